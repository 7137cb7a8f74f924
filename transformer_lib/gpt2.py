"""GPT-2 on our parts: Hugging Face's ``GPT2LMHeadModel`` to our ``DecoderOnlyModel`` and back, exactly.

GPT-2 (Radford et al., 2019) is a decoder-only Transformer that the library's blocks
already express (the ``"gpt2-small"`` preset): pre-norm layers with a final LayerNorm
(``ln_f``), the tanh approximation of GELU, learned absolute positions added to token
embeddings that are not scaled by ``sqrt(d_model)``, and an output layer without bias
that reuses the token embedding matrix. Converting is a matter of putting each tensor in
the right place, with two differences of layout:

* GPT-2's linear maps are ``Conv1D`` modules whose weight is ``(in, out)`` and which
  compute ``x @ W + b``; ``nn.Linear`` stores ``(out, in)`` and computes ``x @ W.T + b``.
  Every GPT-2 matrix is therefore the transpose of ours.
* GPT-2 projects queries, keys and values with one fused ``c_attn`` of width
  ``3 * d_model``: its columns are ``[W_q | W_k | W_v]``, and within each, head ``i``
  owns columns ``i * d_k`` to ``(i + 1) * d_k``, as in our :class:`MultiHeadAttention`.

The whole correspondence, per layer ``i`` (ours under ``decoder.layers.i``, GPT-2's under
``transformer.h.i``)::

    add_norm1.norm              ln_1
    self_attn.W_q, W_k, W_v     attn.c_attn     (concatenated, transposed)
    self_attn.W_o               attn.c_proj     (transposed)
    add_norm3.norm              ln_2
    feed_forward.W_1            mlp.c_fc        (transposed)
    feed_forward.W_2            mlp.c_proj      (transposed)

and ``decoder.embedding.token_embedding`` = ``transformer.wte``,
``decoder.embedding.position.embedding`` = ``transformer.wpe``, ``decoder.norm`` =
``transformer.ln_f``, ``generator.proj`` = ``lm_head`` (tied to ``wte`` unless the
configuration says ``tie_word_embeddings=False``). GPT-2 returns logits, ours
log-probabilities: ``log_softmax`` of GPT-2's logits equals our output.

Dropout: GPT-2 has three rates (``embd_pdrop``, ``attn_pdrop``, ``resid_pdrop``), ours
one; and our feed-forward network also drops its hidden activations (as
``nn.TransformerEncoderLayer`` does), which GPT-2's does not. The two models therefore
compute the same function in evaluation mode or with dropout 0, not the same random
function in training with dropout.

Read top to bottom:

* :func:`config_from_gpt2`: a ``GPT2Config`` as our :class:`TransformerConfig`, refusing
  what our blocks cannot express.
* :func:`gpt2_config`: the other way, naming every field of ours that GPT-2 cannot express.
* :func:`gpt2_tensors` and :func:`load_gpt2_tensors`: our weights under GPT-2's names and
  layouts, and back, checking every name and shape.
* :func:`from_gpt2` and :func:`to_gpt2`: whole models.

``transformers`` is imported only when a function needs it. The decoder-only model it fills
is taught in chapter 14.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ._extras import require
from .config import TransformerConfig
from .lm import DecoderOnlyModel

if TYPE_CHECKING:
    from transformers import GPT2Config, GPT2LMHeadModel

# GPT-2's activation names -> ours. "gelu_new" (GPT-2's own) is the tanh approximation.
ACTIVATIONS_FROM_GPT2 = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "relu": "relu",
    "silu": "silu",
}
ACTIVATIONS_TO_GPT2 = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}
GPT2_VOCAB_SIZE = 50257  # GPT-2's byte-level BPE vocabulary; its last id, 50256, is <|endoftext|>
# buffers that older GPT-2 checkpoints hold and that are not weights (the causal mask)
_NOT_WEIGHTS = ("attn.bias", "attn.masked_bias")


def config_from_gpt2(hf_config: GPT2Config, dropout: float | None = None) -> TransformerConfig:
    """Our :class:`TransformerConfig` for a Hugging Face ``GPT2Config``.

    Args:
        hf_config: the ``GPT2Config`` (``model.config``), or its ``config.json`` as a dict.
        dropout: our single dropout rate; ``None`` takes GPT-2's, which then must be one
            rate (``embd_pdrop == attn_pdrop == resid_pdrop``).

    Raises ``ValueError`` naming the field for what our blocks cannot express: another
    ``model_type``, cross-attention, unscaled or layer-scaled attention, an activation
    other than GELU (exact or tanh), ReLU or SiLU, or three different dropout rates.
    """
    if isinstance(hf_config, dict):  # a config.json, read
        get = hf_config.get
    else:
        def get(name: str, default: Any = None) -> Any:
            return getattr(hf_config, name, default)
    if get("model_type", "gpt2") != "gpt2":
        raise ValueError(
            f"hf_config must describe a GPT-2 model (model_type 'gpt2'), got {get('model_type')!r}"
        )
    problems = []
    if get("add_cross_attention", False):
        problems.append("add_cross_attention must be False (our decoder-only layers have no cross-attention)")
    if not get("scale_attn_weights", True):
        problems.append("scale_attn_weights must be True (attention divides by sqrt(d_k))")
    if get("scale_attn_by_inverse_layer_idx", False):
        problems.append("scale_attn_by_inverse_layer_idx must be False (every layer scales by sqrt(d_k))")
    activation = get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS_FROM_GPT2:
        options = sorted(ACTIVATIONS_FROM_GPT2)
        problems.append(f"activation_function must be one of {options}, got {activation!r}")
    rates = {name: get(name, 0.1) for name in ("embd_pdrop", "attn_pdrop", "resid_pdrop")}
    if dropout is None and len(set(rates.values())) > 1:
        problems.append(f"embd_pdrop, attn_pdrop and resid_pdrop must be equal (ours is one rate), "
                        f"got {rates} (or pass dropout=)")
    if problems:
        raise ValueError("hf_config cannot be expressed by DecoderOnlyModel: " + "; ".join(problems))
    n_embd = get("n_embd")
    return TransformerConfig.preset(
        "gpt2-small",
        tgt_vocab_size=get("vocab_size"),  # a decoder-only model's one vocabulary
        d_model=n_embd,
        num_heads=get("n_head"),
        num_layers=get("n_layer"),
        d_ff=get("n_inner") or 4 * n_embd,  # GPT-2's n_inner=None means 4 * n_embd
        dropout=float(rates["resid_pdrop"] if dropout is None else dropout),
        activation=ACTIVATIONS_FROM_GPT2[activation],
        layer_norm_eps=float(get("layer_norm_epsilon", 1e-5)),
        max_len=get("n_positions"),
        tie_output=bool(get("tie_word_embeddings", True)),
    )


def gpt2_config(config: TransformerConfig, **overrides: Any) -> GPT2Config:
    """The Hugging Face ``GPT2Config`` of a model built from our ``config``.

    Args:
        config: a decoder-only :class:`TransformerConfig` in GPT-2's style.
        overrides: more ``GPT2Config`` fields (e.g. ``bos_token_id``, ``attn_implementation``).

    ``bos_token_id`` and ``eos_token_id`` are GPT-2's 50256 when the vocabulary holds that
    id, ``None`` otherwise (our configuration has no special ids). Raises ``ValueError``
    naming every field of ``config`` that GPT-2 cannot express (post-norm, sinusoidal or
    rotary positions, scaled embeddings, token types, the ablation switches, ...).
    """
    GPT2Config = require("transformers", "tl.gpt2.gpt2_config").GPT2Config

    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    required = {  # field -> (value GPT-2 needs, why)
        "architecture": ("decoder-only", "GPT-2 is a decoder-only model"),
        "norm_first": (True, "GPT-2 is pre-norm: ln_1 and ln_2 come before the sublayers"),
        "positional": ("learned", "GPT-2 learns its positions (wpe)"),
        "scale_embeddings": (False, "GPT-2 adds wte and wpe without a sqrt(d_model) factor"),
        "num_token_types": (0, "GPT-2 has no token-type embedding"),
        "embedding_norm": (False, "GPT-2 has no LayerNorm on its embeddings"),
        "generator_bias": (False, "GPT-2's lm_head has no bias"),
        "attention_scale": (True, "GPT-2 divides q.k by sqrt(d_k)"),
        "residual": (True, "GPT-2's sublayers add to the residual stream"),
        "layer_norm": (True, "GPT-2 normalises before each sublayer and at the end"),
        "norm_type": ("layer", "GPT-2's norms are LayerNorms"),
        "ffn_type": ("mlp", "GPT-2's feed-forward network has two matrices"),
        "bias": (True, "GPT-2's projections have biases"),
        "window": (None, "GPT-2 attends to every earlier position"),
    }
    problems = [
        f"config.{field} must be {value!r} ({why}), got {getattr(config, field)!r}"
        for field, (value, why) in required.items()
        if getattr(config, field) != value
    ]
    if config.kv_heads != config.num_heads:
        problems.append(f"config.num_kv_heads must be None or num_heads (GPT-2's keys and values have as many "
                        f"heads as its queries), got {config.num_kv_heads!r}")
    if config.final_norm is False:
        problems.append("config.final_norm must be None or True (GPT-2 ends with ln_f), got False")
    if problems:
        raise ValueError("config cannot be expressed by GPT-2: " + "; ".join(problems))
    vocab_size = config.tgt_vocab_size
    special = GPT2_VOCAB_SIZE - 1 if vocab_size >= GPT2_VOCAB_SIZE else None
    fields = dict(
        vocab_size=vocab_size, n_positions=config.max_len, n_embd=config.d_model, n_layer=config.num_layers,
        n_head=config.num_heads, n_inner=config.d_ff,
        activation_function=ACTIVATIONS_TO_GPT2[config.activation],
        resid_pdrop=config.dropout, embd_pdrop=config.dropout, attn_pdrop=config.dropout,
        layer_norm_epsilon=config.layer_norm_eps, tie_word_embeddings=config.tie_output,
        bos_token_id=special, eos_token_id=special,
    )  # fmt: skip
    return GPT2Config(**{**fields, **overrides})


# (our state-dict names, concatenated along dim 0; GPT-2's name; transposed)
Correspondence = list[tuple[list[str], str, bool]]


def _correspondence(num_layers: int) -> Correspondence:
    """``(our state-dict names, GPT-2's name, transposed)`` for every tensor.

    Our tensors are concatenated along their first dimension in the order given (only
    ``c_attn`` has more than one); ``transposed`` marks GPT-2's ``Conv1D`` weights.
    """
    table = [
        (["decoder.embedding.token_embedding.weight"], "transformer.wte.weight", False),
        (["decoder.embedding.position.embedding.weight"], "transformer.wpe.weight", False),
    ]
    per_layer = [  # ours, GPT-2's, inside one layer
        (["add_norm1.norm.weight"], "ln_1.weight", False),
        (["add_norm1.norm.bias"], "ln_1.bias", False),
        ([f"self_attn.{W}.weight" for W in ("W_q", "W_k", "W_v")], "attn.c_attn.weight", True),
        ([f"self_attn.{W}.bias" for W in ("W_q", "W_k", "W_v")], "attn.c_attn.bias", False),
        (["self_attn.W_o.weight"], "attn.c_proj.weight", True),
        (["self_attn.W_o.bias"], "attn.c_proj.bias", False),
        (["add_norm3.norm.weight"], "ln_2.weight", False),
        (["add_norm3.norm.bias"], "ln_2.bias", False),
        (["feed_forward.W_1.weight"], "mlp.c_fc.weight", True),
        (["feed_forward.W_1.bias"], "mlp.c_fc.bias", False),
        (["feed_forward.W_2.weight"], "mlp.c_proj.weight", True),
        (["feed_forward.W_2.bias"], "mlp.c_proj.bias", False),
    ]
    for i in range(num_layers):
        for ours, theirs, transposed in per_layer:
            names = [f"decoder.layers.{i}.{name}" for name in ours]
            table.append((names, f"transformer.h.{i}.{theirs}", transposed))
    table += [
        (["decoder.norm.weight"], "transformer.ln_f.weight", False),
        (["decoder.norm.bias"], "transformer.ln_f.bias", False),
        (["generator.proj.weight"], "lm_head.weight", False),
    ]
    return table


def _checked_table(model: DecoderOnlyModel) -> tuple[dict[str, torch.Tensor], Correspondence]:
    """Our state dict and the correspondence, which must cover it exactly."""
    if not isinstance(model, DecoderOnlyModel):
        raise TypeError(f"model must be a DecoderOnlyModel, got {type(model).__name__}")
    ours = model.state_dict()
    table = _correspondence(len(model.decoder.layers))
    covered = {name for names, _, _ in table for name in names}
    if covered != set(ours):
        raise ValueError(
            "model's tensors do not match GPT-2's layout; build it from a GPT-2 style config "
            f"(gpt2_config(model.config) names the fields): unmatched {sorted(covered ^ set(ours))[:5]}"
        )
    return ours, table


def gpt2_tensors(model: DecoderOnlyModel) -> dict[str, torch.Tensor]:
    """Our model's weights under ``GPT2LMHeadModel``'s state-dict names and layouts (detached copies)."""
    ours, table = _checked_table(model)
    tensors = {}
    for names, theirs, transposed in table:
        t = torch.cat([ours[name].detach() for name in names])  # (sum of outs, ...) along dim 0
        tensors[theirs] = (t.T if transposed else t).clone()  # Conv1D stores (in, out)
    return tensors


def load_gpt2_tensors(model: DecoderOnlyModel, tensors: dict[str, torch.Tensor]) -> DecoderOnlyModel:
    """Copy a ``GPT2LMHeadModel`` state dict into our ``model`` (in place), checking names and shapes.

    Raises ``KeyError`` naming tensors the model needs that ``tensors`` lacks,
    ``ValueError`` naming a tensor of the wrong shape, one that has no place in our
    model, or an ``lm_head`` that differs from ``wte`` when our output layer is tied.
    """
    ours, table = _checked_table(model)
    missing = [theirs for _, theirs, _ in table if theirs not in tensors]
    if missing:
        raise KeyError(f"tensors is missing {len(missing)} GPT-2 tensor(s) the model needs: {missing[:5]}")
    used = {theirs for _, theirs, _ in table}
    unused = sorted(k for k in tensors if k not in used and not k.endswith(_NOT_WEIGHTS))
    if unused:
        raise ValueError(f"tensors holds GPT-2 tensors this model has no place for: {unused[:5]}")
    tied = model.generator.proj.weight is model.decoder.embedding.token_embedding.weight
    if tied and not torch.equal(tensors["lm_head.weight"], tensors["transformer.wte.weight"]):
        raise ValueError("tensors has an lm_head.weight that differs from transformer.wte.weight, but the "
                         "model ties them (config.tie_output=True); use tie_output=False")
    with torch.no_grad():
        for names, theirs, transposed in table:
            t = tensors[theirs].T if transposed else tensors[theirs]  # (sum of outs, ...)
            sizes = [ours[name].shape[0] for name in names]
            expected = (sum(sizes), *ours[names[0]].shape[1:])
            if tuple(t.shape) != expected:
                shape = expected[::-1] if transposed else expected
                raise ValueError(f"GPT-2 tensor {theirs!r} must have shape {shape} for this model, "
                                 f"got {tuple(tensors[theirs].shape)}")
            for name, part in zip(names, t.split(sizes)):
                ours[name].copy_(part)  # the state dict's tensors share storage with the parameters
    return model


def _load_hf(model_or_path: Any) -> GPT2LMHeadModel:
    """A ``GPT2LMHeadModel`` from an instance, a local folder or a Hub id."""
    GPT2LMHeadModel = require("transformers", "tl.from_gpt2").GPT2LMHeadModel

    if isinstance(model_or_path, GPT2LMHeadModel):
        return model_or_path
    if not isinstance(model_or_path, (str, Path)):
        raise TypeError(
            "model_or_path must be a transformers.GPT2LMHeadModel, a folder saved with save_pretrained "
            f"or a Hugging Face Hub id such as 'gpt2', got {type(model_or_path).__name__}"
        )
    folder = Path(model_or_path).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"model_or_path: the folder {folder} holds no config.json "
                                    "(save it with model.save_pretrained(folder))")
        return GPT2LMHeadModel.from_pretrained(folder)
    if isinstance(model_or_path, Path) or str(model_or_path).startswith(("/", ".", "~")):
        raise FileNotFoundError(f"model_or_path must be an existing folder or a Hub id, "
                                f"got {model_or_path!r} (no such folder)")
    try:  # a Hub id: downloaded once into the Hub's cache (needs the network)
        return GPT2LMHeadModel.from_pretrained(str(model_or_path))
    except OSError as exc:
        raise OSError(f"model_or_path {model_or_path!r}: could not load it from the Hugging Face Hub "
                      f"({exc})") from exc


def from_gpt2(model_or_path: Any, *, dropout: float | None = None) -> DecoderOnlyModel:
    """Our :class:`DecoderOnlyModel` with the weights of a GPT-2 model.

    Args:
        model_or_path: a ``transformers.GPT2LMHeadModel``; a folder written by its
            ``save_pretrained``; or a Hugging Face Hub id such as ``"gpt2"`` (the 124M
            model, downloaded on first use; needs the network).
        dropout: our single dropout rate (see :func:`config_from_gpt2`).

    Returns:
        The model, with the source's dtype, device and mode (a folder or Hub id loads in
        evaluation mode). Its ``forward(ids)`` equals ``log_softmax`` of GPT-2's logits.
    """
    hf = _load_hf(model_or_path)
    param = next(hf.parameters())
    model = DecoderOnlyModel(config_from_gpt2(hf.config, dropout)).to(dtype=param.dtype, device=param.device)
    load_gpt2_tensors(model, hf.state_dict())
    return model.train(hf.training)


def to_gpt2(model: DecoderOnlyModel, **overrides: Any) -> GPT2LMHeadModel:
    """A ``transformers.GPT2LMHeadModel`` with the weights of our ``model``.

    Args:
        model: a :class:`DecoderOnlyModel` built from a GPT-2 style config (see
            :func:`gpt2_config` for what that means; it names every field that is not).
        overrides: more ``GPT2Config`` fields, e.g. ``attn_implementation="eager"``.

    Returns:
        The model with our dtype, device and mode; its ``log_softmax(logits)`` equals
        our output.
    """
    GPT2LMHeadModel = require("transformers", "tl.to_gpt2").GPT2LMHeadModel

    if not isinstance(model, DecoderOnlyModel):
        raise TypeError(f"model must be a DecoderOnlyModel, got {type(model).__name__}")
    hf_config = gpt2_config(model.config, **overrides)  # first: it names every field GPT-2 cannot express
    tensors = gpt2_tensors(model)
    param = next(model.parameters())
    hf = GPT2LMHeadModel(hf_config).to(param.dtype)
    hf.load_state_dict(tensors, strict=True)
    return hf.to(device=param.device).train(model.training)

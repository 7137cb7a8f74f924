"""Llama on our parts: Hugging Face's ``LlamaForCausalLM`` to our ``DecoderOnlyModel`` and back, exactly.

Llama (Touvron et al., 2023) is GPT-2's decoder with five parts changed, each an option of
the library's blocks (:class:`~transformer_lib.config.TransformerConfig`, the
``"llama-tiny"`` preset): RMSNorm instead of LayerNorm (``norm_type="rms"``), the SwiGLU
feed-forward network (``ffn_type="glu"``, ``activation="silu"``), rotary positions in
the "rotate half" layout instead of learned ones (``positional="rotary"``,
``rotary_layout="half"``, ``rotary_base`` = ``rope_theta``), grouped-query attention from
Llama 2's larger models on (``num_kv_heads``), and no biases (``bias=False``). No second
model class: :class:`~transformer_lib.lm.DecoderOnlyModel` built from such a config is the
model, and converting is a matter of putting each tensor in the right place.

The correspondence, per layer ``i`` (ours under ``decoder.layers.i``, Llama's under
``model.layers.i``)::

    add_norm1.norm          input_layernorm
    self_attn.W_q, W_k      self_attn.q_proj, k_proj   (rows reordered if our layout is interleaved)
    self_attn.W_v, W_o      self_attn.v_proj, o_proj
    add_norm3.norm          post_attention_layernorm
    feed_forward.W_1        mlp.gate_proj   (the activated branch)
    feed_forward.W_3        mlp.up_proj     (the linear branch)
    feed_forward.W_2        mlp.down_proj

and ``decoder.embedding.token_embedding`` = ``model.embed_tokens``, ``decoder.norm`` =
``model.norm``, ``generator.proj`` = ``lm_head`` (tied to the embedding when
``tie_word_embeddings``). Both store ``nn.Linear`` weights as ``(out, in)``, so nothing is
transposed. Llama returns logits, ours log-probabilities: ``log_softmax`` of its logits
equals our output.

Rotary layouts. Hugging Face's checkpoints pair features ``(k, k + d/2)`` of each head;
chapter 8's layout pairs ``(2k, 2k+1)``. A model of ours in the interleaved layout converts
too: the rows of ``q_proj`` and ``k_proj`` are reordered within each head by
:func:`~transformer_lib.positional.rotary_permutation` (what Hugging Face's own script
does to Meta's original weights), and the two compute the same function.

Read top to bottom: :func:`config_from_llama` and :func:`llama_config` (the
configurations, naming every field the other side cannot express), :func:`llama_tensors`
and :func:`load_llama_tensors` (the weights), :func:`from_llama` and :func:`to_llama`
(whole models). ``transformers`` is imported only when a function needs it. Taught in
chapter 19.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ._extras import require
from .config import TransformerConfig
from .lm import DecoderOnlyModel
from .positional import rotary_permutation

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM

# Llama's activation names -> ours
ACTIVATIONS_FROM_LLAMA = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                          "relu": "relu"}  # fmt: skip
ACTIVATIONS_TO_LLAMA = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
# what a Llama-style config of ours must hold: field -> (value, why)
LLAMA_FIELDS = {
    "architecture": ("decoder-only", "Llama is a decoder-only model"),
    "positional": ("rotary", "Llama rotates queries and keys (rotary positions)"),
    "norm_type": ("rms", "Llama normalises with RMSNorm"),
    "ffn_type": ("glu", "Llama's feed-forward network is gated (SwiGLU)"),
    "norm_first": (True, "Llama is pre-norm"),
    "scale_embeddings": (False, "Llama does not scale its embeddings by sqrt(d_model)"),
    "num_token_types": (0, "Llama has no token-type embedding"),
    "embedding_norm": (False, "Llama has no norm on its embeddings"),
    "generator_bias": (False, "Llama's lm_head has no bias"),
    "attention_scale": (True, "Llama divides q.k by sqrt(d_k)"),
    "residual": (True, "Llama's sublayers add to the residual stream"),
    "layer_norm": (True, "Llama normalises before each sublayer and at the end"),
    "window": (None, "Llama attends to every earlier position (Mistral has the sliding window)"),
}


def _getter(hf_config: Any):
    if isinstance(hf_config, dict):  # a config.json, read
        return hf_config.get
    return lambda name, default=None: getattr(hf_config, name, default)


def _rope_theta(get) -> tuple[float, str]:
    """``(rope_theta, rope_type)`` from either spelling of a Llama config (``rope_parameters`` or ``rope_theta``)."""
    params = get("rope_parameters") or {}
    scaling = get("rope_scaling") or {}
    theta = params.get("rope_theta", get("rope_theta", 10000.0))
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    return float(theta), kind


def config_from_llama(hf_config: LlamaConfig, rotary_layout: str = "half") -> TransformerConfig:
    """Our :class:`TransformerConfig` for a Hugging Face ``LlamaConfig`` (or its ``config.json`` as a dict).

    Args:
        hf_config: the ``LlamaConfig`` (``model.config``).
        rotary_layout: ``"half"`` (the checkpoint's own layout) or ``"interleaved"``
            (chapter 8's; the conversion then reorders the query and key rows).

    Raises ``ValueError`` naming every field our blocks cannot express: another
    ``model_type``, rotary scaling (Llama 3.1's ``"llama3"``, ...), a ``head_dim`` other than
    ``hidden_size / num_attention_heads``, attention biases without feed-forward biases (or
    the reverse), an activation we do not have.
    """
    get = _getter(hf_config)
    if get("model_type", "llama") != "llama":
        raise ValueError(f"hf_config must describe a Llama model (model_type 'llama'), got {get('model_type')!r}")
    d_model, heads = get("hidden_size"), get("num_attention_heads")
    theta, rope_type = _rope_theta(get)
    problems = []
    if rope_type != "default":
        problems.append(f"the rotary positions must be unscaled (rope_type 'default'), got {rope_type!r}")
    head_dim = get("head_dim") or d_model // heads
    if head_dim * heads != d_model:
        problems.append(f"head_dim must be hidden_size / num_attention_heads = {d_model // heads}, got {head_dim}")
    if bool(get("attention_bias", False)) != bool(get("mlp_bias", False)):
        problems.append(f"attention_bias and mlp_bias must be equal (ours is one switch, bias), got "
                        f"{get('attention_bias')} and {get('mlp_bias')}")
    activation = get("hidden_act", "silu")
    if activation not in ACTIVATIONS_FROM_LLAMA:
        problems.append(f"hidden_act must be one of {sorted(ACTIVATIONS_FROM_LLAMA)}, got {activation!r}")
    if problems:
        raise ValueError("hf_config cannot be expressed by DecoderOnlyModel: " + "; ".join(problems))
    return TransformerConfig.preset(
        "llama-tiny",
        tgt_vocab_size=get("vocab_size"), d_model=d_model, num_heads=heads,
        num_kv_heads=get("num_key_value_heads") or heads, num_layers=get("num_hidden_layers"),
        d_ff=get("intermediate_size"), dropout=float(get("attention_dropout", 0.0)),
        activation=ACTIVATIONS_FROM_LLAMA[activation], layer_norm_eps=float(get("rms_norm_eps", 1e-6)),
        max_len=get("max_position_embeddings"), tie_output=bool(get("tie_word_embeddings", False)),
        bias=bool(get("attention_bias", False)), rotary_base=theta, rotary_layout=rotary_layout,
    )  # fmt: skip


def llama_config(config: TransformerConfig, **overrides: Any) -> LlamaConfig:
    """The Hugging Face ``LlamaConfig`` of a model built from our ``config``.

    Raises ``ValueError`` naming every field of ``config`` that Llama cannot express.
    ``overrides`` are more ``LlamaConfig`` fields (e.g. ``attn_implementation="eager"``).
    Our configuration has no special ids, so ``bos_token_id`` and ``eos_token_id`` are ``None``.
    """
    LlamaConfig = require("transformers", "tl.llama.llama_config").LlamaConfig

    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    problems = [f"config.{field} must be {value!r} ({why}), got {getattr(config, field)!r}"
                for field, (value, why) in LLAMA_FIELDS.items() if getattr(config, field) != value]  # fmt: skip
    if config.final_norm is False:
        problems.append("config.final_norm must be None or True (Llama ends with a norm), got False")
    if config.activation not in ACTIVATIONS_TO_LLAMA:
        problems.append(f"config.activation must be one of {sorted(ACTIVATIONS_TO_LLAMA)}, got {config.activation!r}")
    if problems:
        raise ValueError("config cannot be expressed by Llama: " + "; ".join(problems))
    fields = dict(
        vocab_size=config.tgt_vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=config.kv_heads, head_dim=config.d_k, hidden_act=ACTIVATIONS_TO_LLAMA[config.activation],
        max_position_embeddings=config.max_len, rms_norm_eps=config.layer_norm_eps,
        tie_word_embeddings=config.tie_output, attention_bias=config.bias, mlp_bias=config.bias,
        attention_dropout=config.dropout, rope_parameters={"rope_type": "default", "rope_theta": config.rotary_base},
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return LlamaConfig(**{**fields, **overrides})


# (our state-dict name, Llama's name, heads whose rows a layout change reorders, or 0)
Correspondence = list[tuple[str, str, int]]


def _correspondence(model: DecoderOnlyModel) -> Correspondence:
    c = model.config
    table = [("decoder.embedding.token_embedding.weight", "model.embed_tokens.weight", 0)]
    per_layer = [
        ("add_norm1.norm.weight", "input_layernorm.weight", 0),
        ("self_attn.W_q.weight", "self_attn.q_proj.weight", c.num_heads),
        ("self_attn.W_k.weight", "self_attn.k_proj.weight", c.kv_heads),
        ("self_attn.W_v.weight", "self_attn.v_proj.weight", 0),
        ("self_attn.W_o.weight", "self_attn.o_proj.weight", 0),
        ("add_norm3.norm.weight", "post_attention_layernorm.weight", 0),
        ("feed_forward.W_1.weight", "mlp.gate_proj.weight", 0),
        ("feed_forward.W_3.weight", "mlp.up_proj.weight", 0),
        ("feed_forward.W_2.weight", "mlp.down_proj.weight", 0),
    ]
    if c.bias:
        per_layer += [
            ("self_attn.W_q.bias", "self_attn.q_proj.bias", c.num_heads),
            ("self_attn.W_k.bias", "self_attn.k_proj.bias", c.kv_heads),
            ("self_attn.W_v.bias", "self_attn.v_proj.bias", 0),
            ("self_attn.W_o.bias", "self_attn.o_proj.bias", 0),
            ("feed_forward.W_1.bias", "mlp.gate_proj.bias", 0),
            ("feed_forward.W_3.bias", "mlp.up_proj.bias", 0),
            ("feed_forward.W_2.bias", "mlp.down_proj.bias", 0),
        ]
    for i in range(c.num_layers):
        table += [(f"decoder.layers.{i}.{ours}", f"model.layers.{i}.{theirs}", h) for ours, theirs, h in per_layer]
    table += [("decoder.norm.weight", "model.norm.weight", 0), ("generator.proj.weight", "lm_head.weight", 0)]
    return table


def _checked_table(model: DecoderOnlyModel) -> tuple[dict[str, torch.Tensor], Correspondence]:
    """Our state dict and the correspondence, which must cover it exactly."""
    if not isinstance(model, DecoderOnlyModel):
        raise TypeError(f"model must be a DecoderOnlyModel, got {type(model).__name__}")
    llama_config(model.config)  # names every field Llama cannot express
    ours = model.state_dict()
    table = _correspondence(model)
    covered = {name for name, _, _ in table}
    if covered != set(ours):
        raise ValueError(f"model's tensors do not match Llama's layout: unmatched {sorted(covered ^ set(ours))[:5]}")
    return ours, table


def _half_order(model: DecoderOnlyModel, heads: int) -> torch.Tensor | None:
    """The row order that takes our ``W_q``/``W_k`` to Llama's half layout (``None``: already in it)."""
    if not heads or model.config.rotary_layout == "half":
        return None
    return rotary_permutation(model.config.d_k, heads)


def llama_tensors(model: DecoderOnlyModel) -> dict[str, torch.Tensor]:
    """Our model's weights under ``LlamaForCausalLM``'s state-dict names and layout (detached copies)."""
    ours, table = _checked_table(model)
    tensors = {}
    for name, theirs, heads in table:
        t = ours[name].detach()
        order = _half_order(model, heads)
        tensors[theirs] = (t if order is None else t[order]).clone()
    return tensors


def load_llama_tensors(model: DecoderOnlyModel, tensors: dict[str, torch.Tensor]) -> DecoderOnlyModel:
    """Copy a ``LlamaForCausalLM`` state dict into our ``model`` (in place), checking names and shapes.

    Raises ``KeyError`` naming tensors the model needs that ``tensors`` lacks, and
    ``ValueError`` naming a tensor of the wrong shape, one that has no place in our model,
    or an ``lm_head`` that differs from the embedding when our output layer is tied.
    """
    ours, table = _checked_table(model)
    tied = model.generator.proj.weight is model.decoder.embedding.token_embedding.weight
    needed = [theirs for _, theirs, _ in table if not (tied and theirs == "lm_head.weight")]
    missing = [theirs for theirs in needed if theirs not in tensors]
    if missing:
        raise KeyError(f"tensors is missing {len(missing)} Llama tensor(s) the model needs: {missing[:5]}")
    unused = sorted(k for k in tensors if k not in {theirs for _, theirs, _ in table} and "rotary_emb" not in k)
    if unused:
        raise ValueError(f"tensors holds Llama tensors this model has no place for: {unused[:5]}")
    if tied and "lm_head.weight" in tensors and not torch.equal(tensors["lm_head.weight"],
                                                                tensors["model.embed_tokens.weight"]):
        raise ValueError("tensors has an lm_head.weight that differs from model.embed_tokens.weight, but the "
                         "model ties them (config.tie_output=True); use tie_output=False")
    with torch.no_grad():
        for name, theirs, heads in table:
            if theirs not in tensors:  # a tied lm_head: the embedding is the same tensor
                continue
            t = tensors[theirs]
            if t.shape != ours[name].shape:
                raise ValueError(f"Llama tensor {theirs!r} must have shape {tuple(ours[name].shape)} for this "
                                 f"model, got {tuple(t.shape)}")
            order = _half_order(model, heads)
            ours[name].copy_(t if order is None else t[order.argsort()])
    return model


def _load_hf(model_or_path: Any) -> LlamaForCausalLM:
    LlamaForCausalLM = require("transformers", "tl.from_llama").LlamaForCausalLM

    if isinstance(model_or_path, LlamaForCausalLM):
        return model_or_path
    if not isinstance(model_or_path, str | Path):
        raise TypeError("model_or_path must be a transformers.LlamaForCausalLM or a folder saved with "
                        f"save_pretrained, got {type(model_or_path).__name__}")
    folder = Path(model_or_path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model_or_path must be a folder holding config.json (save it with "
                                f"model.save_pretrained(folder)), got {str(model_or_path)!r}")
    return LlamaForCausalLM.from_pretrained(folder)


def from_llama(model_or_path: Any, *, rotary_layout: str = "half") -> DecoderOnlyModel:
    """Our :class:`DecoderOnlyModel` with the weights of a Llama model.

    Args:
        model_or_path: a ``transformers.LlamaForCausalLM``, or a folder written by its
            ``save_pretrained`` (nothing is downloaded).
        rotary_layout: our model's rotary layout (see :func:`config_from_llama`).

    Returns:
        The model with the source's dtype, device and mode; its ``forward(ids)`` equals
        ``log_softmax`` of Llama's logits.
    """
    hf = _load_hf(model_or_path)
    param = next(hf.parameters())
    model = DecoderOnlyModel(config_from_llama(hf.config, rotary_layout))
    model = model.to(dtype=param.dtype, device=param.device)
    load_llama_tensors(model, hf.state_dict())
    return model.train(hf.training)


def to_llama(model: DecoderOnlyModel, **overrides: Any) -> LlamaForCausalLM:
    """A ``transformers.LlamaForCausalLM`` with the weights of our ``model`` (same dtype, device and mode).

    ``overrides`` are more ``LlamaConfig`` fields, e.g. ``attn_implementation="eager"``.
    """
    LlamaForCausalLM = require("transformers", "tl.to_llama").LlamaForCausalLM

    if not isinstance(model, DecoderOnlyModel):
        raise TypeError(f"model must be a DecoderOnlyModel, got {type(model).__name__}")
    hf_config = llama_config(model.config, **overrides)  # first: it names every field Llama cannot express
    tensors = llama_tensors(model)
    param = next(model.parameters())
    hf = LlamaForCausalLM(hf_config).to(param.dtype)
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not (model.config.tie_output and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"LlamaForCausalLM did not take the tensors: missing {missing}, unexpected {unexpected}")
    return hf.to(device=param.device).train(model.training)

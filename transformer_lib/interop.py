"""Conversions between our modules and PyTorch's own, with the same weights.

``to_torch(ours)`` builds the equivalent ``torch.nn`` module; ``from_torch(theirs)``
builds ours. Tests and chapters use them to show that the library computes exactly
what PyTorch does. Read top to bottom: helpers, then one pair of converters per pair of
classes (attention, layers, stacks, the Transformer), then the two tables that map each
class to its converter, :data:`TO_TORCH` and :data:`FROM_TORCH`, and the two functions
that look a module up in them. Importing this module registers nothing anywhere: the
tables are plain dicts.

Adding a pair (say Hugging Face's ``GPT2LMHeadModel`` to our
:class:`~transformer_lib.lm.DecoderOnlyModel`) is two functions and one entry in each
table. A key is a class, or the dotted name of one (``"module.path.ClassName"``) for a
class from an optional package, so the table can name it without importing that package.
A module is looked up by its class and then by its base classes.

Mask conventions differ: ours is ``True`` where attention is allowed,
``torch.nn.MultiheadAttention``'s ``attn_mask`` is ``True`` where it is blocked
(:func:`torch_attn_mask` converts). Our :class:`~transformer_lib.layers.DecoderLayer` and
:class:`~transformer_lib.stacks.Decoder` read ``tgt_mask=None`` as the causal mask,
``nn.TransformerDecoderLayer`` and ``nn.TransformerDecoder`` as no mask: pass masks
explicitly when comparing them.

PyTorch's modules express only the paper's model: :func:`to_torch` refuses a module built
with an ablation switch off (``attention_scale``, ``residual``, ``layer_norm``) or with
rotary positions, naming the field of :class:`~transformer_lib.config.TransformerConfig`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .layers import ACTIVATION_FUNCTIONS, AddNorm, DecoderLayer, EncoderLayer, FeedForward
from .stacks import Decoder, Encoder
from .torch_attention import MultiHeadAttention
from .transformer import Transformer

# --------------------------------------------------------------------------- helpers


def torch_attn_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Our mask (True = attend) as ``nn.MultiheadAttention``'s ``attn_mask`` (True = blocked)."""
    return None if mask is None else ~mask


def copy_linear(dst: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Copy a weight (and bias) into ``dst`` without tracking gradients."""
    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)


def copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    """Copy a LayerNorm's weight and bias into ``dst`` without tracking gradients."""
    copy_linear(dst, src.weight, src.bias)


# --------------------------------------------------------------------------- attention


def mha_to_torch(m: MultiHeadAttention) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention(batch_first=True)`` with our four projections packed as PyTorch packs them."""
    bias = m.W_q.bias is not None
    t = nn.MultiheadAttention(m.d_model, m.num_heads, dropout=m.dropout, bias=bias, batch_first=True,
                              dtype=m.W_q.weight.dtype)  # fmt: skip
    with torch.no_grad():
        t.in_proj_weight.copy_(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        if bias:
            t.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
    copy_linear(t.out_proj, m.W_o.weight, m.W_o.bias)
    return t


def mha_from_torch(t: nn.MultiheadAttention) -> MultiHeadAttention:
    """Our :class:`MultiHeadAttention` from PyTorch's packed in-projection."""
    if not t._qkv_same_embed_dim:
        raise ValueError("module must use the same size for query, key and value (kdim = vdim = embed_dim)")
    if t.bias_k is not None or t.add_zero_attn:
        raise ValueError("module must not use add_bias_kv or add_zero_attn, which MultiHeadAttention lacks")
    bias = t.in_proj_bias is not None
    m = MultiHeadAttention(t.embed_dim, t.num_heads, dropout=t.dropout, bias=bias).to(t.in_proj_weight.dtype)
    w_q, w_k, w_v = t.in_proj_weight.chunk(3)
    b_q, b_k, b_v = t.in_proj_bias.chunk(3) if bias else (None, None, None)
    copy_linear(m.W_q, w_q, b_q)
    copy_linear(m.W_k, w_k, b_k)
    copy_linear(m.W_v, w_v, b_v)
    copy_linear(m.W_o, t.out_proj.weight, t.out_proj.bias)
    return m


# --------------------------------------------------------------------------- layers


def _torch_activation(name: str) -> Callable:
    return {"relu": F.relu, "gelu": F.gelu}.get(name, ACTIVATION_FUNCTIONS[name])


def _activation_from_torch(t: nn.Module) -> str:
    act = t.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    if isinstance(act, functools.partial) and act.func is F.gelu and act.keywords == {"approximate": "tanh"}:
        return "gelu_tanh"
    raise ValueError(f"module's activation must be ReLU or GELU, got {act!r}")


def _layer_options_from_torch(t: nn.Module) -> dict:
    if not t.self_attn.batch_first:
        raise ValueError("module must be built with batch_first=True, as our layers are")
    if t.linear1.bias is None or t.norm1.bias is None:
        raise ValueError("module must use biases (bias=True), as our layers do")
    return dict(
        d_model=t.self_attn.embed_dim,
        num_heads=t.self_attn.num_heads,
        d_ff=t.linear1.out_features,
        dropout=t.dropout.p,
        norm_first=t.norm_first,
        activation=_activation_from_torch(t),
        layer_norm_eps=t.norm1.eps,
    )


def _torch_layer(cls: type, m: EncoderLayer | DecoderLayer) -> nn.Module:
    """An empty PyTorch layer of class ``cls`` with ``m``'s sizes and options."""
    return cls(m.d_model, m.self_attn.num_heads, m.feed_forward.d_ff, dropout=m.self_attn.dropout,
               activation=_torch_activation(m.feed_forward.activation), layer_norm_eps=m.add_norm1.norm.eps,
               batch_first=True, norm_first=m.norm_first, dtype=m.add_norm1.norm.weight.dtype)  # fmt: skip


def encoder_layer_to_torch(m: EncoderLayer | DecoderLayer) -> nn.TransformerEncoderLayer:
    """``nn.TransformerEncoderLayer``; also GPT-2's block (a DecoderLayer without cross-attention)."""
    t = _torch_layer(nn.TransformerEncoderLayer, m)
    t.self_attn = mha_to_torch(m.self_attn)
    copy_linear(t.linear1, m.feed_forward.W_1.weight, m.feed_forward.W_1.bias)
    copy_linear(t.linear2, m.feed_forward.W_2.weight, m.feed_forward.W_2.bias)
    copy_norm(t.norm1, m.add_norm1.norm)
    copy_norm(t.norm2, m.add_norm3.norm if isinstance(m, DecoderLayer) else m.add_norm2.norm)
    return t


def encoder_layer_from_torch(t: nn.TransformerEncoderLayer) -> EncoderLayer:
    m = EncoderLayer(**_layer_options_from_torch(t)).to(t.linear1.weight.dtype)
    m.self_attn = mha_from_torch(t.self_attn)
    copy_linear(m.feed_forward.W_1, t.linear1.weight, t.linear1.bias)
    copy_linear(m.feed_forward.W_2, t.linear2.weight, t.linear2.bias)
    copy_norm(m.add_norm1.norm, t.norm1)
    copy_norm(m.add_norm2.norm, t.norm2)
    return m


def decoder_layer_to_torch(m: DecoderLayer) -> nn.Module:
    """``nn.TransformerDecoderLayer``, or an encoder layer for a block without cross-attention."""
    if m.cross_attn is None:
        return encoder_layer_to_torch(m)
    t = _torch_layer(nn.TransformerDecoderLayer, m)
    t.self_attn = mha_to_torch(m.self_attn)
    t.multihead_attn = mha_to_torch(m.cross_attn)
    copy_linear(t.linear1, m.feed_forward.W_1.weight, m.feed_forward.W_1.bias)
    copy_linear(t.linear2, m.feed_forward.W_2.weight, m.feed_forward.W_2.bias)
    copy_norm(t.norm1, m.add_norm1.norm)
    copy_norm(t.norm2, m.add_norm2.norm)
    copy_norm(t.norm3, m.add_norm3.norm)
    return t


def decoder_layer_from_torch(t: nn.TransformerDecoderLayer) -> DecoderLayer:
    m = DecoderLayer(**_layer_options_from_torch(t)).to(t.linear1.weight.dtype)
    m.self_attn = mha_from_torch(t.self_attn)
    m.cross_attn = mha_from_torch(t.multihead_attn)
    copy_linear(m.feed_forward.W_1, t.linear1.weight, t.linear1.bias)
    copy_linear(m.feed_forward.W_2, t.linear2.weight, t.linear2.bias)
    copy_norm(m.add_norm1.norm, t.norm1)
    copy_norm(m.add_norm2.norm, t.norm2)
    copy_norm(m.add_norm3.norm, t.norm3)
    return m


# --------------------------------------------------------------------------- stacks


def _final_norm_to_torch(norm: nn.LayerNorm | None) -> nn.LayerNorm | None:
    if norm is None:
        return None
    t = nn.LayerNorm(norm.normalized_shape, eps=norm.eps, dtype=norm.weight.dtype)
    copy_norm(t, norm)
    return t


def encoder_to_torch(m: Encoder | Decoder) -> nn.TransformerEncoder:
    """The layers and final norm as ``nn.TransformerEncoder`` (PyTorch's stacks have no embedding)."""
    layers = [encoder_layer_to_torch(layer) for layer in m.layers]
    with warnings.catch_warnings():  # PyTorch warns that pre-norm stacks cannot use nested tensors
        warnings.simplefilter("ignore")
        t = nn.TransformerEncoder(layers[0], len(layers), _final_norm_to_torch(m.norm),
                                  enable_nested_tensor=not m.layers[0].norm_first)  # fmt: skip
    t.layers = nn.ModuleList(layers)
    return t


def decoder_to_torch(m: Decoder) -> nn.Module:
    """``nn.TransformerDecoder``; a decoder-only stack is PyTorch's encoder stack given a causal mask."""
    if not m.cross_attention:
        return encoder_to_torch(m)
    layers = [decoder_layer_to_torch(layer) for layer in m.layers]
    t = nn.TransformerDecoder(layers[0], len(layers), _final_norm_to_torch(m.norm))
    t.layers = nn.ModuleList(layers)
    return t


def _final_norm_from_torch(t: nn.Module) -> nn.LayerNorm | None:
    if t.norm is None:
        return None
    norm = nn.LayerNorm(t.norm.normalized_shape, eps=t.norm.eps, dtype=t.norm.weight.dtype)
    copy_norm(norm, t.norm)
    return norm


def encoder_from_torch(t: nn.TransformerEncoder) -> Encoder:
    """Our :class:`Encoder` without embedding (it takes vectors, as PyTorch's does)."""
    return Encoder(None, [encoder_layer_from_torch(layer) for layer in t.layers], _final_norm_from_torch(t))


def decoder_from_torch(t: nn.TransformerDecoder) -> Decoder:
    """Our :class:`Decoder` without embedding (note the different meaning of ``tgt_mask=None``)."""
    return Decoder(None, [decoder_layer_from_torch(layer) for layer in t.layers], _final_norm_from_torch(t))


# --------------------------------------------------------------------------- the Transformer


def transformer_to_torch(m: Transformer) -> nn.Transformer:
    """``nn.Transformer(batch_first=True)`` holding our two stacks (no embeddings, no generator)."""
    c = m.config
    # build a one-layer shell (its own weights are replaced), then put our two stacks in it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = nn.Transformer(c.d_model, c.num_heads, 1, 1, c.d_ff, c.dropout, layer_norm_eps=c.layer_norm_eps,
                           batch_first=True, norm_first=c.norm_first)  # fmt: skip
    t.encoder = encoder_to_torch(m.encoder)
    t.decoder = decoder_to_torch(m.decoder)
    return t


def transformer_from_torch(t: nn.Transformer) -> Transformer:
    """Our :class:`Transformer` without vocabularies: its stacks take vectors, it has no generator."""
    encoder = encoder_from_torch(t.encoder)
    decoder = decoder_from_torch(t.decoder)
    if len(decoder.layers) != len(encoder.layers) or (decoder.norm is None) != (encoder.norm is None):
        raise ValueError(
            "module must have as many decoder layers as encoder layers, and final norms on both or neither"
        )
    layer = encoder.layers[0]
    config = TransformerConfig(
        src_vocab_size=None, tgt_vocab_size=None, d_model=layer.d_model, num_heads=layer.self_attn.num_heads,
        num_layers=len(encoder.layers), d_ff=layer.feed_forward.d_ff, dropout=layer.self_attn.dropout,
        norm_first=layer.norm_first, final_norm=encoder.norm is not None,
        activation=layer.feed_forward.activation, layer_norm_eps=layer.add_norm1.norm.eps, positional="none",
    )  # fmt: skip
    m = Transformer(config)
    m.encoder, m.decoder = encoder, decoder
    return m


# --------------------------------------------------------------------------- the tables

Converter = Callable[[nn.Module], nn.Module]

# ours -> PyTorch's, keyed by our class
TO_TORCH: dict[type | str, Converter] = {
    MultiHeadAttention: mha_to_torch,
    EncoderLayer: encoder_layer_to_torch,
    DecoderLayer: decoder_layer_to_torch,
    Encoder: encoder_to_torch,
    Decoder: decoder_to_torch,
    Transformer: transformer_to_torch,
}

# PyTorch's -> ours, keyed by PyTorch's class (or a dotted class name, for optional packages)
FROM_TORCH: dict[type | str, Converter] = {
    nn.MultiheadAttention: mha_from_torch,
    nn.TransformerEncoderLayer: encoder_layer_from_torch,
    nn.TransformerDecoderLayer: decoder_layer_from_torch,
    nn.TransformerEncoder: encoder_from_torch,
    nn.TransformerDecoder: decoder_from_torch,
    nn.Transformer: transformer_from_torch,
}


def _lookup(table: dict[type | str, Converter], module: object, direction: str) -> Converter:
    """The converter for ``module``'s class or its nearest base class in ``table``."""
    for cls in type(module).__mro__:
        for key in (cls, f"{cls.__module__}.{cls.__qualname__}"):
            if key in table:
                return table[key]
    known = ", ".join(sorted(k if isinstance(k, str) else k.__name__ for k in table))
    raise TypeError(f"module must be one of [{known}] for {direction}, got {type(module).__name__}")


def check_expressible(module: nn.Module) -> None:
    """Raise ``ValueError`` naming every switch of ``module`` that PyTorch's modules cannot express.

    ``nn.MultiheadAttention`` always divides by ``sqrt(d_k)``, knows no rotary positions and
    gives keys and values as many heads as queries; PyTorch's layers always add the
    residual, always normalise with ``nn.LayerNorm``, and have a two-matrix feed-forward
    network with biases; ``nn.TransformerDecoder`` has no sliding window.
    """
    problems = {}
    if getattr(module, "window", None) is not None:
        problems["window"] = f"window={module.window} (PyTorch's decoder has no sliding window)"
    for sub in module.modules():
        if isinstance(sub, MultiHeadAttention):
            if not sub.attention_scale:
                problems["attention_scale"] = "attention_scale=False (PyTorch's attention divides by sqrt(d_k))"
            if sub.rotary:
                problems["positional"] = "positional='rotary' (PyTorch's attention has no rotary positions)"
            if sub.num_kv_heads != sub.num_heads:
                problems["num_kv_heads"] = (f"num_kv_heads={sub.num_kv_heads} (PyTorch's attention has as many "
                                            "key-value heads as query heads)")  # fmt: skip
        elif isinstance(sub, AddNorm):
            if not sub.residual:
                problems["residual"] = "residual=False (PyTorch's layers always add the residual)"
            if not sub.layer_norm:
                problems["layer_norm"] = "layer_norm=False (PyTorch's layers always normalise)"
            elif not isinstance(sub.norm, nn.LayerNorm):
                problems["norm_type"] = "norm_type='rms' (PyTorch's layers normalise with nn.LayerNorm)"
        elif isinstance(sub, FeedForward):
            if sub.kind != "mlp":
                problems["ffn_type"] = f"ffn_type={sub.kind!r} (PyTorch's feed-forward network has two matrices)"
            if sub.W_1.bias is None:
                problems["bias"] = "bias=False (PyTorch's layers convert with biases)"
    if problems:
        raise ValueError(f"module cannot be expressed by PyTorch's modules: it was built with "
                         f"{'; '.join(problems.values())}; only the defaults convert")


def _match_state(converted: nn.Module, source: nn.Module) -> nn.Module:
    """``converted`` in ``source``'s dtype, device and training mode."""
    param = next(source.parameters(), None)
    if param is not None:
        converted = converted.to(dtype=param.dtype, device=param.device)
    return converted.train(source.training)


def to_torch(module: nn.Module) -> nn.Module:
    """The ``torch.nn`` module equivalent to ``module``, with copied weights, same mode and dtype.

    Raises ``ValueError`` for a module built with an ablation switch PyTorch cannot express
    (:func:`check_expressible`).
    """
    convert = _lookup(TO_TORCH, module, "to_torch")
    check_expressible(module)
    return _match_state(convert(module), module)


def from_torch(module: nn.Module) -> nn.Module:
    """Our module equivalent to the ``torch.nn`` ``module``, with copied weights, same mode and dtype."""
    return _match_state(_lookup(FROM_TORCH, module, "from_torch")(module), module)

"""Conversions between our modules and PyTorch's own, with the same weights.

``to_torch(ours)`` builds the equivalent ``torch.nn`` module; ``from_torch(theirs)``
builds ours. Tests and chapters use them to show that the library computes exactly
what PyTorch does. Each pair of classes registers its two converters with
:func:`register`; later modules (layers, models) add their own pairs.

Remember that the mask conventions differ: ours is ``True`` where attention is allowed,
``torch.nn.MultiheadAttention``'s ``attn_mask`` is ``True`` where it is blocked.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .torch_attention import MultiHeadAttention

_TO_TORCH: dict[type, Callable[[nn.Module], nn.Module]] = {}
_FROM_TORCH: dict[type, Callable[[nn.Module], nn.Module]] = {}


def register(ours: type, theirs: type, to_fn: Callable, from_fn: Callable) -> None:
    """Register the converters between one of our classes and a torch class."""
    _TO_TORCH[ours] = to_fn
    _FROM_TORCH[theirs] = from_fn


def _lookup(table: dict, module: nn.Module, direction: str) -> Callable:
    for cls in type(module).__mro__:
        if cls in table:
            return table[cls]
    known = ", ".join(sorted(c.__name__ for c in table))
    raise TypeError(f"module must be one of [{known}] for {direction}, got {type(module).__name__}")


def to_torch(module: nn.Module) -> nn.Module:
    """The ``torch.nn`` module equivalent to ``module``, with copied weights, same mode and dtype."""
    converted = _lookup(_TO_TORCH, module, "to_torch")(module)
    return _match_state(converted, module)


def from_torch(module: nn.Module) -> nn.Module:
    """Our module equivalent to the ``torch.nn`` ``module``, with copied weights, same mode and dtype."""
    converted = _lookup(_FROM_TORCH, module, "from_torch")(module)
    return _match_state(converted, module)


def _match_state(converted: nn.Module, source: nn.Module) -> nn.Module:
    param = next(source.parameters(), None)
    if param is not None:
        converted = converted.to(dtype=param.dtype, device=param.device)
    return converted.train(source.training)


def copy_linear(dst: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Copy a weight (and bias) into ``dst`` without tracking gradients."""
    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)


def _mha_to_torch(m: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = m.W_q.bias is not None
    t = nn.MultiheadAttention(m.d_model, m.num_heads, dropout=m.dropout, bias=bias, batch_first=True)
    t = t.to(dtype=m.W_q.weight.dtype)
    with torch.no_grad():
        t.in_proj_weight.copy_(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        if bias:
            t.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
    copy_linear(t.out_proj, m.W_o.weight, m.W_o.bias)
    return t


def _mha_from_torch(t: nn.MultiheadAttention) -> MultiHeadAttention:
    if not t._qkv_same_embed_dim:
        raise ValueError("module must use the same size for query, key and value (kdim = vdim = embed_dim)")
    if t.bias_k is not None or t.add_zero_attn:
        raise ValueError("module must not use add_bias_kv or add_zero_attn, which MultiHeadAttention lacks")
    bias = t.in_proj_bias is not None
    m = MultiHeadAttention(t.embed_dim, t.num_heads, dropout=t.dropout, bias=bias)
    m = m.to(dtype=t.in_proj_weight.dtype)
    w_q, w_k, w_v = t.in_proj_weight.chunk(3)
    b_q, b_k, b_v = t.in_proj_bias.chunk(3) if bias else (None, None, None)
    copy_linear(m.W_q, w_q, b_q)
    copy_linear(m.W_k, w_k, b_k)
    copy_linear(m.W_v, w_v, b_v)
    copy_linear(m.W_o, t.out_proj.weight, t.out_proj.bias)
    return m


register(MultiHeadAttention, nn.MultiheadAttention, _mha_to_torch, _mha_from_torch)


def torch_attn_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Our mask (True = attend) as ``nn.MultiheadAttention``'s ``attn_mask`` (True = blocked)."""
    return None if mask is None else ~mask

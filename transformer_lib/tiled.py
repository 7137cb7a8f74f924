"""FlashAttention's idea on the CPU: attention block by block with the online softmax.

Attention as chapter 04 writes it builds the whole ``(q_len, k_len)`` matrix of scores,
then its softmax, then multiplies by the values: memory that grows with ``n**2``.
FlashAttention (Dao et al., 2022) never holds that matrix. It walks over blocks of keys,
and for each query keeps three running numbers per row: the largest score seen so far
``m``, the sum of ``exp(score - m)`` so far ``l``, and the weighted sum of values so far
``acc``. When a block brings a larger maximum, the earlier sum and accumulator are
rescaled by ``exp(m_old - m_new)``: the online softmax of Milakov and Gimelshein (2018).
After the last block, ``acc / l`` is exactly ``softmax(scores) @ v``, up to float rounding.

Read top to bottom:

* :func:`online_softmax`: the softmax of one vector (or of every row) computed block by
  block, the running maximum and running sum alone;
* :func:`tiled_attention`: attention block by block, with masks and causal masking, equal to
  ``F.scaled_dot_product_attention``;
* :func:`peak_memory`: the most bytes a call's tensors held at once, to compare the two.

What this shows and what it does not: the memory. The speed of the real kernel comes
from the GPU's memory hierarchy (blocks kept in fast on-chip memory instead of written to
and read back from the GPU's main memory); a Python loop over blocks on a CPU is slower
than one matrix product, and says nothing about that speed. Taught in chapter 19.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _checks


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """``softmax(x, dim=-1)`` computed over blocks of ``block_size`` entries, one pass, then a rescale.

    For each block: the new running maximum ``m = max(m, max(block))``; the running sum
    rescaled to it, ``l = l * exp(m_old - m) + sum(exp(block - m))``. At the end every entry
    is ``exp(x - m) / l``. No block needs the ones after it, which is what lets
    :func:`tiled_attention` work on keys one block at a time.

    Args:
        x: ``(..., n)`` floats; entries ``-inf`` get weight 0 (a row of only ``-inf`` gets
            all zeros, not NaN).
        block_size: entries per block.
    """
    _checks.float_tensor(x, "x")
    _checks.ndim_at_least(x, 1, "x", "(..., n)")
    block_size = _checks.positive_int(block_size, "block_size")
    m = torch.full(x.shape[:-1] + (1,), -math.inf, dtype=x.dtype, device=x.device)  # running maximum
    l = torch.zeros_like(m)  # running sum of exp(x - m)  # noqa: E741
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        safe = m_new.nan_to_num(neginf=0.0)  # a row with no finite entry yet: nothing to rescale
        l = l * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=-1, keepdim=True)  # noqa: E741
        m = m_new
    safe = m.nan_to_num(neginf=0.0)
    return torch.where(l > 0, torch.exp(x - safe) / l.clamp(min=torch.finfo(x.dtype).tiny), 0.0)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    block_size: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    """``softmax(q k^T * scale) v`` computed over blocks of queries and keys, never the whole score matrix.

    Each block of ``block_size`` queries walks over the keys in blocks of ``block_size``,
    keeping the running maximum ``m``, the running sum ``l`` and the running weighted sum
    of values ``acc`` of every query (FlashAttention's forward pass, Dao et al., 2022). The
    largest tensor it makes is one block of scores, ``(..., block_size, block_size)``, and
    the output.

    Args:
        q: ``(..., q_len, d)``; k: ``(..., k_len, d)``; v: ``(..., k_len, d_v)``, leading
            dimensions equal (batch, heads).
        mask: optional boolean, ``True`` where attention is allowed, broadcastable to
            ``(..., q_len, k_len)`` (as ``F.scaled_dot_product_attention``'s ``attn_mask``).
        causal: query ``i`` sees keys ``0 .. i`` only, as ``is_causal=True`` of
            ``F.scaled_dot_product_attention`` (aligned at the top left); key blocks wholly
            in the future are skipped, not computed and masked.
        block_size: queries and keys per block.
        scale: the factor the scores are multiplied by; ``None``: ``1 / sqrt(d)``.

    Returns:
        ``(..., q_len, d_v)``. A query whose keys are all masked gets a zero output (it has
        nothing to attend to), as the library's attention does; PyTorch 2.13's CPU kernels
        also return zeros there (the explicit softmax of chapter 04 would give NaN).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.float_tensor(x, name)
        _checks.ndim_at_least(x, 2, name, f"(..., {'q_len' if name == 'q' else 'k_len'}, d)")
    _checks.same_size(q.shape[-1], k.shape[-1], "the last dimensions of q and k (d)")
    _checks.same_size(k.shape[-2], v.shape[-2], "the key and value counts of k and v (k_len)")
    block_size = _checks.positive_int(block_size, "block_size")
    causal = _checks.flag(causal, "causal")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else _checks.positive_float(scale, "scale")
    n, m_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        _checks.bool_mask(mask, "mask", (*q.shape[:-1], m_len), "(..., q_len, k_len)", tensor=True)
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., q_len, d_v)
    for qs in range(0, n, block_size):
        qe = min(qs + block_size, n)
        q_blk = q[..., qs:qe, :] * scale  # (..., bq, d)
        # the running maximum, sum and weighted values of every query of this block
        m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)  # (..., bq, 1)
        l = torch.zeros_like(m)  # noqa: E741
        acc = torch.zeros(*q_blk.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., bq, d_v)
        last_key = min(m_len, qe) if causal else m_len  # keys after the block's last query are all in the future
        for ks in range(0, last_key, block_size):
            ke = min(ks + block_size, last_key)
            # 1) one block of scores, masked
            s = q_blk @ k[..., ks:ke, :].transpose(-2, -1)  # (..., bq, bk)
            if mask is not None:
                s = s.masked_fill(~mask[..., qs:qe, ks:ke] if mask.shape[-2] > 1 else ~mask[..., ks:ke], -math.inf)
            if causal and ke > qs + 1:  # the block reaches past some query's own position
                future = torch.ones(qe - qs, ke - ks, dtype=torch.bool, device=q.device).triu(qs - ks + 1)
                s = s.masked_fill(future, -math.inf)
            # 2) the online softmax: a new maximum rescales what came before
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            safe = m_new.nan_to_num(neginf=0.0)  # rows with no visible key yet stay at zero
            p = torch.exp(s - safe)  # (..., bq, bk); masked scores give exp(-inf) = 0
            rescale = torch.exp(m - safe)  # (..., bq, 1); 0 at the first block with a visible key
            l = l * rescale + p.sum(dim=-1, keepdim=True)  # noqa: E741
            acc = acc * rescale + p @ v[..., ks:ke, :]
            m = m_new
        # 3) divide by the sum once, at the end; a row that saw no key stays 0
        out[..., qs:qe, :] = torch.where(l > 0, acc / l.clamp(min=torch.finfo(q.dtype).tiny), 0.0)
    return out


class _LiveBytes(TorchDispatchMode):
    """Counts the bytes of the storages that the operations inside it create, while they live."""

    def __init__(self, known: set[int]):
        super().__init__()
        self.known = known  # storages that existed before (the inputs): not counted
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors using it]
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key == 0 or key in self.known:
                continue
            if key not in self.live:
                self.live[key] = [storage.nbytes(), 0]
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            self.live[key][1] += 1
            weakref.finalize(t, self._release, key)
        return out


def peak_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Call ``fn(*args, **kwargs)``; return its result and the most bytes its new tensors held at once.

    Every tensor an operation creates during the call is counted from its creation until
    the last tensor using its memory is freed; the inputs (and tensors that share their
    memory) are not counted. The peak therefore includes the result. For attention over
    ``n`` positions the explicit version's peak grows with ``n**2`` (the score matrix and its
    softmax) and :func:`tiled_attention`'s with ``n`` (the output and one block).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    known = {a.untyped_storage().data_ptr() for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}
    mode = _LiveBytes(known)
    with torch.no_grad(), mode:
        result = fn(*args, **kwargs)
    return result, mode.peak

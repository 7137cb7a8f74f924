"""Attention in PyTorch: masks, scaled dot-product attention and multi-head attention.

Chapters 04-06 teach these pieces; chapters 09 onwards build layers from them. Read top to
bottom: the masks, the attention function (explicit, then PyTorch's fused kernel), the
:class:`KVCache` that keeps keys and values between generation steps, and
:class:`MultiHeadAttention`, which uses all of them.

Mask convention (the same as ``torch.nn.functional.scaled_dot_product_attention``): a
mask is a boolean tensor, ``True`` where a query may attend to a key, broadcastable to
``(batch, heads, q_len, k_len)``. ``torch.nn.MultiheadAttention`` uses the opposite
convention (``True`` = blocked); :mod:`transformer_lib.interop` converts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .config import ROTARY_LAYOUTS
from .positional import apply_rotary


def causal_mask(
    n: int, device: torch.device | str | None = None, *, past: int = 0, window: int | None = None
) -> torch.Tensor:
    """Look-ahead mask: ``(n, past + n)`` boolean, ``True`` on and below the diagonal.

    Query position i may attend to key positions 0..i only, so a decoder cannot peek at
    the tokens it is about to predict. Taught in chapter 05.

    ``past`` is for generation with a :class:`KVCache`: the ``n`` queries are positions
    ``past .. past + n - 1`` and the keys are positions ``0 .. past + n - 1`` (the cached
    ones first), so query i sees keys ``0 .. past + i``. ``past=0`` is the square mask.

    ``window`` makes it a sliding window (Mistral's, chapter 19; chapter 13's local
    attention, one-sided): query i sees only the ``window`` most recent keys, positions
    ``i - window + 1 .. i``, itself included. ``None``: every earlier key.
    """
    n = _checks.positive_int(n, "n")
    past = _checks.non_negative_int(past, "past")
    mask = torch.ones(n, past + n, dtype=torch.bool, device=device).tril(past)
    if window is not None:
        window = _checks.positive_int(window, "window")
        mask = mask.triu(past - window + 1)  # drop keys more than window - 1 positions back
    return mask


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Key-padding mask: ``(batch, 1, 1, seq)`` boolean, ``False`` at padding tokens.

    It broadcasts over heads and query positions, so no query attends to a pad.

    Args:
        tokens: ``(batch, seq)`` integer token ids.
        pad_id: the id of the padding token.

    Taught in chapter 05.
    """
    _checks.token_ids(tokens, "tokens")
    pad_id = _checks.token_id(pad_id, "pad_id")
    return (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, seq)


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.float_tensor(x, name)
        _checks.ndim_at_least(x, 2, name, f"(..., {'q_len' if name == 'q' else 'k_len'}, d)")
    _checks.same_size(q.shape[-1], k.shape[-1], "the last dimensions of q and k (d_k)")
    _checks.same_size(k.shape[-2], v.shape[-2], "the key and value counts of k and v (k_len)")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_k)) v``, written out step by step.

    Args:
        q: ``(..., q_len, d_k)`` queries; any leading batch dimensions (e.g. batch, heads).
        k: ``(..., k_len, d_k)`` keys.
        v: ``(..., k_len, d_v)`` values.
        mask: optional boolean tensor, ``True`` where attention is allowed, broadcastable
            to ``(..., q_len, k_len)``. A query row whose keys are all masked gets zero
            weights and a zero output (never NaN): it has nothing to attend to.
        dropout_p: probability of dropping an attention weight (applied whenever it is
            positive, as in ``F.scaled_dot_product_attention``; pass 0 in evaluation).
        scale: the factor the scores are multiplied by; ``None`` (the paper) is
            ``1 / sqrt(d_k)``, ``1.0`` gives the raw dot products (as the ``scale=`` of
            ``F.scaled_dot_product_attention``).

    Returns:
        ``(output, weights)``: ``(..., q_len, d_v)`` and the softmax weights
        ``(..., q_len, k_len)`` before dropout.

    Taught in chapter 04; masks in chapter 05.
    """
    _check_qkv(q, k, v)
    dropout_p = _checks.probability(dropout_p, "dropout_p")
    if scale is not None:
        scale = _checks.positive_float(scale, "scale")
    # 1) scores: how well each query matches each key, divided by sqrt(d_k) unless told otherwise
    scores = q @ k.transpose(-2, -1)  # (..., q_len, k_len)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if mask is not None:
        _checks.bool_mask(mask, "mask", scores.shape, "(..., q_len, k_len)", tensor=True)
        scores = scores.masked_fill(~mask, float("-inf"))
    # 2) softmax, row by row: each query's weights sum to 1
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # a fully masked row is softmax(all -inf) = NaN; it has no keys, so weights 0
        weights = weights.masked_fill(~mask, 0.0)
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    # 3) weighted sum of the values
    return attended @ v, weights


def _is_causal(mask: torch.Tensor, q_len: int, k_len: int) -> bool:
    """Whether ``mask`` is ``causal_mask(q_len)``, the same for every batch and head.

    PyTorch's layers check their masks the same way (``torch.nn.Transformer`` with
    ``is_causal=None``); the fused kernel then skips the blocked half instead of reading a mask.
    Only square masks qualify: with a cache, the queries are the last positions, and the
    kernel's ``is_causal`` would align them with the first.
    """
    if q_len != k_len or mask.shape[-2:] != (q_len, k_len) or any(s != 1 for s in mask.shape[:-2]):
        return False
    return torch.equal(mask.reshape(q_len, k_len), causal_mask(q_len, device=mask.device))


def _fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    scale: float | None = None,
) -> torch.Tensor:
    """The same maths through PyTorch's fused kernel, with fully masked rows zeroed.

    ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention): the kernel
    then shares each key-value head among ``q``'s heads in consecutive groups.
    """
    options = dict(dropout_p=dropout_p, scale=scale)
    if k.shape[-3:-2] != q.shape[-3:-2]:
        options["enable_gqa"] = True  # only when asked: the default keeps the kernel PyTorch picks
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, **options)
    if _is_causal(mask, q.shape[-2], k.shape[-2]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **options)
    # the mask stays as broadcast as it came: the kernel turns a boolean mask into an additive
    # one of the mask's own shape, so an expanded mask would be filled out to (..., q_len, k_len)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len or 1, 1)
    if bool(has_key.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)
    # let empty rows see every key (so the kernel makes no NaN), then zero their output
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, **options)
    return out * has_key


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``(batch, kv_heads, seq, d_k)`` to ``(batch, kv_heads * groups, seq, d_k)``: each head repeated.

    Grouped-query attention (Ainslie et al., 2023) shares key-value head ``j`` among the
    query heads ``j * groups .. (j + 1) * groups - 1``; repeating it lets every query head
    attend as in ordinary multi-head attention (what ``enable_gqa=True`` does inside
    ``F.scaled_dot_product_attention``). Taught in chapter 19.
    """
    groups = _checks.positive_int(groups, "groups")
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)


@dataclass
class KVCache:
    """The keys and values one attention keeps between generation steps (used by :mod:`~transformer_lib.decoding`).

    A decoder generates one token at a time, and each step attends over every token so
    far. Without a cache, step t projects the keys and values of all t tokens again,
    although a causal decoder's earlier tokens never change: their keys and values are
    the same at every step. With a cache, the attention projects only the new token's
    query, key and value, appends the key and value here and attends over all it holds.
    Step t then costs about as much as one token instead of t tokens.

    Two kinds, one per attention of a decoder layer:

    * ``grows=True``, self-attention: each call appends the new tokens' keys and values,
      so ``length`` is the number of tokens seen, and the new tokens are positions
      ``length .. length + new - 1`` (rotary positions turn them by those positions).
    * ``grows=False``, cross-attention: the keys and values of the encoder's ``memory``,
      which does not change while a sequence is decoded. The first call computes them,
      every later call reuses them and projects only the queries.

    A sliding-window attention (``window``, Mistral's, chapter 19) needs only the most
    recent keys: a growing cache with ``window=w`` returns every key a call needs, then
    keeps only the last ``w - 1`` (with the next token's own key, that is the ``w`` keys
    it may see), so its memory stays bounded however long the text. ``dropped`` counts the
    positions let go, so ``position`` (the next token's position) still counts them all.

    With grouped-query attention the cache holds the key-value heads only
    (``heads = num_kv_heads``), which is where its memory saving comes from.

    Attributes:
        k, v: ``(batch, heads, length, d_k)`` keys (already rotated, with rotary
            positions) and values, or ``None`` before the first call.
        grows: which of the two kinds this cache is.
        window: for a growing cache, keep at most ``window - 1`` keys; ``None``: all.
        dropped: how many of the earliest positions a windowed cache has let go.
    """

    grows: bool = True
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    window: int | None = None
    dropped: int = 0

    def __post_init__(self) -> None:
        _checks.flag(self.grows, "grows")
        if self.window is not None:
            _checks.positive_int(self.window, "window")
            if not self.grows:
                raise ValueError("window applies to a growing (self-attention) cache, got grows=False")

    @property
    def length(self) -> int:
        """How many key positions the cache holds (0 before the first call)."""
        return 0 if self.k is None else self.k.shape[2]

    @property
    def position(self) -> int:
        """The position of the next token: the positions seen, held or dropped."""
        return self.dropped + self.length

    def update(self, k: torch.Tensor | None, v: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Take this call's keys and values ``(batch, heads, new, d_k)``; return all to attend over.

        A growing cache appends them along the positions; a fixed one keeps the first
        call's (later calls pass ``None``). A windowed cache returns the keys held and the
        new ones, then keeps the last ``window - 1``.
        """
        if self.k is None:
            self.k, self.v = k, v
        elif self.grows:
            self.k = torch.cat([self.k, k], dim=2)  # (batch, heads, length + new, d_k)
            self.v = torch.cat([self.v, v], dim=2)
        keys, values = self.k, self.v
        if self.window is not None and self.length > self.window - 1:
            start = self.length - (self.window - 1)
            self.k, self.v = self.k[:, :, start:], self.v[:, :, start:]
            self.dropped += start
        return keys, values

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` ``(new_batch,)`` of the batch, in that order (beam search)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``Concat(head_1, ..., head_h) W_o``.

    ``head_i = Attention(query W_q_i, key W_k_i, value W_v_i)``; each head works in
    ``d_k = d_model / num_heads`` dimensions, so all heads together cost about as much as
    one full-width head. The per-head projections are slices of the four
    ``nn.Linear(d_model, d_model)`` layers ``W_q``, ``W_k``, ``W_v`` and ``W_o``.

    Args:
        d_model: width of the inputs and outputs.
        num_heads: number of heads; must divide ``d_model``.
        dropout: dropout on the attention weights during training.
        bias: whether the four projections have biases.
        attention_scale: divide the scores by ``sqrt(d_k)`` (the paper); ``False`` uses the
            raw dot products ``q . k``, for the ablation that shows why the factor is there.
        rotary: rotate each head's queries and keys by their positions (rotary embeddings,
            :func:`~transformer_lib.positional.apply_rotary`, Su et al. 2021) before the
            scores, so the scores depend on relative positions; for self-attention, where
            queries and keys are positions ``0 .. seq - 1`` of one sequence. ``d_k`` must
            be even.
        num_kv_heads: heads of the keys and values (``None``: ``num_heads``, the paper).
            Fewer make grouped-query attention (Ainslie et al., 2023): each key-value head
            serves ``num_heads / num_kv_heads`` query heads, and ``W_k``, ``W_v`` shrink to
            ``num_kv_heads * d_k`` outputs; ``1`` is multi-query attention (Shazeer, 2019).
            It must divide ``num_heads``. A :class:`KVCache` then holds only these heads.
        rotary_layout: which features the rotation pairs, ``"interleaved"`` (chapter 8) or
            ``"half"`` (Llama's checkpoints); see :func:`~transformer_lib.positional.apply_rotary`.
        rotary_base: the rotation's frequency base (Llama's ``rope_theta``).

    After a forward pass with ``need_weights=True``, ``attention_weights`` holds the
    weights of every head, ``(batch, heads, q_len, k_len)`` (detached).

    Taught in chapter 06; used by the encoder and decoder layers (chapters 09-10).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        attention_scale: bool = True,
        rotary: bool = False,
        num_kv_heads: int | None = None,
        rotary_layout: str = "interleaved",
        rotary_base: float = 10000.0,
    ):
        super().__init__()
        d_model = _checks.positive_int(d_model, "d_model")
        num_heads = _checks.positive_int(num_heads, "num_heads")
        if d_model % num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else _checks.positive_int(num_kv_heads, "num_kv_heads")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must divide num_heads (each key-value head serves a group of query "
                             f"heads), got num_kv_heads={num_kv_heads} and num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.d_k = d_model // num_heads
        self.rotary_layout = _checks.one_of(rotary_layout, "rotary_layout", ROTARY_LAYOUTS)
        self.rotary_base = _checks.positive_float(rotary_base, "rotary_base")
        self.dropout = _checks.probability(dropout, "dropout")
        self.attention_scale = _checks.flag(attention_scale, "attention_scale")
        self.rotary = _checks.flag(rotary, "rotary")
        if rotary and self.d_k % 2:
            raise ValueError(f"rotary=True needs an even d_k = d_model / num_heads (features turn in pairs), "
                             f"got d_k={self.d_k}")
        d_kv = num_kv_heads * self.d_k  # d_model unless grouped-query
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_kv, bias=bias)
        self.W_v = nn.Linear(d_model, d_kv, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.attention_weights: torch.Tensor | None = None

    def _check_inputs(self, query, key, value, mask, cache) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            _checks.hidden(x, name, self.d_model)
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                "query, key and value must share the batch size, got "
                f"{query.shape[0]}, {key.shape[0]} and {value.shape[0]}"
            )
        _checks.same_size(key.shape[1], value.shape[1], "the sequence lengths of key and value")
        k_len = key.shape[1]
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
            if cache.k is not None and cache.k.shape[0] != query.shape[0]:
                raise ValueError(f"cache must hold the query's batch of {query.shape[0]} rows, "
                                 f"got {cache.k.shape[0]} (reorder it after changing the batch)")
            k_len = cache.length + k_len if cache.grows else cache.length or k_len
        if mask is not None:
            target = (query.shape[0], self.num_heads, query.shape[1], k_len)
            _checks.bool_mask(mask, "mask", target, "(batch, heads, q_len, k_len)", tensor=True)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, heads * d_k)`` to ``(batch, heads, seq, d_k)``: the width split into heads of d_k."""
        b, n, _ = x.shape
        return x.view(b, n, -1, self.d_k).transpose(1, 2)  # (batch, heads, seq, d_k)

    def _project(self, query, key, value):
        """Apply W_q, W_k, W_v; self-attention does it as one packed matmul."""
        if query is key and key is value:
            weight = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
            bias = None
            if self.W_q.bias is not None:
                bias = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])
            d_kv = self.W_k.out_features
            return F.linear(query, weight, bias).split([self.d_model, d_kv, d_kv], dim=-1)
        return self.W_q(query), self.W_k(key), self.W_v(value)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: ``(batch, q_len, d_model)``.
            key: ``(batch, k_len, d_model)``.
            value: ``(batch, k_len, d_model)``.
            mask: optional boolean, ``True`` where attention is allowed, broadcastable to
                ``(batch, heads, q_len, k_len)`` (with a growing cache, ``k_len`` counts the
                cached keys too: ``cache.length + k_len``).
            need_weights: True (default) runs the explicit matmul-softmax path and keeps
                the weights in ``attention_weights``; False may use PyTorch's fused
                kernel, which gives the same output but no weights.
            cache: a :class:`KVCache` for generation, updated in place. Growing
                (self-attention): ``query``, ``key`` and ``value`` are the new tokens, which
                attend to the cached ones and to each other. Fixed (cross-attention):
                ``key`` and ``value`` are projected at the first call only.

        Returns:
            ``(batch, q_len, d_model)``.
        """
        self._check_inputs(query, key, value, mask, cache)
        b, q_len, _ = query.shape
        dropout_p = self.dropout if self.training else 0.0
        past = cache.position if cache is not None and cache.grows else 0  # positions already seen

        # 1) project, then split d_model into h heads of d_k (a filled fixed cache has k and v)
        if cache is not None and not cache.grows and cache.k is not None:
            q, k, v = self._heads(self.W_q(query)), None, None
        else:
            q, k, v = (self._heads(x) for x in self._project(query, key, value))  # (batch, heads, len, d_k)
        if self.rotary:  # turn each query and key by its position: scores then see only offsets
            rotate = dict(base=self.rotary_base, layout=self.rotary_layout)
            q = apply_rotary(q, torch.arange(past, past + q_len, device=q.device), **rotate)  # shape unchanged
            if k is not None:
                k = apply_rotary(k, torch.arange(past, past + k.shape[2], device=k.device), **rotate)
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, kv_heads, every position so far, d_k)

        # 2) attend, every head at once (a key-value head serves its group of query heads)
        scale = None if self.attention_scale else 1.0  # None: 1 / sqrt(d_k)
        if need_weights:
            groups = self.num_heads // self.num_kv_heads
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (batch, heads, k_len, d_k)
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, scale)
            self.attention_weights = weights.detach()  # (batch, heads, q_len, k_len)
        else:
            out = _fused_attention(q, k, v, mask, dropout_p, scale)
            self.attention_weights = None

        # 3) concatenate the heads, then mix them with W_o
        out = out.transpose(1, 2).reshape(b, q_len, self.d_model)  # (batch, q_len, d_model)
        return self.W_o(out)

    def extra_repr(self) -> str:
        text = f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout}"
        if self.num_kv_heads != self.num_heads:
            text += f", num_kv_heads={self.num_kv_heads}"
        if not self.attention_scale:
            text += ", attention_scale=False"
        if self.rotary and self.rotary_layout != "interleaved":
            return text + f", rotary=True, rotary_layout={self.rotary_layout!r}"
        return text + (", rotary=True" if self.rotary else "")

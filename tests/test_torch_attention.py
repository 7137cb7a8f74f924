"""Tests for transformer_lib.torch_attention: masks, scaled dot-product and multi-head attention.

The references are PyTorch's own ``F.scaled_dot_product_attention`` and
``nn.MultiheadAttention`` (with the weights copied through ``tl.to_torch``), over random
shapes, masks and both float32 and float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer_lib as tl
from transformer_lib.interop import torch_attn_mask

DTYPES = [torch.float32, torch.float64]


def tolerance(dtype):
    """(rtol, atol): relative error at most 1e-5 in float32, far tighter in float64."""
    return (1e-5, 1e-6) if dtype == torch.float32 else (1e-12, 1e-13)


def assert_close(actual, expected, dtype=torch.float32):
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def max_relative_error(actual, expected):
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def random_mask(gen, shape, p_allowed=0.6, keep_one=True):
    mask = torch.rand(shape, generator=gen) < p_allowed
    if keep_one:  # at least one allowed key per row, so PyTorch makes no NaN
        mask[..., torch.randint(shape[-1], (), generator=gen)] = True
    return mask


# --------------------------------------------------------------------------- masks


class TestCausalMask:
    @pytest.mark.parametrize("n", [1, 2, 5, 17])
    def test_values(self, n):
        m = tl.causal_mask(n)
        assert m.shape == (n, n) and m.dtype == torch.bool
        for i in range(n):
            for j in range(n):
                assert bool(m[i, j]) == (j <= i)

    def test_matches_pytorch_causal(self):
        q, k, v = torch.randn(3, 6, 4), torch.randn(3, 6, 4), torch.randn(3, 6, 4)
        ours, _ = tl.scaled_dot_product_attention(q, k, v, mask=tl.causal_mask(6))
        assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def test_numpy_integer_and_device(self):
        assert tl.causal_mask(np.int64(3)).shape == (3, 3)
        assert tl.causal_mask(2, device="cpu").device.type == "cpu"

    @pytest.mark.parametrize(("n", "exc"), [(0, ValueError), (-2, ValueError), (2.5, TypeError), (True, TypeError)])
    def test_errors(self, n, exc):
        with pytest.raises(exc, match=r"n .*positive integer"):
            tl.causal_mask(n)


class TestPaddingMask:
    def test_values(self):
        tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
        m = tl.padding_mask(tokens, pad_id=0)
        assert m.shape == (2, 1, 1, 4) and m.dtype == torch.bool
        torch.testing.assert_close(m[:, 0, 0], torch.tensor([[True, True, False, False], [True, False, True, True]]))

    def test_no_query_attends_to_pads(self):
        tokens = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]])
        q = torch.randn(2, 3, 5, 8)
        _, w = tl.scaled_dot_product_attention(q, q, q, mask=tl.padding_mask(tokens, 0))
        assert (w[0, :, :, 3:] == 0).all() and (w[1, :, :, 2:] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5))

    def test_errors(self):
        with pytest.raises(TypeError, match=r"tokens .*torch.Tensor of token ids.*list"):
            tl.padding_mask([[1, 2]], 0)
        with pytest.raises(TypeError, match=r"tokens .*integer token ids.*torch.float32"):
            tl.padding_mask(torch.zeros(2, 3), 0)
        with pytest.raises(TypeError, match=r"tokens .*integer token ids.*torch.bool"):
            tl.padding_mask(torch.zeros(2, 3, dtype=torch.bool), 0)
        with pytest.raises(ValueError, match=r"tokens .*\(batch, seq\).*\(3,\)"):
            tl.padding_mask(torch.zeros(3, dtype=torch.long), 0)
        with pytest.raises(TypeError, match=r"pad_id .*int.*float 0.0"):
            tl.padding_mask(torch.zeros(2, 3, dtype=torch.long), 0.0)
        with pytest.raises(TypeError, match=r"pad_id .*int.*bool"):
            tl.padding_mask(torch.zeros(2, 3, dtype=torch.long), False)


# --------------------------------------------------------------------------- scaled dot-product attention


def loop_sdpa(q, k, v, mask=None):
    """One query at a time in float64, for a 2-D (q_len, d) problem."""
    q_len, k_len = q.shape[0], k.shape[0]
    out = torch.zeros(q_len, v.shape[1], dtype=torch.float64)
    weights = torch.zeros(q_len, k_len, dtype=torch.float64)
    for i in range(q_len):
        scores = [float(q[i] @ k[j]) / math.sqrt(q.shape[1]) for j in range(k_len)]
        e = [math.exp(s) if mask is None or mask[i, j] else 0.0 for j, s in enumerate(scores)]
        total = sum(e)
        for j in range(k_len):
            weights[i, j] = e[j] / total if total else 0.0
        out[i] = weights[i] @ v.double()
    return out, weights


class TestScaledDotProductAttention:
    def test_against_loops(self):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(s, generator=gen, dtype=torch.float64) for s in ((4, 3), (5, 3), (5, 2)))
        mask = random_mask(gen, (4, 5))
        out, w = tl.scaled_dot_product_attention(q, k, v, mask=mask)
        ref_out, ref_w = loop_sdpa(q, k, v, mask)
        assert_close(out, ref_out, torch.float64)
        assert_close(w, ref_w, torch.float64)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("seed", range(6))
    def test_matches_pytorch(self, dtype, seed):
        gen = torch.Generator().manual_seed(seed)
        lead = tuple(int(s) for s in torch.randint(1, 4, (int(torch.randint(0, 3, (), generator=gen)),), generator=gen))
        q_len, k_len, d, d_v = (int(x) for x in torch.randint(1, 12, (4,), generator=gen))
        q = torch.randn(*lead, q_len, d, generator=gen, dtype=dtype)
        k = torch.randn(*lead, k_len, d, generator=gen, dtype=dtype)
        v = torch.randn(*lead, k_len, d_v, generator=gen, dtype=dtype)
        for mask in (None, random_mask(gen, (*lead, q_len, k_len)), random_mask(gen, (q_len, k_len)),
                     random_mask(gen, (k_len,))):
            out, w = tl.scaled_dot_product_attention(q, k, v, mask=mask)
            full = None if mask is None else mask.expand(*lead, q_len, k_len)  # torch wants >= 2 dims
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
            assert out.shape == (*lead, q_len, d_v) and w.shape == (*lead, q_len, k_len)
            assert out.dtype == dtype and w.dtype == dtype
            assert_close(out, ref, dtype)
            if dtype == torch.float32:
                assert max_relative_error(out, ref) <= 1e-5

    def test_broadcast_batch_dimensions(self):
        q, k, v = torch.randn(2, 3, 4, 8), torch.randn(1, 3, 6, 8), torch.randn(1, 3, 6, 5)
        out, w = tl.scaled_dot_product_attention(q, k, v)
        assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
        assert_close(out, F.scaled_dot_product_attention(q, k, v))

    def test_weights_rows_sum_to_one_and_masked_are_exactly_zero(self):
        gen = torch.Generator().manual_seed(3)
        q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 3)
        mask = random_mask(gen, (2, 1, 7, 9), p_allowed=0.5)
        _, w = tl.scaled_dot_product_attention(q, k, v, mask=mask)
        full = mask.expand_as(w)
        assert (w[~full] == 0).all()
        assert (w[full] > 0).all()
        assert_close(w.sum(-1), torch.ones(2, 4, 7))

    def test_mask_wins_over_extreme_scores(self):
        # the allowed key scores -9e4, far below any finite "large negative" fill value
        q = torch.tensor([[-300.0]], dtype=torch.float64)
        k = torch.tensor([[300.0], [0.0], [-300.0]], dtype=torch.float64)
        v = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
        out, w = tl.scaled_dot_product_attention(q, k, v, mask=torch.tensor([True, False, False]))
        torch.testing.assert_close(w, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64), rtol=0, atol=0)
        torch.testing.assert_close(out, v[:1], rtol=0, atol=0)

    def test_fully_masked_row_gives_zeros_not_nan(self):
        q = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
        k = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
        v = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
        mask = torch.ones(3, 5, dtype=torch.bool)
        mask[1] = False
        out, w = tl.scaled_dot_product_attention(q, k, v, mask=mask)
        assert torch.isfinite(out).all() and torch.isfinite(w).all()
        assert (out[1] == 0).all() and (w[1] == 0).all()
        ref_out, _ = loop_sdpa(q.detach(), k.detach(), v.detach(), mask)
        assert_close(out.detach(), ref_out, torch.float64)
        out.sum().backward()
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all()
        assert (q.grad[1] == 0).all()  # the empty row has no dependence on anything

    def test_gradients_match_pytorch(self):
        gen = torch.Generator().manual_seed(5)
        tensors = [torch.randn(s, generator=gen, dtype=torch.float64) for s in ((2, 5, 4), (2, 6, 4), (2, 6, 3))]
        mask = random_mask(gen, (5, 6))
        ours = [t.clone().requires_grad_() for t in tensors]
        theirs = [t.clone().requires_grad_() for t in tensors]
        grad_out = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
        (tl.scaled_dot_product_attention(*ours, mask=mask)[0] * grad_out).sum().backward()
        (F.scaled_dot_product_attention(*theirs, attn_mask=mask) * grad_out).sum().backward()
        for a, b in zip(ours, theirs):
            assert_close(a.grad, b.grad, torch.float64)

    def test_gradcheck(self):
        gen = torch.Generator().manual_seed(6)
        shapes = ((3, 4), (4, 4), (4, 2))
        q, k, v = (torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True) for s in shapes)
        mask = torch.tensor([[True, False, True, True], [False, False, False, False], [True, True, True, False]])
        assert torch.autograd.gradcheck(lambda q, k, v: tl.scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v))

    def test_dropout(self):
        torch.manual_seed(0)
        q, k, v = torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
        plain, plain_w = tl.scaled_dot_product_attention(q, k, v)
        torch.manual_seed(1)
        dropped, dropped_w = tl.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        assert not torch.allclose(plain, dropped)
        torch.testing.assert_close(plain_w, dropped_w)  # weights are returned before dropout
        # the dropped weights are 0 or 2x the weights: reconstruct them from the output
        torch.manual_seed(1)
        keep = F.dropout(torch.ones(2, 6, 6), p=0.5)
        torch.testing.assert_close(dropped, (plain_w * keep) @ v)

    def test_errors(self):
        q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
        sdpa = tl.scaled_dot_product_attention
        with pytest.raises(TypeError, match=r"q .*torch.Tensor.*ndarray"):
            sdpa(q.numpy(), k, v)
        with pytest.raises(TypeError, match=r"k .*floating-point tensor.*torch.int64"):
            sdpa(q, k.long(), v)
        with pytest.raises(ValueError, match=r"q .*\(\.\.\., q_len, d\).*\(4,\)"):
            sdpa(torch.randn(4), k, v)
        with pytest.raises(ValueError, match=r"v .*\(\.\.\., k_len, d\).*\(5,\)"):
            sdpa(q, k, torch.randn(5))
        with pytest.raises(ValueError, match=r"last dimensions of q and k \(d_k\).*3 and 4"):
            sdpa(torch.randn(3, 3), k, v)
        with pytest.raises(ValueError, match=r"key and value counts of k and v \(k_len\).*5 and 4"):
            sdpa(q, k, torch.randn(4, 2))
        with pytest.raises(TypeError, match=r"q, k and v .*dtype"):
            sdpa(q.double(), k, v)
        allowed = r"mask .*boolean.*"
        with pytest.raises(TypeError, match=allowed + r"torch.float32"):
            sdpa(q, k, v, mask=torch.ones(3, 5))
        with pytest.raises(TypeError, match=r"mask .*boolean.*torch.int64"):
            sdpa(q, k, v, mask=torch.ones(3, 5, dtype=torch.long))
        no_broadcast = r"mask .*\(3, 4\).*broadcast.*"
        with pytest.raises(ValueError, match=no_broadcast + r"\(\.\.\., q_len, k_len\) = \(3, 5\)"):
            sdpa(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"mask .*\(2, 3, 5\).*broadcast"):
            sdpa(q, k, v, mask=torch.ones(2, 3, 5, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"mask .*\(2, 5\).*broadcast.* = \(1, 5\)"):
            sdpa(q[:1], k, v, mask=torch.ones(2, 5, dtype=torch.bool))  # one query, two mask rows
        with pytest.raises(TypeError, match=r"mask .*torch.Tensor .*list"):
            sdpa(q, k, v, mask=[[True] * 5] * 3)
        with pytest.raises(TypeError, match=r"mask .*torch.Tensor .*ndarray"):
            sdpa(q, k, v, mask=np.ones((3, 5), dtype=bool))
        with pytest.raises(ValueError, match=r"dropout_p .*in \[0, 1\).*1.0"):
            sdpa(q, k, v, dropout_p=1.0)
        with pytest.raises(TypeError, match=r"dropout_p .*float in \[0, 1\).*str"):
            sdpa(q, k, v, dropout_p="0.1")


# --------------------------------------------------------------------------- multi-head attention


def torch_call(t, query, key, value, mask=None, key_padding=None, need_weights=True):
    """nn.MultiheadAttention with our masks translated to its True-means-blocked convention."""
    return t(query, key, value, attn_mask=torch_attn_mask(mask), key_padding_mask=key_padding,
             need_weights=need_weights, average_attn_weights=False)


class TestMultiHeadAttentionModule:
    def test_attributes(self):
        m = tl.MultiHeadAttention(48, 6, dropout=0.1)
        assert (m.d_model, m.num_heads, m.d_k, m.dropout) == (48, 6, 8, 0.1)
        for name in ("W_q", "W_k", "W_v", "W_o"):
            lin = getattr(m, name)
            assert isinstance(lin, nn.Linear) and lin.in_features == lin.out_features == 48
            assert lin.bias is not None
        assert m.attention_weights is None
        assert sum(p.numel() for p in m.parameters()) == 4 * (48 * 48 + 48)
        assert "d_model=48, num_heads=6, d_k=8" in repr(m)

    def test_no_bias(self):
        m = tl.MultiHeadAttention(16, 4, bias=False)
        assert all(getattr(m, n).bias is None for n in ("W_q", "W_k", "W_v", "W_o"))
        x = torch.randn(2, 3, 16)
        torch.testing.assert_close(m(x, x, x), m(x, x, x, need_weights=False))

    @pytest.mark.parametrize(
        ("args", "exc", "pattern"),
        [
            ((10, 3), ValueError, r"d_model .*divisible by num_heads.*d_model=10 and num_heads=3"),
            ((0, 1), ValueError, r"d_model .*positive integer.*0"),
            ((16.0, 4), TypeError, r"d_model .*positive integer.*float"),
            ((16, 0), ValueError, r"num_heads .*positive integer.*0"),
            ((16, "4"), TypeError, r"num_heads .*positive integer.*str"),
            ((16, 4, 1.5), ValueError, r"dropout .*in \[0, 1\).*1.5"),
            ((16, 4, -0.1), ValueError, r"dropout .*in \[0, 1\).*-0.1"),
        ],
    )
    def test_constructor_errors(self, args, exc, pattern):
        with pytest.raises(exc, match=pattern):
            tl.MultiHeadAttention(*args)

    def test_forward_errors(self):
        m = tl.MultiHeadAttention(8, 2)
        x, y = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
        with pytest.raises(ValueError, match=r"query .*\(batch, seq, d_model=8\).*\(3, 8\)"):
            m(x[0], x, x)
        with pytest.raises(ValueError, match=r"key .*\(batch, seq, d_model=8\).*\(2, 5, 6\)"):
            m(x, torch.randn(2, 5, 6), y)
        with pytest.raises(TypeError, match=r"value .*torch.Tensor.*ndarray"):
            m(x, y, y.numpy())
        with pytest.raises(TypeError, match=r"query .*floating-point tensor"):
            m(x.long(), y, y)
        with pytest.raises(ValueError, match=r"query, key and value .*the batch size.*2, 1 and 1"):
            m(x, y[:1], y[:1])
        with pytest.raises(ValueError, match=r"sequence lengths of key and value.*5 and 3"):
            m(x, y, x)
        with pytest.raises(TypeError, match=r"mask .*boolean"):
            m(x, y, y, mask=torch.ones(3, 5))
        no_broadcast = r"mask .*\(3, 3\).*broadcast.*"
        with pytest.raises(ValueError, match=no_broadcast + r"\(batch, heads, q_len, k_len\) = \(2, 2, 3, 5\)"):
            m(x, y, y, mask=tl.causal_mask(3))
        with pytest.raises(ValueError, match=r"mask .*\(3, 1, 1, 5\).*broadcast"):
            m(x, y, y, mask=torch.ones(3, 1, 1, 5, dtype=torch.bool))
        with pytest.raises(TypeError, match=r"mask .*torch.Tensor"):
            m(x, y, y, mask=np.ones((3, 5), dtype=bool))

    def test_hand_computation(self):
        """Each head is attention on a slice of the projections; W_o mixes the concatenation."""
        torch.manual_seed(0)
        m = tl.MultiHeadAttention(12, 3).double()
        x, y = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 5, 12, dtype=torch.float64)
        out = m(x, y, y)
        Q, K, V = m.W_q(x), m.W_k(y), m.W_v(y)
        heads, weights = [], []
        for i in range(3):
            cols = slice(4 * i, 4 * i + 4)
            scores = Q[..., cols] @ K[..., cols].transpose(1, 2) / 2.0  # sqrt(d_k) = 2
            w = torch.softmax(scores, -1)
            heads.append(w @ V[..., cols])
            weights.append(w)
        assert_close(out, m.W_o(torch.cat(heads, -1)), torch.float64)
        assert_close(m.attention_weights, torch.stack(weights, 1).detach(), torch.float64)

    def test_attention_weights(self):
        m = tl.MultiHeadAttention(16, 4)
        x, y = torch.randn(3, 5, 16, requires_grad=True), torch.randn(3, 7, 16)
        mask = random_mask(torch.Generator().manual_seed(0), (3, 1, 5, 7), p_allowed=0.5)
        m(x, y, y, mask=mask)
        w = m.attention_weights
        assert w.shape == (3, 4, 5, 7)
        assert not w.requires_grad
        assert_close(w.sum(-1), torch.ones(3, 4, 5))
        assert (w[~mask.expand_as(w)] == 0).all()
        m(x, y, y, need_weights=False)
        assert m.attention_weights is None

    def test_packed_self_attention_equals_separate_projections(self):
        torch.manual_seed(0)
        m = tl.MultiHeadAttention(16, 4).double()
        x = torch.randn(2, 6, 16, dtype=torch.float64)
        packed = m(x, x, x)
        m.zero_grad()
        packed.square().sum().backward()
        packed_grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        separate = m(x, x.clone(), x.clone())  # not the same object: three separate matmuls
        separate.square().sum().backward()
        assert_close(packed, separate, torch.float64)
        for g, p in zip(packed_grads, m.parameters()):
            assert_close(g, p.grad, torch.float64)

    def test_dropout_only_in_training(self):
        torch.manual_seed(0)
        m = tl.MultiHeadAttention(16, 2, dropout=0.5)
        x = torch.randn(2, 8, 16)
        m.eval()
        no_dropout = m(x, x, x)
        torch.testing.assert_close(m(x, x, x, need_weights=False), no_dropout)  # both paths, no dropout
        m.train()
        for need_weights in (True, False):
            torch.manual_seed(1)
            dropped = m(x, x, x, need_weights=need_weights)
            # dropping half the weights moves the output far more than the two kernels' rounding (~1e-7)
            gap = (dropped - no_dropout).abs().max().item()
            assert gap > 0.05, (need_weights, gap)
            # kept weights are scaled by 1 / (1 - p): on average the output is the no-dropout one
            with torch.no_grad():
                mean = torch.stack([m(x, x, x, need_weights=need_weights) for _ in range(400)]).mean(0)
            torch.testing.assert_close(mean, no_dropout, rtol=0, atol=0.05)
        m(x, x, x)
        assert_close(m.attention_weights.sum(-1), torch.ones(2, 2, 8))  # weights kept before dropout

    def test_module_transforms(self):
        m = tl.MultiHeadAttention(8, 2).double()
        assert all(p.dtype == torch.float64 for p in m.parameters())
        x = torch.randn(1, 3, 8, dtype=torch.float64)
        assert m(x, x, x).dtype == torch.float64
        assert set(dict(m.named_parameters())) == {f"W_{n}.{p}" for n in "qkvo" for p in ("weight", "bias")}


def random_problem(seed, dtype, self_attention):
    gen = torch.Generator().manual_seed(seed)
    num_heads = int(torch.randint(1, 5, (), generator=gen))
    d_model = num_heads * int(torch.randint(1, 9, (), generator=gen))
    batch, q_len = (int(x) for x in torch.randint(1, 6, (2,), generator=gen))
    k_len = q_len if self_attention else int(torch.randint(1, 9, (), generator=gen))
    torch.manual_seed(seed)
    m = tl.MultiHeadAttention(d_model, num_heads).to(dtype)
    query = torch.randn(batch, q_len, d_model, generator=gen, dtype=dtype)
    memory = query if self_attention else torch.randn(batch, k_len, d_model, generator=gen, dtype=dtype)
    lengths = torch.randint(1, k_len + 1, (batch,), generator=gen)
    tokens = torch.where(torch.arange(k_len)[None, :] < lengths[:, None], 1, 0)  # 0 = pad
    return m, query, memory, tokens


class TestMultiHeadAttentionAgainstPyTorch:
    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("self_attention", [True, False])
    @pytest.mark.parametrize("seed", range(5))
    @pytest.mark.parametrize("masking", ["none", "causal", "padding", "both"])
    def test_forward(self, dtype, self_attention, seed, masking):
        m, query, memory, tokens = random_problem(seed, dtype, self_attention)
        q_len, k_len = query.shape[1], memory.shape[1]
        if masking == "causal" and not self_attention:
            masking = "none" if q_len != k_len else masking
        t = tl.to_torch(m)
        assert isinstance(t, nn.MultiheadAttention) and t.batch_first
        mask = attn_mask = key_padding = None
        if masking in ("causal", "both") and q_len == k_len:
            mask = attn_mask = tl.causal_mask(q_len)
        if masking in ("padding", "both"):
            pad = tl.padding_mask(tokens, 0)
            mask = pad if mask is None else (pad & mask)
            key_padding = tokens == 0  # torch: True = ignore
        ours = m(query, memory, memory, mask=mask)
        ref, ref_w = torch_call(t, query, memory, memory, attn_mask, key_padding)
        finite = torch.isfinite(ref).all(-1)  # torch gives NaN for fully masked rows; we give zeros there
        assert finite.all() or masking == "both"
        assert_close(ours[finite], ref[finite], dtype)
        if dtype == torch.float32:
            assert max_relative_error(ours[finite], ref[finite]) <= 1e-5
        rows = finite[:, None, :].expand(m.attention_weights.shape[:3])
        assert_close(m.attention_weights[rows], ref_w[rows], dtype)
        fused = m(query, memory, memory, mask=mask, need_weights=False)
        assert_close(fused, ours, dtype)
        ref_fused, _ = torch_call(t, query, memory, memory, attn_mask, key_padding, need_weights=False)
        assert_close(fused[finite], ref_fused[finite], dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_distinct_query_key_and_value(self, dtype):
        torch.manual_seed(4)
        m = tl.MultiHeadAttention(16, 4).to(dtype)
        t = tl.to_torch(m)
        query, key, value = (torch.randn(2, n, 16, dtype=dtype) for n in (3, 5, 5))
        mask = torch.rand(2, 1, 3, 5) < 0.7
        mask[..., 0] = True
        ours = m(query, key, value, mask=mask)
        ref, ref_w = t(query, key, value, attn_mask=torch_attn_mask(mask.expand(2, 4, 3, 5).reshape(8, 3, 5)),
                       average_attn_weights=False)
        assert_close(ours, ref, dtype)
        assert_close(m.attention_weights, ref_w, dtype)
        assert_close(m(query, key, value, mask=mask, need_weights=False), ref, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_gradients(self, dtype):
        m, query, memory, tokens = random_problem(11, dtype, self_attention=False)
        t = tl.to_torch(m)
        mask = tl.padding_mask(tokens, 0)
        grad_out = torch.randn(query.shape, dtype=dtype)
        for need_weights in (True, False):
            m.zero_grad()
            t.zero_grad()
            q1, q2 = query.clone().requires_grad_(), query.clone().requires_grad_()
            (m(q1, memory, memory, mask=mask, need_weights=need_weights) * grad_out).sum().backward()
            out, _ = torch_call(t, q2, memory, memory, key_padding=tokens == 0, need_weights=need_weights)
            (out * grad_out).sum().backward()
            rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-10, 1e-12)
            torch.testing.assert_close(q1.grad, q2.grad, rtol=rtol, atol=atol)
            torch.testing.assert_close(torch.cat([m.W_q.weight.grad, m.W_k.weight.grad, m.W_v.weight.grad]),
                                       t.in_proj_weight.grad, rtol=rtol, atol=atol)
            torch.testing.assert_close(m.W_o.weight.grad, t.out_proj.weight.grad, rtol=rtol, atol=atol)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_from_torch(self, dtype):
        torch.manual_seed(3)
        t = nn.MultiheadAttention(24, 4, batch_first=True).to(dtype)
        with torch.no_grad():  # PyTorch starts the in-projection bias at zero; make it matter
            t.in_proj_bias.normal_()
            t.out_proj.bias.normal_()
        m = tl.from_torch(t)
        assert isinstance(m, tl.MultiHeadAttention) and (m.d_model, m.num_heads) == (24, 4)
        x = torch.randn(3, 6, 24, dtype=dtype)
        y = torch.randn(3, 4, 24, dtype=dtype)
        mask = tl.causal_mask(6)
        assert_close(m(x, x, x, mask=mask), torch_call(t, x, x, x, mask)[0], dtype)
        assert_close(m(x, y, y), torch_call(t, x, y, y)[0], dtype)


class TestFusedPath:
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_fully_masked_rows(self, dtype):
        torch.manual_seed(0)
        m = tl.MultiHeadAttention(16, 4, bias=False).to(dtype)
        x = torch.randn(2, 5, 16, dtype=dtype)
        mask = torch.ones(2, 4, 5, 5, dtype=torch.bool)
        mask[0, :, 2] = False  # query 2 of example 0 sees nothing in any head
        mask[1, 1, 4] = False  # query 4 of example 1 sees nothing in head 1 only
        outputs = {}
        for need_weights in (True, False):
            xx = x.clone().requires_grad_()
            out = m(xx, xx, xx, mask=mask, need_weights=need_weights)
            out.sum().backward()
            assert torch.isfinite(out).all() and torch.isfinite(xx.grad).all()
            assert all(torch.isfinite(p.grad).all() for p in m.parameters())
            assert (out[0, 2] == 0).all()  # no bias: an empty row's output is exactly zero
            outputs[need_weights] = (out.detach(), xx.grad)
            m.zero_grad()
        assert_close(outputs[False][0], outputs[True][0], dtype)
        assert_close(outputs[False][1], outputs[True][1], dtype)

    def test_fully_masked_row_with_bias_is_output_bias(self):
        m = tl.MultiHeadAttention(8, 2)
        x = torch.randn(1, 3, 8)
        mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
        for need_weights in (True, False):
            out = m(x, x, x, mask=mask, need_weights=need_weights)
            torch.testing.assert_close(out[0, 1], m.W_o.bias.detach())

    def test_every_row_masked(self):
        m = tl.MultiHeadAttention(8, 2, bias=False)
        x = torch.randn(2, 3, 8)
        mask = torch.zeros(3, 3, dtype=torch.bool)
        for need_weights in (True, False):
            assert (m(x, x, x, mask=mask, need_weights=need_weights) == 0).all()


# --------------------------------------------------------------------------- properties


@st.composite
def mha_case(draw):
    num_heads = draw(st.integers(1, 4))
    d_model = num_heads * draw(st.integers(1, 6))
    batch, q_len, k_len = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    mask_kind = draw(st.sampled_from(["none", "full", "heads", "2d", "key"]))
    shape = {
        "none": None,
        "full": (batch, num_heads, q_len, k_len),
        "heads": (batch, 1, q_len, k_len),
        "2d": (q_len, k_len),
        "key": (batch, 1, 1, k_len),
    }[mask_kind]
    seed = draw(st.integers(0, 2**31 - 1))
    p_allowed = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    return num_heads, d_model, batch, q_len, k_len, shape, seed, p_allowed


@settings(max_examples=30, deadline=None)
@given(mha_case())
def test_multi_head_attention_properties(case):
    num_heads, d_model, batch, q_len, k_len, shape, seed, p_allowed = case
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = tl.MultiHeadAttention(d_model, num_heads, bias=False)
    query = torch.randn(batch, q_len, d_model, generator=gen, requires_grad=True)
    memory = torch.randn(batch, k_len, d_model, generator=gen)
    mask = None if shape is None else torch.rand(shape, generator=gen) < p_allowed
    out = m(query, memory, memory, mask=mask)
    w = m.attention_weights
    assert out.shape == (batch, q_len, d_model)
    assert w.shape == (batch, num_heads, q_len, k_len)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    full = torch.ones_like(w, dtype=torch.bool) if mask is None else mask.expand_as(w)
    assert (w[~full] == 0).all()
    sums = w.sum(-1)
    has_key = full.any(-1)
    torch.testing.assert_close(sums, has_key.to(sums.dtype), rtol=1e-5, atol=1e-5)
    fused = m(query, memory, memory, mask=mask, need_weights=False)
    torch.testing.assert_close(fused, out, rtol=1e-4, atol=1e-5)
    (out.sum() + fused.sum()).backward()
    assert torch.isfinite(query.grad).all()
    if mask is not None:
        empty_everywhere = ~full.any(-1).any(1)  # (batch, q_len): no head sees any key
        assert (out[empty_everywhere] == 0).all()


@settings(max_examples=30, deadline=None)
@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    q_len=st.integers(1, 6),
    k_len=st.integers(1, 6),
    d=st.integers(1, 8),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from(DTYPES),
)
def test_sdpa_matches_numpy_and_pytorch(lead, q_len, k_len, d, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, q_len, d, generator=gen, dtype=dtype)
    k = torch.randn(*lead, k_len, d, generator=gen, dtype=dtype)
    v = torch.randn(*lead, k_len, d, generator=gen, dtype=dtype)
    mask = torch.rand(*lead, q_len, k_len, generator=gen) < 0.5
    out, w = tl.scaled_dot_product_attention(q, k, v, mask=mask)
    np_out, np_w = tl.attention(q.numpy(), k.numpy(), v.numpy(), mask=mask.numpy())
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out.numpy(), np_out, rtol=rtol * 10, atol=atol * 10)
    np.testing.assert_allclose(w.numpy(), np_w, rtol=rtol * 10, atol=atol * 10)
    has_key = mask.any(-1)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(out[has_key], ref[has_key], dtype)
    assert (out[~has_key] == 0).all() and (w[~has_key] == 0).all()

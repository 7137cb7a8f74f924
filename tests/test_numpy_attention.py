"""Tests for transformer_lib.numpy_attention: softmax, cosine similarity and attention in numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl

RNG_SEED = 1234


@pytest.fixture
def rng():
    return np.random.default_rng(RNG_SEED)


def reference_softmax(x, axis=-1):
    """Textbook softmax with math.exp, one slice at a time (finite inputs of modest size)."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        e = [math.exp(v) for v in x[idx]]
        out[idx] = [v / sum(e) for v in e]
    return np.moveaxis(out, -1, axis)


# --------------------------------------------------------------------------- softmax


class TestSoftmax:
    def test_matches_formula(self, rng):
        x = rng.normal(size=(4, 6))
        np.testing.assert_allclose(tl.softmax(x), reference_softmax(x), rtol=1e-12)

    def test_known_values(self):
        np.testing.assert_allclose(tl.softmax([0.0, 0.0]), [0.5, 0.5])
        e = math.e
        np.testing.assert_allclose(tl.softmax([1.0, 0.0]), [e / (e + 1), 1 / (e + 1)])

    @pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
    def test_axis(self, rng, axis):
        x = rng.normal(size=(3, 4, 5))
        out = tl.softmax(x, axis=axis)
        np.testing.assert_allclose(out.sum(axis=axis), 1.0, rtol=1e-12)
        np.testing.assert_allclose(out, reference_softmax(x, axis=axis), rtol=1e-12)

    def test_rows_sum_to_one_and_positive(self, rng):
        out = tl.softmax(rng.normal(scale=5.0, size=(10, 7)))
        assert (out > 0).all()
        np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-12)

    @pytest.mark.parametrize("magnitude", [1e3, 1e4, 1e5, 1e12])
    def test_large_logits_do_not_overflow(self, magnitude):
        x = np.array([[magnitude, magnitude - 1.0, magnitude - 2.0], [-magnitude, -magnitude + 1.0, 0.0]])
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # overflow or NaN fails
            out = tl.softmax(x)
        assert np.isfinite(out).all()
        # subtracting a constant does not change softmax
        np.testing.assert_allclose(out[0], reference_softmax([0.0, -1.0, -2.0]), rtol=1e-12)
        np.testing.assert_allclose(out.sum(axis=-1), 1.0)

    def test_shift_invariance(self, rng):
        x = rng.normal(size=(5, 8))
        np.testing.assert_allclose(tl.softmax(x + 1e4), tl.softmax(x), rtol=1e-9, atol=1e-15)

    def test_minus_inf_gets_exactly_zero(self):
        out = tl.softmax(np.array([[0.0, -np.inf, 1.0], [-np.inf, 2.0, -np.inf]]))
        assert out[0, 1] == 0.0
        assert out[1, 0] == 0.0 and out[1, 2] == 0.0
        assert out[1, 1] == 1.0
        np.testing.assert_allclose(out[0, [0, 2]], reference_softmax([0.0, 1.0]))

    def test_all_minus_inf_row_is_zero(self):
        x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, 0.0, -np.inf]])
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            out = tl.softmax(x)
        np.testing.assert_array_equal(out[0], [0.0, 0.0, 0.0])
        np.testing.assert_allclose(out[1], [0.5, 0.5, 0.0])

    def test_plus_inf_takes_all_the_weight(self):
        out = tl.softmax(np.array([[np.inf, 0.0, 1.0], [np.inf, np.inf, -np.inf]]))
        assert np.isfinite(out).all()
        np.testing.assert_array_equal(out, [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])

    def test_dtype_and_inputs(self):
        assert tl.softmax(np.zeros(3, dtype=np.float32)).dtype == np.float32
        assert tl.softmax([1, 2, 3]).dtype == np.float64  # ints are promoted
        np.testing.assert_allclose(tl.softmax([1, 2, 3]), reference_softmax([1, 2, 3]))

    def test_scalar_raises(self):
        with pytest.raises(ValueError, match=r"x must have at least one dimension"):
            tl.softmax(np.float64(3.0))

    @pytest.mark.parametrize("axis", [2, -3, 7])
    def test_bad_axis_raises(self, axis):
        with pytest.raises(ValueError, match=r"axis .*in \[-2, 1\] .*\(2, 3\).*got " + str(axis)):
            tl.softmax(np.zeros((2, 3)), axis=axis)

    def test_nan_raises(self):
        with pytest.raises(ValueError, match=r"x contains NaN"):
            tl.softmax(np.array([0.0, np.nan]))

    def test_tensor_raises(self):
        with pytest.raises(TypeError, match=r"x .*numpy array.*a torch.Tensor"):
            tl.softmax(torch.zeros(3))

    def test_non_numeric_raises(self):
        with pytest.raises(TypeError, match=r"x .*numbers.*<U"):
            tl.softmax(["a", "b"])
        with pytest.raises(TypeError, match=r"x must"):
            tl.softmax([[1.0, 2.0], [3.0]])  # ragged

    def test_matches_torch(self, rng):
        x = rng.normal(scale=3.0, size=(3, 4, 9))
        np.testing.assert_allclose(tl.softmax(x), torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-12)


# --------------------------------------------------------------------------- cosine similarity


def direct_cosine(A, B):
    out = np.zeros((len(A), len(B)))
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            na, nb = math.sqrt(sum(v * v for v in a)), math.sqrt(sum(v * v for v in b))
            out[i, j] = 0.0 if na == 0 or nb == 0 else sum(x * y for x, y in zip(a, b)) / (na * nb)
    return out


class TestCosineSimilarity:
    def test_against_direct_formula(self, rng):
        A, B = rng.normal(size=(5, 3)), rng.normal(size=(4, 3))
        np.testing.assert_allclose(tl.cosine_similarity(A, B), direct_cosine(A, B), rtol=1e-12, atol=1e-15)

    def test_self_similarity(self, rng):
        A = rng.normal(size=(6, 4))
        S = tl.cosine_similarity(A)
        assert S.shape == (6, 6)
        np.testing.assert_allclose(S, direct_cosine(A, A), atol=1e-14)
        np.testing.assert_allclose(np.diag(S), 1.0)
        np.testing.assert_allclose(S, S.T)
        np.testing.assert_allclose(S, tl.cosine_similarity(A, A))

    def test_known_values(self):
        A = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
        S = tl.cosine_similarity(A)
        assert S[0, 1] == pytest.approx(0.0)
        assert S[0, 2] == pytest.approx(-1.0)
        assert S[0, 3] == pytest.approx(1 / math.sqrt(2))

    def test_scale_invariant(self, rng):
        A, B = rng.normal(size=(3, 5)), rng.normal(size=(2, 5))
        np.testing.assert_allclose(tl.cosine_similarity(7.5 * A, 0.01 * B), tl.cosine_similarity(A, B))

    def test_zero_vectors_give_zero_not_nan(self):
        A = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            S = tl.cosine_similarity(A)
        assert np.isfinite(S).all()
        np.testing.assert_array_equal(S[0], [0.0, 0.0])
        np.testing.assert_array_equal(S[:, 0], [0.0, 0.0])
        assert S[1, 1] == pytest.approx(1.0)
        np.testing.assert_array_equal(tl.cosine_similarity(np.zeros((2, 4)), np.ones((3, 4))), 0.0)

    def test_bounded(self, rng):
        A = rng.normal(size=(50, 2)) * 1e8
        S = tl.cosine_similarity(A)
        assert (np.abs(S) <= 1.0).all()

    def test_errors(self):
        with pytest.raises(ValueError, match=r"A .*\(n, d\).*\(3,\)"):
            tl.cosine_similarity(np.zeros(3))
        with pytest.raises(ValueError, match=r"B .*\(m, d\).*\(1, 2, 3\)"):
            tl.cosine_similarity(np.zeros((2, 3)), np.zeros((1, 2, 3)))
        with pytest.raises(ValueError, match=r"feature sizes of A and B \(d\).*3 and 4"):
            tl.cosine_similarity(np.zeros((2, 3)), np.zeros((2, 4)))
        with pytest.raises(TypeError, match=r"B .*numpy array"):
            tl.cosine_similarity(np.zeros((2, 3)), torch.zeros(2, 3))


# --------------------------------------------------------------------------- cosine attention


class TestCosineAttention:
    def test_definition(self, rng):
        X = rng.normal(size=(5, 3))
        Z, W = tl.cosine_attention(X)
        expected_w = reference_softmax(direct_cosine(X, X))
        np.testing.assert_allclose(W, expected_w, rtol=1e-12)
        np.testing.assert_allclose(Z, expected_w @ X, rtol=1e-12)
        assert Z.shape == (5, 3) and W.shape == (5, 5)

    def test_rows_sum_to_one(self, rng):
        _, W = tl.cosine_attention(rng.normal(size=(8, 4)))
        np.testing.assert_allclose(W.sum(axis=1), 1.0)

    def test_identical_words_attend_equally(self):
        X = np.array([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]])  # same direction: cosine 1 everywhere
        Z, W = tl.cosine_attention(X)
        np.testing.assert_allclose(W, 1 / 3)
        np.testing.assert_allclose(Z, np.tile(X.mean(axis=0), (3, 1)))

    def test_zero_vector_no_nan(self):
        Z, W = tl.cosine_attention(np.array([[0.0, 0.0], [1.0, 1.0]]))
        assert np.isfinite(Z).all() and np.isfinite(W).all()
        np.testing.assert_allclose(W[0], [0.5, 0.5])

    def test_error(self):
        with pytest.raises(ValueError, match=r"X .*\(n, d\).*\(2, 3, 4\)"):
            tl.cosine_attention(np.zeros((2, 3, 4)))


# --------------------------------------------------------------------------- attention


def loop_attention(Q, K, V, mask=None, divisor=None):
    """Attention written with Python loops, one query at a time."""
    d = Q.shape[-1]
    divisor = math.sqrt(d) if divisor is None else divisor
    out = np.zeros((Q.shape[0], V.shape[1]))
    weights = np.zeros((Q.shape[0], K.shape[0]))
    for i, q in enumerate(Q):
        scores = [float(q @ k) / divisor for k in K]
        allowed = [True] * len(K) if mask is None else list(mask[i])
        e = [math.exp(s) if a else 0.0 for s, a in zip(scores, allowed)]
        total = sum(e)
        weights[i] = [v / total if total else 0.0 for v in e]
        out[i] = weights[i] @ V
    return out, weights


class TestAttention:
    def test_against_loops(self, rng):
        Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
        out, w = tl.attention(Q, K, V)
        ref_out, ref_w = loop_attention(Q, K, V)
        np.testing.assert_allclose(out, ref_out, rtol=1e-12)
        np.testing.assert_allclose(w, ref_w, rtol=1e-12)
        assert out.shape == (3, 2) and w.shape == (3, 5)

    def test_scale_options(self, rng):
        Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
        np.testing.assert_allclose(tl.attention(Q, K, V, scale=False)[1], loop_attention(Q, K, V, divisor=1)[1])
        np.testing.assert_allclose(tl.attention(Q, K, V, scale=3.0)[1], loop_attention(Q, K, V, divisor=3)[1])
        np.testing.assert_allclose(tl.attention(Q, K, V, scale=True)[1], loop_attention(Q, K, V, divisor=2)[1])
        assert not np.allclose(tl.attention(Q, K, V, scale=False)[1], tl.attention(Q, K, V)[1])

    def test_mask(self, rng):
        Q, K, V = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 5))
        mask = np.tril(np.ones((4, 4), dtype=bool))
        mask[2] = False  # a fully masked row
        out, w = tl.attention(Q, K, V, mask=mask)
        ref_out, ref_w = loop_attention(Q, K, V, mask=mask)
        np.testing.assert_allclose(w, ref_w, rtol=1e-12)
        np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-15)
        assert (w[~mask] == 0.0).all()
        np.testing.assert_array_equal(w[2], 0.0)
        np.testing.assert_array_equal(out[2], 0.0)
        np.testing.assert_allclose(w[[0, 1, 3]].sum(axis=-1), 1.0)

    def test_mask_wins_over_extreme_scores(self):
        # the allowed key scores -9e4, far below any finite "large negative" fill value
        out, w = tl.attention(np.array([[-300.0]]), np.array([[300.0], [0.0], [-300.0]]),
                              np.array([[1.0], [2.0], [3.0]]), mask=np.array([[True, False, False]]))
        np.testing.assert_array_equal(w, [[1.0, 0.0, 0.0]])
        np.testing.assert_array_equal(out, [[1.0]])

    def test_broadcast_mask_and_batch(self, rng):
        Q, K, V = rng.normal(size=(2, 3, 4, 6)), rng.normal(size=(2, 3, 5, 6)), rng.normal(size=(2, 3, 5, 2))
        mask = rng.random((2, 1, 1, 5)) > 0.3
        mask[..., 0] = True
        out, w = tl.attention(Q, K, V, mask=mask)
        assert out.shape == (2, 3, 4, 2) and w.shape == (2, 3, 4, 5)
        for b in range(2):
            for h in range(3):
                ref_out, ref_w = loop_attention(Q[b, h], K[b, h], V[b, h], mask=np.broadcast_to(mask[b, 0], (4, 5)))
                np.testing.assert_allclose(out[b, h], ref_out, rtol=1e-12)
                np.testing.assert_allclose(w[b, h], ref_w, rtol=1e-12)

    def test_single_query(self, rng):
        q, K, V = rng.normal(size=4), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
        out, w = tl.attention(q, K, V)
        assert out.shape == (2,) and w.shape == (5,)
        ref_out, ref_w = loop_attention(q[None], K, V)
        np.testing.assert_allclose(out, ref_out[0])
        mask = np.array([True, False, True, False, False])
        out, w = tl.attention(q, K, V, mask=mask)
        np.testing.assert_allclose(w, loop_attention(q[None], K, V, mask=mask[None])[1][0])

    def test_large_scores_are_finite(self, rng):
        Q, K, V = 1e3 * rng.normal(size=(3, 4)), 1e3 * rng.normal(size=(3, 4)), rng.normal(size=(3, 2))
        out, w = tl.attention(Q, K, V)
        assert np.isfinite(out).all() and np.isfinite(w).all()
        np.testing.assert_allclose(w.sum(-1), 1.0)

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_matches_torch(self, rng, dtype):
        Q, K, V = (rng.normal(size=s).astype(dtype) for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)))
        mask = rng.random((2, 1, 5, 7)) > 0.4
        mask[..., 0] = True
        out, w = tl.attention(Q, K, V, mask=mask)
        tq, tk, tv, tm = map(torch.from_numpy, (Q, K, V, mask))
        ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
        ours_torch, ours_w = tl.scaled_dot_product_attention(tq, tk, tv, mask=tm)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, ref.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(out, ours_torch.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(w, ours_w.numpy(), rtol=tol, atol=tol)
        assert out.dtype == dtype

    def test_errors(self):
        Q, K, V = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))
        with pytest.raises(ValueError, match=r"K .*\(\.\.\., k_len, d_k\).*\(4,\)"):
            tl.attention(Q, np.zeros(4), V)
        with pytest.raises(ValueError, match=r"V .*\(\.\.\., k_len, d_v\).*\(5,\)"):
            tl.attention(Q, K, np.zeros(5))
        with pytest.raises(ValueError, match=r"last dimensions of Q and K \(d_k\).*3 and 4"):
            tl.attention(np.zeros((3, 3)), K, V)
        with pytest.raises(ValueError, match=r"key and value counts of K and V \(k_len\).*5 and 6"):
            tl.attention(Q, K, np.zeros((6, 2)))
        with pytest.raises(TypeError, match=r"mask .*boolean .*int64"):
            tl.attention(Q, K, V, mask=np.ones((3, 5), dtype=np.int64))
        with pytest.raises(TypeError, match=r"mask .*boolean .*float64"):
            tl.attention(Q, K, V, mask=np.ones((3, 5)))
        with pytest.raises(ValueError, match=r"mask .*\(3, 4\).*broadcast.*\(3, 5\)"):
            tl.attention(Q, K, V, mask=np.ones((3, 4), dtype=bool))
        with pytest.raises(ValueError, match=r"mask .*\(2, 3, 5\).*broadcast"):
            tl.attention(Q, K, V, mask=np.ones((2, 3, 5), dtype=bool))  # would grow the output
        with pytest.raises(ValueError, match=r"mask .*\(2, 5\).*broadcast.* = \(1, 5\)"):
            tl.attention(Q[:1], K, V, mask=np.ones((2, 5), dtype=bool))  # one query, two mask rows
        with pytest.raises(TypeError, match=r"Q .*numpy array"):
            tl.attention(torch.zeros(3, 4), K, V)
        for bad in (0, -1.0, "big", None):
            with pytest.raises(ValueError, match=r"scale .*True, False or a positive number"):
                tl.attention(Q, K, V, scale=bad)


# --------------------------------------------------------------------------- additive attention


class TestAdditiveAttention:
    @pytest.fixture
    def params(self, rng):
        d_s, d_h, d_a, n = 3, 4, 5, 6
        return dict(
            H=rng.normal(size=(n, d_h)),
            W_s=rng.normal(size=(d_a, d_s)),
            W_h=rng.normal(size=(d_a, d_h)),
            v=rng.normal(size=d_a),
            s=rng.normal(size=d_s),
        )

    def test_hand_computation(self, params):
        p = params
        res = tl.additive_attention(p["s"], p["H"], p["W_s"], p["W_h"], p["v"])
        assert isinstance(res, tl.AdditiveAttention)
        scores = []
        for h in p["H"]:
            hidden = []
            for a in range(5):
                pre = sum(p["W_s"][a, j] * p["s"][j] for j in range(3)) + sum(p["W_h"][a, j] * h[j] for j in range(4))
                hidden.append(math.tanh(pre))
            scores.append(sum(p["v"][a] * hidden[a] for a in range(5)))
        weights = reference_softmax(scores)
        context = sum(w * h for w, h in zip(weights, p["H"]))
        np.testing.assert_allclose(res.scores, scores, rtol=1e-12)
        np.testing.assert_allclose(res.weights, weights, rtol=1e-12)
        np.testing.assert_allclose(res.context, context, rtol=1e-12)
        context2, weights2, scores2 = res  # it is a named tuple
        assert context2 is res.context

    def test_tiny_example(self):
        # W_s = W_h = I, v = (1, 1): e_i = tanh(s_1 + h_i1) + tanh(s_2 + h_i2)
        s = np.array([0.0, 0.0])
        H = np.array([[0.0, 0.0], [1.0, 1.0]])
        res = tl.additive_attention(s, H, np.eye(2), np.eye(2), np.ones(2))
        np.testing.assert_allclose(res.scores, [0.0, 2 * math.tanh(1.0)])
        w1 = 1 / (1 + math.exp(2 * math.tanh(1.0)))
        np.testing.assert_allclose(res.weights, [w1, 1 - w1])
        np.testing.assert_allclose(res.context, [1 - w1, 1 - w1])

    def test_several_states_at_once(self, params, rng):
        p = params
        S = rng.normal(size=(4, 3))
        res = tl.additive_attention(S, p["H"], p["W_s"], p["W_h"], p["v"])
        assert res.context.shape == (4, 4) and res.weights.shape == (4, 6) and res.scores.shape == (4, 6)
        np.testing.assert_allclose(res.weights.sum(-1), 1.0)
        for i, s in enumerate(S):
            one = tl.additive_attention(s, p["H"], p["W_s"], p["W_h"], p["v"])
            np.testing.assert_allclose(res.context[i], one.context, rtol=1e-12)
            np.testing.assert_allclose(res.weights[i], one.weights, rtol=1e-12)

    def test_errors(self, params):
        p = params
        args = dict(s=p["s"], H=p["H"], W_s=p["W_s"], W_h=p["W_h"], v=p["v"])

        def call(**changes):
            return tl.additive_attention(**{**args, **changes})

        with pytest.raises(ValueError, match=r"s .*\(d_s,\) or \(m, d_s\).*\(1, 1, 3\)"):
            call(s=np.zeros((1, 1, 3)))
        with pytest.raises(ValueError, match=r"H .*\(n, d_h\).*\(4,\)"):
            call(H=np.zeros(4))
        with pytest.raises(ValueError, match=r"W_s .*\(d_a, d_s\).*\(3,\)"):
            call(W_s=np.zeros(3))
        with pytest.raises(ValueError, match=r"W_h .*\(d_a, d_h\)"):
            call(W_h=np.zeros((5, 4, 1)))
        with pytest.raises(ValueError, match=r"v .*\(d_a,\).*\(5, 1\)"):
            call(v=np.zeros((5, 1)))
        with pytest.raises(ValueError, match=r"W_s's columns and the size of s \(d_s\).*3 and 2"):
            call(s=np.zeros(2))
        with pytest.raises(ValueError, match=r"W_h's columns .* \(d_h\).*4 and 7"):
            call(H=np.zeros((6, 7)))
        with pytest.raises(ValueError, match=r"rows of W_s and W_h \(d_a\).*2 and 5"):
            call(W_s=np.zeros((2, 3)))
        with pytest.raises(ValueError, match=r"length of v and the rows of W_h \(d_a\).*3 and 5"):
            call(v=np.zeros(3))
        with pytest.raises(TypeError, match=r"v .*numpy array"):
            call(v=torch.zeros(5))


# --------------------------------------------------------------------------- properties


@st.composite
def attention_case(draw):
    batch = draw(st.integers(1, 3))
    q_len, k_len = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    mask_shape = draw(st.sampled_from([(batch, q_len, k_len), (1, q_len, k_len), (q_len, k_len), (batch, 1, k_len)]))
    rng = np.random.default_rng(seed)
    mask = rng.random(mask_shape) < draw(st.floats(0.0, 1.0))
    if draw(st.booleans()):
        mask[..., 0, :] = False  # at least one fully masked row
    return (
        rng.normal(size=(batch, q_len, d)) * draw(st.sampled_from([1.0, 100.0])),
        rng.normal(size=(batch, k_len, d)),
        rng.normal(size=(batch, k_len, d_v)),
        mask,
    )


@settings(max_examples=40, deadline=None)
@given(attention_case())
def test_attention_properties(case):
    Q, K, V, mask = case
    out, w = tl.attention(Q, K, V, mask=mask)
    assert out.shape == (*Q.shape[:-1], V.shape[-1])
    assert w.shape == (*Q.shape[:-1], K.shape[-2])
    assert np.isfinite(out).all() and np.isfinite(w).all()
    full_mask = np.broadcast_to(mask, w.shape)
    assert (w[~full_mask] == 0.0).all()
    has_key = full_mask.any(axis=-1)
    np.testing.assert_allclose(w.sum(-1), np.where(has_key, 1.0, 0.0), atol=1e-12)
    assert (out[~has_key] == 0.0).all()


@st.composite
def logit_rows(draw):
    width = draw(st.integers(1, 6))
    row = st.lists(st.floats(-1e4, 1e4), min_size=width, max_size=width)
    return draw(st.lists(row, min_size=1, max_size=4))


@settings(max_examples=40, deadline=None)
@given(logit_rows())
def test_softmax_properties(rows):
    x = np.array(rows)
    out = tl.softmax(x)
    assert np.isfinite(out).all()
    assert ((out >= 0) & (out <= 1)).all()
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-12)
    # the largest logit gets the largest weight
    best = x.argmax(-1)
    np.testing.assert_array_equal(out[np.arange(len(x)), best], out.max(-1))

"""Tests for transformer_lib.positional: sinusoidal encodings, their rotations, rotary embeddings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl

D_MODELS = [2, 4, 6, 16, 64, 128, 512]


# --------------------------------------------------------------------------- frequencies and the encoding


class TestFrequencies:
    @pytest.mark.parametrize("d_model", D_MODELS)
    def test_formula(self, d_model):
        omega = tl.frequencies(d_model)
        assert omega.shape == (d_model // 2,)
        for k, w in enumerate(omega):
            assert w == pytest.approx(1 / 10000 ** (2 * k / d_model), rel=1e-12)
        assert omega[0] == 1.0
        assert (np.diff(omega) < 0).all()

    def test_base(self):
        np.testing.assert_allclose(tl.frequencies(4, base=100.0), [1.0, 0.1])

    def test_errors(self):
        with pytest.raises(ValueError, match=r"d_model .*even \(sine and cosine come in pairs\).*5"):
            tl.frequencies(5)
        with pytest.raises(ValueError, match=r"d_model .*positive integer.*0"):
            tl.frequencies(0)


class TestSinusoidalEncoding:
    @pytest.mark.parametrize("d_model", [2, 8, 64])
    def test_formula(self, d_model):
        pe = tl.sinusoidal_encoding(50, d_model)
        assert pe.shape == (50, d_model)
        for t in (0, 1, 7, 49):
            for k in range(d_model // 2):
                w = 1 / 10000 ** (2 * k / d_model)
                assert pe[t, 2 * k] == pytest.approx(math.sin(w * t), abs=1e-12)
                assert pe[t, 2 * k + 1] == pytest.approx(math.cos(w * t), abs=1e-12)

    def test_position_zero_and_bounds(self):
        pe = tl.sinusoidal_encoding(100, 16)
        np.testing.assert_array_equal(pe[0, 0::2], 0.0)
        np.testing.assert_array_equal(pe[0, 1::2], 1.0)
        assert np.abs(pe).max() <= 1.0
        # every (sin, cos) pair lies on the unit circle, so |pe[t]|^2 = d_model / 2
        np.testing.assert_allclose((pe**2).sum(axis=1), 8.0)

    def test_positions_are_distinct(self):
        pe = tl.sinusoidal_encoding(200, 32)
        dist = np.linalg.norm(pe[:, None] - pe[None], axis=-1)
        assert (dist + np.eye(200) > 1e-3).all()

    @pytest.mark.parametrize(
        ("args", "exc", "pattern"),
        [
            ((10, 7), ValueError, r"d_model .*even \(sine and cosine come in pairs\).*7"),
            ((10, 0), ValueError, r"d_model .*positive integer.*0"),
            ((0, 8), ValueError, r"num_positions .*positive integer.*0"),
            ((2.0, 8), TypeError, r"num_positions .*positive integer.*float"),
            ((10, "8"), TypeError, r"d_model .*positive integer.*str"),
        ],
    )
    def test_errors(self, args, exc, pattern):
        with pytest.raises(exc, match=pattern):
            tl.sinusoidal_encoding(*args)


# --------------------------------------------------------------------------- rotations


class TestRotationMatrix:
    def test_entries(self):
        R = tl.rotation_matrix(3.0, 0.25)
        c, s = math.cos(0.75), math.sin(0.75)
        np.testing.assert_allclose(R, [[c, s], [-s, c]], rtol=1e-15)
        np.testing.assert_array_equal(tl.rotation_matrix(0, 0.3), np.eye(2))

    @pytest.mark.parametrize("omega", [1.0, 0.5, 1e-2, 1e-4, 2.7])
    @pytest.mark.parametrize("phi", [0, 1, 2, 5, 13, 100, -3, 0.5])
    def test_moves_sin_cos_forward(self, phi, omega):
        for t in np.linspace(-20, 500, 53):
            before = np.array([math.sin(omega * t), math.cos(omega * t)])
            after = np.array([math.sin(omega * (t + phi)), math.cos(omega * (t + phi))])
            np.testing.assert_allclose(tl.rotation_matrix(phi, omega) @ before, after, atol=1e-12)

    def test_is_a_rotation(self):
        for phi, omega in [(1, 1.0), (7, 0.3), (-2, 0.01)]:
            R = tl.rotation_matrix(phi, omega)
            np.testing.assert_allclose(R @ R.T, np.eye(2), atol=1e-15)
            assert np.linalg.det(R) == pytest.approx(1.0)
            np.testing.assert_allclose(R @ tl.rotation_matrix(-phi, omega), np.eye(2), atol=1e-15)
            np.testing.assert_allclose(R @ tl.rotation_matrix(3, omega), tl.rotation_matrix(phi + 3, omega),
                                       atol=1e-14)

    def test_numpy_scalars(self):
        np.testing.assert_allclose(tl.rotation_matrix(np.int64(2), np.float32(0.5)), tl.rotation_matrix(2, 0.5),
                                   rtol=1e-7)

    @pytest.mark.parametrize(
        ("phi", "omega", "pattern"),
        [
            ("1", 1.0, r"phi must be a real number, got str '1'"),
            (1, np.array([1.0, 2.0]), r"omega must be a real number, got ndarray"),
            (1, torch.tensor(1.0), r"omega must be a real number, got Tensor"),
            (True, 1.0, r"phi must be a real number, got bool True"),
            (1j, 1.0, r"phi must be a real number, got complex"),
        ],
    )
    def test_errors(self, phi, omega, pattern):
        with pytest.raises(TypeError, match=pattern):
            tl.rotation_matrix(phi, omega)


class TestOffsetMatrix:
    @pytest.mark.parametrize("d_model", D_MODELS)
    @pytest.mark.parametrize("phi", [0, 1, 2, 3, 10, 37, 250])
    def test_shifts_the_encoding(self, d_model, phi):
        pe = tl.sinusoidal_encoding(600, d_model)
        M = tl.offset_matrix(phi, d_model)
        ts = np.arange(0, 600 - phi)
        np.testing.assert_allclose(pe[ts] @ M.T, pe[ts + phi], atol=1e-9)  # M @ pe[t] for every t at once

    def test_negative_offset(self):
        pe = tl.sinusoidal_encoding(40, 12)
        np.testing.assert_allclose(pe[10:] @ tl.offset_matrix(-10, 12).T, pe[:30], atol=1e-12)

    @pytest.mark.parametrize("d_model", [2, 8, 32])
    def test_structure(self, d_model):
        M = tl.offset_matrix(4, d_model)
        assert M.shape == (d_model, d_model)
        omega = tl.frequencies(d_model)
        for k in range(d_model // 2):
            block = M[2 * k : 2 * k + 2, 2 * k : 2 * k + 2]
            np.testing.assert_array_equal(block, tl.rotation_matrix(4, omega[k]))
            M[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = 0
        assert (M == 0).all()  # nothing outside the 2x2 blocks

    def test_orthogonal_and_composes(self):
        A, B = tl.offset_matrix(3, 16), tl.offset_matrix(5, 16)
        np.testing.assert_allclose(A @ A.T, np.eye(16), atol=1e-14)
        np.testing.assert_allclose(A @ B, tl.offset_matrix(8, 16), atol=1e-13)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"d_model .*even .*got 9"):
            tl.offset_matrix(1, 9)
        with pytest.raises(TypeError, match=r"phi .*real number"):
            tl.offset_matrix("1", 8)


@settings(max_examples=40, deadline=None)
@given(
    t=st.integers(0, 2000),
    phi=st.integers(-500, 500),
    half=st.integers(1, 64),
)
def test_offset_identity_property(t, phi, half):
    d_model = 2 * half
    omega = tl.frequencies(d_model)

    def pe(pos):  # the encoding of one (possibly negative) position, straight from the formula
        out = np.empty(d_model)
        out[0::2], out[1::2] = np.sin(omega * pos), np.cos(omega * pos)
        return out

    np.testing.assert_allclose(tl.offset_matrix(phi, d_model) @ pe(t), pe(t + phi), atol=1e-9)
    if t + phi >= 0:
        table = tl.sinusoidal_encoding(max(t, t + phi) + 1, d_model)
        np.testing.assert_allclose(tl.offset_matrix(phi, d_model) @ table[t], table[t + phi], atol=1e-9)


@pytest.mark.parametrize("d_model", [4, 16, 64, 256])
def test_dot_product_depends_only_on_offset(d_model):
    pe = tl.sinusoidal_encoding(300, d_model)
    omega = tl.frequencies(d_model)
    for offset in (0, 1, 4, 25, 100):
        dots = np.einsum("td,td->t", pe[: 300 - offset], pe[offset:])
        expected = np.cos(omega * offset).sum()  # sum_k sin a sin b + cos a cos b = sum_k cos(w_k offset)
        np.testing.assert_allclose(dots, expected, atol=1e-9)
        # and the same in the other direction: symmetric in the sign of the offset
        np.testing.assert_allclose(np.einsum("td,td->t", pe[offset:], pe[: 300 - offset]), expected, atol=1e-9)


# --------------------------------------------------------------------------- modules


class TestPositionalEncoding:
    def test_adds_the_encoding(self):
        module = tl.PositionalEncoding(16, max_len=50)
        x = torch.randn(3, 20, 16)
        out = module(x)
        assert out.shape == x.shape and out.dtype == torch.float32
        expected = x + torch.from_numpy(tl.sinusoidal_encoding(20, 16)).float()
        torch.testing.assert_close(out, expected)
        table = torch.from_numpy(tl.sinusoidal_encoding(50, 16)).float()
        torch.testing.assert_close(module(torch.zeros(1, 50, 16))[0], table)

    def test_float64(self):
        module = tl.PositionalEncoding(8, max_len=10).double()
        out = module(torch.zeros(2, 10, 8, dtype=torch.float64))
        assert out.dtype == torch.float64
        np.testing.assert_allclose(out[1].numpy(), tl.sinusoidal_encoding(10, 8), atol=1e-6)

    def test_default_max_len_is_5000(self):
        module = tl.PositionalEncoding(8)
        assert module.max_len == 5000 and module.pe.shape == (5000, 8)
        with pytest.raises(ValueError, match=r"x has 5001 positions, more than max_len=5000"):
            module(torch.zeros(1, 5001, 8))

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_low_precision_stays_low_precision(self, dtype):
        # the float32 table is cast to x's dtype, not x promoted to float32
        out = tl.PositionalEncoding(8, max_len=10)(torch.zeros(2, 10, 8, dtype=dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out[0], torch.from_numpy(tl.sinusoidal_encoding(10, 8)).to(dtype))

    def test_start_offsets_the_positions(self):
        module = tl.PositionalEncoding(8, max_len=10)
        torch.testing.assert_close(module(torch.zeros(1, 3, 8), start=4)[0], module.pe[4:7])
        with pytest.raises(ValueError, match=r"^start must be a non-negative integer, got -1$"):
            module(torch.zeros(1, 3, 8), start=-1)
        with pytest.raises(ValueError, match=r"^x has 3 positions from start=8, more than max_len=10$"):
            module(torch.zeros(1, 3, 8), start=8)

    def test_buffer_is_not_a_parameter(self):
        module = tl.PositionalEncoding(8, max_len=10)
        assert list(module.parameters()) == []
        assert "pe" not in module.state_dict()
        assert module.pe.shape == (10, 8)

    def test_dropout(self):
        torch.manual_seed(0)
        module = tl.PositionalEncoding(32, max_len=64, dropout=0.5)
        x = torch.randn(4, 64, 32)
        clean = x + module.pe[:64]
        module.train()
        noisy = module(x)
        zeros = noisy == 0
        assert 0.3 < zeros.float().mean() < 0.7
        torch.testing.assert_close(noisy[~zeros], 2 * clean[~zeros])
        module.eval()
        torch.testing.assert_close(module(x), clean)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"d_model .*even .*got 15"):
            tl.PositionalEncoding(15)
        with pytest.raises(ValueError, match=r"max_len .*positive integer.*0"):
            tl.PositionalEncoding(16, max_len=0)
        with pytest.raises(ValueError, match=r"dropout .*in \[0, 1\).*2"):
            tl.PositionalEncoding(16, dropout=2)
        module = tl.PositionalEncoding(16, max_len=10)
        with pytest.raises(ValueError, match=r"x has 11 positions, more than max_len=10"):
            module(torch.zeros(1, 11, 16))
        with pytest.raises(ValueError, match=r"x .*\(batch, seq, d_model=16\).*\(5, 16\)"):
            module(torch.zeros(5, 16))
        with pytest.raises(ValueError, match=r"x .*\(batch, seq, d_model=16\).*\(2, 5, 8\)"):
            module(torch.zeros(2, 5, 8))
        with pytest.raises(TypeError, match=r"x .*floating-point tensor.*torch.int64"):
            module(torch.zeros(2, 5, 16, dtype=torch.long))


class TestLearnedPositionalEmbedding:
    def test_adds_a_vector_per_position(self):
        module = tl.LearnedPositionalEmbedding(max_len=12, d_model=6)
        assert module.embedding.weight.shape == (12, 6)
        x = torch.randn(2, 7, 6)
        out = module(x)
        torch.testing.assert_close(out, x + module.embedding.weight[:7].detach())

    def test_learns(self):
        module = tl.LearnedPositionalEmbedding(10, 4)
        module(torch.zeros(3, 5, 4)).sum().backward()
        grad = module.embedding.weight.grad
        torch.testing.assert_close(grad[:5], torch.full((5, 4), 3.0))
        assert (grad[5:] == 0).all()

    def test_odd_width_is_fine(self):
        assert tl.LearnedPositionalEmbedding(4, 5)(torch.zeros(1, 4, 5)).shape == (1, 4, 5)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_low_precision_stays_low_precision(self, dtype):
        module = tl.LearnedPositionalEmbedding(4, 2)
        out = module(torch.zeros(1, 3, 2, dtype=dtype), start=1)
        assert out.dtype == dtype
        torch.testing.assert_close(out[0], module.embedding.weight[1:4].detach().to(dtype))

    def test_float64(self):
        module = tl.LearnedPositionalEmbedding(4, 2).double()
        assert module(torch.zeros(1, 3, 2, dtype=torch.float64)).dtype == torch.float64

    def test_errors(self):
        with pytest.raises(ValueError, match=r"max_len .*positive integer.*-1"):
            tl.LearnedPositionalEmbedding(-1, 4)
        with pytest.raises(TypeError, match=r"d_model .*positive integer.*float"):
            tl.LearnedPositionalEmbedding(8, 4.0)
        module = tl.LearnedPositionalEmbedding(8, 4)
        with pytest.raises(ValueError, match=r"x has 9 positions, more than max_len=8"):
            module(torch.zeros(2, 9, 4))
        with pytest.raises(ValueError, match=r"x .*\(batch, seq, d_model=4\)"):
            module(torch.zeros(2, 3, 5))
        with pytest.raises(TypeError, match=r"x .*torch.Tensor.*ndarray"):
            module(np.zeros((2, 3, 4)))


# --------------------------------------------------------------------------- rotary embeddings


def complex_rotary(x, positions, base=10000.0):
    """Rotary embedding as complex multiplication: (x_2k + i x_2k+1) * exp(i m theta_k)."""
    x = x.double()
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(
        torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * theta
    )
    return torch.stack((z.real, z.imag), -1).flatten(-2)


class TestApplyRotary:
    def test_against_complex_form(self):
        x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
        positions = torch.tensor([0, 1, 2, 5, 9, 100, 4000])
        torch.testing.assert_close(tl.apply_rotary(x, positions), complex_rotary(x, positions))
        torch.testing.assert_close(tl.apply_rotary(x), complex_rotary(x, torch.arange(7)))
        torch.testing.assert_close(tl.apply_rotary(x, positions, base=50.0), complex_rotary(x, positions, 50.0))

    def test_pair_is_turned_by_rotation_matrix(self):
        d, m = 6, 7
        x = torch.randn(1, d, dtype=torch.float64)
        out = tl.apply_rotary(x, torch.tensor([m]))[0].numpy()
        theta = tl.frequencies(d)
        for k in range(d // 2):
            pair = x[0, 2 * k : 2 * k + 2].numpy()
            # rotary turns by +m theta_k; rotation_matrix(m, theta) turns (sin, cos) pairs the other way
            np.testing.assert_allclose(out[2 * k : 2 * k + 2], tl.rotation_matrix(m, theta[k]).T @ pair, atol=1e-12)

    def test_position_zero_is_identity_and_shape(self):
        x = torch.randn(4, 5, 16)
        out = tl.apply_rotary(x)
        assert out.shape == x.shape and out.dtype == x.dtype
        torch.testing.assert_close(out[:, 0], x[:, 0])
        assert not torch.allclose(out[:, 1], x[:, 1])

    def test_norms_preserved(self):
        x = torch.randn(3, 50, 32, dtype=torch.float64)
        out = tl.apply_rotary(x, torch.arange(50) * 37)
        torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
        # and within each pair
        torch.testing.assert_close(out.view(3, 50, 16, 2).norm(dim=-1), x.view(3, 50, 16, 2).norm(dim=-1))

    @pytest.mark.parametrize("d", [2, 8, 64])
    def test_relative_position_property(self, d):
        gen = torch.Generator().manual_seed(d)
        q = torch.randn(d, generator=gen, dtype=torch.float64)
        k = torch.randn(d, generator=gen, dtype=torch.float64)

        def score(m, n):
            rq = tl.apply_rotary(q[None], torch.tensor([m]))[0]
            rk = tl.apply_rotary(k[None], torch.tensor([n]))[0]
            return float(rq @ rk)

        for offset in (-7, -1, 0, 1, 3, 50):
            ref = score(offset, 0)
            for n in (0, 1, 2, 10, 123, 1000):
                assert score(n + offset, n) == pytest.approx(ref, abs=1e-9)
        assert score(5, 0) != pytest.approx(score(6, 0), abs=1e-6)  # but it does depend on the offset

    def test_scores_of_a_sequence_form_a_toeplitz_matrix(self):
        gen = torch.Generator().manual_seed(0)
        q, k = torch.randn(2, 1, 16, generator=gen, dtype=torch.float64)
        # the same query and key at every position 0..39, rotated in one call each
        rq, rk = tl.apply_rotary(q.expand(40, 16)), tl.apply_rotary(k.expand(40, 16))
        scores = rq @ rk.T  # scores[m, n] depends only on m - n: constant along each diagonal
        for off in range(-39, 40):
            diag = torch.diagonal(scores, off)
            torch.testing.assert_close(diag, diag[:1].expand_as(diag))
        assert not torch.allclose(scores[1, 0], scores[0, 1])

    def test_float_positions_and_float32(self):
        x = torch.randn(3, 4)
        out = tl.apply_rotary(x, torch.tensor([0.0, 0.5, 1.5]))
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), complex_rotary(x, torch.tensor([0.0, 0.5, 1.5])), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(tl.apply_rotary(x, [0, 1, 2]), tl.apply_rotary(x))  # a list is fine too

    def test_half_layout_against_complex_form(self):
        # the half layout pairs x[k] with x[k + d/2]: the same complex rotation on those pairs
        x = torch.randn(2, 5, 8, dtype=torch.float64)
        positions = torch.tensor([0, 1, 3, 10, 700])
        first, second = x[..., :4], x[..., 4:]
        theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # (d/2,)
        angles = positions[:, None] * theta  # (seq, d/2)
        z = torch.complex(first, second) * torch.polar(torch.ones(5, 4, dtype=torch.float64), angles)
        torch.testing.assert_close(tl.apply_rotary(x, positions, layout="half"), torch.cat((z.real, z.imag), -1))
        perm = tl.rotary_permutation(8)
        torch.testing.assert_close(tl.apply_rotary(x[..., perm], positions, layout="half"),
                                   tl.apply_rotary(x, positions)[..., perm])  # fmt: skip

    def test_follows_x_to_its_device(self):
        # the angles are made on x's device, wherever the positions come from ("meta" stands in for a GPU)
        x = torch.randn(2, 3, 8, device="meta")
        for positions in (None, torch.arange(3), [0, 1, 2]):
            for layout in ("interleaved", "half"):
                out = tl.apply_rotary(x, positions, layout=layout)
                assert out.device == x.device and out.shape == x.shape

    def test_errors_name_the_argument(self):
        with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., seq, d\), got shape \(4,\)$"):
            tl.apply_rotary(torch.randn(4))
        with pytest.raises(ValueError, match=r"^base must be a positive float, got -2\.0$"):
            tl.apply_rotary(torch.randn(3, 4), base=-2.0)
        with pytest.raises(ValueError, match=r"^layout must be one of .*, got 'halves'$"):
            tl.apply_rotary(torch.randn(3, 4), layout="halves")

    def test_errors(self):
        with pytest.raises(ValueError, match=r"x's last dimension d .*even .*got 5"):
            tl.apply_rotary(torch.randn(3, 5))
        with pytest.raises(ValueError, match=r"x .*\(\.\.\., seq, d\).*\(4,\)"):
            tl.apply_rotary(torch.randn(4))
        with pytest.raises(ValueError, match=r"positions .*\(seq,\) = \(3,\).*\(4,\)"):
            tl.apply_rotary(torch.randn(3, 4), torch.arange(4))
        with pytest.raises(ValueError, match=r"positions .*\(seq,\) = \(3,\).*\(1, 3\)"):
            tl.apply_rotary(torch.randn(3, 4), torch.arange(3)[None])
        with pytest.raises(TypeError, match=r"x .*floating-point tensor"):
            tl.apply_rotary(torch.ones(3, 4, dtype=torch.long))
        with pytest.raises(TypeError, match=r"x .*torch.Tensor.*ndarray"):
            tl.apply_rotary(np.ones((3, 4)))


class TestRotaryPermutation:
    def test_values(self):
        assert tl.rotary_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
        assert tl.rotary_permutation(2).tolist() == [0, 1]
        assert tl.rotary_permutation(4, num_heads=3).tolist() == [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11]

    def test_errors(self):
        with pytest.raises(ValueError, match=r"^d must be even \(sine and cosine come in pairs\), got 7$"):
            tl.rotary_permutation(7)
        with pytest.raises(ValueError, match=r"^num_heads must be a positive integer, got 0$"):
            tl.rotary_permutation(4, num_heads=0)
        with pytest.raises(TypeError, match=r"^d must be a positive integer, got float 4\.0$"):
            tl.rotary_permutation(4.0)


@settings(max_examples=30, deadline=None)
@given(
    half=st.integers(1, 32),
    m=st.integers(0, 3000),
    n=st.integers(0, 3000),
    shift=st.integers(-1000, 1000),
    seed=st.integers(0, 2**31 - 1),
)
def test_rotary_relative_property(half, m, n, shift, seed):
    d = 2 * half
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, d, generator=gen, dtype=torch.float64), torch.randn(1, d, generator=gen, dtype=torch.float64)

    def score(a, b):
        return (tl.apply_rotary(q, torch.tensor([a])) @ tl.apply_rotary(k, torch.tensor([b])).T).item()

    scale = q.norm().item() * k.norm().item()
    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-9 * scale)
    torch.testing.assert_close(tl.apply_rotary(q, torch.tensor([m])).norm(), q.norm())

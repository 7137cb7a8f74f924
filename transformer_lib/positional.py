"""Positional information: sinusoidal encodings, the rotation behind them, rotary embeddings.

Chapter 07 teaches the sinusoidal encoding; chapter 08 proves that shifting it by
``phi`` positions is a rotation (``rotation_matrix``, ``offset_matrix``) and follows the
idea to rotary embeddings (``apply_rotary``).

For frequency index ``k = 0 .. d_model/2 - 1``, ``omega_k = 1 / 10000**(2k / d_model)``,
and position ``t`` is encoded as ``pe[t, 2k] = sin(omega_k t)``,
``pe[t, 2k+1] = cos(omega_k t)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import _checks
from .config import ROTARY_LAYOUTS


def _even_width(d_model: int, name: str = "d_model") -> int:
    d_model = _checks.positive_int(d_model, name)
    if d_model % 2:
        raise ValueError(f"{name} must be even (sine and cosine come in pairs), got {d_model}")
    return d_model


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """The ``d_model / 2`` angular frequencies ``omega_k = 1 / base**(2k / d_model)``.

    They fall geometrically from 1 (wavelength ``2 pi``) towards ``1 / base``
    (wavelength near ``base * 2 pi``). Taught in chapter 07.
    """
    d_model = _even_width(d_model)
    k = np.arange(d_model // 2)
    return 1.0 / base ** (2 * k / d_model)


def sinusoidal_encoding(num_positions: int, d_model: int) -> np.ndarray:
    """The sinusoidal positional encoding of Vaswani et al. (2017), as a numpy array.

    Args:
        num_positions: how many positions ``t = 0 .. num_positions - 1``.
        d_model: width of the encoding; must be even.

    Returns:
        ``(num_positions, d_model)``: sines in the even columns, cosines in the odd ones.

    Taught in chapter 07.
    """
    num_positions = _checks.positive_int(num_positions, "num_positions")
    omega = frequencies(d_model)  # (d_model/2,)
    angles = np.arange(num_positions)[:, None] * omega[None, :]  # (num_positions, d_model/2)
    pe = np.empty((num_positions, d_model))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def _check_embedded(x: torch.Tensor, d_model: int, max_len: int, start: int) -> int:
    """Check ``x`` ``(batch, seq, d_model)`` at positions ``start .. start + seq - 1``; return ``start``."""
    _checks.hidden(x, "x", d_model)
    start = _checks.non_negative_int(start, "start")
    if start + x.shape[1] > max_len:
        where = f"{x.shape[1]} positions" + (f" from start={start}" if start else "")
        raise ValueError(f"x has {where}, more than max_len={max_len}")
    return start


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to a batch of embeddings, then dropout.

    Args:
        d_model: embedding width (even).
        max_len: the longest sequence it can encode.
        dropout: dropout applied to the sum, as in the paper.

    ``forward(x, start=0)`` takes and returns ``(batch, seq, d_model)``; ``x`` holds positions
    ``start .. start + seq - 1`` (``start > 0`` when generating with a cache).
    Taught in chapter 07.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model = _even_width(d_model)
        self.max_len = _checks.positive_int(max_len, "max_len")
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))
        pe = torch.from_numpy(sinusoidal_encoding(max_len, d_model)).float()
        self.register_buffer("pe", pe, persistent=False)  # (max_len, d_model)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        start = _check_embedded(x, self.d_model, self.max_len, start)
        return self.dropout(x + self.pe[start : start + x.shape[1]].to(x.dtype))


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position (as BERT and GPT-2 do) to a batch of embeddings.

    Args:
        max_len: number of positions with a vector of their own.
        d_model: embedding width.

    ``forward(x, start=0)`` takes and returns ``(batch, seq, d_model)``, as
    :class:`PositionalEncoding`. Taught in chapter 07.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = _checks.positive_int(max_len, "max_len")
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        start = _check_embedded(x, self.d_model, self.max_len, start)
        return x + self.embedding.weight[start : start + x.shape[1]].to(x.dtype)


def rotation_matrix(phi: float, omega: float) -> np.ndarray:
    """The 2x2 matrix that moves one sine-cosine pair ``phi`` positions forward.

    ``[[cos(omega phi), sin(omega phi)], [-sin(omega phi), cos(omega phi)]]`` maps
    ``[sin(omega t), cos(omega t)]`` to ``[sin(omega (t + phi)), cos(omega (t + phi))]``
    for every ``t``: a rotation by angle ``omega phi`` that does not depend on ``t``.
    Proved in chapter 08.
    """
    for name, value in (("phi", phi), ("omega", omega)):
        if isinstance(value, bool) or not np.isscalar(value) or not np.isreal(value):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    angle = float(omega) * float(phi)
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, s], [-s, c]])


def offset_matrix(phi: float, d_model: int) -> np.ndarray:
    """Block-diagonal ``(d_model, d_model)`` matrix with ``offset_matrix(phi, d) @ pe[t] == pe[t + phi]``.

    Block k is ``rotation_matrix(phi, omega_k)``, acting on columns ``2k, 2k+1`` of the
    encoding. Proved in chapter 08.
    """
    omega = frequencies(d_model)
    M = np.zeros((d_model, d_model))
    for k, w in enumerate(omega):
        M[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = rotation_matrix(phi, w)
    return M


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0, layout: str = "interleaved"
) -> torch.Tensor:
    """Rotary position embedding (Su et al., 2021): rotate each feature pair by its position.

    Pair ``k`` at position ``m`` is turned by the angle ``m * theta_k`` with
    ``theta_k = base**(-2k / d)``. Because rotations compose, the dot product of a
    query rotated to position m and a key rotated to position n depends only on
    ``m - n``.

    Which features make pair ``k`` is the ``layout``:

    * ``"interleaved"`` (chapter 8, the RoFormer paper and Meta's Llama code):
      ``(x[2k], x[2k+1])``, neighbours;
    * ``"half"`` ("rotate half", the layout of Hugging Face's Llama checkpoints and
      GPT-NeoX): ``(x[k], x[k + d/2])``, the first half against the second.

    The two compute the same attention once the query and key features are reordered
    (:func:`rotary_permutation`).

    Args:
        x: ``(..., seq, d)`` queries or keys, ``d`` even.
        positions: ``(seq,)`` positions (default ``0 .. seq - 1``); integers or floats.
        base: the frequency base (Llama's ``rope_theta``).
        layout: ``"interleaved"`` or ``"half"``.

    Returns:
        A tensor shaped like ``x``. Taught in chapter 08 (the interleaved layout) and
        chapter 19 (the half layout).
    """
    _checks.float_tensor(x, "x")
    _checks.ndim_at_least(x, 2, "x", "(..., seq, d)")
    d = _even_width(x.shape[-1], "x's last dimension d")
    _checks.positive_float(base, "base")
    _checks.one_of(layout, "layout", ROTARY_LAYOUTS)
    seq = x.shape[-2]
    if positions is None:
        positions = torch.arange(seq, device=x.device)
    if not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(positions)
    if positions.shape != (seq,):
        raise ValueError(f"positions must have shape (seq,) = ({seq},), got {tuple(positions.shape)}")
    cos, sin = _rotary_angles(positions, d, float(base), x.dtype, x.device)  # (seq, d/2) each
    if layout == "half":
        first, second = x[..., : d // 2], x[..., d // 2 :]  # (..., seq, d/2) each
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., seq, d/2) each
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (..., seq, d): pairs interleaved back


def _rotary_angles(
    positions: torch.Tensor, d: int, base: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of ``positions[:, None] * theta[None, :]``, computed in float64, in ``dtype``."""
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)  # (d/2,)
    angles = positions.to(device=device, dtype=torch.float64)[:, None] * theta[None, :]  # (seq, d/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotary_permutation(d: int, num_heads: int = 1) -> torch.Tensor:
    """The reordering of features that turns the interleaved rotary layout into the half layout.

    Feature ``j`` of the half layout is feature ``perm[j]`` of the interleaved one: the
    even features first, then the odd ones, so that pair ``(2k, 2k+1)`` lands on
    ``(k, k + d/2)``. Then, for every ``x``,
    ``apply_rotary(x[..., perm], layout="half") == apply_rotary(x)[..., perm]``, and since
    a dot product does not change when both vectors are reordered alike, queries and keys
    reordered this way give the same attention scores. Reordering the rows of ``W_q`` and
    ``W_k`` (``W[perm]``) converts a model between the layouts; ``perm.argsort()`` goes
    back.

    Args:
        d: the width of one head (even).
        num_heads: heads stacked in one projection; each head's rows are reordered within
            the head.

    Returns:
        ``(num_heads * d,)`` indices. Taught in chapter 19.
    """
    d = _even_width(d, "d")
    num_heads = _checks.positive_int(num_heads, "num_heads")
    one = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # (d,)
    return (one + d * torch.arange(num_heads)[:, None]).flatten()  # (num_heads * d,)

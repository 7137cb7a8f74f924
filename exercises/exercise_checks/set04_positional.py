"""Checkers of set 4: the sinusoidal encoding, the 2x2 rotation, the offset matrix, shifting encodings.

The expected values come from ``tl.sinusoidal_encoding``, ``tl.rotation_matrix`` and
``tl.offset_matrix``; the mistakes (the exponent ``k`` for ``2k``, sines and cosines in halves or
swapped, positions from 1, transposed blocks) are recomputed in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy import asarray as _asarray

from .compare import expect_array
from .recording import call
from .reference import tl


def _encoding_variant(n: int, d: int, exponent: str = "2k", layout: str = "interleaved", start: int = 0,
                      swap: bool = False) -> np.ndarray:
    k = np.arange(d // 2)
    power = 2 * k / d if exponent == "2k" else k / d
    omega = 1.0 / 10000.0**power
    angles = np.arange(start, start + n)[:, None] * omega[None, :]
    first, second = (np.cos(angles), np.sin(angles)) if swap else (np.sin(angles), np.cos(angles))
    if layout == "halves":
        return np.concatenate([first, second], axis=1)
    pe = np.empty((n, d))
    pe[:, 0::2], pe[:, 1::2] = first, second
    return pe


def check_sinusoidal_encoding(sinusoidal_encoding: Any, num_positions: int, d_model: int) -> None:
    """Check ``sinusoidal_encoding(num_positions, d_model)``: ``tl.sinusoidal_encoding``."""
    got = call("sinusoidal_encoding", sinusoidal_encoding, num_positions, d_model)
    n, d = num_positions, d_model
    expect_array(
        got, tl.sinusoidal_encoding(n, d), f"sinusoidal_encoding({n}, {d})",
        mistakes={
            "the frequencies use k / d_model; the exponent is 2k / d_model, "
            "omega_k = 1 / 10000**(2k / d_model) (some texts misprint it)": lambda: (
                _encoding_variant(n, d, "k")),
            "the sines fill the first half and the cosines the second; they are interleaved, sine in the "
            "even columns 2k and cosine in the odd columns 2k+1": lambda: (
                _encoding_variant(n, d, layout="halves")),
            "sine and cosine are swapped: sine goes in the even columns": lambda: (
                _encoding_variant(n, d, swap=True)),
            "positions start at 1; the first row is position t = 0": lambda: _encoding_variant(n, d, start=1),
        },
    )


def check_rotation_matrix(rotation_matrix: Any, phi: float, omega: float) -> None:
    """Check ``rotation_matrix(phi, omega)``: the 2x2 ``tl.rotation_matrix``."""
    got = call("rotation_matrix", rotation_matrix, phi, omega)
    want = tl.rotation_matrix(phi, omega)
    expect_array(
        got, want, f"rotation_matrix(phi={phi}, omega={omega})",
        mistakes={
            "this is the transpose: it moves the pair phi positions backwards. Check with "
            "M @ [sin(wt), cos(wt)] = [sin(w(t+phi)), cos(w(t+phi))] and the angle-addition formulas": (
                lambda: want.T),
            "the angle should be omega * phi, not phi alone": lambda: tl.rotation_matrix(phi, 1.0),
        },
    )


def check_offset_matrix(offset_matrix: Any, phi: float, d_model: int) -> None:
    """Check ``offset_matrix(phi, d_model)``: the block-diagonal ``tl.offset_matrix``."""
    got = call("offset_matrix", offset_matrix, phi, d_model)
    want = tl.offset_matrix(phi, d_model)

    def with_power(power):
        M = np.zeros((d_model, d_model))
        for k in range(d_model // 2):
            M[2 * k:2 * k + 2, 2 * k:2 * k + 2] = tl.rotation_matrix(phi, 1.0 / 10000.0 ** power(k))
        return M

    expect_array(
        got, want, f"offset_matrix(phi={phi}, d_model={d_model})",
        mistakes={
            "block k uses omega = 1 / 10000**(k / d_model); the exponent is 2k / d_model": lambda: with_power(
                lambda k: k / d_model),
            "every 2x2 block is transposed (moves backwards)": lambda: want.T,
            "the blocks use k as the exponent index for column 2k+1 too; block k acts on columns 2k and 2k+1 "
            "with one frequency omega_k": lambda: with_power(lambda k: 4 * k / d_model),
        },
    )


def _encoding_at(positions: np.ndarray, d_model: int) -> np.ndarray:
    """The sinusoidal encoding of arbitrary (even negative) positions: a test's input.

    Computed here with numpy alone (the frequencies as ``tl.frequencies`` computes them), since
    it is built before the answer is called, also in the grading kernel, where the library is
    not installed.
    """
    frequencies = 1.0 / 10000.0 ** (2 * np.arange(d_model // 2) / d_model)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * frequencies[None, :]
    pe = np.empty((len(positions), d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return pe


def check_shift_encoding(shift_encoding: Any, positions: Any, d_model: int, phi: int) -> None:
    """Check ``shift_encoding(pe, phi)``: the encodings of ``positions + phi``."""
    positions = _asarray(positions)
    pe = _encoding_at(positions, d_model)
    got = call("shift_encoding", shift_encoding, pe, phi)
    M = tl.offset_matrix(phi, d_model)
    expect_array(
        got, _encoding_at(positions + phi, d_model), f"shift_encoding(pe, phi={phi})",
        mistakes={
            "the rows were multiplied by M instead of M^T: each row p is a column vector in M @ p, so "
            "for a stack of rows use pe @ M.T (this shifts backwards)": lambda: pe @ M,
            "the encoding was not shifted": lambda: pe,
        },
    )

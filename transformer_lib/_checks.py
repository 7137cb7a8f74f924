"""Input checks shared by the library: every public entry point validates at the door.

Each check raises a ``ValueError`` or ``TypeError`` whose message names the argument,
says what was expected and shows what came, so a mistake is caught where it is made
rather than deep inside numpy or torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of an array or tensor as a plain tuple."""
    return tuple(int(s) for s in x.shape)


def positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def probability(value: Any, name: str) -> float:
    """Return ``value`` as a float in [0, 1), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def as_float_array(x: Any, name: str) -> np.ndarray:
    """Convert ``x`` to a floating numpy array (float64 unless it is already floating)."""
    if isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a numpy array, got a torch.Tensor; call .numpy() first")
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return arr


def ndim_at_least(x: Any, n: int, name: str, layout: str) -> None:
    """Raise unless ``x`` has at least ``n`` dimensions; ``layout`` names them for the message."""
    if x.ndim < n:
        raise ValueError(f"{name} must have shape {layout}, got shape {shape_of(x)}")


def ndim_exactly(x: Any, n: int, name: str, layout: str) -> None:
    """Raise unless ``x`` has exactly ``n`` dimensions."""
    if x.ndim != n:
        raise ValueError(f"{name} must have shape {layout}, got shape {shape_of(x)}")


def float_tensor(x: Any, name: str) -> torch.Tensor:
    """Raise unless ``x`` is a floating-point torch tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def same_size(a: int, b: int, what: str) -> None:
    """Raise unless two sizes agree; ``what`` says which sizes, for the message."""
    if a != b:
        raise ValueError(f"{what} must match, got {a} and {b}")


def broadcastable(shape: Sequence[int], target: Sequence[int]) -> bool:
    """True if an array of ``shape`` broadcasts to ``target`` (without growing ``target``)."""
    if len(shape) > len(target):
        return False
    for s, t in zip(reversed(shape), reversed(target)):
        if s != 1 and s != t:
            return False
    return True


def bool_mask(mask: Any, name: str, target: Sequence[int], layout: str) -> Any:
    """Check that ``mask`` is boolean (True = may attend) and broadcasts to ``target``."""
    dtype = getattr(mask, "dtype", None)
    if dtype is None:
        raise TypeError(f"{name} must be a boolean array or tensor, got {type(mask).__name__}")
    if dtype not in (torch.bool, np.bool_, bool):
        raise TypeError(
            f"{name} must be boolean (True where attention is allowed), got dtype {dtype}"
        )
    if not broadcastable(shape_of(mask), target):
        raise ValueError(
            f"{name} of shape {shape_of(mask)} does not broadcast to {layout} = {tuple(target)}"
        )
    return mask

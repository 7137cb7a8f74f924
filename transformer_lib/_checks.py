"""Input checks shared by the library: every public entry point validates at the door.

Each check raises a ``ValueError`` or ``TypeError`` whose message names the argument,
says what was expected and shows what came, so a mistake is caught where it is made
rather than deep inside numpy or torch. One check per idea: numbers (:func:`positive_int`,
:func:`non_negative_int`, :func:`positive_float`, :func:`probability`, :func:`flag`),
choices (:func:`one_of`), arrays and tensors (:func:`as_float_array`, :func:`float_tensor`,
:func:`hidden`, shapes), token ids (:func:`token_id`, :func:`token_ids`) and masks
(:func:`bool_mask`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

# --------------------------------------------------------------------------- numbers and choices


def positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def non_negative_int(value: Any, name: str) -> int:
    """Return ``value`` as an int if it is an integer >= 0, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value}")
    return int(value)


def positive_float(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is a number > 0, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a positive float, got {type(value).__name__} {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be a positive float, got {value}")
    return float(value)


def probability(value: Any, name: str) -> float:
    """Return ``value`` as a float in [0, 1), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def flag(value: Any, name: str) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (not 0, 1 or None), else raise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def one_of(value: Any, name: str, options: Iterable[str]) -> str:
    """Return ``value`` if it is one of the string ``options``, else raise naming them all."""
    options = list(options)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {options}, got {type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


# --------------------------------------------------------------------------- arrays and tensors


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of an array or tensor as a plain tuple."""
    return tuple(int(s) for s in x.shape)


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


def hidden(x: Any, name: str, d_model: int, layout: str = "(batch, seq, d_model={})") -> torch.Tensor:
    """Raise unless ``x`` is a float tensor of vectors ``(batch, seq, d_model)``.

    ``layout`` names the dimensions for the message; ``{}`` in it becomes ``d_model``.
    """
    layout = layout.format(d_model)
    float_tensor(x, name)
    ndim_exactly(x, 3, name, layout)
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape {layout}, got shape {shape_of(x)}")
    return x


def same_size(a: int, b: int, what: str) -> None:
    """Raise unless two sizes agree; ``what`` says which sizes, for the message."""
    if a != b:
        raise ValueError(f"{what} must match, got {a} and {b}")


# --------------------------------------------------------------------------- token ids


def token_id(value: Any, name: str) -> int:
    """Return ``value`` if it is one token id, a non-negative int (``bos_id``, ``pad_id``, ...)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise TypeError(f"{name} must be a non-negative int token id, got {type(value).__name__} {value!r}")
    return int(value)


def token_ids(tokens: Any, name: str, vocab_size: int | None = None) -> torch.Tensor:
    """Raise unless ``tokens`` is a ``(batch, seq)`` integer tensor of ids in ``[0, vocab_size)``.

    Without ``vocab_size`` only the type, dtype and shape are checked.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    ndim_exactly(tokens, 2, name, "(batch, seq)")
    if vocab_size is not None and tokens.numel():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must hold ids in [0, {vocab_size}) for a vocabulary of {vocab_size}, "
                f"got ids from {low} to {high}"
            )
    return tokens


# --------------------------------------------------------------------------- masks


def bool_mask(mask: Any, name: str, target: Sequence[int], layout: str, *, tensor: bool = False) -> Any:
    """Check that ``mask`` is boolean (True = may attend) and broadcasts to ``target``.

    ``target`` is the shape the mask is applied to (the attention scores); the mask may
    have fewer dimensions or size-1 ones, but broadcasting it must not grow ``target``.
    With ``tensor=True`` the mask must be a torch tensor (a numpy array is refused).
    """
    what = "a boolean torch.Tensor" if tensor else "a boolean array or tensor"
    if (tensor and not isinstance(mask, torch.Tensor)) or getattr(mask, "dtype", None) is None:
        raise TypeError(f"{name} must be {what} (True where attention is allowed), got {type(mask).__name__}")
    if mask.dtype not in (torch.bool, np.bool_):
        raise TypeError(f"{name} must be boolean (True where attention is allowed), got dtype {mask.dtype}")
    target = tuple(int(s) for s in target)
    try:
        fits = torch.broadcast_shapes(shape_of(mask), target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} of shape {shape_of(mask)} does not broadcast to {layout} = {target}")
    return mask

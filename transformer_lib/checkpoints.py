"""Checkpoints: a model's weights, config, optimizer, schedule and training history in one file.

Taught in chapter 11.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from .training import History


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer=None,
    scheduler=None,
    history: History | None = None,
    dtype: torch.dtype | None = None,
) -> None:
    """Save the model's weights (and its config, the optimizer, the schedule and the history) to ``path``.

    ``dtype`` (e.g. ``torch.float16``) stores the floating-point weights at that precision,
    halving a float32 file; :func:`load_checkpoint` copies them back into a float32 model.
    """
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float16, got {dtype!r}")
    config = getattr(model, "config", None)
    weights = model.state_dict()
    if dtype is not None:
        weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}
    state = {
        "model": weights,
        "config": dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None,
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "history": None if history is None else history.to_dict(),
    }
    torch.save(state, path)


def load_checkpoint(
    path: str | Path, model: nn.Module | None = None, optimizer=None, scheduler=None
) -> tuple[nn.Module, History | None]:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Args:
        path: the file.
        model: the module to load the weights into; by default a new model is built from
            the saved config with :func:`~transformer_lib.model.build_model`.
        optimizer, scheduler: restored too when given (to continue training).

    Returns:
        ``(model, history)`` with the model in eval mode (history ``None`` if not saved).
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    if model is None:
        if state["config"] is None:
            raise ValueError("model must be given: the checkpoint holds no config to build one from")
        from . import TransformerConfig, build_model  # the package's, whichever module defines them

        model = build_model(TransformerConfig(**state["config"]))
    model.load_state_dict(state["model"])
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    history = None if state["history"] is None else History(**state["history"])
    return model.eval(), history

"""From a configuration to a model: :func:`build_model`, and :func:`count_parameters`.

:func:`build_model` is the one factory (the Annotated Transformer's ``make_model``): it
reads ``config.architecture`` and builds a :class:`~transformer_lib.transformer.Transformer`,
an :class:`~transformer_lib.lm.EncoderOnlyModel` or a :class:`~transformer_lib.lm.DecoderOnlyModel`.
:func:`count_parameters` counts a model's parameters, each shared tensor once, or a
config's without allocating them. Taught in chapter 11.
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks
from .config import TransformerConfig
from .lm import DecoderOnlyModel, EncoderOnlyModel
from .transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {
    "encoder-decoder": Transformer,
    "encoder-only": EncoderOnlyModel,
    "decoder-only": DecoderOnlyModel,
}


def build_model(config: TransformerConfig) -> nn.Module:
    """The model a config describes: a Transformer, EncoderOnlyModel or DecoderOnlyModel."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    return MODELS[config.architecture](config)


def count_parameters(model: nn.Module | TransformerConfig, by_module: bool = False) -> int | dict[str, int]:
    """Number of parameters, each shared (tied) tensor counted once.

    Args:
        model: a module, or a :class:`~transformer_lib.config.TransformerConfig` (built on
            PyTorch's ``meta`` device, so even the big preset costs no memory).
        by_module: return ``{child name: count}`` for the top-level children instead, a
            shared tensor counted in the first child that holds it.

    Taught in chapter 11 (the base model has about 65M parameters, the big one about 213M).
    """
    if isinstance(model, TransformerConfig):
        with torch.device("meta"):
            model = build_model(model)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module or a TransformerConfig, got {type(model).__name__}")
    _checks.flag(by_module, "by_module")
    if not by_module:
        return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    seen: set[int] = set()
    counts: dict[str, int] = {}
    for name, child in model.named_children():
        fresh = [p for p in child.parameters() if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        counts[name] = sum(p.numel() for p in fresh)
    direct = [p for p in model.parameters(recurse=False) if id(p) not in seen]
    if direct:
        counts["(own)"] = sum(p.numel() for p in direct)
    return counts

"""What the optimiser minimises and how fast: label smoothing, and two learning-rate recipes.

* :func:`smoothed_targets` and :class:`LabelSmoothingLoss`: the target distribution puts
  ``1 - smoothing`` on the right token and spreads ``smoothing`` over the other
  (non-padding) tokens; the loss is the cross-entropy against it (Szegedy et al., 2016;
  the paper uses ``smoothing = 0.1``). PyTorch's ``F.cross_entropy(label_smoothing=)``
  spreads it differently; the class's docstring says how.
* :func:`warmup_lr`: ``lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``,
  a linear warm-up followed by an inverse-square-root decay (section 5.3 of the paper).
* :func:`make_optimizer`: Adam with ``beta_1 = 0.9``, ``beta_2 = 0.98``, ``eps = 1e-9``
  and that schedule.
* :func:`cosine_lr` and :func:`make_adamw`: the GPT recipe as nanoGPT runs it: AdamW with
  weight decay on the matrices only, a linear warm-up, then a cosine decay to ``min_lr``.

Taught in chapter 11; the GPT recipe in the language-modelling chapter.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import _checks
from .data import PAD_ID


def _smoothing(value: object) -> float:
    return _checks.probability(value, "smoothing")


def smoothed_targets(
    target: torch.Tensor, vocab_size: int, smoothing: float = 0.1, pad_id: int = PAD_ID
) -> torch.Tensor:
    """The label-smoothed target distribution for each target id.

    Args:
        target: ``(n,)`` correct token ids.
        vocab_size: V.
        smoothing: epsilon, the probability mass taken from the correct token.
        pad_id: the padding id; it never gets probability, and rows whose target is the
            pad are all zeros (they do not count).

    Returns:
        ``(n, V)``: ``1 - smoothing`` at the correct id, ``smoothing / (V - 2)`` at every
        other id except the pad.
    """
    smoothing = _smoothing(smoothing)
    vocab_size = _checks.positive_int(vocab_size, "vocab_size")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be at least 3 (pad, the answer and one more), got {vocab_size}")
    dist = torch.full((target.shape[0], vocab_size), smoothing / (vocab_size - 2))  # (n, V)
    dist[:, pad_id] = 0.0
    dist.scatter_(1, target[:, None], 1.0 - smoothing)
    dist[target == pad_id] = 0.0
    return dist


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against label-smoothed targets, averaged over the non-padding tokens.

    Args:
        smoothing: epsilon (0 gives the ordinary negative log-likelihood).
        pad_id: target positions holding this id are ignored.

    ``forward(log_probs, target)``: ``(..., V)`` log-probabilities and ``(...)`` ids to a
    scalar. With smoothing the smallest possible loss is the entropy of the smoothed
    distribution, not 0. It equals ``-(smoothed_targets(...) * log_probs).sum() / n``,
    computed without building the ``(n, V)`` matrix.

    The course keeps its own loss to show the target distribution (the Annotated
    Transformer's variant). PyTorch's ``F.cross_entropy(logits, target,
    label_smoothing=eps, ignore_index=pad_id)`` differs in where ``eps`` goes: it mixes
    the one-hot target with the uniform distribution over all V classes, so the correct
    token gets ``1 - eps + eps / V`` and every other class ``eps / V``, the pad class
    included. Ours gives the correct token ``1 - eps``, each of the ``V - 2`` other
    non-pad tokens ``eps / (V - 2)``, and the pad class nothing. Both skip positions whose
    target is the pad and average over the rest. They agree exactly when ``eps = 0``, and
    when the model gives the pad no probability: then ours equals PyTorch's over the
    ``V - 1`` non-pad classes with ``label_smoothing = eps * (V - 1) / (V - 2)``.
    """

    def __init__(self, smoothing: float = 0.1, pad_id: int = PAD_ID):
        super().__init__()
        self.smoothing = _smoothing(smoothing)
        self.pad_id = pad_id

    def forward(self, log_probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        _checks.float_tensor(log_probs, "log_probs")
        if log_probs.shape[:-1] != target.shape:
            raise ValueError(
                f"log_probs must have shape target.shape + (V,) = {tuple(target.shape)} + (V,), "
                f"got {tuple(log_probs.shape)}"
            )
        vocab_size = log_probs.shape[-1]
        log_probs = log_probs.reshape(-1, vocab_size)  # (n, V)
        target = target.reshape(-1)  # (n,)
        real = target != self.pad_id  # (n,)
        # 1) the correct token's log-probability
        correct = log_probs.gather(1, target[:, None])[:, 0]  # (n,)
        loss = -(1.0 - self.smoothing) * correct
        if self.smoothing > 0:
            # 2) the others share epsilon evenly, the pad excluded
            others = log_probs.sum(dim=1) - correct - log_probs[:, self.pad_id]  # (n,)
            loss = loss - self.smoothing / (vocab_size - 2) * others
        return loss[real].sum() / real.sum().clamp(min=1)

    def extra_repr(self) -> str:
        return f"smoothing={self.smoothing}, pad_id={self.pad_id}"


def warmup_lr(step: int | np.ndarray, d_model: int, warmup_steps: int = 4000, factor: float = 1.0):
    """The paper's learning rate at ``step`` (1-based): linear warm-up, then ``1 / sqrt(step)`` decay.

    ``factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``; the peak is at
    ``step = warmup_steps``. ``step`` may be a numpy array (to plot the curve); step 0
    counts as step 1.
    """
    d_model = _checks.positive_int(d_model, "d_model")
    warmup_steps = _checks.positive_int(warmup_steps, "warmup_steps")
    s = np.maximum(np.asarray(step, dtype=np.float64), 1.0)
    lr = factor * d_model**-0.5 * np.minimum(s**-0.5, s * warmup_steps**-1.5)
    return float(lr) if np.ndim(lr) == 0 else lr


def make_optimizer(
    model: nn.Module, d_model: int, warmup_steps: int = 4000, factor: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(beta_1=0.9, beta_2=0.98, eps=1e-9) with the :func:`warmup_lr` schedule, stepped once per batch.

    On CPU and CUDA the update is PyTorch's fused Adam kernel (``fused=True``): the same
    algorithm in one pass over all the parameters instead of several small operations per
    parameter tensor, which for the small models of this course cuts the optimizer's share
    of a training step about fourfold.
    """
    params = list(model.parameters())
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: warmup_lr(i + 1, d_model, warmup_steps, factor)
    )
    return optimizer, scheduler


def cosine_lr(
    step: int | np.ndarray,
    lr: float = 1e-3,
    warmup_steps: int = 100,
    decay_steps: int = 2000,
    min_lr: float = 1e-4,
):
    """nanoGPT's learning rate at 0-based step ``step``: linear warm-up, cosine decay, then a floor.

    ``lr * (step + 1) / (warmup_steps + 1)`` while ``step < warmup_steps``; then
    ``min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2`` with ``r`` going from 0 at
    ``warmup_steps`` to 1 at ``decay_steps``; ``min_lr`` after that. ``step`` may be a numpy
    array (to plot the curve).
    """
    for name, value in (("lr", lr), ("min_lr", min_lr)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}")
    if not 0.0 <= min_lr <= lr:
        raise ValueError(f"min_lr must be in [0, lr={lr}], got {min_lr}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    decay_steps = _checks.positive_int(decay_steps, "decay_steps")
    if decay_steps <= warmup_steps:
        raise ValueError(f"decay_steps must be greater than warmup_steps={warmup_steps}, got {decay_steps}")
    s = np.asarray(step, dtype=np.float64)
    warm = lr * (s + 1) / (warmup_steps + 1)
    r = np.clip((s - warmup_steps) / (decay_steps - warmup_steps), 0.0, 1.0)
    decayed = min_lr + 0.5 * (1.0 + np.cos(np.pi * r)) * (lr - min_lr)
    out = np.where(s < warmup_steps, warm, decayed)
    return float(out) if np.ndim(out) == 0 else out


def make_adamw(
    model: nn.Module,
    lr: float = 1e-3,
    warmup_steps: int = 100,
    decay_steps: int = 2000,
    min_lr: float = 1e-4,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.99),
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with the :func:`cosine_lr` schedule, as nanoGPT trains a GPT; stepped once per batch.

    Weight decay applies to the parameters with two or more dimensions (the matrices of
    the linear layers and the embeddings) and not to biases and layer-norm gains, as in
    nanoGPT's ``configure_optimizers``. nanoGPT's character-level Shakespeare settings are
    the defaults: peak ``lr`` 1e-3, ``betas`` (0.9, 0.99), ``weight_decay`` 0.1, 100
    warm-up steps, cosine decay to 1e-4 at step 2,000. PyTorch's fused kernel on CPU and
    CUDA, as in :func:`make_optimizer`.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    cosine_lr(0, lr, warmup_steps, decay_steps, min_lr)  # checks the arguments now, not at the first step
    optimizer = torch.optim.AdamW(groups, lr=1.0, betas=betas, fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: cosine_lr(i, lr, warmup_steps, decay_steps, min_lr)
    )
    return optimizer, scheduler

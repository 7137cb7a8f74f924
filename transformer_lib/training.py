"""Training: label smoothing, the warm-up learning-rate schedule, the training loop, checkpoints.

* :func:`smoothed_targets` and :class:`LabelSmoothingLoss`: the target distribution puts
  ``1 - smoothing`` on the right token and spreads ``smoothing`` over the other
  (non-padding) tokens; the loss is the cross-entropy against it (Szegedy et al., 2016;
  the paper uses ``smoothing = 0.1``).
* :func:`warmup_lr`: ``lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``,
  a linear warm-up followed by an inverse-square-root decay (section 5.3 of the paper).
* :func:`make_optimizer`: Adam with ``beta_1 = 0.9``, ``beta_2 = 0.98``, ``eps = 1e-9``
  and that schedule.
* :func:`train`: the loop (teacher forcing, gradient clipping, a tqdm progress bar that
  works in a terminal and in a notebook, a loss history, held-out evaluation).
* :func:`exact_match`: the share of held-out examples decoded exactly right (greedy).
* :func:`save_checkpoint` and :func:`load_checkpoint`.

Taught in chapter 11.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from . import _checks
from .data import PAD_ID, Batch, Seq2SeqDataset
from .decoding import greedy_decode


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


@dataclass
class History:
    """What a training run recorded.

    Attributes:
        losses: the training loss of every step (per target token).
        lrs: the learning rate of every step.
        eval_steps, eval_accuracy: when the held-out exact-match accuracy was measured, and its value.
        steps, tokens: optimisation steps and target tokens seen.
        train_seconds: wall time spent in training steps; ``total_seconds`` includes evaluation.
        train_cpu_seconds: processor time of the training steps (steadier than wall time
            on a busy machine).
    """

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    train_cpu_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        """Target tokens per second of training."""
        return self.tokens / self.train_seconds if self.train_seconds else 0.0

    @property
    def final_accuracy(self) -> float | None:
        """The last held-out accuracy measured, if any."""
        return self.eval_accuracy[-1] if self.eval_accuracy else None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def exact_match(model, data: Seq2SeqDataset, batch_size: int = 500, max_len: int | None = None) -> float:
    """Share of ``data``'s examples whose greedy decoding equals the target exactly.

    Args:
        model: has ``encode`` and ``decode`` (a :class:`~transformer_lib.model.Transformer`).
        data: the (held-out) examples.
        batch_size: examples decoded at once.
        max_len: the most tokens to produce; by default the longest target plus ``<eos>``.
    """
    if not isinstance(data, Seq2SeqDataset):
        raise TypeError(f"data must be a Seq2SeqDataset, got {type(data).__name__}")
    max_len = data.max_tgt_len + 1 if max_len is None else _checks.positive_int(max_len, "max_len")
    device = _device_of(model)
    correct = 0
    for batch in data.batches(batch_size, shuffle=False):
        out = greedy_decode(model, batch.src.to(device), max_len, src_mask=batch.src_mask.to(device)).cpu()
        # a row is right when it matches tgt_out (answer, <eos>, pads) up to tgt_out's length
        width = batch.tgt_out.shape[1]
        if out.shape[1] < width:
            out = torch.cat([out, out.new_full((out.shape[0], width - out.shape[1]), PAD_ID)], dim=1)
        correct += int((out[:, :width] == batch.tgt_out).all(dim=1).sum())
    return correct / len(data)


def _device_of(model) -> torch.device:
    param = next(model.parameters(), None) if isinstance(model, nn.Module) else None
    return param.device if param is not None else torch.device("cpu")


def train_step(
    model, batch: Batch, loss_fn: Callable, optimizer, scheduler=None, clip_norm: float | None = 1.0
) -> float:
    """One optimisation step on one batch (teacher forcing); returns the loss."""
    # 1) predict every target position at once from the shifted-right target
    log_probs = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, tgt_len, V)
    # 2) label-smoothed loss per real target token
    loss = loss_fn(log_probs, batch.tgt_out)
    # 3) backpropagate, clip the gradient norm, update, advance the schedule
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def train(
    model: nn.Module,
    data: Seq2SeqDataset,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 64,
    warmup_steps: int = 400,
    lr_factor: float = 1.0,
    smoothing: float = 0.1,
    clip_norm: float | None = 1.0,
    eval_data: Seq2SeqDataset | None = None,
    eval_every: int | None = None,
    target_accuracy: float | None = None,
    target_checks: int = 1,
    time_limit: float | None = None,
    progress: bool = True,
    seed: int = 0,
    bucket: bool = False,
    d_model: int | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler=None,
    history: History | None = None,
) -> History:
    """Train a sequence-to-sequence model on ``data`` and record what happened.

    Stops after ``steps`` optimisation steps or ``epochs`` passes over the data
    (whichever comes first; at least one must be given), after ``time_limit`` seconds of
    training, or as soon as the held-out accuracy reaches ``target_accuracy`` (at
    ``target_checks`` evaluations in a row: more than one guards against a lucky check).

    Args:
        model: ``model(src, tgt_in, src_mask, tgt_mask)`` -> log-probabilities, plus
            ``encode``/``decode`` for evaluation (a :class:`~transformer_lib.model.Transformer`).
        data: the training set.
        batch_size: examples per step.
        warmup_steps, lr_factor: the schedule of :func:`warmup_lr`; ``d_model`` defaults
            to ``model.config.d_model``.
        smoothing: label smoothing epsilon.
        clip_norm: the largest gradient norm (``None``: no clipping).
        eval_data: held-out examples for :func:`exact_match` every ``eval_every`` steps
            (default: once per epoch) and at the end.
        progress: show a tqdm progress bar (terminal or notebook).
        seed: seeds the shuffling of the batches and ``torch`` (dropout).
        bucket: batch examples of similar length together (less padding, faster steps).
        optimizer, scheduler, history: continue an earlier run (from :func:`make_optimizer`
            and a previous :class:`History`, e.g. after :func:`load_checkpoint`).

    Returns:
        the :class:`History`.
    """
    if not isinstance(data, Seq2SeqDataset):
        raise TypeError(f"data must be a Seq2SeqDataset, got {type(data).__name__}")
    if steps is None and epochs is None:
        raise ValueError("steps or epochs must be given, got neither")
    steps = None if steps is None else _checks.positive_int(steps, "steps")
    epochs = None if epochs is None else _checks.positive_int(epochs, "epochs")
    batch_size = _checks.positive_int(batch_size, "batch_size")
    if target_accuracy is not None and eval_data is None:
        raise ValueError("target_accuracy needs eval_data (the held-out examples), got None")
    if d_model is None:
        d_model = getattr(getattr(model, "config", None), "d_model", None)
        if d_model is None:
            raise ValueError("d_model must be given for a model without config.d_model")
    target_checks = _checks.positive_int(target_checks, "target_checks")
    steps_per_epoch = math.ceil(len(data) / batch_size)
    if eval_data is not None and eval_every is None:
        eval_every = steps_per_epoch
    total = min(x for x in (steps, epochs and epochs * steps_per_epoch) if x)
    if optimizer is None:
        optimizer, scheduler = make_optimizer(model, d_model, warmup_steps, lr_factor)
    history = History() if history is None else history
    loss_fn = LabelSmoothingLoss(smoothing, PAD_ID)
    device = _device_of(model)
    torch.manual_seed(seed)

    start_total = time.perf_counter()
    bar = tqdm(total=total, disable=not progress, desc="training", unit="step", leave=True)
    step, epoch, stop = 0, 0, False
    try:
        while not stop:
            for batch in data.batches(batch_size, shuffle=True, seed=seed + history.steps + epoch, bucket=bucket):
                model.train()
                tick, cpu_tick = time.perf_counter(), time.process_time()
                loss = train_step(model, batch.to(device), loss_fn, optimizer, scheduler, clip_norm)
                history.train_seconds += time.perf_counter() - tick
                history.train_cpu_seconds += time.process_time() - cpu_tick
                history.losses.append(loss)
                history.lrs.append(optimizer.param_groups[0]["lr"])
                history.tokens += batch.num_tokens
                history.steps += 1
                step += 1
                bar.update(1)
                if eval_data is not None and step % eval_every == 0:
                    history.eval_steps.append(history.steps)
                    history.eval_accuracy.append(exact_match(model, eval_data))
                    bar.set_postfix(loss=f"{loss:.3f}", acc=f"{history.eval_accuracy[-1]:.3f}")
                    recent = history.eval_accuracy[-target_checks:]
                    if target_accuracy is not None and len(recent) == target_checks and min(recent) >= target_accuracy:
                        stop = True
                elif step % 20 == 0:
                    bar.set_postfix(loss=f"{loss:.3f}")
                if step >= total or (time_limit is not None and history.train_seconds >= time_limit):
                    stop = True
                if stop:
                    break
            epoch += 1
        if bar.n < total:
            # stopped before the planned number of steps (target reached or time limit):
            # end the bar at the steps taken, so a finished run does not look like a
            # broken one (a half-full bar turns red in a notebook when it closes)
            bar.total = bar.n
            if hasattr(bar, "container"):  # a notebook bar: its widget keeps its own maximum
                bar.container.children[1].max = bar.n
            bar.set_description("training (stopped early)")
            bar.refresh()
    finally:
        bar.close()
    if eval_data is not None and (not history.eval_steps or history.eval_steps[-1] != history.steps):
        history.eval_steps.append(history.steps)
        history.eval_accuracy.append(exact_match(model, eval_data))
    model.eval()
    history.total_seconds += time.perf_counter() - start_total
    return history


def save_checkpoint(
    path: str | Path, model: nn.Module, optimizer=None, scheduler=None, history: History | None = None
) -> None:
    """Save the model's weights (and its config, the optimizer, the schedule and the history) to ``path``."""
    config = getattr(model, "config", None)
    state = {
        "model": model.state_dict(),
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
        from .model import TransformerConfig, build_model

        model = build_model(TransformerConfig(**state["config"]))
    model.load_state_dict(state["model"])
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    history = None if state["history"] is None else History(**state["history"])
    return model.eval(), history

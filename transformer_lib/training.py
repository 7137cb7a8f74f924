"""Training: label smoothing, two learning-rate recipes, one training loop, evaluation, checkpoints.

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
* :func:`train`: one loop for a sequence-to-sequence model on a
  :class:`~transformer_lib.data.Seq2SeqDataset` (teacher forcing) and for a decoder-only
  language model on a :class:`~transformer_lib.data.TextDataset` (next-token prediction);
  gradient clipping, a tqdm progress bar that works in a terminal and in a notebook, a
  loss history, held-out evaluation, early stopping and a time limit.
* :func:`exact_match`: the share of held-out examples decoded exactly right (greedy).
* :func:`language_model_loss`: a language model's mean next-token loss on a text split.
* :func:`save_checkpoint` and :func:`load_checkpoint`.

Taught in chapter 11; the language-model parts in the language-modelling chapter.
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
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import _checks
from .data import PAD_ID, Batch, Seq2SeqDataset, TextBatch, TextDataset
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


@dataclass
class History:
    """What a training run recorded.

    Attributes:
        losses: the training loss of every step (per target token).
        lrs: the learning rate of every step.
        eval_steps: the steps after which the model was evaluated (0: before training).
        eval_accuracy: a sequence-to-sequence model's held-out exact-match accuracy at each
            of them.
        eval_loss, eval_train_loss: a language model's mean next-token loss on the held-out
            split and on the training split at each of them (:func:`language_model_loss`).
        eval_seconds: ``train_seconds`` at each evaluation (for a loss-against-time curve).
        steps, tokens: optimisation steps and target tokens seen.
        train_seconds: wall time spent in training steps; ``total_seconds`` includes evaluation.
        train_cpu_seconds: processor time of the training steps (steadier than wall time
            on a busy machine).
    """

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_train_loss: list[float] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)
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

    @property
    def final_loss(self) -> float | None:
        """The last held-out language-model loss measured, if any."""
        return self.eval_loss[-1] if self.eval_loss else None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def exact_match(
    model, data: Seq2SeqDataset, batch_size: int = 500, max_len: int | None = None, use_cache: bool = True
) -> float:
    """Share of ``data``'s examples whose greedy decoding equals the target exactly.

    Args:
        model: has ``encode`` and ``decode`` (a :class:`~transformer_lib.transformer.Transformer`).
        data: the (held-out) examples.
        batch_size: examples decoded at once.
        max_len: the most tokens to produce; by default the longest target plus ``<eos>``.
        use_cache: passed to :func:`~transformer_lib.decoding.greedy_decode`; ``False`` runs
            the whole prefix at every step, as a forward hook that reads the full sequence
            needs.
    """
    if not isinstance(data, Seq2SeqDataset):
        raise TypeError(f"data must be a Seq2SeqDataset, got {type(data).__name__}")
    max_len = data.max_tgt_len + 1 if max_len is None else _checks.positive_int(max_len, "max_len")
    device = _device_of(model)
    correct = 0
    for batch in data.batches(batch_size, shuffle=False):
        src, src_mask = batch.src.to(device), batch.src_mask.to(device)
        out = greedy_decode(model, src, max_len, src_mask=src_mask, use_cache=use_cache).cpu()
        # a row is right when it matches tgt_out (answer, <eos>, pads) up to tgt_out's length
        width = batch.tgt_out.shape[1]
        if out.shape[1] < width:
            out = torch.cat([out, out.new_full((out.shape[0], width - out.shape[1]), PAD_ID)], dim=1)
        correct += int((out[:, :width] == batch.tgt_out).all(dim=1).sum())
    return correct / len(data)


def _device_of(model) -> torch.device:
    param = next(model.parameters(), None) if isinstance(model, nn.Module) else None
    return param.device if param is not None else torch.device("cpu")


#: the seed of the windows :func:`language_model_loss` draws by default: the same windows at every
#: evaluation of every run, and not the training run's own first windows
EVAL_SEED = 1_000_003


def language_model_loss(
    model: nn.Module,
    data: TextDataset,
    num_batches: int | None = 200,
    batch_size: int = 12,
    seed: int = EVAL_SEED,
) -> float:
    """A language model's mean next-token loss (nats per token) on one split of a text.

    Args:
        model: maps ``(batch, T)`` ids to log-probabilities ``(batch, T, V)`` with a causal
            mask (a :class:`~transformer_lib.lm.DecoderOnlyModel`).
        data: the split, a :class:`~transformer_lib.data.TextDataset`.
        num_batches: average over the windows of ``num_batches`` random batches of
            ``batch_size`` (``data.loader(batch_size, num_batches, seed)``: the same windows
            for the same seed, as nanoGPT's ``estimate_loss`` averages ``eval_iters``
            batches, though nanoGPT draws new ones each time); ``None``: every
            non-overlapping window of the split once (``data.sequential_loader``).
        batch_size: windows per batch.
        seed: the seed of the random windows.

    The model runs in eval mode without gradients (its mode is restored afterwards); the
    windows are fed 256 at a time, which changes nothing but the speed.
    """
    if not isinstance(data, TextDataset):
        raise TypeError(f"data must be a TextDataset, got {type(data).__name__}")
    batch_size = _checks.positive_int(batch_size, "batch_size")
    if num_batches is None:
        loader = data.sequential_loader(256)
    else:
        num_batches = _checks.positive_int(num_batches, "num_batches")
        loader = data.loader(batch_size, num_batches, seed)
    device = _device_of(model)
    was_training = model.training
    model.eval()
    total, count, waiting = 0.0, 0, []
    try:
        with torch.no_grad():
            for i, batch in enumerate(loader):
                waiting.append(batch)
                if sum(len(b) for b in waiting) < 256 and i + 1 < len(loader):
                    continue
                tgt_in = torch.cat([b.tgt_in for b in waiting]).to(device)  # (windows, T)
                tgt_out = torch.cat([b.tgt_out for b in waiting]).to(device)  # (windows, T)
                log_probs = model(tgt_in)  # (windows, T, V)
                total += F.nll_loss(log_probs.flatten(0, 1), tgt_out.flatten(), reduction="sum").item()
                count += tgt_out.numel()
                waiting = []
    finally:
        model.train(was_training)
    return total / count


def train_step(
    model: nn.Module,
    batch: Batch | TextBatch,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    scheduler=None,
    clip_norm: float | None = 1.0,
) -> float:
    """One optimisation step on one batch; returns the loss.

    A :class:`~transformer_lib.data.Batch` trains a sequence-to-sequence model with teacher
    forcing; a :class:`~transformer_lib.data.TextBatch` trains a decoder-only language model
    to predict the next token (its causal mask is the model's default).
    """
    # 1) predict every target position at once from the shifted-right target
    if isinstance(batch, TextBatch):
        log_probs = model(batch.tgt_in)  # (batch, T, V)
    else:
        log_probs = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, tgt_len, V)
    # 2) the loss per real target token
    loss = loss_fn(log_probs.flatten(0, 1), batch.tgt_out.flatten())  # (batch * len, V), (batch * len,)
    # 3) backpropagate, clip the gradient norm, update, advance the schedule
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def _evaluate(history: History, model: nn.Module, data, eval_data, eval_batches: int, batch_size: int) -> str:
    """Evaluate once, record it in ``history``; returns the progress bar's text for it."""
    history.eval_steps.append(history.steps)
    history.eval_seconds.append(history.train_seconds)
    if isinstance(eval_data, TextDataset):
        history.eval_loss.append(language_model_loss(model, eval_data, eval_batches, batch_size))
        history.eval_train_loss.append(language_model_loss(model, data, eval_batches, batch_size))
        return f"{history.eval_loss[-1]:.3f}"
    history.eval_accuracy.append(exact_match(model, eval_data))
    return f"{history.eval_accuracy[-1]:.3f}"


def train(
    model: nn.Module,
    data: Seq2SeqDataset | TextDataset,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 64,
    warmup_steps: int | None = None,
    lr_factor: float = 1.0,
    lr: float = 1e-3,
    min_lr: float = 1e-4,
    decay_steps: int | None = None,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.99),
    smoothing: float | None = None,
    clip_norm: float | None = 1.0,
    eval_data: Seq2SeqDataset | TextDataset | None = None,
    eval_every: int | None = None,
    eval_batches: int = 20,
    target_accuracy: float | None = None,
    target_loss: float | None = None,
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
    """Train a sequence-to-sequence model or a decoder-only language model and record what happened.

    The data decides which. A :class:`~transformer_lib.data.Seq2SeqDataset` trains
    ``model(src, tgt_in, src_mask, tgt_mask)`` with teacher forcing, the paper's recipe
    (Adam with :func:`warmup_lr`, label smoothing), shuffled batches of examples, and is
    evaluated by :func:`exact_match`. A :class:`~transformer_lib.data.TextDataset` trains
    ``model(tgt_in)`` to predict the next token, nanoGPT's recipe (AdamW with
    :func:`cosine_lr`, no label smoothing), on random windows of the text, and is evaluated
    by :func:`language_model_loss` on ``eval_data`` and on the training split.

    Stops after ``steps`` optimisation steps or ``epochs`` passes over the data
    (whichever comes first; at least one must be given; a text's windows are drawn at
    random, so it takes ``steps``), after ``time_limit`` seconds of training, or as soon
    as the held-out accuracy reaches ``target_accuracy`` (or the held-out loss falls to
    ``target_loss``) at ``target_checks`` evaluations in a row: more than one guards
    against a lucky check.

    Args:
        model: a :class:`~transformer_lib.transformer.Transformer` (with ``encode``/``decode``
            for evaluation), or a :class:`~transformer_lib.lm.DecoderOnlyModel`.
        data: the training set.
        batch_size: examples (or windows) per step.
        warmup_steps: steps of linear warm-up (default 400 for the paper's schedule, 100
            for the GPT recipe).
        lr_factor: the paper's schedule, :func:`warmup_lr`; ``d_model`` defaults to
            ``model.config.d_model``.
        lr, min_lr, decay_steps, weight_decay, betas: the GPT recipe, :func:`make_adamw`:
            peak and final learning rate, the step at which the cosine reaches ``min_lr``
            (default: ``steps``), AdamW's weight decay (matrices only) and betas.
        smoothing: label smoothing epsilon (default 0.1 for a sequence-to-sequence model,
            0 for a language model, whose loss is PyTorch's ``nn.CrossEntropyLoss``).
        clip_norm: the largest gradient norm (``None``: no clipping).
        eval_data: held-out data of the same kind as ``data``, evaluated every
            ``eval_every`` steps (default: once per epoch; for a language model only at the
            end) and at the end; a language model is evaluated before its first step too.
        eval_batches: a language model's evaluations average ``eval_batches`` random
            batches of ``batch_size`` windows, the same windows each time.
        progress: show a tqdm progress bar (terminal or notebook).
        seed: seeds the order of the batches (or the windows drawn) and ``torch`` (dropout).
        bucket: batch examples of similar length together (less padding, faster steps).
        optimizer, scheduler, history: continue an earlier run (from :func:`make_optimizer`
            or :func:`make_adamw` and a previous :class:`History`, e.g. after
            :func:`load_checkpoint`), or bring another optimizer.

    Returns:
        the :class:`History`.
    """
    language_model = isinstance(data, TextDataset)
    if not language_model and not isinstance(data, Seq2SeqDataset):
        raise TypeError(f"data must be a Seq2SeqDataset or a TextDataset, got {type(data).__name__}")
    if eval_data is not None and type(eval_data) is not type(data):
        kind = type(data).__name__
        raise TypeError(f"eval_data must be a {kind} like data, got {type(eval_data).__name__}")
    if steps is None and epochs is None:
        raise ValueError("steps or epochs must be given, got neither")
    if language_model and steps is None:
        raise ValueError(f"steps must be given for a TextDataset (its windows are drawn at random, it has "
                         f"no epochs), got steps=None and epochs={epochs}")  # fmt: skip
    steps = None if steps is None else _checks.positive_int(steps, "steps")
    epochs = None if epochs is None else _checks.positive_int(epochs, "epochs")
    batch_size = _checks.positive_int(batch_size, "batch_size")
    eval_batches = _checks.positive_int(eval_batches, "eval_batches")
    target = target_loss if language_model else target_accuracy
    if target_accuracy is not None and (eval_data is None or language_model):
        raise ValueError("target_accuracy needs eval_data (the held-out examples) of a Seq2SeqDataset, got "
                         f"{type(eval_data).__name__}")  # fmt: skip
    if target_loss is not None and (eval_data is None or not language_model):
        raise ValueError(f"target_loss needs eval_data (the held-out text) of a TextDataset, got "
                         f"{type(eval_data).__name__}")  # fmt: skip
    target_checks = _checks.positive_int(target_checks, "target_checks")
    if language_model:
        total = steps
        if eval_data is not None and eval_every is None:
            eval_every = steps
    else:
        steps_per_epoch = math.ceil(len(data) / batch_size)
        if eval_data is not None and eval_every is None:
            eval_every = steps_per_epoch
        total = min(x for x in (steps, epochs and epochs * steps_per_epoch) if x)
    if eval_every is not None:
        eval_every = _checks.positive_int(eval_every, "eval_every")
    if optimizer is None and language_model:
        warmup = 100 if warmup_steps is None else warmup_steps
        decay = steps if decay_steps is None else decay_steps
        optimizer, scheduler = make_adamw(model, lr, warmup, decay, min_lr, weight_decay, betas)
    elif optimizer is None:
        if d_model is None:
            d_model = getattr(getattr(model, "config", None), "d_model", None)
            if d_model is None:
                raise ValueError("d_model must be given for a model without config.d_model")
        warmup = 400 if warmup_steps is None else warmup_steps
        optimizer, scheduler = make_optimizer(model, d_model, warmup, lr_factor)
    history = History() if history is None else history
    if language_model:
        loss_fn = nn.CrossEntropyLoss(label_smoothing=_smoothing(0.0 if smoothing is None else smoothing))
    else:
        loss_fn = LabelSmoothingLoss(0.1 if smoothing is None else smoothing, PAD_ID)
    device = _device_of(model)
    torch.manual_seed(seed)

    def batches(epoch: int):
        """One epoch's batches (for a text, every step's) from a ``DataLoader``."""
        if language_model:  # a new seed for a continued run, so it does not see the same windows again
            return data.loader(batch_size, total, seed + history.steps)
        return data.loader(batch_size, shuffle=True, seed=seed + history.steps + epoch, bucket=bucket)

    start_total = time.perf_counter()
    if language_model and eval_data is not None and history.steps == 0:
        _evaluate(history, model, data, eval_data, eval_batches, batch_size)  # the untrained model
    bar = tqdm(total=total, disable=not progress, desc="training", unit="step", leave=True)
    step, epoch, stop = 0, 0, False
    try:
        while not stop:
            for batch in batches(epoch):
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
                    shown = _evaluate(history, model, data, eval_data, eval_batches, batch_size)
                    bar.set_postfix({"loss": f"{loss:.3f}", "val" if language_model else "acc": shown})
                    scores = history.eval_loss if language_model else history.eval_accuracy
                    recent = scores[-target_checks:]
                    if target is not None and len(recent) == target_checks:
                        stop = max(recent) <= target if language_model else min(recent) >= target
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
        _evaluate(history, model, data, eval_data, eval_batches, batch_size)
    model.eval()
    history.total_seconds += time.perf_counter() - start_total
    return history


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

"""Training: one training loop, a training step, and evaluation.

* :func:`train`: one loop for a sequence-to-sequence model on a
  :class:`~transformer_lib.tasks.Seq2SeqDataset` (teacher forcing) and for a decoder-only
  language model on a :class:`~transformer_lib.text.TextDataset` (next-token prediction);
  gradient clipping, a tqdm progress bar that works in a terminal and in a notebook, a
  loss history, held-out evaluation, early stopping and a time limit. The losses and
  learning-rate schedules it uses are in :mod:`transformer_lib.optim`. Read in this order:
  :func:`train_step` (one optimisation step), ``_record_step`` (timed, into the
  :class:`History`), ``_evaluate``, ``_loop`` (the loop that calls them, with the progress
  bar), then :func:`train`, which checks its arguments, picks the recipe and runs the loop.
* :func:`exact_match`: the share of held-out examples decoded exactly right (greedy).
* :func:`language_model_loss`: a language model's mean next-token loss on a text split.

Taught in chapter 11; the language-model parts in the language-modelling chapter.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import _checks
from .data import PAD_ID, Batch
from .decoding import greedy_decode
from .optim import LabelSmoothingLoss, make_adamw, make_optimizer
from .tasks import Seq2SeqDataset
from .text import TextBatch, TextDataset


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
        data: the split, a :class:`~transformer_lib.text.TextDataset`.
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
    forcing; a :class:`~transformer_lib.text.TextBatch` trains a decoder-only language model
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


def _record_step(
    history: History,
    model: nn.Module,
    batch: Batch | TextBatch,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    scheduler,
    clip_norm: float | None,
) -> float:
    """:func:`train_step` on ``batch`` in training mode, timed and recorded in ``history``; returns the loss."""
    model.train()
    tick, cpu_tick = time.perf_counter(), time.process_time()
    loss = train_step(model, batch.to(_device_of(model)), loss_fn, optimizer, scheduler, clip_norm)
    history.train_seconds += time.perf_counter() - tick
    history.train_cpu_seconds += time.process_time() - cpu_tick
    history.losses.append(loss)
    history.lrs.append(optimizer.param_groups[0]["lr"])
    history.tokens += batch.num_tokens
    history.steps += 1
    return loss


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


def _target_reached(scores: list[float], target: float | None, checks: int, at_most: bool) -> bool:
    """Whether the last ``checks`` held-out scores all reached ``target``: at most ``target`` (a
    loss) when ``at_most``, at least ``target`` (an accuracy) otherwise."""
    recent = scores[-checks:]
    if target is None or len(recent) < checks:
        return False
    return max(recent) <= target if at_most else min(recent) >= target


def _batches(data: Seq2SeqDataset | TextDataset, batch_size: int, total: int, seed: int, history: History,
             bucket: bool):  # fmt: skip
    """Every batch of a run, in order: a text's ``total`` batches of random windows, or epoch after
    epoch of shuffled examples. The seeds count the steps already taken, so a continued run does
    not see the same batches again."""
    if isinstance(data, TextDataset):
        yield from data.loader(batch_size, total, seed + history.steps)
        return
    epoch = 0
    while True:
        yield from data.loader(batch_size, shuffle=True, seed=seed + history.steps + epoch, bucket=bucket)
        epoch += 1


def _loop(
    batches,
    step: Callable[[object], float],
    evaluate: Callable[[], str] | None,
    history: History,
    *,
    total: int,
    eval_every: int | None,
    stop_at_target: Callable[[], bool],
    time_limit: float | None,
    bar,
    score_name: str,
) -> None:
    """Step through ``batches`` until ``total`` steps, the target or the time limit; evaluate every
    ``eval_every`` steps; show the loss (and the held-out score) on the progress ``bar``."""
    for taken, batch in enumerate(batches, start=1):
        loss = step(batch)
        bar.update(1)
        if evaluate is not None and taken % eval_every == 0:
            bar.set_postfix({"loss": f"{loss:.3f}", score_name: evaluate()})
            if stop_at_target():
                break
        elif taken % 20 == 0:
            bar.set_postfix(loss=f"{loss:.3f}")
        if taken >= total or (time_limit is not None and history.train_seconds >= time_limit):
            break


def _end_bar_early(bar) -> None:
    """End a progress bar at the steps taken, so a run that stopped early (target reached or time
    limit) does not look like a broken one: a half-full bar turns red in a notebook when it closes.
    ``reset(total=...)`` is tqdm's way to give a bar a new total (a notebook's widget too); the
    count and the clock it restarts are put back, so the bar still shows the run's time and rate."""
    taken, started = bar.n, bar.start_t
    bar.reset(total=taken)
    bar.n, bar.start_t = taken, started
    bar.set_description("training (stopped early)")  # redraws the bar


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

    The data decides which. A :class:`~transformer_lib.tasks.Seq2SeqDataset` trains
    ``model(src, tgt_in, src_mask, tgt_mask)`` with teacher forcing, the paper's recipe
    (Adam with :func:`~transformer_lib.optim.warmup_lr`, label smoothing), shuffled batches
    of examples, and is evaluated by :func:`exact_match`. A
    :class:`~transformer_lib.text.TextDataset` trains ``model(tgt_in)`` to predict the next
    token, nanoGPT's recipe (AdamW with :func:`~transformer_lib.optim.cosine_lr`, no label
    smoothing), on random windows of the text, and is evaluated by
    :func:`language_model_loss` on ``eval_data`` and on the training split.

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
        lr_factor: the paper's schedule, :func:`~transformer_lib.optim.warmup_lr`;
            ``d_model`` defaults to ``model.config.d_model``.
        lr, min_lr, decay_steps, weight_decay, betas: the GPT recipe,
            :func:`~transformer_lib.optim.make_adamw`: peak and final learning rate, the
            step at which the cosine reaches ``min_lr`` (default: ``steps``), AdamW's
            weight decay (matrices only) and betas.
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
        optimizer, scheduler, history: continue an earlier run (from
            :func:`~transformer_lib.optim.make_optimizer` or
            :func:`~transformer_lib.optim.make_adamw` and a previous :class:`History`, e.g.
            after :func:`~transformer_lib.checkpoints.load_checkpoint`), or bring another
            optimizer.

    Returns:
        the :class:`History`.
    """
    language_model = isinstance(data, TextDataset)
    steps, epochs, batch_size, eval_batches, target_checks = _check_arguments(
        data, eval_data, steps, epochs, batch_size, eval_batches, target_accuracy, target_loss, target_checks
    )
    # the run's length in steps, and evaluation once per epoch (a text's: at the end) by default
    steps_per_epoch = steps if language_model else math.ceil(len(data) / batch_size)
    total = steps if language_model else min(x for x in (steps, epochs and epochs * steps_per_epoch) if x)
    if eval_data is not None and eval_every is None:
        eval_every = steps_per_epoch
    if eval_every is not None:
        eval_every = _checks.positive_int(eval_every, "eval_every")
    if optimizer is None:
        optimizer, scheduler = _default_optimizer(
            model, language_model, steps, warmup_steps, lr_factor, d_model, lr, min_lr, decay_steps, weight_decay, betas
        )
    history = History() if history is None else history
    if language_model:
        eps = _checks.probability(0.0 if smoothing is None else smoothing, "smoothing")
        loss_fn = nn.CrossEntropyLoss(label_smoothing=eps)
    else:
        loss_fn = LabelSmoothingLoss(0.1 if smoothing is None else smoothing, PAD_ID)
    torch.manual_seed(seed)

    step = functools.partial(_record_step, history, model, loss_fn=loss_fn, optimizer=optimizer,
                             scheduler=scheduler, clip_norm=clip_norm)  # fmt: skip
    evaluate = None
    if eval_data is not None:
        evaluate = functools.partial(_evaluate, history, model, data, eval_data, eval_batches, batch_size)
    scores = history.eval_loss if language_model else history.eval_accuracy
    target = target_loss if language_model else target_accuracy
    start_total = time.perf_counter()
    if language_model and evaluate is not None and history.steps == 0:
        evaluate()  # the untrained model
    bar = tqdm(total=total, disable=not progress, desc="training", unit="step", leave=True)
    try:
        _loop(
            _batches(data, batch_size, total, seed, history, bucket),
            step,
            evaluate,
            history,
            total=total,
            eval_every=eval_every,
            stop_at_target=functools.partial(_target_reached, scores, target, target_checks, language_model),
            time_limit=time_limit,
            bar=bar,
            score_name="val" if language_model else "acc",
        )
        if not bar.disable and bar.n < total:
            _end_bar_early(bar)
    finally:
        bar.close()
    if evaluate is not None and (not history.eval_steps or history.eval_steps[-1] != history.steps):
        evaluate()
    model.eval()
    history.total_seconds += time.perf_counter() - start_total
    return history


def _default_optimizer(
    model: nn.Module,
    language_model: bool,
    steps: int | None,
    warmup_steps: int | None,
    lr_factor: float,
    d_model: int | None,
    lr: float,
    min_lr: float,
    decay_steps: int | None,
    weight_decay: float,
    betas: tuple[float, float],
):
    """The optimizer and schedule of :func:`train`'s recipe: nanoGPT's AdamW with a cosine for a
    language model, the paper's Adam with warm-up otherwise."""
    if language_model:
        warmup = 100 if warmup_steps is None else warmup_steps
        decay = steps if decay_steps is None else decay_steps
        return make_adamw(model, lr, warmup, decay, min_lr, weight_decay, betas)
    if d_model is None:
        d_model = getattr(getattr(model, "config", None), "d_model", None)
        if d_model is None:
            raise ValueError("d_model must be given for a model without config.d_model")
    warmup = 400 if warmup_steps is None else warmup_steps
    return make_optimizer(model, d_model, warmup, lr_factor)


def _check_arguments(data, eval_data, steps, epochs, batch_size, eval_batches, target_accuracy, target_loss,
                     target_checks):  # fmt: skip
    """:func:`train`'s checks of its data and counts; returns the counts checked."""
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
    if target_accuracy is not None and (eval_data is None or language_model):
        raise ValueError("target_accuracy needs eval_data (the held-out examples) of a Seq2SeqDataset, got "
                         f"{type(eval_data).__name__}")  # fmt: skip
    if target_loss is not None and (eval_data is None or not language_model):
        raise ValueError(f"target_loss needs eval_data (the held-out text) of a TextDataset, got "
                         f"{type(eval_data).__name__}")  # fmt: skip
    target_checks = _checks.positive_int(target_checks, "target_checks")
    return steps, epochs, batch_size, eval_batches, target_checks

"""Training benchmark: the Transformer on two toy tasks, to 99% held-out exact match, ours against nn.Transformer.

Tasks (``transformer_lib.tasks``), each split into training, validation and test sets that
share no source sequence:

- ``reverse``: sequences of length 1 to 16 over 10 symbols, reversed (in the style of the
  UvA deep-learning tutorial, here as sequence-to-sequence with variable lengths);
- ``numbers``: numbers up to 99,999 written in English words into digits (different
  vocabularies and lengths on the two sides, a small translation task).

The model is the ``"tiny"`` preset (d_model 32, one encoder and one decoder layer, d_ff 64,
about 24,000 parameters) with learned positions and no dropout; for reversing, 4 heads of
width 8 instead of 2 of width 16, and batches of 128 sequences instead of 32 (the same
parameter count: in our runs this way reached 99.5% in 1,250 to 1,550 steps, against a
plateau near 98% that the 2-head model at 32 sequences a batch held for thousands of
steps). Learned positions rather than sinusoidal ones: the paper found the two about
equal, and at d_model 32 the sinusoidal vectors of neighbouring positions are close,
which slows down learning the exact positions that reversing needs (in our runs,
sinusoidal positions took about twice as many steps). For each task the same loop
(``tl.train``: Adam(0.9, 0.98, 1e-9) with the warm-up schedule, label smoothing 0.1,
gradient clipping) trains

- ``ours``: ``tl.Transformer``;
- ``pytorch``: a model of identical size whose encoder and decoder stacks are an
  ``nn.Transformer`` (``tl.to_torch(ours)``, so the same initial weights), with the same
  embeddings and output layer around it,

each until the validation exact-match accuracy (greedy decoding, checked every
``EVAL_EVERY`` steps) has reached ``STOP_ACCURACY`` (99.5%, a margin over the goal) at
``STOP_CHECKS`` checks in a row (a small model's accuracy jitters from check to check, and
stopping at one lucky check over-estimates it), or the training time reaches
``TIME_LIMIT`` seconds; then the test set gives the accuracy reported. Goals: both tasks
at >= 99% test exact match within 60 s of training on a 2-core CPU; ours / PyTorch wall
time per training step at most 1.10, with both runs at the accuracy goal.

Timing: training time counts the optimisation steps only (not the evaluations). The goal
ratio is ``ratio per step``: ours / PyTorch wall time for the same work, a training step
of the same loop on the same batches, averaged over the two runs above, each of which
reached the accuracy goal. The time to reach the goal is printed too (``ratio to goal``),
but it is not a measure of code speed: the two runs start from the same weights and see
the same batches, yet rounding differs, so their paths drift apart and the number of
steps to 99.5% varies from run to run by hundreds of steps whichever code runs them (in
our runs with seeds 0-2: 1,250 to 1,550 steps on ``reverse`` and 950 to 2,200 on
``numbers``, for either model; with clipping off as well, the outputs of the two models
on the same inputs still part after 100 to 200 steps). Pass ``--seeds N`` to repeat
everything with N seeds and compare the total times to goal.
A third ratio, ``ratio per step, alternating``, is the median time of one training step
on the same batches, timed with ``torch.utils.benchmark.Timer.blocked_autorange`` in rounds
that alternate the two models (ours, theirs, theirs, ours, ...: ``run.interleaved``), so
that background load hits both alike; ``torch.utils.benchmark.Compare`` prints the two
medians side by side. Both models use the machine's two cores
(``torch.set_num_threads(2)``; with one thread a ``reverse`` step takes about 1.4 times
as long). Processor (CPU) times are printed too.

Run on its own (``python benchmarks/bench_training.py``) or through ``benchmarks/run.py``,
which calls :func:`run`.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils import benchmark

import transformer_lib as tl

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from run import format_table, interleaved  # noqa: E402  (benchmarks/run.py, beside this file)

GOAL_ACCURACY = 0.99
STOP_ACCURACY = 0.995  # stop on validation a little above the goal, so the test set clears it too
STOP_CHECKS = 2  # ... at this many checks in a row: the accuracy of a small model jitters from check to check
GOAL_SECONDS = 60.0
GOAL_RATIO = 1.10
TIME_LIMIT = 90.0  # stop a run that has not reached the goal after this much training
EVAL_EVERY = 50
NUM_VALID = NUM_TEST = 1000
STEP_ROUNDS = 6  # alternating blocked_autorange rounds of the step timing, per model
STEP_MIN_RUN_TIME = 0.1  # seconds each round measures (after sizing its block)

#: task -> (data options, config overrides of the "tiny" preset, training options)
MODEL = dict(positional="learned", max_len=32, dropout=0.0)
TRAINING = dict(batch_size=32, warmup_steps=100, lr_factor=0.5, smoothing=0.1)
TASKS: dict[str, tuple[dict, dict, dict]] = {
    "reverse": (dict(num_train=20_000, min_len=1, max_len=16, num_symbols=10), dict(MODEL, num_heads=4),
                dict(TRAINING, batch_size=128)),
    "numbers": (dict(num_train=30_000, max_value=99_999), MODEL, TRAINING),
}


class TorchSeq2Seq(nn.Module):
    """Our embeddings and output layer around PyTorch's ``nn.Transformer`` stacks.

    Built from one of our models (``tl.to_torch`` copies the stacks' weights), so both start
    from the same weights; it offers the same ``forward``/``encode``/``decode`` as
    ``tl.Transformer`` and takes our masks, turning them into PyTorch's (True = blocked).
    """

    def __init__(self, ours: tl.Transformer):
        super().__init__()
        twin = copy.deepcopy(ours)  # keeps the weight tying of embeddings and generator
        self.config = ours.config
        self.src_embed = twin.encoder.embedding
        self.tgt_embed = twin.decoder.embedding
        self.generator = twin.generator
        self.transformer = tl.to_torch(ours)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        src_pad = ~src_mask[:, 0, 0, :]  # (batch, src_len): True at pads
        return self.transformer.encoder(self.src_embed(src), src_key_padding_mask=src_pad)

    def decode(self, tgt, memory, src_mask, tgt_mask) -> torch.Tensor:
        t = tgt.shape[1]
        causal = ~tl.causal_mask(t, device=tgt.device)  # (t, t): True above the diagonal
        out = self.transformer.decoder(
            self.tgt_embed(tgt), memory, tgt_mask=causal, tgt_is_causal=True,
            tgt_key_padding_mask=tgt == tl.data.PAD_ID, memory_key_padding_mask=~src_mask[:, 0, 0, :],
        )  # fmt: skip
        return self.generator(out)

    def forward(self, src, tgt, src_mask, tgt_mask) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)


def build(task: str, seed: int = 0):
    """The task's data (train, validation, test: no source in two of them) and the two models."""
    data_options, overrides, _ = TASKS[task]
    data_options = dict(data_options)
    num_train = data_options.pop("num_train")
    train_data, valid_data = tl.make_splits(task, num_train, NUM_VALID, seed=seed, **data_options)
    seen = [s for s, _ in train_data.pairs + valid_data.pairs]
    test_data = tl.make_task(task, NUM_TEST, seed=seed + 7, exclude=seen, **data_options)
    config = tl.TransformerConfig.preset(
        "tiny", src_vocab_size=len(train_data.src_vocab), tgt_vocab_size=len(train_data.tgt_vocab), **overrides
    )
    torch.manual_seed(seed)
    ours = tl.Transformer(config)
    theirs = TorchSeq2Seq(ours)
    return train_data, valid_data, test_data, ours, theirs


def _check_same(ours: nn.Module, theirs: nn.Module, data) -> float:
    """Both models compute the same log-probabilities before anything is timed; returns the max difference."""
    batch = next(data.batches(64, shuffle=False))
    ours.eval(), theirs.eval()
    with torch.no_grad():
        a = ours(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        b = theirs(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    real = batch.tgt_out != tl.data.PAD_ID
    diff = (a - b)[real].abs().max().item()
    assert diff < 1e-4, f"the two models disagree by {diff}"
    return diff


def step_ratio(ours: nn.Module, theirs: nn.Module, data, batch_size: int, rounds: int = STEP_ROUNDS,
               min_run_time: float = STEP_MIN_RUN_TIME, threads: int = 2, label: str = "") -> tuple[float, float]:
    """Median seconds of one training step (the same batches, in the same order), the two models alternating.

    Each model trains a copy of itself (so the runs to the goal start from the untouched
    weights); ``torch.utils.benchmark.Compare`` prints the two medians.
    """
    models = {"ours": copy.deepcopy(ours), "pytorch": copy.deepcopy(theirs)}
    d_model = ours.config.d_model
    batches = list(data.batches(batch_size, shuffle=True, seed=1))

    def stepper(model: nn.Module) -> Callable[[], None]:
        optimizer, scheduler = tl.make_optimizer(model.train(), d_model, warmup_steps=100)
        loss_fn = tl.LabelSmoothingLoss(0.1)
        stream = itertools.cycle(batches)  # each model sees the batches in the same order

        def step() -> None:
            tl.training.train_step(model, next(stream), loss_fn, optimizer, scheduler)

        return step

    timers = {
        name: benchmark.Timer("step()", globals={"step": stepper(model)}, label="training step",
                              sub_label=label, description=name, num_threads=threads)
        for name, model in models.items()
    }  # fmt: skip
    measured = interleaved(timers, rounds, min_run_time)
    benchmark.Compare(list(measured.values())).print()
    return measured["ours"].median, measured["pytorch"].median


def train_to_goal(model: nn.Module, train_data, valid_data, options: dict, progress: bool, seed: int = 0) -> tl.History:
    """Train until the validation exact match reaches STOP_ACCURACY (checked every EVAL_EVERY steps)."""
    return tl.train(
        model, train_data, steps=100_000, eval_data=valid_data, eval_every=EVAL_EVERY,
        target_accuracy=STOP_ACCURACY, target_checks=STOP_CHECKS, time_limit=TIME_LIMIT, progress=progress,
        seed=seed, **options,
    )  # fmt: skip


def reached(h: tl.History, test_accuracy: float) -> bool:
    """Did the run reach the accuracy goal (on validation and test) within the time goal?"""
    return min(h.final_accuracy, test_accuracy) >= GOAL_ACCURACY and h.train_seconds <= GOAL_SECONDS


def _run_row(task: str, seed: int, name: str, parameters: int, h: tl.History, test_accuracy: float) -> dict:
    return {
        "task": task,
        "seed": seed,
        "model": name,
        "parameters": parameters,
        "steps": h.steps,
        "valid exact match": f"{h.final_accuracy:.3f}",
        "test exact match": f"{test_accuracy:.3f}",
        "train wall s": f"{h.train_seconds:.1f}",
        "train cpu s": f"{h.train_cpu_seconds:.1f}",
        "ms/step": f"{1000 * h.train_seconds / h.steps:.1f}",
        "tokens/s": f"{h.tokens_per_second:.0f}",
        "goal": "met" if reached(h, test_accuracy) else "NOT met",
    }


def _ratios(ours: list[tl.History], theirs: list[tl.History], accurate: bool) -> dict:
    """Ours / PyTorch: per step (the goal ratio) and to the goal, over the given runs."""
    def per_step(hs):
        return sum(h.train_seconds for h in hs) / sum(h.steps for h in hs)

    ratio = per_step(ours) / per_step(theirs)
    return {
        "ratio per step": f"{ratio:.2f}",
        "ratio goal": "met" if ratio <= GOAL_RATIO and accurate else "NOT met",
        "ratio to goal": f"{sum(h.train_seconds for h in ours) / sum(h.train_seconds for h in theirs):.2f}",
    }


def run(tasks: list[str] | None = None, threads: int = 2, progress: bool = False, seeds: int = 1) -> list[dict]:
    """Train both models on every task (with seeds 0 .. seeds-1); one row per run, ratios on PyTorch's rows.

    With more than one seed, a last row per task totals the runs of each model.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # PyTorch's eval fast path
    try:
        for task in tasks or list(TASKS):
            options = TASKS[task][2]
            histories: dict[str, list[tl.History]] = {"ours": [], "pytorch": []}
            accurate = True
            for seed in range(seeds):
                train_data, valid_data, test_data, ours, theirs = build(task, seed)
                _check_same(ours, theirs, test_data)
                seed_ok = True  # both models of this seed reached the accuracy goal
                if seed == 0:
                    t_step_ours, t_step_torch = step_ratio(
                        ours, theirs, train_data, options["batch_size"], STEP_ROUNDS, STEP_MIN_RUN_TIME,
                        threads, label=task,
                    )
                for name, model in (("ours", ours), ("pytorch", theirs)):
                    h = train_to_goal(model, train_data, valid_data, options, progress, seed)
                    test_accuracy = tl.exact_match(model, test_data)
                    seed_ok &= min(h.final_accuracy, test_accuracy) >= GOAL_ACCURACY
                    histories[name].append(h)
                    row = _run_row(task, seed, name, tl.count_parameters(ours), h, test_accuracy)
                    if name == "pytorch":
                        row.update(_ratios(histories["ours"][-1:], [h], seed_ok))
                        if seed == 0:
                            row["ratio per step, alternating"] = f"{t_step_ours / t_step_torch:.2f}"
                    rows.append(row)
                accurate &= seed_ok
            if seeds > 1:
                for name, hs in histories.items():
                    row = {"task": task, "seed": f"0-{seeds - 1}", "model": f"{name}, total",
                           "steps": sum(h.steps for h in hs),
                           "train wall s": f"{sum(h.train_seconds for h in hs):.1f}",
                           "train cpu s": f"{sum(h.train_cpu_seconds for h in hs):.1f}"}  # fmt: skip
                    if name == "pytorch":
                        row.update(_ratios(histories["ours"], hs, accurate))
                    rows.append(row)
    finally:
        torch.set_num_threads(previous)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", choices=[[], *TASKS], help="tasks to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=1, help="repeat with seeds 0 .. N-1 and total the runs")
    parser.add_argument("--progress", action="store_true", help="show tqdm progress bars")
    args = parser.parse_args()
    print(format_table(run(args.tasks or None, args.threads, args.progress, args.seeds)))
    print(f"goals: held-out exact match >= {GOAL_ACCURACY:.0%} within {GOAL_SECONDS:.0f} s of training; "
          f"ours / PyTorch wall time per training step <= {GOAL_RATIO}, both at the accuracy goal")  # fmt: skip


if __name__ == "__main__":
    main()

"""Generation with and without the key-value cache, and ours against transformers' GPT-2 ``generate``.

The model: GPT-style, 4 layers, 4 heads, d_model 128, d_ff 512, a 1,024-token vocabulary,
learned positions up to 512, dropout 0. It is built as a ``GPT2LMHeadModel`` and converted
with :func:`transformer_lib.from_gpt2`, so both hold the same weights. Greedy continuation
of an 8-token prompt by 32, 64, 128 and 256 tokens, batch 1 and batch 8, three ways:

- ``no_cache``: ``tl.generate(..., use_cache=False)``: every step runs the whole sequence
  again, so step t costs about t tokens' work and n new tokens about n^2 / 2;
- ``cache``: ``tl.generate`` as it is by default: the prompt once, then one token per
  step, the earlier keys and values read from the cache: about n tokens' work;
- ``transformers``: ``GPT2LMHeadModel.generate`` (greedy, its own key-value cache).

Before anything is timed the three continuations are checked identical. Columns:
``speed_up`` is ``no_cache / cache`` (goal: at least 3 at 256 tokens); ``ours/transformers``
is ``cache / transformers`` (below 1, ours is faster). How the cost grows with the length
``n``: ``x_per_doubling`` is the time at ``n`` over the time at ``n / 2`` (4 for a cost in
``n^2``, 2 for a cost in ``n``), and one ``growth`` row per batch gives the exponent ``k``
of the least-squares fit ``time ~ n^k`` over the four lengths, and over the last doubling
alone. A fixed cost per step (Python, the checks, small matrix products) grows like ``n``
in both ways, so the uncached exponent approaches 2 only once the sequence work dominates:
at batch 8 sooner than at batch 1.

Timing: ``torch.utils.benchmark.Timer(..., num_threads=threads).blocked_autorange``, in
rounds that alternate the three (``run.interleaved``); each figure is the median over every
block of every round. ``torch.utils.benchmark.Compare`` prints the times side by side. The
clock is the process's processor time (``time.process_time``, ``clock="process"``, the
default), not the wall clock: on a machine shared with other jobs the wall time of a
one-thread run is its work plus however long the scheduler gave the cores to others, which
swamps the ratios here (a run takes up to tens of seconds, long enough for the load to
change within it), while the processor time counts only this process's work. With more
than one thread it adds up every thread's time; ``clock="wall"`` times the wall clock.
The uncached 256-token batch of 8 takes seconds a run, so the whole benchmark takes minutes.

Run on its own (``python benchmarks/bench_generation.py [--rounds N] [--threads T]``) or
through ``benchmarks/run.py``, which calls :func:`run`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils import benchmark
from transformers import GPT2Config, GPT2LMHeadModel

import transformer_lib as tl

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from run import argument_parser, format_table, interleaved, print_comparison  # noqa: E402  (benchmarks/run.py, beside this file)

GOAL = 3.0  # speed-up of the cache at the longest length
MODEL = dict(n_layer=4, n_head=4, n_embd=128, n_inner=512, vocab_size=1024, n_positions=512)
PROMPT = 8
NEW_TOKENS = (32, 64, 128, 256)
BATCHES = (1, 8)
ROUNDS = 2
MIN_RUN_TIME = 0.5  # seconds of repeats per round
WAYS = ("no_cache", "cache", "transformers")
CLOCKS = {"process": time.process_time, "wall": time.perf_counter}


def build(model: dict | None = None, seed: int = 0) -> tuple[tl.DecoderOnlyModel, GPT2LMHeadModel]:
    """Ours and transformers' GPT-2 with the same weights, in evaluation mode, dropout 0."""
    fields = dict(MODEL if model is None else model, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                  bos_token_id=None, eos_token_id=None)  # fmt: skip
    torch.manual_seed(seed)
    theirs = GPT2LMHeadModel(GPT2Config(**fields)).eval()
    return tl.from_gpt2(theirs).eval(), theirs


def generate(way: str, ours: tl.DecoderOnlyModel, theirs: GPT2LMHeadModel, prompt: torch.Tensor, new: int):
    """Greedy continuation of ``prompt`` ``(batch, t)`` by ``new`` tokens, ``(batch, t + new)``, one of ``WAYS``."""
    with torch.no_grad():
        if way == "transformers":
            return theirs.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                   max_new_tokens=new, min_new_tokens=new, pad_token_id=0, use_cache=True)  # fmt: skip
        return tl.generate(ours, prompt, new, greedy=True, use_cache=way == "cache")


def exponent(lengths: list[int], seconds: list[float]) -> float:
    """``k`` of the least-squares fit ``log(seconds) = k log(length) + c``: 1 for a linear cost, 2 for a square."""
    return float(np.polyfit(np.log(lengths), np.log(seconds), 1)[0])


def _timer(step, label: str, sub_label: str, who: str, threads: int, clock: str) -> benchmark.Timer:
    return benchmark.Timer("step()", globals={"step": step}, label=label, sub_label=sub_label,
                           description=who, num_threads=threads, timer=CLOCKS[clock])  # fmt: skip


def run(rounds: int = ROUNDS, threads: int = 1, new_tokens: tuple[int, ...] = NEW_TOKENS,
        batches: tuple[int, ...] = BATCHES, model: dict | None = None, prompt_len: int = PROMPT,
        min_run_time: float = MIN_RUN_TIME, compare: bool = True, clock: str = "process") -> list[dict]:  # fmt: skip
    """Time the three ways at each batch size and length; one row each, then one ``growth`` row per batch.

    ``new_tokens`` should double from one to the next for ``x_per_doubling`` to mean what
    it says. ``compare`` prints ``torch.utils.benchmark.Compare``'s table of the medians too.
    ``clock``: ``"process"`` (processor time, the default) or ``"wall"``.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the checks and the set-up; each Timer sets it for its statement
    rows, measurements = [], []
    try:
        ours, theirs = build(model)
        vocab, positions = theirs.config.vocab_size, theirs.config.n_positions
        if prompt_len + max(new_tokens) > positions:
            raise ValueError(f"prompt_len + new_tokens ({prompt_len} + {max(new_tokens)}) must fit the model's "
                             f"{positions} positions")
        g = torch.Generator().manual_seed(0)
        for batch in batches:
            prompt = torch.randint(0, vocab, (batch, prompt_len), generator=g)
            medians: dict[str, list[float]] = {way: [] for way in WAYS}
            for new in new_tokens:
                outputs = {way: generate(way, ours, theirs, prompt, new) for way in WAYS}
                for way in WAYS[1:]:
                    assert torch.equal(outputs[way], outputs["no_cache"]), f"{way} differs, batch {batch}, {new} tokens"
                size = f"{batch} x ({prompt_len} + {new})"
                timers = {way: _timer(lambda way=way, new=new, prompt=prompt: generate(way, ours, theirs, prompt, new),
                                      f"greedy generation ({clock} time, threads={threads})", size, way, threads,
                                      clock)
                          for way in WAYS}  # fmt: skip
                measured = interleaved(timers, rounds, min_run_time)
                measurements += list(measured.values())
                for way in WAYS:
                    medians[way].append(measured[way].median)
                rows.append(_row(batch, new, medians, threads, last=new == max(new_tokens)) | {"clock": clock})
            if len(new_tokens) > 1:
                rows.append(_growth_row(batch, list(new_tokens), medians))
    finally:
        torch.set_num_threads(previous)
    if compare:
        print_comparison(measurements)
    return rows


def _row(batch: int, new: int, medians: dict[str, list[float]], threads: int, last: bool) -> dict:
    """The row of the latest length: times, speed-up, growth since the previous length, ours / transformers.

    ``last``: the longest length, where the speed-up has its goal.
    """
    t = {way: times[-1] for way, times in medians.items()}

    def per_doubling(way: str) -> float | str:
        times = medians[way]
        return round(times[-1] / times[-2], 2) if len(times) > 1 else ""

    speed_up = t["no_cache"] / t["cache"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return {
        "benchmark": "greedy generation",
        "batch": batch,
        "new_tokens": new,
        "no_cache_ms": round(t["no_cache"] * 1e3, 3),
        "cache_ms": round(t["cache"] * 1e3, 3),
        "speed_up": round(speed_up, 2),
        "no_cache_x_per_doubling": per_doubling("no_cache"),
        "cache_x_per_doubling": per_doubling("cache"),
        "transformers_ms": round(t["transformers"] * 1e3, 3),
        "ours/transformers": round(t["cache"] / t["transformers"], 3),
        "goal": GOAL if last else "",
        "met": speed_up >= GOAL if last else "",
        "threads": threads,
        "load_avg_1min": round(load, 1),
    }


def _growth_row(batch: int, lengths: list[int], medians: dict[str, list[float]]) -> dict:
    """The fitted exponent of time against length, over every length and over the last doubling."""
    row: dict = {"benchmark": "growth (time ~ n^k)", "batch": batch, "new_tokens": f"{lengths[0]}-{lengths[-1]}"}
    for way in WAYS:
        row[f"{way}_k"] = round(exponent(lengths, medians[way]), 2)
        row[f"{way}_k_last_doubling"] = round(exponent(lengths[-2:], medians[way][-2:]), 2)
    return row


if __name__ == "__main__":
    parser = argument_parser(__doc__, ROUNDS, threads=1)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="process", help="processor or wall time")
    args = parser.parse_args()
    print(format_table(run(rounds=args.rounds, threads=args.threads, clock=args.clock)))

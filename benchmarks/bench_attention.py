"""Multi-head attention, forward plus backward: our MultiHeadAttention against nn.MultiheadAttention.

Self-attention in training mode with dropout 0, on the CPU, at three sizes. PyTorch's module
gets exactly our weights (``tl.to_torch``) and both run on the same input, so the only
difference is the code. Two paths are compared:

- ``fused``: ours with ``need_weights=False`` (PyTorch's fused kernel) against PyTorch's
  module with ``need_weights=False``. Goal: ours / PyTorch at most 1.10.
- ``explicit``: ours with ``need_weights=True`` (the matmul-softmax path the chapters teach,
  keeping every head's weights) against PyTorch's module with ``need_weights=True,
  average_attn_weights=False`` (which also materialises the per-head weights).

Timing: every implementation is warmed up, then the repetitions of the two implementations
alternate (ours, theirs, theirs, ours, ...) so that background load hits both alike; each
figure is the median over the repetitions of the time of one step (``ratio`` compares the
medians; ``ratio_of_minima`` compares the fastest repetitions, which background load disturbs
least). The number of threads is set once for the whole run (``torch.set_num_threads``); other
work on the machine still adds noise (the 1-minute load average is printed with each size),
so read the ratios, not the absolute times.

Run on its own (``python benchmarks/bench_attention.py [--repeats N] [--threads T]``) or
through ``benchmarks/run.py``, which calls :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

import transformer_lib as tl

#: (name, batch, seq, d_model, num_heads); "base" is the size the goal is stated for.
SIZES = [
    ("small", 8, 64, 128, 4),
    ("base", 32, 128, 256, 8),
    ("large", 32, 256, 512, 8),
]
GOAL = 1.10  # fused path: ours / PyTorch at most this
TARGET_SAMPLE_S = 0.05  # each timed sample runs enough steps to last about this long


def _step_fn(module: nn.Module, x: torch.Tensor, grad_out: torch.Tensor, ours: bool, need_weights: bool
             ) -> Callable[[], None]:
    """One training step's worth of attention: forward, then backward into weights and input."""
    params = list(module.parameters())

    def step() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        if ours:
            out = module(x, x, x, need_weights=need_weights)
        else:
            out, _ = module(x, x, x, need_weights=need_weights, average_attn_weights=False)
        out.backward(grad_out)

    return step


def _time(step: Callable[[], None], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        step()
    return (time.perf_counter() - start) / inner


def _check_same(ours: nn.Module, theirs: nn.Module, x: torch.Tensor) -> None:
    """Both modules compute the same thing before anything is timed."""
    with torch.no_grad():
        for need_weights in (False, True):
            a = ours(x, x, x, need_weights=need_weights)
            b, _ = theirs(x, x, x, need_weights=need_weights, average_attn_weights=False)
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def bench_size(batch: int, seq: int, d_model: int, num_heads: int, repeats: int, warmup: int = 3
               ) -> dict[str, dict[str, list[float]]]:
    """Seconds per step, {path: {"ours": samples, "torch": samples}}, for one size."""
    torch.manual_seed(0)
    ours = tl.MultiHeadAttention(d_model, num_heads, dropout=0.0).train()
    theirs = tl.to_torch(ours).train()
    x = torch.randn(batch, seq, d_model, requires_grad=True)
    grad_out = torch.randn(batch, seq, d_model)
    _check_same(ours, theirs, x.detach())

    results = {}
    for path, need_weights in (("fused", False), ("explicit", True)):
        steps = {
            "ours": _step_fn(ours, x, grad_out, ours=True, need_weights=need_weights),
            "torch": _step_fn(theirs, x, grad_out, ours=False, need_weights=need_weights),
        }
        for step in steps.values():
            for _ in range(warmup):
                step()
        one = min(_time(step, 1) for step in steps.values())
        inner = max(1, round(TARGET_SAMPLE_S / one))
        samples: dict[str, list[float]] = {name: [] for name in steps}
        for r in range(repeats):
            order = ("ours", "torch") if r % 2 == 0 else ("torch", "ours")
            for name in order:
                samples[name].append(_time(steps[name], inner))
        results[path] = samples
    return results


def run(repeats: int = 15, threads: int = 2, sizes: list[tuple] | None = None) -> list[dict]:
    """Time every size and both paths; one row per (size, path) with the ratio ours / PyTorch."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    try:
        for name, batch, seq, d_model, num_heads in sizes or SIZES:
            timings = bench_size(batch, seq, d_model, num_heads, repeats)
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            for path, samples in timings.items():
                t_ours, t_torch = statistics.median(samples["ours"]), statistics.median(samples["torch"])
                ratio = t_ours / t_torch
                rows.append({
                    "benchmark": f"MultiHeadAttention fwd+bwd, {path}",
                    "size": name,
                    "batch x seq x d_model / heads": f"{batch} x {seq} x {d_model} / {num_heads}",
                    "ours_ms": round(t_ours * 1e3, 2),
                    "pytorch_ms": round(t_torch * 1e3, 2),
                    "ratio": round(ratio, 3),
                    "ratio_of_minima": round(min(samples["ours"]) / min(samples["torch"]), 3),
                    "goal": GOAL if path == "fused" else "",
                    "met": (ratio <= GOAL) if path == "fused" else "",
                    "threads": threads,
                    "load_avg_1min": round(load, 1),
                })
    finally:
        torch.set_num_threads(previous)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed samples per implementation and path")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads for the whole run")
    args = parser.parse_args()
    from run import format_table  # benchmarks/run.py, beside this file

    print(format_table(run(repeats=args.repeats, threads=args.threads)))

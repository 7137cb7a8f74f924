"""Multi-head attention: our MultiHeadAttention against nn.MultiheadAttention, without and with masks.

Self-attention on the CPU, at three sizes, with dropout 0. PyTorch's module gets exactly our
weights (``tl.to_torch``) and both run on the same input with the same mask, each given it
in its own convention, so the only difference is the code:

- ``none``: no mask;
- ``causal``: ours gets ``tl.causal_mask(seq)`` (``True`` = may attend); PyTorch gets its
  negation as ``attn_mask`` (``True`` = blocked) with ``is_causal=True``, as
  ``nn.TransformerDecoder`` passes it;
- ``padding``: a batch whose lengths go evenly from ``seq`` down to ``seq / 4``, padded with
  id 0; ours gets ``tl.padding_mask(tokens, 0)``, ``(batch, 1, 1, seq)``, and PyTorch
  ``key_padding_mask=tokens == 0``, ``(batch, seq)``.

Two modes: ``forward`` (evaluation mode under ``torch.no_grad()``, where PyTorch takes its
inference fast path) and ``fwd+bwd`` (training mode, forward then backward into the weights
and the input, as in a training step). Two paths:

- ``fused``: ours with ``need_weights=False`` (PyTorch's fused kernel) against PyTorch's
  module with ``need_weights=False``, every mask and both modes. Goal: ours / PyTorch at
  most 1.10 in every row.
- ``explicit``: ours with ``need_weights=True`` (the matmul-softmax path the chapters teach,
  keeping every head's weights) against PyTorch's module with ``need_weights=True,
  average_attn_weights=False`` (which also materialises the per-head weights); no mask,
  forward and backward.

Timing: ``torch.utils.benchmark.Timer(..., num_threads=threads).blocked_autorange`` for
every implementation, in rounds that alternate ours and PyTorch's (``run.interleaved``), so
that background load hits both alike; each figure is the median over every block of every
round (``ratio`` compares the medians; ``ratio_of_minima`` the fastest blocks, which
background load disturbs least). ``torch.utils.benchmark.Compare`` prints the times side
by side. Other work on the machine still adds noise (the 1-minute load average is printed
with each size), so read the ratios, not the absolute times.

Run on its own (``python benchmarks/bench_attention.py [--rounds N] [--threads T]``) or
through ``benchmarks/run.py``, which calls :func:`run`.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils import benchmark

import transformer_lib as tl

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from run import argument_parser, format_table, interleaved, print_comparison  # noqa: E402  (benchmarks/run.py, beside this file)

#: (name, batch, seq, d_model, num_heads); "base" is the size the goal is stated for.
SIZES = [
    ("small", 8, 64, 128, 4),
    ("base", 32, 128, 256, 8),
    ("large", 32, 256, 512, 8),
]
MASKS = ("none", "causal", "padding")
#: (mode, path, masks): what is timed at every size
CASES = [
    ("forward", "fused", MASKS),
    ("fwd+bwd", "fused", MASKS),
    ("fwd+bwd", "explicit", ("none",)),
]
GOAL = 1.10  # fused path: ours / PyTorch at most this
PAD_ID = 0
ROUNDS = 6  # blocked_autorange rounds per implementation, alternating
MIN_RUN_TIME = 0.05  # seconds each round measures (after sizing its block)


def make_masks(batch: int, seq: int) -> dict[str, tuple[dict, dict]]:
    """Per mask kind, the keyword arguments of (ours, PyTorch's) forward, each in its own convention."""
    lengths = torch.linspace(seq, max(1, seq // 4), batch).round().long()  # (batch,): seq down to seq / 4
    tokens = torch.randint(1, 100, (batch, seq))  # (batch, seq)
    tokens[torch.arange(seq)[None, :] >= lengths[:, None]] = PAD_ID
    causal = tl.causal_mask(seq)  # (seq, seq): True = may attend
    return {
        "none": ({}, {}),
        "causal": ({"mask": causal}, {"attn_mask": ~causal, "is_causal": True}),
        "padding": ({"mask": tl.padding_mask(tokens, PAD_ID)}, {"key_padding_mask": tokens == PAD_ID}),
    }


def _call(ours: bool, module: nn.Module, x: torch.Tensor, kwargs: dict, need_weights: bool) -> torch.Tensor:
    if ours:
        return module(x, x, x, need_weights=need_weights, **kwargs)
    out, _ = module(x, x, x, need_weights=need_weights, average_attn_weights=False, **kwargs)
    return out


def _step_fn(ours: bool, module: nn.Module, x: torch.Tensor, kwargs: dict, need_weights: bool,
             mode: str, grad_out: torch.Tensor) -> Callable[[], None]:
    """What one timed statement runs: a forward without autograd, or a forward and backward."""
    if mode == "forward":
        def step() -> None:
            with torch.no_grad():
                _call(ours, module, x, kwargs, need_weights)
        return step

    params = list(module.parameters())

    def step() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        _call(ours, module, x, kwargs, need_weights).backward(grad_out)

    return step


def _check_same(pairs: dict[str, tuple[nn.Module, nn.Module]], x: torch.Tensor, masks: dict) -> None:
    """Both modules compute the same thing, in both modes, with every mask, before anything is timed."""
    with torch.no_grad():
        for mode, (ours, theirs) in pairs.items():
            for _, path, kinds in CASES:
                for kind in kinds:
                    need_weights = path == "explicit"
                    a = _call(True, ours, x, masks[kind][0], need_weights)
                    b = _call(False, theirs, x, masks[kind][1], need_weights)
                    torch.testing.assert_close(
                        a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{mode}, {path}, mask {kind}: {m}"  # noqa: B023
                    )


def bench_size(name: str, batch: int, seq: int, d_model: int, num_heads: int, threads: int, rounds: int,
               min_run_time: float) -> dict[tuple[str, str, str], dict[str, benchmark.Measurement]]:
    """{(mode, path, mask): {"ours": Measurement, "pytorch": Measurement}} for one size."""
    torch.manual_seed(0)
    train = tl.MultiHeadAttention(d_model, num_heads, dropout=0.0).train()
    evaluate = copy.deepcopy(train).eval()
    pairs = {"fwd+bwd": (train, tl.to_torch(train)), "forward": (evaluate, tl.to_torch(evaluate))}
    x = torch.randn(batch, seq, d_model, requires_grad=True)
    grad_out = torch.randn(batch, seq, d_model)
    masks = make_masks(batch, seq)
    _check_same(pairs, x.detach(), masks)

    shape = f"{batch} x {seq} x {d_model} / {num_heads}"
    results = {}
    for mode, path, kinds in CASES:
        for kind in kinds:
            need_weights = path == "explicit"
            timers = {
                who: benchmark.Timer(
                    "step()",
                    globals={"step": _step_fn(who == "ours", module, x, masks[kind][0 if who == "ours" else 1],
                                              need_weights, mode, grad_out)},
                    label=f"MultiHeadAttention {mode}, {path} (threads={threads})",
                    sub_label=f"{name} {shape}, mask {kind}",
                    description=who,
                    num_threads=threads,
                )  # fmt: skip
                for who, module in zip(("ours", "pytorch"), pairs[mode])
            }
            results[mode, path, kind] = interleaved(timers, rounds, min_run_time)
    return results


def run(rounds: int = ROUNDS, threads: int = 2, sizes: list[tuple] | None = None,
        min_run_time: float = MIN_RUN_TIME, compare: bool = True) -> list[dict]:
    """Time every size, mask, mode and path; one row per case with the ratio ours / PyTorch.

    ``compare`` prints ``torch.utils.benchmark.Compare``'s tables of the medians too.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the checks and the set-up; each Timer sets it for its statement
    rows, measurements = [], []
    try:
        for name, batch, seq, d_model, num_heads in sizes or SIZES:
            timings = bench_size(name, batch, seq, d_model, num_heads, threads, rounds, min_run_time)
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            for (mode, path, kind), m in timings.items():
                measurements += [m["ours"], m["pytorch"]]
                ratio = m["ours"].median / m["pytorch"].median
                goal = path == "fused"
                rows.append({
                    "benchmark": f"MultiHeadAttention {mode}, {path}",
                    "mask": kind,
                    "size": name,
                    "batch x seq x d_model / heads": f"{batch} x {seq} x {d_model} / {num_heads}",
                    "ours_ms": round(m["ours"].median * 1e3, 2),
                    "pytorch_ms": round(m["pytorch"].median * 1e3, 2),
                    "ratio": round(ratio, 3),
                    "ratio_of_minima": round(min(m["ours"].times) / min(m["pytorch"].times), 3),
                    "goal": GOAL if goal else "",
                    "met": (ratio <= GOAL) if goal else "",
                    "blocks": f"{len(m['ours'].times)}/{len(m['pytorch'].times)}",
                    "threads": threads,
                    "load_avg_1min": round(load, 1),
                })  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    if compare:
        print_comparison(measurements)
    return rows


if __name__ == "__main__":
    parser = argument_parser(__doc__, ROUNDS, threads=2)
    parser.add_argument("--sizes", nargs="*", choices=[s[0] for s in SIZES], help="sizes (default: all)")
    args = parser.parse_args()
    sizes = [s for s in SIZES if s[0] in args.sizes] if args.sizes else None
    print(format_table(run(rounds=args.rounds, threads=args.threads, sizes=sizes)))

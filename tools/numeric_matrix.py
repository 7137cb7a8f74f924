"""Run a pytest selection under several numeric configurations of PyTorch and its libraries.

A small training run is chaotic: the last bit of one sum can change the step at which it stops.
The checks of the chapters, the exercise solutions and the widget tests must hold on every
numeric path a learner's machine may take, so this runs the same selection once per
configuration below (each one only sets environment variables that PyTorch, MKL or OpenMP read
at start-up) and prints a table of test x configuration, pass or fail.

Each configuration was checked to change the arithmetic of a training step on an AMD EPYC
(AVX-512) machine: the parameters of chapter 11's model after 30 steps differ in their last bits
from the default's (``python tools/numeric_matrix.py --verify`` repeats that check). Switches
that change nothing there (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``, and thread counts,
since the chapters and tests set one thread themselves) are not in the default matrix.

Usage:
    python tools/numeric_matrix.py [--configs aten-default,mkl-compatible] -- PYTEST_ARGS...
    python tools/numeric_matrix.py --jobs 2 --select A --select B [--configs ...] -- PYTEST_OPTIONS...
    python tools/numeric_matrix.py --verify

With ``--select``, each selection (a notebook or a test id) runs under each configuration as its
own pytest process, ``--jobs`` of them at a time, so the runs of different configurations share
the cores instead of each configuration waiting for its slowest test. List the slowest first.

The exit status is 1 when any test failed under any configuration.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name -> environment variables. "default" sets nothing: the machine's own fastest path.
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    # PyTorch's own kernels (softmax, layer norm, GELU, reductions, Adam) without vector code
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    # PyTorch's own kernels with AVX2 instead of AVX-512
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    # MKL's matrix products on its reproducible, machine-independent code path
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}

ROOT = Path(__file__).resolve().parent.parent

VERIFY = """
import torch
import transformer_lib as tl
from transformer_lib import tasks, training
torch.set_num_threads(1)
train_set = tasks.make_task("reverse", 2000, seed=0, min_len=8, max_len=8)
vocab = train_set.src_vocab
torch.manual_seed(0)
config = tl.TransformerConfig.preset("tiny", src_vocab_size=len(vocab), tgt_vocab_size=len(vocab),
                                     num_heads=4, share_embeddings=True)
model = tl.Transformer(config)
training.train(model, train_set, steps=30, batch_size=128, warmup_steps=100, lr_factor=0.5,
               smoothing=0.1, seed=0, progress=False)
total = sum(p.double().sum() for p in model.parameters()).item()
print(torch.backends.cpu.get_cpu_capability(), total.hex())
"""


def verify(names: list[str]) -> int:
    """Train chapter 11's model for 30 steps under each configuration; every one but the
    default must end with different parameters from the default's."""
    results = {}
    for name in names:
        env = {**os.environ, **CONFIGS[name]}
        out = subprocess.run([sys.executable, "-c", VERIFY], env=env, capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout.split()
        results[name] = out
        print(f"{name:<15} capability {out[0]:<8} sum of parameters after 30 steps {out[1]}")
    same = [n for n in names if n != "default" and results[n][1] == results["default"][1]]
    if same:
        print("these configurations compute the same as the default here:", ", ".join(same))
        return 1
    return 0


def _outcomes(report: Path) -> dict[str, str]:
    """test id -> pass / FAIL / ERROR / skip, from a pytest JUnit XML report."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = "pass"
        for tag, word in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "skip")):
            if case.find(tag) is not None:
                outcome = word
        out[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return out


def _pytest(name: str, args: list[str], report: Path) -> tuple[float, str]:
    """One pytest process under configuration ``name``: its seconds and its output."""
    env = {**os.environ, **CONFIGS[name]}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", f"--junitxml={report}", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    return time.perf_counter() - start, done.stdout + done.stderr


def run(names: list[str], pytest_args: list[str], selections: list[str] | None = None, jobs: int = 1) -> int:
    """Run the selection under each configuration; print the table; 1 if anything failed.

    With ``selections``, one pytest process per (selection, configuration), ``jobs`` at a time;
    without, one per configuration, in turn. Each run's output is printed when it ends.
    """
    if selections:
        runs = [(selection, name, ["-p", "no:xdist", *pytest_args, selection])
                for selection, name in itertools.product(selections, names)]  # fmt: skip
    else:
        runs, jobs = [("all", name, pytest_args) for name in names], 1
    table: dict[str, dict[str, str]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        reports = [Path(tmp) / f"{i}.xml" for i in range(len(runs))]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_pytest, name, args, report) for (_, name, args), report in zip(runs, reports)]
            for (label, name, _), future in zip(runs, futures):
                took, output = future.result()
                setting = " ".join(f"{k}={v}" for k, v in CONFIGS[name].items()) or "nothing set"
                print(f"== {name} ({setting}): {label}, {took:.0f} s\n{output.strip()}", flush=True)
                seconds[name] = seconds.get(name, 0.0) + took
        wall = time.perf_counter() - start
        for (label, name, _), report in zip(runs, reports):
            if not report.exists():
                table.setdefault(f"{label} (pytest did not run)", {})[name] = "error"
                continue
            for test, outcome in _outcomes(report).items():
                table.setdefault(test, {})[name] = outcome
    failed = {t: r for t, r in table.items() if any(v in ("FAIL", "ERROR", "error") for v in r.values())}
    missing = {t: r for t, r in table.items() if set(r) != set(names)}
    print("\n== test x configuration (only the tests that failed somewhere; "
          f"{len(table) - len(failed)} of {len(table)} passed everywhere)")
    width = max([len(t) for t in failed] + [4])
    print(f"{'test':<{width}} | " + " | ".join(f"{n:<14}" for n in names))
    for test, row in failed.items():
        print(f"{test:<{width}} | " + " | ".join(f"{row.get(n, '-'):<14}" for n in names))
    print("seconds of pytest per configuration: " + ", ".join(f"{n} {s:.0f}" for n, s in seconds.items())
          + f"; wall {wall:.0f}")
    if missing:
        print("tests not run under every configuration:", ", ".join(sorted(missing)))
    return 1 if failed or missing or not table else 0


def main(argv: list[str]) -> int:
    if "--" in argv:
        own, pytest_args = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    else:
        own, pytest_args = argv, []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated names among {', '.join(CONFIGS)} (default: all)")
    parser.add_argument("--select", action="append", default=[],
                        help="a notebook or test id to run as its own process under each configuration (repeat)")
    parser.add_argument("--jobs", type=int, default=1, help="with --select: processes at a time (default 1)")
    parser.add_argument("--verify", action="store_true",
                        help="check that each configuration changes a training step's arithmetic")
    args = parser.parse_args(own)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"--configs: expected names among {', '.join(CONFIGS)}, got {', '.join(unknown)}")
    if args.verify:
        return verify(["default", *[n for n in names if n != "default"]])
    if args.jobs < 1:
        parser.error(f"--jobs: expected a positive number, got {args.jobs}")
    if not pytest_args and not args.select:
        parser.error("expected the pytest arguments after '--', e.g. -- chapters/11_full_transformer.ipynb --nbval-lax")
    return run(names, pytest_args, args.select, args.jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

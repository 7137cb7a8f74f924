"""What the parts of today's decoders buy on Shakespeare: chapter 16's GPT with each part, and with all.

The baseline is chapter 17's: chapter 16's character-level GPT (4 layers, 4 heads, width
128, context 64, pre-norm, LayerNorm, a GELU feed-forward network of width 512, learned
positions) trained for the ablations' budget (``scripts/ablations.py``: the same steps,
schedule, batches, evaluation and seeds). Each variant changes one part to Llama's:

* ``rms_norm``: RMSNorm instead of LayerNorm, everywhere;
* ``swiglu``: the gated feed-forward network with SiLU, hidden width 352 (2/3 of 512,
  rounded up to a multiple of 32, so the parameter count stays about the baseline's);
* ``rotary_half``: rotary positions in the "rotate half" layout instead of learned positions;
* ``gqa_2``: grouped-query attention, 2 key-value heads for the 4 query heads;
* ``mqa``: multi-query attention, 1 key-value head;
* ``all``: RMSNorm, SwiGLU, rotary (half) and 2 key-value heads together.

Every run is recorded with its full settings, its parameter count, its curve and final
numbers (measured as ``ablations.loss_and_accuracy``), its times and the repository
commit, in ``transformer_lib/records/modern/results.json``. Runs go one at a time in this
process with one thread; a finished run with the same settings is skipped, so a stopped
invocation continues where it stopped.

``python scripts/modern_parts.py`` (``make modern``) runs what is missing and prints the
table; ``--table`` prints it from the results alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import transformer_lib as tl
from transformer_lib.training import language_model_loss

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import ablations  # noqa: E402  (the baseline's model, budget, data and measurements)
import train_shakespeare as shakespeare  # noqa: E402

RESULTS = ROOT / "transformer_lib" / "records" / "modern" / "results.json"
SEEDS = ablations.SEEDS
GLU_WIDTH = tl.glu_hidden_size(ablations.LM_MODEL["d_model"], multiple_of=32)  # 352 for width 128
SWIGLU = dict(ffn_type="glu", activation="silu", d_ff=GLU_WIDTH)

#: name -> (label, what changes, the config fields changed from chapter 16's model)
VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "baseline": ("baseline", "chapter 16's GPT, as in chapter 17's ablations", {}),
    "rms_norm": ("RMSNorm", "RMSNorm instead of LayerNorm", dict(norm_type="rms")),
    "swiglu": ("SwiGLU", f"a SwiGLU feed-forward network of width {GLU_WIDTH}", SWIGLU),
    "rotary_half": ("rotary (half)", "rotary positions, rotate-half layout, instead of learned positions",
                    dict(positional="rotary", rotary_layout="half")),
    "gqa_2": ("GQA, 2 KV heads", "2 key-value heads shared by the 4 query heads", dict(num_kv_heads=2)),
    "mqa": ("MQA, 1 KV head", "1 key-value head shared by the 4 query heads", dict(num_kv_heads=1)),
    "all": ("all four", "RMSNorm, SwiGLU, rotary (half) and 2 key-value heads together",
            dict(norm_type="rms", **SWIGLU, positional="rotary", rotary_layout="half", num_kv_heads=2)),
}  # fmt: skip


def model_config(name: str) -> tl.TransformerConfig:
    """The configuration of variant ``name``: chapter 16's model with the variant's fields changed."""
    if name not in VARIANTS:
        raise ValueError(f"name must be one of {list(VARIANTS)}, got {name!r}")
    return tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=65, **{**ablations.LM_MODEL, **VARIANTS[name][2]})


def settings(name: str, steps: int | None = None) -> dict[str, Any]:
    """Everything that defines a run except its seed, as ``ablations.settings`` gives it: the whole model
    configuration (``tl.TransformerConfig(**settings["model"])`` rebuilds it) and the training settings."""
    train = {**ablations.LM, "smoothing": 0.0}
    if steps is not None:  # a shorter budget keeps the warm-up's share of it
        for key in ("warmup_steps", "decay_from"):
            train[key] = round(train[key] * steps / train["steps"])
        train["steps"] = steps
    if train["decay_from"] != train["warmup_steps"]:
        raise ValueError("the baseline's cosine starts where its warm-up ends; got decay_from="
                         f"{train['decay_from']} and warmup_steps={train['warmup_steps']}")
    return {"model": dataclasses.asdict(model_config(name)), "training": json.loads(json.dumps(train))}


def run(name: str, seed: int, steps: int | None = None) -> dict[str, Any]:
    """Train variant ``name`` from ``seed`` and measure it as chapter 17 does; returns the run's record."""
    s = settings(name, steps)
    t = s["training"]
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = tl.build_model(model_config(name))
    train_set, val_set = ablations.shakespeare_splits()
    history = tl.train(model, train_set, steps=t["steps"], batch_size=t["batch_size"], warmup_steps=t["warmup_steps"],
                       lr=t["lr"], min_lr=t["min_lr"], weight_decay=t["weight_decay"], betas=tuple(t["betas"]),
                       clip_norm=t["clip_norm"], smoothing=t["smoothing"], eval_data=val_set,
                       eval_every=t["eval_every"], eval_batches=t["eval_batches"], seed=seed,
                       progress=False)  # fmt: skip
    loss, accuracy = ablations.loss_and_accuracy(model, val_set, t["final_eval_batches"], t["batch_size"])
    finite = ablations.finite
    curve = [{"step": st, "val loss": finite(va), "train loss": finite(tr), "seconds": round(sec, 2)}
             for st, va, tr, sec in zip(history.eval_steps, history.eval_loss, history.eval_train_loss,
                                        history.eval_seconds)]  # fmt: skip
    final = {"val loss": ablations.finite(loss), "val accuracy": round(accuracy, 4),
             "train loss": ablations.finite(language_model_loss(model, train_set, 20, t["batch_size"]))}  # fmt: skip
    kv_bytes = 2 * model.config.num_layers * model.config.kv_heads * model.config.d_k * 4  # float32, per token
    return {
        "variant": name, "seed": seed, "settings": s, "parameters": tl.count_parameters(model), "device": "cpu",
        "kv cache bytes per token (float32)": kv_bytes, "curve": curve, "final": final,
        "diverged": not all(math.isfinite(x) for x in history.losses),
        "seconds": {"training steps": round(history.train_seconds, 1),
                    "training steps, processor time": round(history.train_cpu_seconds, 1),
                    "whole run": round(time.perf_counter() - start, 1)},
    }  # fmt: skip


def todo(results: dict[str, Any], names: list[str], seeds: list[int], steps: int | None,
         rerun_edited: bool = False) -> list[tuple[str, int]]:
    """The runs not yet in ``results`` with the settings they would have now (and, with ``rerun_edited``,
    those recorded from a tree whose run files differed from its commit); every variant's seed 0 first."""
    return [(name, seed) for seed in seeds for name in names
            if ablations.to_run(results["runs"].get(ablations.run_key(name, seed)), settings(name, steps),
                                rerun_edited)]  # fmt: skip


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per variant: mean and sample standard deviation of the final validation loss over the seeds,
    and the mean of the per-seed differences from the baseline (the paired comparison)."""
    rows = []
    base = {s: r["final"]["val loss"] for s in SEEDS if (r := results["runs"].get(ablations.run_key("baseline", s)))}
    for name, (label, _, _) in VARIANTS.items():
        runs = [r for s in SEEDS if (r := results["runs"].get(ablations.run_key(name, s))) is not None]
        losses = [r["final"]["val loss"] for r in runs if r["final"]["val loss"] is not None]
        diffs = [r["final"]["val loss"] - base[r["seed"]] for r in runs
                 if r["final"]["val loss"] is not None and base.get(r["seed"]) is not None]  # fmt: skip
        rows.append({"variant": name, "label": label, "seeds": len(runs),
                     "mean": statistics.fmean(losses) if losses else None,
                     "std": statistics.stdev(losses) if len(losses) > 1 else None,
                     "vs baseline": statistics.fmean(diffs) if diffs and name != "baseline" else None,
                     "accuracy": statistics.fmean(r["final"]["val accuracy"] for r in runs) if runs else None,
                     "parameters": runs[0]["parameters"] if runs else None,
                     "kv bytes": runs[0]["kv cache bytes per token (float32)"] if runs else None})  # fmt: skip
    return rows


def table(results: dict[str, Any]) -> str:
    def num(x: float | None, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    lines = [f"{'variant':<18} {'seeds':>5} {'mean':>7} {'std':>6} {'vs base':>8} {'acc':>6} {'params':>9} "
             f"{'KV B/tok':>8}"]  # fmt: skip
    for r in summary(results):
        lines.append(f"{r['label']:<18} {r['seeds']:>5} {num(r['mean']):>7} {num(r['std']):>6} "
                     f"{num(r['vs baseline'], '+.3f'):>8} {num(r['accuracy']):>6} {num(r['parameters'], ','):>9} "
                     f"{num(r['kv bytes'], ','):>8}")  # fmt: skip
    lines.append("mean, std: final validation loss (nats per character) over the seeds; vs base: paired difference "
                 "from the baseline; acc: next-character accuracy; KV B/tok: key-value cache bytes per token, float32")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=None, help="override the budget (for a quick try)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file")
    parser.add_argument("--table", action="store_true", help="print the table from the results file and stop")
    parser.add_argument("--rerun-edited", action="store_true",
                        help="also run again the recorded runs whose files differed from their commit")
    args = parser.parse_args(argv)
    results = ablations.load(args.out)
    if args.table:
        print(table(results))
        return
    torch.set_num_threads(1)
    start = time.perf_counter()
    results["what"] = ("chapter 16's character-level GPT on tiny Shakespeare with each part of today's decoders "
                       "(RMSNorm, SwiGLU, rotary in the half layout, grouped-query and multi-query attention) and "
                       "with all of them, at the budget of chapter 17's ablations, three seeds")
    results["variants"] = {name: {"label": label, "what": what, "config": config}
                           for name, (label, what, config) in VARIANTS.items()}  # fmt: skip
    results["seeds"] = list(SEEDS)
    work = todo(results, args.variants, args.seeds, args.steps)
    invocation = {
        "command": "python scripts/modern_parts.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "versions": ablations.library_state(), "hardware": shakespeare.hardware(1), "parallel runs": 1,
        "threads per run": 1, "runs": len(work), "wall seconds": None,
    }  # fmt: skip
    results["invocations"].append(invocation)
    ablations.save(results, args.out)
    print(f"{len(work)} runs to do, one at a time", flush=True)
    for name, seed in work:
        record = run(name, seed, args.steps)
        record["invocation"] = len(results["invocations"]) - 1
        # the code this process imported at its start (a later commit does not change a running process)
        record["commit"] = invocation["versions"]["commit"]
        record["edited files"] = invocation["versions"].get("edited files")
        results["runs"][ablations.run_key(name, seed)] = record
        ablations.finish(results, invocation, start, args.out)
        print(f"{name:>12} seed {seed}: {record['final']} ({record['seconds']['whole run']:.0f} s)", flush=True)
    ablations.finish(results, invocation, start, args.out)
    print(table(results))


if __name__ == "__main__":
    main()

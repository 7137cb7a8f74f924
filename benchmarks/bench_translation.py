"""Translation benchmark: the shipped English -> French model's held-out BLEU, and ours against nn.Transformer.

Two measurements on the Tatoeba pairs (``transformer_lib.translation``; the split by
English sentence, 2,000 test sentences, every reference translation of each):

- ``shipped model``: ``transformer_lib/records/translation/model.pt`` (trained by ``make translation``) is
  loaded and evaluated, not retrained: test sacreBLEU (default ``13a`` tokenisation)
  with greedy decoding and with beam search of width 4 (length normalisation 0.6), beside
  the values ``transformer_lib/records/translation/results.json`` recorded; then the recorded training
  time (wall and processor minutes, the load average when it started). Goal: test BLEU
  >= 30 within 10 minutes of training.
- ``training step``: the same-size model (the recorded config) in the same training step
  (``tl.training.train_step``: Adam with the warm-up schedule, label smoothing 0.1,
  gradient clipping) on the same batches (of the recorded size, from a seeded sample of
  ``STEP_BATCHES`` batches' worth of training pairs), ours (``tl.Transformer``) against
  PyTorch's (``nn.Transformer`` stacks from ``tl.to_torch(ours)``, the same weights, with
  our embeddings and output layer around them; ``bench_training.TorchSeq2Seq``). The two
  are first checked to compute the same log-probabilities; then
  ``bench_training.step_ratio`` times each step with ``torch.utils.benchmark.Timer`` and
  ``blocked_autorange`` in rounds that alternate the two models (``run.interleaved``), so
  that background load falls on both alike. Goal: ours / PyTorch time per step <= 1.10
  (the ratio from the unrounded medians; the times are printed in ms to 3 decimals).

Both use one thread, as the training run does.
Run on its own (``python benchmarks/bench_translation.py [shipped] [step]``) or through
``benchmarks/run.py``, which calls :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

import transformer_lib as tl
from transformer_lib import translation as tr

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from bench_training import TorchSeq2Seq, step_ratio  # noqa: E402  (benchmarks/bench_training.py, beside this file)
from run import format_table  # noqa: E402  (benchmarks/run.py)

GOAL_BLEU, GOAL_MINUTES, GOAL_RATIO = 30.0, 10.0, 1.10
BEAM, ALPHA = 4, 0.6
THREADS = 1
STEP_ROUNDS = 6  # alternating blocked_autorange rounds per model
STEP_MIN_RUN_TIME = 2.0  # seconds each round measures
STEP_BATCHES = 64  # distinct batches the steps cycle through
DATA_KEYS = ("min_freq", "num_valid", "num_test", "seed")


def load_avg() -> float:
    return round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else float("nan")


def shipped_rows(recorded: dict, data: tr.TranslationData, results: Path = tr.RESULTS_DIR) -> list[dict]:
    """Evaluate the shipped checkpoint on the test set, greedy and with beam search; the recorded training time."""
    model, src_vocab, tgt_vocab, _ = tr.load_translation_model(results / "model.pt")
    if (src_vocab, tgt_vocab) != (data.src_vocab, data.tgt_vocab):
        raise RuntimeError("the shipped model's vocabularies differ from the data's: retrain with make translation")
    sources, references = data.references("test")
    rows = []
    for name, beam in (("greedy", None), (f"beam{BEAM}", BEAM)):
        hyps = tr.translate(model, sources, src_vocab, tgt_vocab, beam_size=beam, alpha=ALPHA)
        bleu = tr.corpus_bleu(hyps, references).score
        rows.append({
            "benchmark": "shipped model, test BLEU",
            "decoding": name if beam is None else f"beam {beam}, alpha {ALPHA}",
            "sentences": len(sources),
            "bleu": round(bleu, 2),
            "recorded_bleu": recorded["test"][name]["bleu"],
            "goal": f">= {GOAL_BLEU:g}",
            "met": bleu >= GOAL_BLEU,
        })  # fmt: skip
    minutes = recorded["train_minutes"]
    rows.append({
        "benchmark": "shipped model, training (recorded)",
        "train_minutes": minutes,
        "train_cpu_minutes": recorded["train_cpu_minutes"],
        "threads": recorded["hardware"]["torch_threads"],
        "load_avg_1min": recorded["load_average"]["start"][0],
        "goal": f"test BLEU >= {GOAL_BLEU:g} (greedy) within {GOAL_MINUTES:g} min",
        "met": recorded["test"]["greedy"]["bleu"] >= GOAL_BLEU and minutes <= GOAL_MINUTES,
    })  # fmt: skip
    return rows


def step_rows(
    config: dict,
    data: tr.TranslationData,
    batch_size: int,
    *,
    seed: int = 0,
    rounds: int = STEP_ROUNDS,
    min_run_time: float = STEP_MIN_RUN_TIME,
    num_batches: int = STEP_BATCHES,
) -> list[dict]:
    """Ours against nn.Transformer (the same weights): one training step on the same batches, alternating
    (``bench_training.step_ratio``, which prints ``torch.utils.benchmark.Compare``'s table)."""
    torch.manual_seed(seed)
    ours = tl.build_model(tl.TransformerConfig(**config))
    theirs = TorchSeq2Seq(ours)
    train_set = data.dataset("train")
    # a seeded sample of the training pairs, num_batches batches' worth, spread over every length
    size = min(len(train_set), num_batches * batch_size)
    keep = sorted(np.random.default_rng(seed).choice(len(train_set), size=size, replace=False).tolist())
    sample = tl.Seq2SeqDataset("tatoeba-train-sample", [train_set.pairs[i] for i in keep], data.src_vocab,
                               data.tgt_vocab)  # fmt: skip
    # the same log-probabilities before anything is timed
    ours.eval(), theirs.eval()
    b = next(sample.batches(batch_size, shuffle=False))
    with torch.no_grad():
        diff = ours(b.src, b.tgt_in, b.src_mask, b.tgt_mask) - theirs(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    diff = diff[b.tgt_out != tl.data.PAD_ID].abs().max().item()
    if diff > 1e-4:
        raise RuntimeError(f"the two models disagree by {diff} before training")
    ours_s, pytorch_s = step_ratio(ours, theirs, sample, batch_size, rounds, min_run_time, threads=THREADS,
                                   label=f"translation, batch {batch_size}")  # fmt: skip
    ratio = ours_s / pytorch_s
    return [{
        "benchmark": "training step, ours / nn.Transformer",
        "d_model": config["d_model"],
        "layers": config["num_layers"],
        "batch": batch_size,
        "ours_ms": round(ours_s * 1e3, 3),
        "pytorch_ms": round(pytorch_s * 1e3, 3),
        "ratio": round(ratio, 2),
        "max_difference": f"{diff:.1e}",
        "goal": f"<= {GOAL_RATIO}",
        "met": ratio <= GOAL_RATIO,
        "threads": THREADS,
        "load_avg_1min": load_avg(),
    }]  # fmt: skip


def run(
    parts: tuple[str, ...] = ("shipped", "step"),
    *,
    results: Path = tr.RESULTS_DIR,
    config: dict | None = None,
    rounds: int = STEP_ROUNDS,
    min_run_time: float = STEP_MIN_RUN_TIME,
    num_batches: int = STEP_BATCHES,
) -> list[dict]:
    """The rows of both measurements (``parts`` picks some).

    ``config`` overrides the recorded model's settings for the step timing (a tiny model in
    the tests); ``rounds``, ``min_run_time`` and ``num_batches`` size it.
    """
    recorded = json.loads((results / "results.json").read_text())
    unknown = set(parts) - {"shipped", "step"}
    if unknown:
        raise ValueError(f"parts must be among ('shipped', 'step'), got {sorted(unknown)}")
    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    try:
        data = tr.make_translation_data(**{k: recorded["data"][k] for k in DATA_KEYS})
        rows = []
        if "shipped" in parts:
            rows += shipped_rows(recorded, data, results)
        if "step" in parts:
            rows += step_rows(
                {**recorded["config"], **(config or {})}, data, recorded["training"]["batch_size"],
                seed=recorded["seed"], rounds=rounds, min_run_time=min_run_time, num_batches=num_batches,
            )  # fmt: skip
        return rows
    finally:
        torch.set_num_threads(previous)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="{shipped,step}", help="default: both")
    args = parser.parse_args()
    print(format_table(run(tuple(args.parts) or ("shipped", "step"))))


if __name__ == "__main__":
    main()

"""Language-model benchmark: what the GPT trained on tiny Shakespeare reached, read from its results.

``scripts/train_shakespeare.py`` (``make shakespeare``) trains nanoGPT's CPU configuration of
its character-level Shakespeare model with the library and records the run in
``transformer_lib/records/shakespeare/<name>.json``. This benchmark retrains nothing: it reads every such
file and prints one row per run: validation loss (mean over 200 random batches of 12
windows, and over the whole validation split in non-overlapping windows), per character
for a BPE run, steps, training time (wall and processor time: on a machine shared with other
work the processor time is the steadier figure) and the machine's threads and load. Goal:
at most 1.88 per character on the 200 batches (nanoGPT's README: "about 1.88", measured on 20 random
batches) within 300 s of training (wall time) for nanoGPT's 2,000 steps; a longer run is
held to the loss only.

The time of one training step against an equivalent reference (Hugging Face's
``GPT2LMHeadModel`` of the same size, same weights) is measured by ``bench_gpt2.py``.
Run on its own (``python benchmarks/bench_language_model.py``) or through ``benchmarks/run.py``.
"""

from __future__ import annotations

import json

from transformer_lib.resources import records_path

RESULTS = records_path("shakespeare")
GOAL_LOSS = 1.88
GOAL_SECONDS = 300.0
REFERENCE_STEPS = 2000
VAL_200 = "validation loss, 200 random batches of 12"
VAL_ALL = "validation loss, whole split in non-overlapping windows"


def row(name: str, result: dict) -> dict:
    """One table row from a results json."""
    final, seconds, settings = result["final"], result["seconds"], result["settings"]
    per_char = result.get("final per character", {})
    per_char_loss = per_char.get(VAL_200, final[VAL_200])  # nanoGPT's 1.88 is per character
    budget = settings["steps"] == REFERENCE_STEPS  # the time goal is for nanoGPT's 2,000 steps
    return {
        "run": name,
        "tokens": f"{settings['tokenizer']} ({settings['vocab_size']})",
        "steps": settings["steps"],
        "val loss (200 batches)": f"{final[VAL_200]:.4f}",
        "val loss (whole split)": f"{final[VAL_ALL]:.4f}",
        "val loss per char": f"{per_char_loss:.4f}",
        "train loss": f"{final['training loss, 200 random batches of 12']:.4f}",
        "train s": f"{seconds['training steps']:.0f}",
        "train cpu s": f"{seconds['training steps, processor time']:.0f}"
        if "training steps, processor time" in seconds else "",
        "ms/step": f"{seconds['ms per step']:.0f}",
        "threads": result["hardware"]["torch threads"],
        "load at start": result["hardware"]["load average at start (1, 5, 15 min)"][0],
        f"loss <= {GOAL_LOSS}": "met" if per_char_loss <= GOAL_LOSS else "NOT met",
        f"wall <= {GOAL_SECONDS:.0f} s": ("met" if seconds["training steps"] <= GOAL_SECONDS else "NOT met")
        if budget else f"({settings['steps']:,} steps)",
    }


def run() -> list[dict]:
    """One row per recorded run (``transformer_lib/records/shakespeare/*.json``), the 2,000-step run first."""
    paths = sorted(RESULTS.glob("*.json"), key=lambda p: (p.stem != "char", p.stem))
    rows = []
    for path in paths:
        result = json.loads(path.read_text())
        if "final" in result and "settings" in result:  # a run's results, not a tokeniser file
            rows.append(row(path.stem, result))
    return rows


def main() -> None:
    from run import format_table  # benchmarks/run.py, beside this file

    print(format_table(run()))
    print(f"goal: validation loss <= {GOAL_LOSS} per character (nanoGPT's CPU run) within {GOAL_SECONDS:.0f} s of "
          f"training (wall time, {REFERENCE_STEPS:,} steps); processor time is the steadier figure on a busy machine")


if __name__ == "__main__":
    main()

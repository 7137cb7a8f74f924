"""Train the two toy models whose attention chapters 10 and 11 read, and record them.

``make toy-models`` runs it. Chapters 10 and 11 train these models live, and what they assert
about their own run holds on every machine (it was measured under several numeric
configurations and seeds). What one trained model's heads do (which head reads which source
word, which head rests on ``<bos>``) is not like that: the last bits of a sum differ between
processors, math libraries and thread counts, training amplifies them, and another machine's
run ends with other weights. So the chapters read those heads off the models recorded here,
trained with exactly the chapters' settings, and load them with ``importlib.resources``:

- ``numbers_decoder.pt``: chapter 10's tiny model, numbers in words -> digits;
- ``reverse.pt``: chapter 11's one-layer model, reversing eight digits;
- ``settings.json``: the settings of both, the versions, the processor and its numeric path,
  and what each run recorded (steps, held-out accuracies).

One thread, PyTorch's default numeric path. ``--out`` writes elsewhere (a trial that must not
overwrite the shipped records).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib import tasks, training

OUT = Path(__file__).resolve().parent.parent / "transformer_lib" / "records" / "toy_models"
THREADS = 1  # as the chapters run

# chapter 10, "Watching a trained decoder step by step"
NUMBERS = dict(
    task="numbers", train_examples=4000, train_seed=0, held_out_examples=300, held_out_seed=1,
    excluded=[["two", "thousand", "five"]], preset="tiny", init_seed=0,
    steps=1000, batch_size=64, warmup_steps=100, eval_every=500,
)  # fmt: skip
# chapter 11, "Training"
REVERSE = dict(
    task="reverse", seq_len=8, train_examples=20000, valid_examples=300, split_seed=0,
    test_examples=1000, test_seed=123, preset="tiny", num_heads=4, share_embeddings=True, init_seed=0,
    steps=600, batch_size=128, warmup_steps=100, lr_factor=0.5, smoothing=0.1, eval_every=50,
    target_accuracy=0.995, seed=0,
)  # fmt: skip


def train_numbers() -> tuple[tl.Transformer, training.History, dict]:
    s = NUMBERS
    excluded = [tuple(words) for words in s["excluded"]]
    train_set = tasks.make_task(s["task"], s["train_examples"], seed=s["train_seed"], exclude=excluded)
    seen = [src for src, _ in train_set.pairs] + excluded
    held_out = tasks.make_task(s["task"], s["held_out_examples"], seed=s["held_out_seed"], exclude=seen)
    torch.manual_seed(s["init_seed"])
    model = tl.Transformer(tl.TransformerConfig.preset(
        s["preset"], src_vocab_size=len(train_set.src_vocab), tgt_vocab_size=len(train_set.tgt_vocab)))
    history = tl.train(model, train_set, steps=s["steps"], batch_size=s["batch_size"], warmup_steps=s["warmup_steps"],
                       eval_data=held_out, eval_every=s["eval_every"], progress=False)
    return model, history, {"held_out_exact_match": history.final_accuracy}


def train_reverse() -> tuple[tl.Transformer, training.History, dict]:
    s = REVERSE
    n = s["seq_len"]
    train_set, valid_set = tasks.make_splits(s["task"], s["train_examples"], s["valid_examples"], seed=s["split_seed"],
                                             min_len=n, max_len=n)
    test_set = tasks.make_task(s["task"], s["test_examples"], seed=s["test_seed"], min_len=n, max_len=n,
                               exclude=[src for src, _ in train_set.pairs + valid_set.pairs])
    vocab = train_set.src_vocab
    torch.manual_seed(s["init_seed"])
    model = tl.Transformer(tl.TransformerConfig.preset(
        s["preset"], src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), num_heads=s["num_heads"],
        share_embeddings=s["share_embeddings"]))
    history = training.train(
        model, train_set, steps=s["steps"], batch_size=s["batch_size"], warmup_steps=s["warmup_steps"],
        lr_factor=s["lr_factor"], smoothing=s["smoothing"], eval_data=valid_set, eval_every=s["eval_every"],
        target_accuracy=s["target_accuracy"], seed=s["seed"], progress=False)
    return model, history, {"test_exact_match": training.exact_match(model, test_set)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder to write into (default {OUT})")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "processor": platform.processor() or None, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": THREADS, "date": time.strftime("%Y-%m-%d", time.gmtime()), "models": {},
    }
    for name, settings, train in (("numbers_decoder", NUMBERS, train_numbers), ("reverse", REVERSE, train_reverse)):
        start = time.perf_counter()
        model, history, scores = train()
        tl.save_checkpoint(args.out / f"{name}.pt", model)  # float32: the chapters' numbers are the trained model's
        record["models"][name] = {
            "file": f"{name}.pt", "settings": settings, "steps": history.steps,
            "eval_steps": history.eval_steps, "eval_accuracy": history.eval_accuracy, **scores,
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(f"{name}: {history.steps} steps, {scores}")
    (args.out / "settings.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Tokeniser benchmark: our byte-level BPE against Hugging Face ``tokenizers`` on tiny Shakespeare.

For each vocabulary size, both tokenisers are trained on the whole corpus (1,115,394
characters) the same way (GPT-2's pre-tokenisation, the 256 bytes as the initial alphabet,
no special tokens; ``tokenizers``: ``models.BPE`` + ``trainers.BpeTrainer`` +
``pre_tokenizers.ByteLevel(add_prefix_space=False)``), then encode the corpus. Rows:
wall time to train and to encode (median of ``repeats`` runs, the two alternating, ours
first on even runs; our encoder starts each run with an empty word cache), the ratio
ours / ``tokenizers``, and the tokens per character each gives. ``tokenizers`` is compiled
Rust and trains with every core; ours is plain Python on one.

Run on its own (``python benchmarks/bench_tokenizer.py``) or through ``benchmarks/run.py``,
which calls :func:`run`.
"""

from __future__ import annotations

import gzip
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import transformer_lib as tl
from transformer_lib.resources import data_path

CORPUS = data_path("tinyshakespeare", "input.txt")


def read_corpus(path: Path = CORPUS) -> str:
    """The tiny Shakespeare text (``input.txt``, or ``input.txt.gz`` beside it)."""
    for candidate in (path, path.with_suffix(path.suffix + ".gz")):
        if candidate.exists():
            data = candidate.read_bytes()
            return (gzip.decompress(data) if candidate.suffix == ".gz" else data).decode("utf-8")
    raise FileNotFoundError(f"tiny Shakespeare not found at {path} (or {path.name}.gz)")


def train_reference(text: str, vocab_size: int):
    """A ``tokenizers`` byte-level BPE trained like ours (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def run(vocab_sizes: Sequence[int] = (512, 1024, 4096), repeats: int = 3, text: str | None = None) -> list[dict]:
    """One row per vocabulary size and step (train, encode): seconds for each and their ratio."""
    text = read_corpus() if text is None else text
    rows = []
    for vocab_size in vocab_sizes:
        times: dict[str, list[float]] = {"ours train": [], "theirs train": [], "ours encode": [], "theirs encode": []}
        for r in range(repeats):
            for who in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
                start = time.perf_counter()
                if who == "ours":
                    ours = tl.BPETokenizer().train(text, vocab_size)
                else:
                    theirs = train_reference(text, vocab_size)
                middle = time.perf_counter()
                if who == "ours":
                    ours_ids = ours.encode(text)  # a new tokeniser: the word cache starts empty
                else:
                    theirs_ids = theirs.encode(text).ids
                end = time.perf_counter()
                times[f"{who} train"].append(middle - start)
                times[f"{who} encode"].append(end - middle)
        for step in ("train", "encode"):
            ours_s = statistics.median(times[f"ours {step}"])
            theirs_s = statistics.median(times[f"theirs {step}"])
            rows.append(
                {
                    "benchmark": f"BPE {step}, vocab {vocab_size}",
                    "ours (s)": round(ours_s, 3),
                    "tokenizers (s)": round(theirs_s, 3),
                    "ratio": round(ours_s / theirs_s, 2),
                    "tokens/char ours": round(len(ours_ids) / len(text), 4),
                    "tokens/char tokenizers": round(len(theirs_ids) / len(text), 4),
                }
            )
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)

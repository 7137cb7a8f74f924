"""Train the English -> French Transformer on the Tatoeba pairs and write its checkpoint and results.

``make translation`` runs it. It trains the model of ``CONFIG`` with ``TRAINING`` (one
thread, fixed seed, a fixed number of steps), measuring the greedy validation BLEU on a
fixed subset of the validation sentences every ``eval_every`` steps, then

- writes ``transformer_lib/records/translation/model.pt``: the weights in float16, the config and the two
  vocabularies (:func:`transformer_lib.translation.save_translation_model`);
- evaluates the held-out TEST set once, at the end (greedy, and beam search of widths 1,
  2, 4 and 8 with length normalisation), with sacreBLEU's defaults against every
  reference translation of each English sentence, on the weights as saved;
- writes ``transformer_lib/records/translation/results.json``: settings, seed, versions, hardware and load,
  wall and processor times, the training curve and the final BLEU scores;
- writes ``transformer_lib/records/translation/test_translations.json.gz``: each test sentence's
  translation, greedy and with each beam width, and what produced them (command, commit, alpha,
  widths), so that the translations can be compared sentence by sentence without decoding again.

Settings were chosen on the validation BLEU only. ``--steps`` and ``--out`` change the run
(e.g. a short trial that must not overwrite the shipped results). ``--device cuda`` trains and
evaluates on an NVIDIA GPU (``make translation TRANSLATION_ARGS="--device cuda"``); the record's
hardware notes the device. ``--decode-only`` trains nothing: it loads ``model.pt`` from ``--out``,
decodes the test set and writes ``test_translations.json.gz`` alone, leaving ``results.json``
(the training record) as it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
import torch

import transformer_lib as tl
from transformer_lib import translation as tr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from devices import add_device_option, describe  # noqa: E402

#: where the shipped model and record live: the package's records folder, in this source tree
OUT = ROOT / "transformer_lib" / "records" / "translation"
SEED = 0
THREADS = 1  # the budget a laptop can spare, and the setting at which the record's times are measured
DATA = dict(min_freq=2, num_valid=2000, num_test=2000, seed=SEED)
CONFIG = dict(d_model=128, num_heads=4, num_layers=3, d_ff=512, dropout=0.0)
# 1,750 steps: in a trial run (one thread) the validation BLEU of the 500-sentence subset was 28.6,
# 36.0, 39.4 and 40.2 after 1,000, 1,500, 1,750 and 2,000 steps; 1,750 keeps all but 0.8 of that BLEU.
# At 0.24 s a step (wall and processor time alike, idle machine) it takes 6.9 of the 10 minutes; on a
# busy machine the same run took 0.48 s a step of wall time (0.29 of processor time) and missed them
TRAINING = dict(steps=1750, eval_every=250, valid_sentences=500, batch_size=128, warmup_steps=400,
                lr_factor=0.3, smoothing=0.1, seed=SEED)  # fmt: skip
BEAMS = (1, 2, 4, 8)
TRANSLATIONS = "test_translations.json.gz"  # beside results.json
ALPHA = 0.6  # length normalisation of beam search (Wu et al., 2016; the paper's value)
GOAL_BLEU, GOAL_MINUTES = 30.0, 10.0


def build(data: tr.TranslationData) -> tl.Transformer:
    """The model of ``CONFIG`` for the data's vocabularies, initialised from ``SEED``."""
    torch.manual_seed(SEED)
    config = tl.TransformerConfig(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab), **CONFIG)
    return tl.build_model(config)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def hardware() -> dict:
    return {
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def test_scores(
    model: tl.Transformer, data: tr.TranslationData, beams: tuple[int, ...] = BEAMS, sentences: int | None = None
) -> tuple[dict, dict]:
    """Held-out test BLEU, greedy and with each beam width, and the seconds each took; and the
    translations themselves, ``{"greedy": [...], "beam1": [...], ...}`` in the order of
    ``data.references("test")``. ``sentences`` keeps only the first ones (a quick trial)."""
    sources, references = data.references("test")
    if sentences is not None:
        if not isinstance(sentences, int) or sentences < 1:
            raise ValueError(f"sentences must be a positive int, got {sentences!r}")
        sources, references = sources[:sentences], references[:sentences]
    scores, translations = {}, {}
    for name, beam in [("greedy", None)] + [(f"beam{k}", k) for k in beams]:
        start = time.perf_counter()
        hyps = tr.translate(model, sources, data.src_vocab, data.tgt_vocab, beam_size=beam, alpha=ALPHA)
        bleu = tr.corpus_bleu(hyps, references)
        scores[name] = {"bleu": round(bleu.score, 2), "seconds": round(time.perf_counter() - start, 1),
                        "sacrebleu": str(bleu), "signature": tr.bleu_signature(hyps, references)}  # fmt: skip
        translations[name] = hyps
        print(f"test {name}: {bleu}", flush=True)
    return scores, translations


def write_translations(path: Path, translations: dict, scores: dict, beams: tuple[int, ...], command: str) -> dict:
    """Write the test translations and what produced them to ``path`` (gzip-compressed JSON);
    return the record written."""
    record = {
        "what": "each distinct English test sentence's French translation by the model of model.pt, in the "
                "order of TranslationData.references('test'), greedy and by beam search of each width",
        "command": command,
        "git_commit": git_commit(),
        "data": DATA,
        "alpha": ALPHA,
        "beams": list(beams),
        "sentences": len(translations["greedy"]),
        "bleu": {name: score["bleu"] for name, score in scores.items()},
        "versions": {"torch": torch.__version__, "sacrebleu": sacrebleu.__version__},
        "translations": translations,
    }  # fmt: skip
    # mtime=0: the same translations give the same bytes
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write((json.dumps(record, indent=0, ensure_ascii=False) + "\n").encode("utf-8"))
    return record


def read_translations(path: Path) -> dict:
    """The record :func:`write_translations` wrote."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def decode_only(
    out: Path,
    beams: tuple[int, ...],
    command: str,
    device: str = "cpu",
    sentences: int | None = None,
    data: tr.TranslationData | None = None,
) -> dict:
    """Decode the test set with ``out/model.pt`` and write ``out/test_translations.json.gz``; no
    training, and ``out/results.json`` is not touched."""
    path = out / "model.pt"
    if not path.is_file():
        raise FileNotFoundError(f"--decode-only needs a trained model: {path} does not exist")
    data = tr.make_translation_data(**DATA) if data is None else data
    model, src_vocab, tgt_vocab, _ = tr.load_translation_model(path)
    if (src_vocab, tgt_vocab) != (data.src_vocab, data.tgt_vocab):
        raise ValueError(f"the vocabularies of {path} are not those of the data settings {DATA}")
    scores, translations = test_scores(model.to(device), data, beams, sentences)
    return write_translations(out / TRANSLATIONS, translations, scores, beams, command)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING["steps"])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for model.pt and results.json")
    parser.add_argument("--beams", default=",".join(map(str, BEAMS)), help="beam widths for the test scores")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch threads (default %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help=f"train nothing: decode the test set with OUT/model.pt and write OUT/{TRANSLATIONS}",
    )
    parser.add_argument(
        "--sentences", type=int, default=None, help="with --decode-only: only the first N test sentences (a trial)"
    )
    add_device_option(parser)
    args = parser.parse_args(argv)
    if args.sentences is not None and not args.decode_only:
        parser.error(
            f"--sentences needs --decode-only (the training record scores the whole test set), got "
            f"--sentences {args.sentences} without it"
        )
    torch.set_num_threads(args.threads)
    beams = tuple(int(k) for k in args.beams.split(",") if k)
    command = "python scripts/train_translation.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.decode_only:
        record = decode_only(args.out, beams, command.strip(), args.device, args.sentences)
        print(f"wrote {args.out / TRANSLATIONS}: {record['sentences']} sentences, BLEU {record['bleu']}", flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    start = time.perf_counter()

    data = tr.make_translation_data(**DATA)
    model = build(data).to(args.device)
    training = dict(TRAINING, steps=args.steps)
    print(
        f"{len(data.splits['train'])} training pairs, vocabularies {len(data.src_vocab)} (English) and "
        f"{len(data.tgt_vocab)} (French), {tl.count_parameters(model):,} parameters",
        flush=True,
    )
    history, curve = tr.train_with_bleu(model, data, progress=not args.no_progress, **training)
    for point in curve:
        print(point, flush=True)
    path = args.out / "model.pt"
    tr.save_translation_model(path, model, data.src_vocab, data.tgt_vocab, history)
    model, _, _, _ = tr.load_translation_model(path)  # evaluate the weights as shipped (float16)
    model = model.to(args.device)
    scores, translations = test_scores(model, data, beams)
    write_translations(args.out / TRANSLATIONS, translations, scores, beams, command.strip())

    results = {
        "task": "English -> French, Tatoeba pairs (tatoeba.org, CC BY 2.0 FR), split by English sentence",
        "data": {**DATA, "train_pairs": len(data.splits["train"]), "valid_pairs": len(data.splits["valid"]),
                 "test_pairs": len(data.splits["test"]), "src_vocab": len(data.src_vocab),
                 "tgt_vocab": len(data.tgt_vocab)},  # fmt: skip
        "config": dataclasses.asdict(model.config),
        "training": training,
        "seed": SEED,
        "versions": {"torch": torch.__version__, "sacrebleu": sacrebleu.__version__, "git_commit": git_commit()},
        "hardware": {**hardware(), **describe(args.device)},
        "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": tl.count_parameters(model),
        "model_file_mb": round(path.stat().st_size / 1e6, 2),
        "train_minutes": round(history.train_seconds / 60, 2),
        "train_cpu_minutes": round(history.train_cpu_seconds / 60, 2),
        "total_minutes": round((time.perf_counter() - start) / 60, 2),
        "first_losses": [round(x, 5) for x in history.losses[:50]],
        "curve": curve,
        "test": scores,
        "goal": {"test_bleu": GOAL_BLEU, "train_minutes": GOAL_MINUTES,
                 "met": scores["greedy"]["bleu"] >= GOAL_BLEU and history.train_seconds <= 60 * GOAL_MINUTES},
    }  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(
        f"test BLEU {scores['greedy']['bleu']} (greedy) after {results['train_minutes']} min of training "
        f"({results['train_cpu_minutes']} processor min); wrote {args.out}",
        flush=True,
    )


if __name__ == "__main__":
    main()

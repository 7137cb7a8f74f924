"""Ablations: train the small Shakespeare GPT with one part removed or changed at a time.

The baseline is chapter 16's character-level GPT (``scripts/train_shakespeare.py``: 4
layers, 4 heads, width 128, context 64, batches of 12, pre-norm, learned positions, tied
output layer, AdamW at 1e-3 with 100 warm-up steps and a cosine decay to 1e-4), trained
for a shorter budget, ``STEPS`` steps, so that every variant fits three seeds (more for the rows
that three cannot decide). Each variant differs from its baseline in one setting (``VARIANTS``).
Four groups:

* ``main``: the baseline and one change each (attention scaling, heads, positions,
  residual connections, layer norm, post-norm, warm-up, label smoothing, weight tying);
* ``deep``: post-norm against pre-norm, with and without warm-up, at a depth where it
  matters (``DEEP_MODEL``: 12 layers of width 64; and the post-norm stack without warm-up
  at 6 layers, where it still trains);
* ``high_lr``: the baseline and the three changes with the largest effects (rotary positions,
  post-norm, no attention scaling) again at twice the peak learning rate, 2e-3, to see whether
  their verdicts hold at a second setting;
* ``reverse``: label smoothing on and off for the reverse task of chapter 11, where the
  model's accuracy and its loss can pull in different directions.

Without warm-up a language model starts at the peak learning rate and holds it until the step
where the baseline's warm-up ends, then follows the baseline's cosine: the warm-up is the only
thing that changes (``decay_from``; the cosine is not stretched over the whole run).

Every run of a language model is measured the same way: its curve every ``eval_every``
steps on the same 20 batches of 12 validation windows (``language_model_loss``'s fixed
windows), then the final validation loss and next-character accuracy on 200 fixed
batches. A seed sets the initial weights and the order of the training windows.

Runs go ``--jobs`` at a time in separate processes of one thread each. Each finished run
is written at once to ``transformer_lib/records/ablations/results.json``, and a run already
there with the same settings is skipped, so a stopped invocation continues where it stopped.
A variant whose switch the library does not have yet is listed as pending and skipped.
Every run records its full settings (the whole model configuration and the training settings),
the commit its process started from, and whether the files a run imports (the library, this
script, ``train_shakespeare.py``, ``devices.py``) differed from that commit; the script refuses
to add a run made from such an edited tree to the shipped record unless ``--allow-dirty``.
``--rerun-edited`` runs again, from the present (clean) tree, every recorded run that was made
from an edited one, and replaces its record.

``python scripts/ablations.py`` (``make ablations``) runs what is missing and prints the
table; ``--table`` prints it from the results alone. ``--device cuda`` trains on an NVIDIA
GPU (``make ablations ABLATIONS_ARGS="--device cuda"``); each run's record notes its device.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import scipy.stats
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.data import PAD_ID
from transformer_lib.text import TextDataset
from transformer_lib.training import EVAL_SEED, language_model_loss

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import train_shakespeare as shakespeare  # noqa: E402  (the corpus, its split and the baseline's settings)
from devices import add_device_option  # noqa: E402
from devices import describe as describe_device  # noqa: E402

#: the shipped record: the package's records folder, in this source tree
RESULTS = ROOT / "transformer_lib" / "records" / "ablations" / "results.json"
SEEDS = (0, 1, 2)
STEPS = 600

#: the keys of chapter 16's settings that describe the model, not its training
MODEL_KEYS = ("d_model", "num_heads", "num_layers", "d_ff", "dropout")
#: chapter 16's training settings (nanoGPT's CPU run) with a shorter budget and a denser curve; the
#: cosine decay starts where the warm-up ends (``decay_from``)
LM = {k: val for k, val in shakespeare.SETTINGS.items() if k not in MODEL_KEYS}
LM.update(steps=STEPS, eval_every=50, decay_from=LM["warmup_steps"])
#: no warm-up, and nothing else: the peak rate from step 0, the baseline's cosine from step 100 on
NO_WARMUP = dict(warmup_steps=0)
#: the first runs without warm-up also started the cosine at step 0, stretching it over all 600 steps
LONG_DECAY = dict(warmup_steps=0, decay_from=0)
#: the names those runs had before their variants were split by where the cosine starts
LONG_DECAY_NAMES = {"no_warmup": "no_warmup_long_decay", "post_norm_no_warmup": "post_norm_no_warmup_long_decay",
                    "deep_pre_no_warmup": "deep_pre_no_warmup_long_decay",
                    "deep_post_no_warmup": "deep_post_no_warmup_long_decay",
                    "deep6_post_no_warmup": "deep6_post_no_warmup_long_decay"}  # fmt: skip
#: the second learning rate of the headline rows
HIGH_LR = dict(lr=2e-3)
#: the model of chapter 16: the "gpt-tiny" preset at nanoGPT's sizes
LM_MODEL = dict(d_model=128, num_heads=4, num_layers=4, d_ff=512, max_len=64, dropout=0.0)
assert all(LM_MODEL[k] == shakespeare.SETTINGS[k] for k in MODEL_KEYS)
#: the deep group: narrower, so that 12 layers cost about what the baseline's 4 do
DEEP_MODEL = dict(LM_MODEL, d_model=64, d_ff=256, num_layers=12)
#: chapter 11's reverse task and model, trained for a fixed budget (no early stop)
REVERSE = dict(num_train=20000, num_test=1000, seq_len=8, steps=300, batch_size=128, warmup_steps=100,
               lr_factor=0.5, eval_every=25, data_seed=0)  # fmt: skip
REVERSE_MODEL = dict(num_heads=4, share_embeddings=True)


@dataclass(frozen=True)
class Variant:
    """One experiment: its group's model and training with ``config`` and ``train`` changed.

    ``baseline`` names the variant it differs from in exactly one setting (itself for a
    group's baseline), or in two where ``also`` names the second; ``needs`` lists the config
    switches it uses, so a library without them skips it.
    """

    name: str
    label: str
    group: str
    baseline: str
    what: str
    config: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    also: str | None = None


VARIANTS: tuple[Variant, ...] = (
    Variant("baseline", "baseline", "main", "baseline",
            "chapter 16's GPT: pre-norm, learned positions, 4 heads, tied output, warm-up 100"),
    Variant("no_scale", "no 1/sqrt(d_k)", "main", "baseline",
            "attention scores are raw dot products q.k", config=dict(attention_scale=False)),
    Variant("heads_1", "1 head", "main", "baseline", "one head of width 128 instead of four of 32",
            config=dict(num_heads=1)),
    Variant("heads_8", "8 heads", "main", "baseline", "eight heads of width 16 instead of four of 32",
            config=dict(num_heads=8)),
    Variant("no_positions", "no positions", "main", "baseline", "no positional information at all",
            config=dict(positional="none")),
    Variant("sinusoidal", "sinusoidal positions", "main", "baseline",
            "the paper's sinusoids added to the embeddings instead of learned positions",
            config=dict(positional="sinusoidal")),
    Variant("rotary", "rotary positions", "main", "baseline",
            "queries and keys rotated by position instead of learned positions", config=dict(positional="rotary")),
    Variant("no_residual", "no residual", "main", "baseline", "no residual connections: x = Sublayer(x)",
            config=dict(residual=False)),
    Variant("no_layer_norm", "no layer norm", "main", "baseline", "no LayerNorm anywhere",
            config=dict(layer_norm=False)),
    Variant("post_norm", "post-norm", "main", "baseline", "the paper's post-norm layers instead of pre-norm",
            config=dict(norm_first=False)),
    Variant("post_norm_no_warmup", "post-norm, no warm-up", "main", "post_norm",
            "post-norm, and the peak learning rate from the first step",
            config=dict(norm_first=False), train=dict(NO_WARMUP)),
    Variant("no_warmup", "no warm-up", "main", "baseline", "the peak learning rate from the first step",
            train=dict(NO_WARMUP)),
    Variant("no_warmup_long_decay", "no warm-up, long cosine", "main", "baseline",
            "two changes: no warm-up, and the cosine stretched over all 600 steps (lower rates from step 100)",
            train=dict(LONG_DECAY), also="decay_from"),
    Variant("post_norm_no_warmup_long_decay", "post-norm, no warm-up, long cosine", "main", "post_norm",
            "post-norm; two changes: no warm-up, and the cosine stretched over all 600 steps",
            config=dict(norm_first=False), train=dict(LONG_DECAY), also="decay_from"),
    Variant("label_smoothing", "label smoothing 0.1", "main", "baseline",
            "trained against targets smoothed with epsilon = 0.1", train=dict(smoothing=0.1)),
    Variant("untied", "untied output", "main", "baseline", "the output layer has its own matrix",
            config=dict(tie_output=False)),
    Variant("deep_pre", "12 layers, pre-norm", "deep", "deep_pre",
            "12 layers of width 64, pre-norm, warm-up 100"),
    Variant("deep_pre_no_warmup_long_decay", "12 layers, pre-norm, no warm-up, long cosine", "deep",
            "deep_pre", "two changes: no warm-up, and the cosine stretched over all 600 steps",
            train=dict(LONG_DECAY), also="decay_from"),
    Variant("deep_post", "12 layers, post-norm", "deep", "deep_pre", "post-norm layers",
            config=dict(norm_first=False)),
    Variant("deep_post_no_warmup_long_decay", "12 layers, post-norm, no warm-up, long cosine", "deep",
            "deep_post", "post-norm; two changes: no warm-up, and the cosine stretched over all 600 steps",
            config=dict(norm_first=False), train=dict(LONG_DECAY), also="decay_from"),
    Variant("deep6_post_no_warmup_long_decay", "6 layers, post-norm, no warm-up, long cosine", "deep",
            "deep_post_no_warmup_long_decay", "the same stack, 6 layers deep instead of 12",
            config=dict(norm_first=False, num_layers=6), train=dict(LONG_DECAY)),
    Variant("high_lr_baseline", "baseline, lr 2e-3", "high_lr", "high_lr_baseline",
            "the baseline at twice the peak learning rate (2e-3; the floor stays 1e-4)", train=dict(HIGH_LR)),
    Variant("high_lr_rotary", "rotary positions, lr 2e-3", "high_lr", "high_lr_baseline",
            "rotary positions at twice the peak learning rate", config=dict(positional="rotary"),
            train=dict(HIGH_LR)),
    Variant("high_lr_post_norm", "post-norm, lr 2e-3", "high_lr", "high_lr_baseline",
            "post-norm at twice the peak learning rate", config=dict(norm_first=False), train=dict(HIGH_LR)),
    Variant("high_lr_no_scale", "no 1/sqrt(d_k), lr 2e-3", "high_lr", "high_lr_baseline",
            "no attention scaling at twice the peak learning rate", config=dict(attention_scale=False),
            train=dict(HIGH_LR)),
    Variant("reverse_smoothing", "reverse, label smoothing 0.1", "reverse", "reverse_smoothing",
            "chapter 11's model and recipe on the reverse task, label smoothing 0.1", train=dict(smoothing=0.1)),
    Variant("reverse_no_smoothing", "reverse, no label smoothing", "reverse", "reverse_smoothing",
            "the same without label smoothing", train=dict(smoothing=0.0)),
)  # fmt: skip
BY_NAME = {v.name: v for v in VARIANTS}


def variant(name: str) -> Variant:
    """The variant called ``name``, or an error listing the names there are."""
    if name not in BY_NAME:
        raise ValueError(f"variant must be one of {list(BY_NAME)}, got {name!r}")
    return BY_NAME[name]


def model_config(v: Variant) -> tl.TransformerConfig:
    """The configuration of ``v``'s model: its group's model with ``v.config`` changed."""
    if v.group == "reverse":
        return tl.TransformerConfig.preset("tiny", src_vocab_size=13, tgt_vocab_size=13,
                                           **{**REVERSE_MODEL, **v.config})  # fmt: skip
    sizes = DEEP_MODEL if v.group == "deep" else LM_MODEL
    return tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=65, **{**sizes, **v.config})


def missing_switches(v: Variant) -> list[str]:
    """What ``v`` needs that this version of the library lacks (empty: it can run).

    A config field that does not exist is named; a value the library refuses (a kind of
    positions it does not know) gives the library's own error.
    """
    fields = {f.name for f in dataclasses.fields(tl.TransformerConfig)}
    missing = [k for k in v.config if k not in fields]
    if not missing:
        try:
            model_config(v)
        except ValueError as error:
            missing.append(str(error))
    return missing


def settings(v: Variant, steps: int | None = None) -> dict[str, Any]:
    """Everything that defines a run of ``v`` except its seed: the whole model configuration
    (``tl.TransformerConfig(**settings["model"])`` rebuilds it) and the training settings."""
    base = REVERSE if v.group == "reverse" else LM
    train = {**base, "smoothing": 0.0, **v.train}
    if steps is not None:  # a shorter (or longer) budget keeps the warm-up's share of it
        for key in ("warmup_steps", "decay_from"):
            if key in train:
                train[key] = round(train[key] * steps / train["steps"])
        train["steps"] = steps
    return {"model": dataclasses.asdict(model_config(v)), "training": json.loads(json.dumps(train))}


def same_settings(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a finished run's settings are ``now``'s: a config field the library gained after the
    run (absent from its record) counts as that field's default, so a new switch reruns nothing."""
    defaults = dataclasses.asdict(tl.TransformerConfig(src_vocab_size=1, tgt_vocab_size=1))
    model = {**{k: defaults[k] for k in now["model"].keys() - recorded["model"].keys()}, **recorded["model"]}
    return model == now["model"] and recorded["training"] == now["training"]


def schedule(t: dict[str, Any]):
    """The learning rate at each step of a language model's run with training settings ``t``.

    ``cosine_lr``'s warm-up and cosine, except that the cosine starts at ``decay_from`` (the
    baseline's end of warm-up) whatever the warm-up: before it, after any warm-up, the rate
    holds at its peak. With ``decay_from == warmup_steps`` this is ``cosine_lr`` itself.
    """
    lr, warmup, start, steps, floor = t["lr"], t["warmup_steps"], t["decay_from"], t["steps"], t["min_lr"]
    if not 0 <= warmup <= start < steps:
        raise ValueError(f"decay_from must be in [warmup_steps={warmup}, steps={steps}), got {start}")

    def rate(step: int) -> float:
        if step < warmup:
            return tl.optim.cosine_lr(step, lr, warmup, steps, floor)
        return tl.optim.cosine_lr(max(step, start), lr, start, steps, floor)

    return rate


# --------------------------------------------------------------------------------------------------
# measuring


def loss_and_accuracy(
    model: torch.nn.Module, data: TextDataset, num_batches: int = 200, batch_size: int = 12, seed: int = EVAL_SEED
) -> tuple[float, float]:
    """A language model's mean next-token loss (nats) and top-1 accuracy on fixed random windows.

    The windows are ``language_model_loss``'s (``data.loader(batch_size, num_batches, seed)``)
    and the loss is the same number; the accuracy is the share of positions whose most
    probable next token is the right one.
    """
    was_training = model.training
    model.eval()
    total, right, count = 0.0, 0, 0
    with torch.no_grad():
        for batch in data.loader(batch_size, num_batches, seed):
            batch = batch.to(_device_of(model))
            log_probs = model(batch.tgt_in)  # (batch, T, V)
            total += F.nll_loss(log_probs.flatten(0, 1), batch.tgt_out.flatten(), reduction="sum").item()
            right += int((log_probs.argmax(-1) == batch.tgt_out).sum())
            count += batch.tgt_out.numel()
    model.train(was_training)
    return total / count, right / count


def seq2seq_loss_and_accuracy(model: torch.nn.Module, data) -> tuple[float, float]:
    """A sequence-to-sequence model's held-out loss (nats per target token, no smoothing) and token accuracy.

    Teacher forcing, as in training: every target position is predicted from the true
    shifted target; padding does not count.
    """
    model.eval()
    total, right, count = 0.0, 0, 0
    with torch.no_grad():
        for batch in data.batches(500, shuffle=False):
            batch = batch.to(_device_of(model))
            log_probs = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, tgt_len, V)
            real = batch.tgt_out != PAD_ID  # (batch, tgt_len)
            total += F.nll_loss(log_probs.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                                reduction="sum").item()  # fmt: skip
            right += int(((log_probs.argmax(-1) == batch.tgt_out) & real).sum())
            count += int(real.sum())
    return total / count, right / count


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def finite(x: float) -> float | None:
    """``x`` rounded for the results file, or ``None`` if it is not a finite number."""
    return round(x, 4) if math.isfinite(x) else None


# --------------------------------------------------------------------------------------------------
# one run

_DATA: dict[str, Any] = {}


def shakespeare_splits() -> tuple[TextDataset, TextDataset]:
    """The character-level split of chapter 16, read once per process."""
    if "lm" not in _DATA:
        text = shakespeare.read_text()
        _DATA["lm"] = shakespeare.split(text, shakespeare.make_tokenizer(text))
    return _DATA["lm"]


def reverse_splits():
    """Chapter 11's reverse task: 20,000 training sequences of 8 digits and 1,000 held-out ones."""
    if "reverse" not in _DATA:
        n = REVERSE["seq_len"]
        _DATA["reverse"] = tl.make_splits("reverse", REVERSE["num_train"], REVERSE["num_test"],
                                          seed=REVERSE["data_seed"], min_len=n, max_len=n)  # fmt: skip
    return _DATA["reverse"]


def run(
    name: str, seed: int, steps: int | None = None, final_batches: int | None = None, device: str = "cpu"
) -> dict[str, Any]:
    """Train variant ``name`` from ``seed`` and measure it; returns the run's record for the results file.

    Args:
        name: a variant's name (``VARIANTS``).
        seed: sets the initial weights (``torch.manual_seed`` before building) and the order
            of the training batches (``tl.train``'s ``seed``).
        steps: the budget (default: the group's, ``STEPS`` or ``REVERSE["steps"]``); the
            warm-up keeps its share of it (100 of 600 steps: 17 of 100).
        final_batches: the batches of the final measurement of a language model (default
            200, ``LM["final_eval_batches"]``; fewer for a quick check).
        device: where to train (``"cpu"``, ``"cuda"``); the record notes it.
    """
    v = variant(name)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    missing = missing_switches(v)
    if missing:
        raise ValueError(f"variant {name!r} needs config switches this library lacks: {missing}")
    s = settings(v, steps)
    t = s["training"]
    if final_batches is not None and v.group != "reverse":
        t["final_eval_batches"] = final_batches
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = tl.build_model(model_config(v)).to(device)
    if v.group == "reverse":
        train_set, test_set = reverse_splits()
        history = tl.train(model, train_set, steps=t["steps"], batch_size=t["batch_size"],
                           warmup_steps=t["warmup_steps"], lr_factor=t["lr_factor"], smoothing=t["smoothing"],
                           eval_data=test_set, eval_every=t["eval_every"], seed=seed, progress=False)  # fmt: skip
        loss, token_accuracy = seq2seq_loss_and_accuracy(model, test_set)
        curve = [{"step": st, "exact match": round(acc, 4), "seconds": round(sec, 2)}
                 for st, acc, sec in zip(history.eval_steps, history.eval_accuracy, history.eval_seconds)]  # fmt: skip
        final = {"exact match": round(history.eval_accuracy[-1], 4), "val loss": finite(loss),
                 "token accuracy": round(token_accuracy, 4)}  # fmt: skip
    else:
        train_set, val_set = shakespeare_splits()
        optimizer = scheduler = None
        if t["decay_from"] != t["warmup_steps"]:  # the cosine does not start where the warm-up ends
            optimizer, _ = tl.optim.make_adamw(model, t["lr"], t["warmup_steps"], t["steps"], t["min_lr"],
                                               t["weight_decay"], tuple(t["betas"]))  # fmt: skip
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(t))
        history = tl.train(model, train_set, steps=t["steps"], batch_size=t["batch_size"],
                           warmup_steps=t["warmup_steps"], lr=t["lr"], min_lr=t["min_lr"],
                           weight_decay=t["weight_decay"], betas=tuple(t["betas"]), clip_norm=t["clip_norm"],
                           smoothing=t["smoothing"], eval_data=val_set, eval_every=t["eval_every"],
                           eval_batches=t["eval_batches"], seed=seed, progress=False,
                           optimizer=optimizer, scheduler=scheduler)  # fmt: skip
        loss, accuracy = loss_and_accuracy(model, val_set, t["final_eval_batches"], t["batch_size"])
        curve = [{"step": st, "val loss": finite(va), "train loss": finite(tr), "seconds": round(sec, 2)}
                 for st, va, tr, sec in zip(history.eval_steps, history.eval_loss, history.eval_train_loss,
                                            history.eval_seconds)]  # fmt: skip
        final = {"val loss": finite(loss), "val accuracy": round(accuracy, 4),
                 "train loss": finite(language_model_loss(model, train_set, 20, t["batch_size"]))}  # fmt: skip
    return {
        "variant": name, "seed": seed, "settings": s, "parameters": tl.count_parameters(model),
        "device": str(device),
        "curve": curve, "final": final,
        "diverged": not all(math.isfinite(x) for x in history.losses),
        "seconds": {"training steps": round(history.train_seconds, 1),
                    "training steps, processor time": round(history.train_cpu_seconds, 1),
                    "whole run": round(time.perf_counter() - start, 1)},
    }  # fmt: skip


def replay(record: dict[str, Any], steps: int) -> list[float | None]:
    """The validation curve of a recorded language-model run, trained again for its first ``steps`` steps.

    The model is rebuilt from the record's own settings (``TransformerConfig(**model)``), seeded as
    ``run`` seeds it, and trained on the record's schedule (the cosine still ends at the recorded
    budget), so the points up to ``steps`` should repeat the record's; the test of the record
    compares them.
    """
    t = record["settings"]["training"]
    if "decay_from" not in t:
        raise ValueError(f"record must be a language model's run, got the settings {sorted(t)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 < steps <= t["steps"]:
        raise ValueError(f"steps must be an int in [1, {t['steps']}], got {steps!r}")
    torch.manual_seed(record["seed"])
    model = tl.build_model(tl.TransformerConfig(**record["settings"]["model"]))
    optimizer, _ = tl.optim.make_adamw(model, t["lr"], t["warmup_steps"], t["steps"], t["min_lr"],
                                       t["weight_decay"], tuple(t["betas"]))  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(t))
    train_set, val_set = shakespeare_splits()
    history = tl.train(model, train_set, steps=steps, batch_size=t["batch_size"], clip_norm=t["clip_norm"],
                       smoothing=t["smoothing"], eval_data=val_set, eval_every=t["eval_every"],
                       eval_batches=t["eval_batches"], seed=record["seed"], progress=False,
                       optimizer=optimizer, scheduler=scheduler)  # fmt: skip
    return [finite(x) for x in history.eval_loss]


def _run_in_worker(name: str, seed: int, steps: int | None, device: str = "cpu") -> dict[str, Any]:
    torch.set_num_threads(1)
    return run(name, seed, steps, device=device)


# --------------------------------------------------------------------------------------------------
# the results file


def run_key(name: str, seed: int) -> str:
    return f"{name}/seed{seed}"


def load(path: Path = RESULTS) -> dict[str, Any]:
    """The results file (its older runs brought to the present form, ``upgrade``), or an empty one."""
    if path.exists():
        return upgrade(json.loads(path.read_text()))
    return {"runs": {}, "invocations": []}


def upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """Bring runs recorded before each run kept its full settings and its commit to the present form.

    Such a run recorded only the model fields that differ from ``TransformerConfig``'s defaults,
    and a training block that also held chapter 16's model sizes (width 128, 4 layers, whatever
    the run's model); its cosine started where its warm-up ended. Its full configuration is
    ``TransformerConfig(**model)``, its training settings are the block without the model's keys
    and with ``decay_from = warmup_steps``, and its commit and edited-tree flag are those of the
    invocation that made it. Runs already in the present form are left as they are.
    """
    for run in results["runs"].values():
        if "commit" in run:  # recorded in the present form
            continue
        model, training = run["settings"]["model"], run["settings"]["training"]
        run["settings"]["model"] = dataclasses.asdict(tl.TransformerConfig(**model))
        for key in MODEL_KEYS:
            training.pop(key, None)
        if "lr_factor" not in training:  # a language model: its cosine started where its warm-up ended
            training.setdefault("decay_from", training["warmup_steps"])
        run["settings recorded as"] = (
            "the model's fields that differ from the defaults, here in full; the "
            "training settings without chapter 16's model sizes"
        )
        versions = results["invocations"][run["invocation"]]["versions"]
        run["commit"] = versions["commit"]
        run["edited files"] = ["transformer_lib"] if versions["library edited since the commit"] else []
        if run["variant"] in LONG_DECAY_NAMES and training.get("decay_from") == 0:
            run["variant"] = LONG_DECAY_NAMES[run["variant"]]
    results["runs"] = {run_key(r["variant"], r["seed"]): r for r in results["runs"].values()}
    return results


def save(results: dict[str, Any], path: Path = RESULTS) -> None:
    """Write atomically (a stopped run never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


#: what a run imports: an edit to any of them, not yet committed, makes a run's commit a partial account
RUN_FILES = (
    "transformer_lib",
    ":(exclude)transformer_lib/records",
    "scripts/ablations.py",
    "scripts/train_shakespeare.py",
    "scripts/devices.py",
)


def library_state() -> dict[str, Any]:
    """The library's version, the repository commit the runs used, and the files a run imports that
    differ from that commit (``edited files``; empty for a clean tree)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"transformer_lib": importlib.metadata.version("transformer-lib"), "torch": torch.__version__,
            "python": platform.python_version(), "commit": git("rev-parse", "HEAD").strip(),
            "edited files": sorted(line[3:] for line in git("status", "--porcelain", "--", *RUN_FILES).splitlines()),
            "library edited since the commit": bool(git("status", "--porcelain", "--", "transformer_lib",
                                                        ":(exclude)transformer_lib/records"))}  # fmt: skip


def todo(results: dict[str, Any], names: list[str], seeds: list[int], steps: int | None,
         rerun_edited: bool = False) -> list[tuple[str, int]]:
    """The runs not yet in ``results`` with the settings they would have now (and, with
    ``rerun_edited``, those recorded from a tree whose run files differed from its commit)."""
    out = []
    for seed in seeds:  # every variant's first seed first, so that a stopped invocation has them all
        for name in names:
            v = variant(name)
            if missing_switches(v):
                continue
            if to_run(results["runs"].get(run_key(name, seed)), settings(v, steps), rerun_edited):
                out.append((name, seed))
    return out


def to_run(done: dict[str, Any] | None, now: dict[str, Any], rerun_edited: bool = False) -> bool:
    """Whether a run recorded as ``done`` (None: not recorded) must run (again) to have settings ``now``;
    with ``rerun_edited``, also when it was recorded from a tree whose run files differed from its commit."""
    return (done is None or not same_settings(done["settings"], now)
            or bool(rerun_edited and done.get("edited files")))


def describe(results: dict[str, Any]) -> None:
    """Fill in what the runs were (variants, groups' settings, pending switches) in ``results``."""
    results["what"] = (
        "ablations of chapter 16's character-level GPT on tiny Shakespeare (and label smoothing "
        "on chapter 11's reverse task): one change at a time, the same steps, three seeds or more; "
        "each run records its own full settings and its commit"
    )
    results["variants"] = {v.name: {"label": v.label, "group": v.group, "baseline": v.baseline, "what": v.what,
                                    "config": v.config, "train": v.train, "also": v.also}
                           for v in VARIANTS}  # fmt: skip
    results["groups"] = {
        "main": {"model": LM_MODEL, "training": {**LM, "betas": list(LM["betas"])}},
        "deep": {"model": DEEP_MODEL, "training": {**LM, "betas": list(LM["betas"])}},
        "high_lr": {"model": LM_MODEL, "training": {**LM, **HIGH_LR, "betas": list(LM["betas"])}},
        "reverse": {"model": dict(preset="tiny", **REVERSE_MODEL), "training": REVERSE},
    }
    results["measured as"] = {
        "curve": f"mean next-character loss on {LM['eval_batches']} batches of {LM['batch_size']} validation "
        f"windows of {LM['block_size']}, the same windows for every point and run (seed {EVAL_SEED})",
        "final": f"loss and top-1 accuracy on {LM['final_eval_batches']} fixed batches of {LM['batch_size']} "
        "validation windows; reverse task: exact match (greedy) and teacher-forced loss on 1,000 held-out sequences",
    }
    results["pending"] = {v.name: missing_switches(v) for v in VARIANTS if missing_switches(v)}
    results["seeds"] = list(SEEDS)  # every variant's; some have more (``seeds_of``)


# --------------------------------------------------------------------------------------------------
# the table


def seeds_of(results: dict[str, Any], name: str) -> list[int]:
    """The seeds of variant ``name`` in ``results``, in order."""
    return sorted(r["seed"] for r in results["runs"].values() if r["variant"] == name)


def summary(results: dict[str, Any], seeds: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """One row per variant: the mean and standard deviation over the seeds of its final numbers.

    ``seeds``: which (default: every seed the results hold for the variant). The standard
    deviation is the sample one (``statistics.stdev``, n - 1), with no spread if only one
    ran. ``vs baseline`` is the mean of the per-seed differences from the variant's baseline
    over the seeds both have (same seed: same initial draw where the shapes agree, same
    batches), the paired comparison; ``paired`` counts them and ``p`` is the two-sided
    paired t-test's p-value (Student's t with ``paired - 1`` degrees of freedom).
    """
    rows = []
    for v in VARIANTS:
        chosen = seeds_of(results, v.name) if seeds is None else seeds
        runs = [results["runs"].get(run_key(v.name, s)) for s in chosen]
        runs = [r for r in runs if r is not None]
        metric = "exact match" if v.group == "reverse" else "val loss"
        values = [r["final"][metric] for r in runs]
        finite_values = [x for x in values if x is not None]
        row = {"variant": v.name, "label": v.label, "group": v.group, "baseline": v.baseline, "metric": metric,
               "seeds": len(runs), "diverged": sum(r["diverged"] or x is None for r, x in zip(runs, values)),
               "parameters": runs[0]["parameters"] if runs else None,
               "mean": statistics.fmean(finite_values) if finite_values else None,
               "std": statistics.stdev(finite_values) if len(finite_values) > 1 else None}  # fmt: skip
        other = "val loss" if v.group == "reverse" else "val accuracy"
        extra = [r["final"][other] for r in runs if r["final"][other] is not None]
        row[f"mean {other}"] = statistics.fmean(extra) if extra else None
        base = {s: r["final"][metric] for s in seeds_of(results, v.baseline)
                if (r := results["runs"].get(run_key(v.baseline, s))) is not None}  # fmt: skip
        diffs = [r["final"][metric] - base[r["seed"]] for r in runs
                 if r["final"][metric] is not None and base.get(r["seed"]) is not None]  # fmt: skip
        compared = diffs and v.name != v.baseline
        row["vs baseline"] = statistics.fmean(diffs) if compared else None
        row["paired"] = len(diffs) if compared else 0
        row["p"] = None
        if compared and len(diffs) > 1 and statistics.stdev(diffs) > 0:
            row["p"] = float(scipy.stats.ttest_1samp(diffs, 0.0).pvalue)
        rows.append(row)
    return rows


def table(results: dict[str, Any]) -> str:
    """The summary as plain text."""

    def num(x: float | None, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    lines = [f"{'variant':<46} {'seeds':>5} {'mean':>7} {'std':>6} {'vs base':>8} {'p':>6} {'other':>7} {'params':>9}"]
    for row in summary(results):
        other = row.get("mean val accuracy", row.get("mean val loss"))
        vs = num(row["vs baseline"], "+.3f")
        lines.append(f"{row['label']:<46} {row['seeds']:>5} {num(row['mean']):>7} {num(row['std']):>6} "
                     f"{vs:>8} {num(row['p']):>6} {num(other):>7} {num(row['parameters'], ','):>9}")  # fmt: skip
    lines.append(
        "mean, std: final validation loss over the seeds (reverse: exact match); vs base: paired "
        "difference from the variant's baseline over the seeds both have; p: two-sided paired t-test "
        "(no correction for the many rows); other: validation accuracy (reverse: loss)"
    )
    pending = results.get("pending") or {}
    if pending:
        lines.append(f"pending (the library lacks the switch): {pending}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# the command


def finish(results: dict[str, Any], invocation: dict[str, Any], start: float, path: Path) -> None:
    """Record this invocation's wall time and the load, and the total over all invocations; save."""
    invocation["wall seconds"] = round(time.perf_counter() - start, 1)
    invocation["load average at end (1, 5, 15 min)"] = [round(x, 2) for x in os.getloadavg()]
    results["wall seconds, all invocations"] = round(sum(i["wall seconds"] or 0.0 for i in results["invocations"]), 1)
    save(results, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=[v.name for v in VARIANTS], metavar="NAME",
                        help="which variants (default: all)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=None, help="override every group's budget (for a quick try)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file")
    parser.add_argument("--table", action="store_true", help="print the table from the results file and stop")
    parser.add_argument(
        "--rerun-edited",
        action="store_true",
        help="also run again the recorded runs whose files differed from their commit (their record is replaced)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="add runs to the shipped record although the files a run imports differ from the commit",
    )
    add_device_option(parser)
    args = parser.parse_args(argv)
    for name in args.variants:
        variant(name)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    results = load(args.out)
    if args.table:
        print(table(results))
        return
    versions = library_state()
    if versions["edited files"] and args.out.resolve() == RESULTS.resolve() and not args.allow_dirty:
        raise ValueError(
            f"the files a run imports differ from commit {versions['commit'][:7]}: "
            f"{versions['edited files']}; commit them first, or pass --allow-dirty (the record "
            "then lists them beside each run)"
        )
    start = time.perf_counter()
    describe(results)
    work = todo(results, args.variants, args.seeds, args.steps, args.rerun_edited)
    invocation = {
        "command": "python scripts/ablations.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "versions": versions, "hardware": {**shakespeare.hardware(1), **describe_device(args.device)},
        "parallel runs": args.jobs,
        "threads per run": 1, "runs": len(work), "wall seconds": None,
    }  # fmt: skip
    results["invocations"].append(invocation)
    save(results, args.out)
    print(f"{len(work)} runs to do, {args.jobs} at a time; pending variants: {list(results['pending'])}", flush=True)
    finished: set[tuple[str, int]] = set()
    for attempt in range(3):  # a worker killed from outside (out of memory, ...) breaks the pool: start another
        remaining = [run for run in todo(results, args.variants, args.seeds, args.steps, args.rerun_edited)
                     if run not in finished]  # (a run redone from an edited tree stays "edited")
        if not remaining:
            break
        try:
            # CUDA cannot be used in a forked process: with a GPU the workers are started afresh
            context = multiprocessing.get_context("spawn" if args.device.type == "cuda" else None)
            with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
                futures = [
                    pool.submit(_run_in_worker, name, seed, args.steps, str(args.device)) for name, seed in remaining
                ]
                for future in as_completed(futures):
                    record = future.result()
                    record["invocation"] = len(results["invocations"]) - 1
                    # the code this invocation's processes imported (a later commit does not change them)
                    record["commit"] = versions["commit"]
                    record["edited files"] = versions["edited files"]
                    results["runs"][run_key(record["variant"], record["seed"])] = record
                    finished.add((record["variant"], record["seed"]))
                    finish(results, invocation, start, args.out)
                    print(f"{record['variant']:>22} seed {record['seed']}: {record['final']} "
                          f"({record['seconds']['whole run']:.0f} s)", flush=True)  # fmt: skip
        except BrokenProcessPool as error:
            print(f"a worker stopped ({error}); starting again, attempt {attempt + 2} of 3", flush=True)
    finish(results, invocation, start, args.out)
    print(table(results))


if __name__ == "__main__":
    main()

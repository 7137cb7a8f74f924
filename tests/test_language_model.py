"""Tests of the GPT trained on tiny Shakespeare: the corpus, its split and windows, a short rerun
of the recorded run against its curve, and the checkpoint a chapter loads."""

import hashlib
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.resources import data_path, records_path
from transformer_lib.text import split_text
from transformer_lib.training import language_model_loss

ROOT = Path(__file__).resolve().parent.parent
RESULTS = records_path("shakespeare")
_spec = importlib.util.spec_from_file_location("train_shakespeare", ROOT / "scripts" / "train_shakespeare.py")
shakespeare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shakespeare)
RESULT = json.loads((RESULTS / "char.json").read_text())



@pytest.fixture(scope="module")
def text() -> str:
    return shakespeare.read_text()


@pytest.fixture(scope="module")
def splits(text):
    return shakespeare.split(text, tl.CharTokenizer().train(text))


def test_the_corpus_is_tiny_shakespeare(text, tmp_path):
    data = data_path("tinyshakespeare", "input.txt").read_bytes()
    assert hashlib.md5(data).hexdigest() == "6fb458f1232090904fb40fe944165e91"
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.startswith("First Citizen:\n")
    changed = tmp_path / "input.txt"
    changed.write_bytes(data.replace(b"Citizen", b"citizen", 1))
    with pytest.raises(ValueError, match="md5 6fb458f1232090904fb40fe944165e91.*got [0-9a-f]{32}"):
        shakespeare.read_text(changed)


def test_the_script_trains_on_bpe_tokens_of_any_vocabulary_size():
    """Chapter 15 says the training script takes ``--tokenizer bpe --vocab-size N``; a wheel has no
    scripts, so the check lives here."""
    source = (ROOT / "scripts" / "train_shakespeare.py").read_text(encoding="utf-8")
    assert '"--tokenizer", choices=("char", "bpe")' in source
    assert 'parser.add_argument("--vocab-size", type=int' in source


def test_the_split_is_90_10_by_position(text, splits):
    train, val = splits
    tokenizer = tl.CharTokenizer().train(text)
    assert (len(train.ids), len(val.ids)) == (1_003_854, 111_540)
    assert tokenizer.decode(train.ids) == text[:1_003_854]  # the first 90 %
    assert tokenizer.decode(val.ids) == text[1_003_854:]  # the last 10 %
    assert len(train) == 1_003_854 - 64 and len(val) == 111_540 - 64
    by_ids = split_text(tokenizer.encode(text), 64)  # the library's split of the whole text's ids
    assert torch.equal(by_ids[0].ids, train.ids) and torch.equal(by_ids[1].ids, val.ids)


def test_windows_are_seeded_and_shifted_by_one(text, splits):
    train, _ = splits
    tokenizer = tl.CharTokenizer().train(text)
    first = [b.tgt_in for b in train.loader(12, 3, seed=0)]
    assert all(torch.equal(a.tgt_in, b) for a, b in zip(train.loader(12, 3, seed=0), first))
    assert not torch.equal(next(iter(train.loader(12, 3, seed=1))).tgt_in, first[0])
    batch = next(iter(train.loader(12, 1, seed=0)))
    for x, y in zip(batch.tgt_in, batch.tgt_out):
        window = tokenizer.decode(torch.cat([x, y[-1:]]))
        assert window in text[:1_003_854] and tokenizer.decode(y) == window[1:]


def test_the_recorded_run_reached_nanogpts_loss():
    settings = RESULT["settings"]
    assert {k: settings[k] for k in ("block_size", "batch_size", "d_model", "num_heads", "num_layers", "d_ff")} == {
        "block_size": 64, "batch_size": 12, "d_model": 128, "num_heads": 4, "num_layers": 4, "d_ff": 512,
    }  # fmt: skip
    assert (settings["steps"], settings["lr"], settings["min_lr"], settings["warmup_steps"]) == (2000, 1e-3, 1e-4, 100)
    assert settings["dropout"] == 0.0 and settings["weight_decay"] == 0.1 and settings["betas"] == [0.9, 0.99]
    assert RESULT["final"]["validation loss, 200 random batches of 12"] <= 1.88
    curve = RESULT["curve"]
    assert [p["step"] for p in curve] == list(range(0, 2001, 100))
    assert curve[-1]["val loss"] < curve[len(curve) // 2]["val loss"] < curve[0]["val loss"] - 2.0
    assert (RESULTS / RESULT["checkpoint"]["file"]).stat().st_size < 5e6


@pytest.mark.parametrize("init, seed", [("xavier", 1), ("xavier", 2), ("gpt2", 0), ("gpt2", 1), ("gpt2", 2)])
def test_each_seed_record_says_what_ran(init, seed):
    """Chapter 16 pairs these runs with char.json seed by seed: each differs from it in its seed and
    its initialisation alone, ships no checkpoint, and its command repeats it."""
    name = f"char_seed{seed}" if init == "xavier" else f"char_gpt2_seed{seed}"
    record = json.loads((RESULTS / f"{name}.json").read_text())
    assert record["seed"] == seed and record["settings"]["init"] == init
    assert record["command"] == (
        f"python scripts/train_shakespeare.py --steps 2000 --threads 1 --seed {seed} --tokenizer char"
        f" --init {init} --name {name} --no-checkpoint"
    )
    assert {k: v for k, v in record["settings"].items() if k != "init"} == RESULT["settings"]
    assert record["checkpoint"] is None and not (RESULTS / f"{name}.pt").exists()
    assert [p["step"] for p in record["curve"]] == list(range(0, 2001, 100))


@pytest.mark.slow
def test_a_short_rerun_follows_the_recorded_curve(one_thread, splits):
    # the recorded run's first 100 steps again: same seed, same schedule (cosine over 2,000 steps)
    train, val = splits
    seed, steps = RESULT["seed"], RESULT["settings"]["steps"]
    model = shakespeare.build(RESULT["settings"]["vocab_size"], seed=seed)
    history = shakespeare.run_training(model, train, val, 100, seed=seed, decay_steps=steps, progress=False)
    recorded = {p["step"]: p for p in RESULT["curve"]}
    assert history.eval_steps == [0, 100]
    for step, val_loss, train_loss in zip(history.eval_steps, history.eval_loss, history.eval_train_loss):
        assert val_loss == pytest.approx(recorded[step]["val loss"], abs=0.02), step
        assert train_loss == pytest.approx(recorded[step]["train loss"], abs=0.02), step
    assert history.eval_loss[1] < history.eval_loss[0] - 1.0  # it learns: from ~4.8 to ~2.7 nats


@pytest.mark.slow
def test_the_script_records_the_initialisation_it_used(tmp_path, monkeypatch, one_thread):
    # the shortest run the schedule allows: the cosine must end after the 100 warm-up steps
    argv = ["train_shakespeare.py", "--steps", "101", "--init", "gpt2", "--no-checkpoint", "--no-progress",
            "--name", "short", "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    shakespeare.main()
    record = json.loads((tmp_path / "short.json").read_text())
    assert record["settings"]["init"] == "gpt2" and "--init gpt2" in record["command"]
    assert record["settings"]["steps"] == 101 and record["seed"] == 0
    assert record["checkpoint"] is None and [p.name for p in tmp_path.iterdir()] == ["short.json"]
    # nanoGPT's draw starts near log 65 + 128 * 0.02**2 / 2 = 4.20 (the library's Xavier draw: 4.81)
    assert record["curve"][0]["val loss"] == pytest.approx(math.log(65) + 128 * 0.02**2 / 2, abs=0.03)


def test_both_initialisations_train_on_the_same_batches(splits, one_thread):
    """The chapter pairs the two initialisations seed by seed: the seed draws the windows with its own
    generator, so the initial weights change nothing in the batches."""
    train, val = splits
    seen, first = {}, {}
    for init in ("xavier", "gpt2"):
        model = shakespeare.build(65, seed=1, init=init)
        first[init] = model.decoder.layers[0].self_attn.W_q.weight.detach().clone()
        inputs = seen[init] = []
        model.register_forward_pre_hook(lambda m, args, inputs=inputs: inputs.append(args[0]) if m.training else None)
        shakespeare.run_training(model, train, val, 3, seed=1, decay_steps=2000, progress=False)
    assert len(seen["xavier"]) == 3 and all(torch.equal(a, b) for a, b in zip(seen["xavier"], seen["gpt2"]))
    assert first["xavier"].std() > 3 * first["gpt2"].std()  # different weights, the same windows


def test_the_checkpoint_gives_the_recorded_validation_loss(splits):
    _, val = splits
    checkpoint = RESULT["checkpoint"]
    model, history = tl.load_checkpoint(RESULTS / checkpoint["file"])
    assert isinstance(model, tl.DecoderOnlyModel) and history.steps == RESULT["settings"]["steps"]
    tokenizer = tl.CharTokenizer.load(RESULTS / checkpoint["tokenizer"])
    assert tokenizer.vocab_size == model.config.tgt_vocab_size == 65
    loss = language_model_loss(model, val, 20, 12)  # the fixed evaluation windows of the curve
    assert loss == pytest.approx(checkpoint["validation loss, 20 random batches of 12, float16 weights"], abs=1e-4)
    # float16 storage moves the loss by far less than training does between two points of the curve
    assert loss == pytest.approx(checkpoint["validation loss, 20 random batches of 12, float32 weights"], abs=2e-3)

"""Tests for transformer_lib.translation: the corpus, tokens and back, the split, BLEU, the shipped model."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch

import transformer_lib as tl
from transformer_lib import translation as tr
from transformer_lib.resources import records_path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = records_path("translation")


@pytest.fixture(scope="module")
def pairs():
    return tr.load_pairs()


@pytest.fixture(scope="module")
def data(pairs):
    return tr.make_translation_data(pairs)


# --------------------------------------------------------------------------- the corpus


def test_the_corpus_is_the_published_file(pairs):
    with gzip.open(tr.DATA_FILE, "rb") as f:
        assert hashlib.md5(f.read()).hexdigest() == tr.DATA_MD5 == "962d675ce104c1e2763bb6c5bb2da1fe"
    assert len(pairs) == 76_036
    assert len({en for en, _ in pairs}) == 49_196
    assert pairs[0] == ("Go.", "Va !")


def test_load_pairs_refuses_a_malformed_file(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Go.\tVa !\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2 of bad.tsv must be english<TAB>french, got 'no tab here'"):
        tr.load_pairs(bad)
    with pytest.raises(FileNotFoundError, match="path must be an existing file"):
        tr.load_pairs(tmp_path / "missing.tsv")


# --------------------------------------------------------------------------- normalising and tokenising


@pytest.mark.parametrize("text, lang, expected", [
    ("I’m  home.", "en", "i'm home."),
    ("Where is it ?", "en", "where is it?"),
    ("Va\u202f!", "fr", "va !"),  # narrow no-break space
    ("Recule\u2009!", "fr", "recule !"),  # thin space
    ("Quoi?", "fr", "quoi ?"),  # French typography: a space before ? ! : ;
    ("Il est 3:30.", "fr", "il est 3:30."),  # ... but not inside a time
    ("«Bonjour»", "fr", "« bonjour »"),
    ("C’est l\u2019été", "fr", "c'est l'été"),
    ("E\u0301te\u0301", "fr", "été"),  # decomposed accents -> one code point each (NFC)
])  # fmt: skip
def test_normalise(text, lang, expected):
    assert tr.normalise(text, lang) == expected


@pytest.mark.parametrize("text, lang, tokens", [
    ("Go.", "en", ["go", "."]),
    ("He's calm.", "en", ["he", "'s", "calm", "."]),
    ("Don't you see?", "en", ["do", "n't", "you", "see", "?"]),
    ("I can't.", "en", ["i", "ca", "n't", "."]),
    ("It's five o'clock.", "en", ["it", "'s", "five", "o'clock", "."]),
    ('"Says who?" "Says me."', "en", ['"', "says", "who", "?", '"', '"', "says", "me", ".", '"']),
    ("J'ai perdu.", "fr", ["j'", "ai", "perdu", "."]),
    ("Qu'est-ce que c'est ?", "fr", ["qu'", "est", "-ce", "que", "c'", "est", "?"]),
    ("Y a-t-il quelqu'un ?", "fr", ["y", "a", "-t-il", "quelqu'un", "?"]),
    ("Donne-le-moi.", "fr", ["donne", "-le", "-moi", "."]),
    ("Aujourd'hui, jusqu'à midi.", "fr", ["aujourd'hui", ",", "jusqu'", "à", "midi", "."]),
    ("Peut-être.", "fr", ["peut-être", "."]),
])  # fmt: skip
def test_tokenise_examples(text, lang, tokens):
    assert tr.tokenise(text, lang) == tokens
    assert tr.detokenise(tokens, lang) == tr.normalise(text, lang)


def test_detokenise_tokenise_is_normalise_for_every_sentence_of_the_corpus(pairs):
    broken = [
        (lang, s)
        for en, fr in pairs
        for lang, s in (("en", en), ("fr", fr))
        if tr.detokenise(tr.tokenise(s, lang), lang) != tr.normalise(s, lang)
    ]
    assert broken == []


def test_normalise_is_idempotent_on_the_corpus(pairs):
    # the held-out sources are stored normalised and normalised again when translated
    assert all(tr.normalise(tr.normalise(s, lang), lang) == tr.normalise(s, lang)
               for pair in pairs for lang, s in zip(("en", "fr"), pair))  # fmt: skip


def test_french_detokenisation_follows_the_references(pairs):
    # most French references write a space (of some kind) before ? and !, as detokenise does
    spaced = sum(s[-2].isspace() for _, s in pairs if s[-1] in "?!")
    unspaced = sum(s[-2].isalnum() for _, s in pairs if s[-1] in "?!")
    assert spaced > 50 * unspaced > 0
    assert tr.detokenise(["tu", "viens", "?"], "fr") == "tu viens ?"
    assert tr.detokenise(["tu", "viens", "?"], "en") == "tu viens?"
    # sacreBLEU's 13a tokenisation splits ? off either way, so the spacing cannot move BLEU
    assert sacrebleu.corpus_bleu(["tu viens demain?"], [["tu viens demain ?"]]).score == pytest.approx(100)


def test_tokenise_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"lang must be one of \['en', 'fr'\], got 'de'"):
        tr.tokenise("Hallo", "de")
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tr.normalise(["Go."], "en")
    with pytest.raises(TypeError, match="tokens must be a sequence of token strings, got one str"):
        tr.detokenise("va !", "fr")


# --------------------------------------------------------------------------- vocabularies


def test_build_vocab_orders_by_frequency_and_cuts_rare_tokens():
    vocab = tr.build_vocab([["b", "a", "b"], ["c", "a", "b"], ["d"]], min_freq=2)
    assert vocab.id_to_token == ["<pad>", "<bos>", "<eos>", "<unk>", "b", "a"]
    assert vocab.token_to_id[tr.UNK] == tr.UNK_ID
    assert tr.known_tokens(["a", "c", "b"], vocab) == ("a", "<unk>", "b")
    with pytest.raises(ValueError, match="min_freq must be a positive integer, got 0"):
        tr.build_vocab([["a"]], min_freq=0)
    with pytest.raises(ValueError, match="vocab must hold <unk>"):
        tr.known_tokens(["a"], tl.Vocab(["a"]))


def test_vocabularies_come_from_the_training_set_only(data):
    train_tokens = {t for en, _ in data.splits["train"] for t in tr.tokenise(en, "en")}
    assert set(data.src_vocab.tokens) - {tr.UNK} <= train_tokens
    held_out = data.dataset("test")
    assert any(tr.UNK in src for src, _ in held_out.pairs)  # held-out words unseen in training


# --------------------------------------------------------------------------- the split


def test_no_english_sentence_is_in_two_sets(data, pairs):
    sides = {name: {tr.normalise(en, "en") for en, _ in split} for name, split in data.splits.items()}
    assert not sides["train"] & sides["valid"]
    assert not sides["train"] & sides["test"]
    assert not sides["valid"] & sides["test"]
    assert len(sides["valid"]) == len(sides["test"]) == 2000
    # every pair is in exactly one set, so all of a sentence's translations went with it
    assert sorted(p for split in data.splits.values() for p in split) == sorted(pairs)


def test_the_split_is_seeded(pairs):
    first = tr.split_by_source(pairs, 2000, 2000, seed=0)
    assert first == tr.split_by_source(pairs, 2000, 2000, seed=0)
    assert first["test"] != tr.split_by_source(pairs, 2000, 2000, seed=1)["test"]


def test_references_hold_every_translation(data):
    sources, references = data.references("test")
    assert len(sources) == 2000
    by_source = {}
    for en, fr in data.splits["test"]:
        by_source.setdefault(tr.normalise(en, "en"), set()).add(tr.normalise(fr, "fr"))
    assert {s: set(r) for s, r in zip(sources, references)} == by_source
    assert max(len(r) for r in references) > 1  # several translations for some sentences


def test_split_errors_name_the_argument(pairs):
    with pytest.raises(ValueError, match="num_valid \\+ num_test must leave training sentences"):
        tr.split_by_source(pairs, 30_000, 30_000)


# --------------------------------------------------------------------------- BLEU


def test_corpus_bleu_against_all_references_by_hand():
    # sentence 1 matches 5 of 6 unigrams and every higher n-gram, each in one of its two
    # references; sentence 2 is exact; brevity penalty 1 (closest lengths 6 and 4)
    hyps = ["the cat sat on the mat", "a b c d"]
    refs = [["the cat sat on a mat", "a cat sat on the mat"], ["a b c d"]]
    score = tr.corpus_bleu(hyps, refs)
    assert score.counts == [9, 8, 6, 4] and score.totals == [10, 8, 6, 4]
    assert score.score == pytest.approx(100 * 0.9**0.25)


def test_corpus_bleu_with_fewer_references_uses_none_not_empty_strings():
    # sentence 2 is short: its only reference has 6 words, so the brevity penalty is
    # exp(1 - 12/9); an empty-string reference (length 0, as close as 6 to 3) would hide it
    hyps = ["the cat sat on the mat", "a b c"]
    refs = [["the cat sat on a mat", "a cat sat on the mat"], ["a b c d e f"]]
    expected = 100 * math.exp(1 - 12 / 9) * (8 / 9) ** 0.25
    assert tr.corpus_bleu(hyps, refs).score == pytest.approx(expected)
    padded_with_empty = sacrebleu.corpus_bleu(hyps, [[refs[0][0], refs[1][0]], [refs[0][1], ""]])
    assert padded_with_empty.score == pytest.approx(100 * (8 / 9) ** 0.25)  # no brevity penalty: wrong


def test_corpus_bleu_equals_sacrebleu_with_equal_reference_counts():
    hyps = ["il est calme .", "je suis chez moi .", "va !"]
    refs = [["il est calme .", "il est tranquille ."], ["je suis à la maison .", "je suis chez moi ."],
            ["bouge !", "va !"]]  # fmt: skip
    streams = [[r[0] for r in refs], [r[1] for r in refs]]
    assert tr.corpus_bleu(hyps, refs).score == sacrebleu.corpus_bleu(hyps, streams).score


def test_bleu_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"references must hold one list per hypothesis \(2\), got 1"):
        tr.corpus_bleu(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"references\[0\] must be a non-empty list of str"):
        tr.corpus_bleu(["a"], [[]])
    with pytest.raises(ValueError, match=r"references\[0\] must be a non-empty list of str, got 'a'"):
        tr.corpus_bleu(["a"], ["a"])


def test_sentence_bleu_is_sacrebleus():
    assert tr.sentence_bleu("il est calme .", ["il est calme .", "il est tranquille ."]) == pytest.approx(1)
    hyp, refs = "il est très calme .", ["il est calme ."]
    assert tr.sentence_bleu(hyp, refs) == pytest.approx(sacrebleu.sentence_bleu(hyp, refs).score / 100)
    assert 0 < tr.sentence_bleu(hyp, refs) < 1


def test_d2l_preprocess_splits_punctuation_only():
    assert tr.d2l_preprocess("J'ai perdu.") == "j'ai perdu ."
    assert tr.d2l_preprocess("Va\u202f!") == "va !"
    assert tr.d2l_preprocess("Hi, you!") == "hi , you !"
    assert tr.d2l_bleu(tr.d2l_preprocess("J'ai perdu."), "j'ai perdu .") == 1.0


def test_d2l_bleu_by_hand():
    assert tr.d2l_bleu("va !", "va !") == 1.0
    # 2 of 3 unigrams and 1 of 2 bigrams: (2/3)^(1/2) (1/2)^(1/4) = 0.687
    assert tr.d2l_bleu("tu perdu .", "j'ai perdu .") == pytest.approx((2 / 3) ** 0.5 * 0.5**0.25)
    assert round(tr.d2l_bleu("tu perdu .", "j'ai perdu ."), 3) == 0.687
    # 3 of 4 unigrams, 1 of 3 bigrams: 0.658
    assert round(tr.d2l_bleu("il est paresseux .", "il est calme ."), 3) == 0.658
    # too short: brevity penalty exp(1 - 4/2); no bigram matches gives 0 without smoothing
    assert tr.d2l_bleu("il est", "il est calme .") == pytest.approx(math.exp(-1))
    assert tr.d2l_bleu("est il", "il est calme .") == 0.0


# --------------------------------------------------------------------------- models: translate, save, load


def tiny_model(data) -> tl.Transformer:
    torch.manual_seed(0)
    config = tl.TransformerConfig(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab),
                                  d_model=32, num_heads=2, num_layers=1, d_ff=64, dropout=0.0)  # fmt: skip
    return tl.build_model(config)


def test_translate_keeps_the_order_and_beam_one_is_greedy(data):
    model = tiny_model(data)
    sentences = ["I'm home.", "Go.", "Where is the cat?", "He's calm."]
    greedy = tr.translate(model, sentences, data.src_vocab, data.tgt_vocab, batch_size=2, max_len=6)
    one_by_one = [tr.translate(model, [s], data.src_vocab, data.tgt_vocab, max_len=6)[0] for s in sentences]
    assert greedy == one_by_one  # sorting by length for batching does not mix the answers up
    beam1 = tr.translate(model, sentences, data.src_vocab, data.tgt_vocab, beam_size=1, max_len=6)
    assert beam1 == greedy
    with pytest.raises(TypeError, match="sentences must be a list of str, got one str"):
        tr.translate(model, "Go.", data.src_vocab, data.tgt_vocab)


def test_next_token_is_the_last_position_without_unk(data):
    model = tiny_model(data).eval()
    batch = tl.make_batch([(data.src_vocab.encode(["go", "."]), data.tgt_vocab.encode(["va", "!"]))])
    with torch.no_grad():
        full = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)[:, -1]  # (1, V)
        memory = model.encode(batch.src, batch.src_mask)
        last = tr.NextToken(model).decode(batch.tgt_in, memory, batch.src_mask, batch.tgt_mask)[:, -1]
    assert last[0, tr.UNK_ID] == -math.inf
    keep = torch.arange(full.shape[-1]) != tr.UNK_ID
    torch.testing.assert_close(last[:, keep], full[:, keep])
    # an untrained model's favourite word, once banned, is never written
    favourite = int(full.argmax())
    banned = tr.NextToken(model, banned=[favourite])
    out = tl.greedy_decode(banned, batch.src, 5, src_mask=batch.src_mask)
    assert favourite not in out.tolist()[0]


def test_train_with_bleu_times_the_steps_not_the_validation_scoring(data, sleepy_encoder):
    """The curve's ``minutes`` are wall time of the training steps; the BLEU rounds between them are left out."""
    model = tiny_model(data)
    waits = sleepy_encoder(model, in_steps=0.05, in_evaluation=0.5)  # in the steps, in the validation translations
    history, curve = tr.train_with_bleu(model, data, steps=4, eval_every=2, valid_sentences=4, batch_size=8,
                                        warmup_steps=2, seed=0, progress=False)  # fmt: skip
    stepping = sum(waits[True])
    assert len(waits[True]) == 4 and len(waits[False]) >= 2  # one pass a step, at least one a round
    assert [point["step"] for point in curve] == [2, 4]
    seconds = curve[-1]["minutes"] * 60  # rounded to 0.001 minute
    assert seconds == pytest.approx(history.train_seconds, abs=0.04)
    assert stepping - 0.04 <= seconds < stepping + min(waits[False])  # the steps' sleep in, no round's
    assert curve[-1]["cpu_minutes"] * 60 < 0.5 * stepping  # sleeping is not processor time


def test_save_and_load_a_translation_model(data, tmp_path):
    model = tiny_model(data)
    path = tmp_path / "model.pt"
    tr.save_translation_model(path, model, data.src_vocab, data.tgt_vocab)
    loaded, src_vocab, tgt_vocab, history = tr.load_translation_model(path)
    assert (src_vocab, tgt_vocab, history) == (data.src_vocab, data.tgt_vocab, None)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, a.half().float(), rtol=0, atol=0, msg=name)  # stored in float16
    assert loaded.generator.proj.weight is loaded.decoder.embedding.token_embedding.weight  # still tied
    tl.save_checkpoint(tmp_path / "plain.pt", model)
    with pytest.raises(ValueError, match="path must be a file written by save_translation_model"):
        tr.load_translation_model(tmp_path / "plain.pt")


# --------------------------------------------------------------------------- the shipped model and its record


@pytest.fixture(scope="module")
def recorded():
    return json.loads((RESULTS / "results.json").read_text())


def test_the_record_matches_the_data_and_the_goal(recorded, data):
    assert {k: recorded["data"][k] for k in ("min_freq", "num_valid", "num_test", "seed")} == {
        "min_freq": data.min_freq,
        "num_valid": 2000,
        "num_test": 2000,
        "seed": 0,
    }
    assert recorded["data"]["src_vocab"] == len(data.src_vocab)
    assert recorded["data"]["tgt_vocab"] == len(data.tgt_vocab)
    assert recorded["test"]["greedy"]["signature"].startswith("nrefs:var|case:mixed|eff:no|tok:13a")
    steps = [point["step"] for point in recorded["curve"]]
    assert steps == sorted(steps) and steps[-1] == recorded["training"]["steps"]
    minutes = [point["minutes"] for point in recorded["curve"]]
    assert minutes == sorted(minutes) and minutes[-1] == pytest.approx(recorded["train_minutes"], abs=0.01)
    assert all(0 <= point["valid_bleu"] <= 100 for point in recorded["curve"])
    assert set(recorded["test"]) == {"greedy", "beam1", "beam2", "beam4", "beam8"}
    greedy, goal = recorded["test"]["greedy"]["bleu"], recorded["goal"]
    assert goal["met"] == (
        greedy >= goal["test_bleu"] == 30 and recorded["train_minutes"] <= goal["train_minutes"] == 10
    )


def test_the_record_is_of_the_script_as_it_is(recorded):
    """The shipped run's settings are the script's: a change to the script needs a new run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_translation", ROOT / "scripts" / "train_translation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert {k: recorded["config"][k] for k in script.CONFIG} == script.CONFIG
    assert recorded["training"] == script.TRAINING
    assert {k: recorded["data"][k] for k in script.DATA} == script.DATA and recorded["seed"] == script.SEED


def test_the_script_s_beam_settings_and_goal_clock_are_the_chapter_s():
    """Chapter 12 quotes the script's beam settings (alpha is not in the record) and says the goal's
    clock is the training steps' wall time; a wheel has no scripts, so the check lives here."""
    import importlib.util
    import inspect

    spec = importlib.util.spec_from_file_location("train_translation", ROOT / "scripts" / "train_translation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (script.ALPHA, script.BEAMS, script.THREADS) == (0.6, (1, 2, 4, 8), 1)
    assert "history.train_seconds <= 60 * GOAL_MINUTES" in inspect.getsource(script.main)


def test_a_short_retraining_reproduces_the_recorded_losses(recorded, data):
    # the first steps of the recorded run, from the same seed, batches and schedule
    n = 30
    training = recorded["training"]
    torch.manual_seed(recorded["seed"])
    model = tl.build_model(tl.TransformerConfig(**recorded["config"]))
    history, _ = tr.train_with_bleu(
        model, data, steps=n, eval_every=n, valid_sentences=5, batch_size=training["batch_size"],
        warmup_steps=training["warmup_steps"], lr_factor=training["lr_factor"],
        smoothing=training["smoothing"], seed=training["seed"], progress=False,
    )  # fmt: skip
    first = recorded["first_losses"][:n]
    assert history.losses == pytest.approx(first, rel=2e-3)
    # and it falls, as recorded: from 9.03 to 8.67 nats (means of the first and last five steps),
    # slowly, the learning rate still warming up
    assert sum(history.losses[-5:]) / 5 < sum(history.losses[:5]) / 5 - 0.3


def test_the_shipped_model_scores_as_recorded(recorded, data):
    path = RESULTS / "model.pt"
    assert path.stat().st_size < 10e6  # float16 weights
    model, src_vocab, tgt_vocab, history = tr.load_translation_model(path)
    assert (src_vocab, tgt_vocab) == (data.src_vocab, data.tgt_vocab)
    assert history.steps == recorded["training"]["steps"]
    assert tl.count_parameters(model) == recorded["parameters"]
    sources, references = data.references("test")
    hypotheses = tl.translate(model, sources, src_vocab, tgt_vocab)
    assert round(tl.corpus_bleu(hypotheses, references).score, 2) == recorded["test"]["greedy"]["bleu"]


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_translation", ROOT / "scripts" / "train_translation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_decode_only_writes_the_translations_and_leaves_the_training_record(data, tmp_path, monkeypatch):
    """``--decode-only`` on six test sentences: the translations file has its fields, one
    translation per test sentence and width, in order, and results.json is left as it was. (The
    shipped model, because an untrained one writes the same tokens whatever the sentence.)"""
    script = _script()
    shutil.copy(RESULTS / "model.pt", tmp_path / "model.pt")
    model, _, _, _ = tr.load_translation_model(tmp_path / "model.pt")
    (tmp_path / "results.json").write_text('{"training": "untouched"}')
    monkeypatch.setattr(script.tr, "make_translation_data", lambda **settings: data)  # no second build
    argv = ["--decode-only", "--out", str(tmp_path), "--beams", "1,2", "--sentences", "6", "--no-progress"]
    script.main(argv)
    assert (tmp_path / "results.json").read_text() == '{"training": "untouched"}'
    record = script.read_translations(tmp_path / script.TRANSLATIONS)
    assert record["command"] == "python scripts/train_translation.py " + " ".join(argv)
    assert (record["alpha"], record["beams"], record["sentences"]) == (0.6, [1, 2], 6)
    assert record["data"] == script.DATA and "git_commit" in record
    sources, references = data.references("test")
    hyps = record["translations"]
    assert list(hyps) == ["greedy", "beam1", "beam2"] and all(len(h) == 6 for h in hyps.values())
    assert hyps["greedy"] == tr.translate(model, sources[:6], data.src_vocab, data.tgt_vocab)
    assert len(set(hyps["greedy"])) == 6  # so the order is checked too
    assert hyps["beam2"] == tr.translate(model, sources[:6], data.src_vocab, data.tgt_vocab, beam_size=2)
    assert record["bleu"]["beam2"] == round(tr.corpus_bleu(hyps["beam2"], references[:6]).score, 2)
    with pytest.raises(SystemExit):  # --sentences alone would cut the training record's test set
        script.main(["--sentences", "6", "--out", str(tmp_path)])


def test_the_recorded_translations_score_as_the_record_says(recorded, data):
    """The shipped test translations (``--decode-only``) give results.json's test BLEU, width by
    width, and say what produced them; chapter 12 reads them for its paired bootstrap."""
    script = _script()
    path = RESULTS / script.TRANSLATIONS
    assert path.stat().st_size < 300e3
    record = script.read_translations(path)
    assert record["command"].startswith("python scripts/train_translation.py --decode-only")
    assert (record["alpha"], tuple(record["beams"])) == (script.ALPHA, script.BEAMS)
    assert record["data"] == script.DATA and len(record["git_commit"]) == 40
    _, references = data.references("test")
    assert set(record["translations"]) == set(recorded["test"])
    for name, hyps in record["translations"].items():
        assert len(hyps) == len(references) == record["sentences"] == 2000
        assert round(tr.corpus_bleu(hyps, references).score, 2) == recorded["test"][name]["bleu"], name


# --------------------------------------------------------------------------- the benchmark


def test_the_translation_benchmark_rows(data, tmp_path, rounded_ratio):
    """A tiny model and one short round: only the step row's shape and arithmetic, no real timing."""
    import importlib.util
    import sys

    folder = ROOT / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("bench_translation", folder / "bench_translation.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        config = dict(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab), d_model=16,
                      num_heads=2, num_layers=1, d_ff=32, dropout=0.0)  # fmt: skip
        record = {"data": {"min_freq": data.min_freq, "num_valid": 2000, "num_test": 2000, "seed": 0},
                  "config": config, "training": {"batch_size": 8}, "seed": 0}  # fmt: skip
        (tmp_path / "results.json").write_text(json.dumps(record))
        rows = bench.run(("step",), results=tmp_path, rounds=1, min_run_time=1e-3, num_batches=2)
        with pytest.raises(ValueError, match=r"parts must be among \('shipped', 'step'\), got \['steps'\]"):
            bench.run(("steps",), results=tmp_path)
    finally:
        sys.path.remove(str(folder))
    (row,) = rows
    assert (row["d_model"], row["layers"], row["batch"], row["threads"]) == (16, 1, 8, 1)
    assert row["ours_ms"] > 0 and row["pytorch_ms"] > 0
    assert rounded_ratio(row["ratio"], row["ours_ms"], row["pytorch_ms"], 0.001, 0.01)
    assert row["goal"] == "<= 1.1" and isinstance(row["met"], bool)
    if abs(row["ratio"] - 1.10) > 0.005:  # the goal is read from the unrounded ratio
        assert row["met"] == (row["ratio"] <= 1.10)
    assert float(row["max_difference"]) <= 1e-4

"""Tests of scripts/modern_parts.py: its baseline is chapter 17's, each variant changes only its own parts,
and an invocation records its runs with their settings and commit, and resumes where one stopped."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import transformer_lib as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
_spec = importlib.util.spec_from_file_location("modern_parts", ROOT / "scripts" / "modern_parts.py")
modern = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(modern)
ablations = sys.modules["ablations"]


def test_the_baseline_is_chapter_17s():
    assert modern.settings("baseline") == ablations.settings(ablations.variant("baseline"))
    assert modern.SEEDS == ablations.SEEDS


def test_each_variant_changes_only_its_parts():
    base = dataclasses.asdict(modern.model_config("baseline"))
    for name, (_, _, changes) in modern.VARIANTS.items():
        config = dataclasses.asdict(modern.model_config(name))
        assert {k for k in base if config[k] != base[k]} == set(changes), name
    assert modern.model_config("swiglu").d_ff == 352 == tl.glu_hidden_size(128, multiple_of=32)
    params = {name: tl.count_parameters(modern.model_config(name)) for name in ("baseline", "swiglu")}
    assert abs(params["swiglu"] / params["baseline"] - 1) < 0.03  # the gated width keeps the count


def test_an_invocation_records_and_resumes(tmp_path, monkeypatch):
    calls = []

    def fake_run(name, seed, steps=None):  # the training itself is chapter 17's, tested there
        calls.append((name, seed))
        return {"variant": name, "seed": seed, "settings": modern.settings(name, steps), "parameters": 1,
                "kv cache bytes per token (float32)": 1, "curve": [], "diverged": False,
                "final": {"val loss": 2.0 + seed, "val accuracy": 0.5, "train loss": 2.0},
                "seconds": {"whole run": 0.0}}  # fmt: skip

    monkeypatch.setattr(modern, "run", fake_run)
    out = tmp_path / "results.json"
    modern.main(["--variants", "baseline", "mqa", "--seeds", "0", "1", "--steps", "5", "--out", str(out)])
    assert calls == [("baseline", 0), ("mqa", 0), ("baseline", 1), ("mqa", 1)]
    results = json.loads(out.read_text())
    assert set(results["runs"]) == {"baseline/seed0", "mqa/seed0", "baseline/seed1", "mqa/seed1"}
    assert all(len(r["commit"]) == 40 for r in results["runs"].values())
    modern.main(["--variants", "baseline", "mqa", "--seeds", "0", "1", "--steps", "5", "--out", str(out)])
    assert len(calls) == 4  # nothing left to do
    modern.main(["--variants", "mqa", "--seeds", "0", "--steps", "6", "--out", str(out)])
    assert calls[-1] == ("mqa", 0)  # other settings: run again


def test_rerun_edited_picks_only_runs_recorded_from_an_edited_tree():
    def record(edited):
        return {"settings": modern.settings("mqa"), "edited files": edited}

    results = {"runs": {"mqa/seed0": record([]), "mqa/seed1": record(["scripts/ablations.py"])}}
    assert modern.todo(results, ["mqa"], [0, 1], None) == []
    assert modern.todo(results, ["mqa"], [0, 1], None, rerun_edited=True) == [("mqa", 1)]

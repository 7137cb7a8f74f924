"""The book build script (library-aware cache invalidation, failing-cell reports), nbval on the book's
execution, and the benchmark runner."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("build_book", REPO / "tools" / "build_book.py")
build_book = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_book)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "transformer_lib").mkdir()
    (tmp_path / "transformer_lib" / "core.py").write_text("X = 1\n")
    return tmp_path


def test_library_hash_follows_every_library_file(tmp_path):
    root = _tree(tmp_path)
    first = build_book.library_hash(root)
    assert build_book.library_hash(root) == first
    (root / "transformer_lib" / "core.py").write_text("X = 2\n")
    second = build_book.library_hash(root)
    assert second != first
    (root / "transformer_lib" / "new.py").write_text("")
    third = build_book.library_hash(root)
    assert third != second
    (root / "transformer_lib" / "records").mkdir()
    (root / "transformer_lib" / "records" / "run.json").write_text("{}")
    fourth = build_book.library_hash(root)
    assert fourth != third, "a recorded result is part of the library too"
    (root / "transformer_lib" / "__pycache__").mkdir()
    (root / "transformer_lib" / "__pycache__" / "core.pyc").write_bytes(b"x")
    assert build_book.library_hash(root) == fourth, "compiled files are not the library"


def test_cache_is_cleared_only_when_the_library_changed(tmp_path):
    root = _tree(tmp_path)
    cache = root / "_build" / ".jupyter_cache"
    cache.mkdir(parents=True)
    (root / "_build" / ".library-hash").write_text(build_book.library_hash(root))
    assert not build_book.invalidate_cache_if_library_changed(root)
    assert cache.exists(), "an unchanged library must keep the execution cache"
    (root / "transformer_lib" / "core.py").write_text("X = 3\n")
    assert build_book.invalidate_cache_if_library_changed(root)
    assert not cache.exists(), "a changed library must clear the execution cache"


def test_a_failing_cell_fails_the_build_and_is_named(tmp_path):
    root = _tree(tmp_path)
    widgets = root / build_book.WIDGETS
    widgets.mkdir(parents=True)
    for name in ("embed-amd.js", "require.min.js"):
        (widgets / name).write_text("")
    (root / "_config.yml").write_text(textwrap.dedent("""\
        title: failing cell check
        only_build_toc_files: true
        execute:
          execute_notebooks: cache
        sphinx:
          config:
            html_static_path: ["_book_static"]
            nb_execution_show_tb: true
        """))
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: broken_chapter\n")
    (root / "intro.md").write_text("# Intro\n\nText.\n")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Broken"), nbformat.v4.new_code_cell("ratio = 1 / 0")]
    nbformat.write(nb, root / "broken_chapter.ipynb")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "build_book.py"), "--root", str(root)],
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "execution failed: broken_chapter" in output
    assert "ratio = 1 / 0" in output and "ZeroDivisionError" in output


# ------------------------------------------- nbval on the book's own execution (tools/nbval_replay.py)

def _replay(tmp_path: Path, executed_outputs: list | None) -> subprocess.CompletedProcess:
    """A two-cell notebook whose first cell's output is checked; the cache holds ``executed_outputs``
    (one list per code cell) as its execution, or nothing when None."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    checked = nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1,
                                        metadata={"tags": ["nbval-check-output"]},
                                        outputs=[nbformat.v4.new_output("stream", name="stdout", text="42\n")])
    nb.cells = [checked, nbformat.v4.new_code_cell("ratio = 6 / 7", execution_count=2)]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "cache").mkdir()
    cache = get_cache(str(tmp_path / "cache"))
    if executed_outputs is not None:
        executed = nbformat.from_dict(nb)
        for cell, outputs in zip(executed.cells, executed_outputs):
            cell.outputs = outputs
        cache.cache_notebook_bundle(CacheBundleIn(executed, str(path)), check_validity=False)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tools.nbval_replay", "--nbval-lax",
         "--nbval-replay", str(tmp_path / "cache"), str(path), "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=120)


def _stdout(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def test_nbval_replay_passes_an_execution_that_matches_without_a_kernel(tmp_path):
    result = _replay(tmp_path, [[_stdout("42\n")], []])
    assert result.returncode == 0, result.stdout
    assert "1 notebook(s) checked from the book's execution; 0 executed here" in result.stdout


def test_nbval_replay_fails_a_checked_cell_whose_output_changed(tmp_path):
    result = _replay(tmp_path, [[_stdout("41\n")], []])
    assert result.returncode == 1
    assert "Cell 0: Cell outputs differ" in result.stdout and "41" in result.stdout


def test_nbval_replay_fails_a_cell_whose_execution_raised(tmp_path):
    error = nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                   traceback=["ZeroDivisionError: division by zero"])
    result = _replay(tmp_path, [[_stdout("42\n")], [error]])
    assert result.returncode == 1
    assert "Cell 1: Cell execution caused an exception" in result.stdout
    assert "ZeroDivisionError" in result.stdout


def test_nbval_replay_executes_a_notebook_the_cache_has_not_run(tmp_path):
    result = _replay(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "0 notebook(s) checked from the book's execution; 1 executed here (chapter.ipynb)" in result.stdout


# ---------------------------------------------------------------- the benchmarks (benchmarks/run.py)
# No real timing here: tiny sizes, one round of a millisecond, so only the rows' shape is checked.

BENCHMARKS = REPO / "benchmarks"
run_spec = importlib.util.spec_from_file_location("run", BENCHMARKS / "run.py")
bench_run = importlib.util.module_from_spec(run_spec)
sys.modules.setdefault("run", bench_run)  # the benchmark modules import it as ``run``
run_spec.loader.exec_module(bench_run)


def test_the_runner_finds_every_bench_module_in_sorted_order(tmp_path):
    for name in ("bench_b", "bench_a", "helper", "_bench_private"):
        (tmp_path / f"{name}.py").write_text(f"def run():\n    return [{{'name': {name!r}}}]\n")
    (tmp_path / "bench_notes.txt").write_text("not a module")
    assert bench_run.discover(tmp_path) == ["bench_a", "bench_b"]
    found = bench_run.discover()
    assert found == sorted(found)
    assert {"bench_attention", "bench_training", "bench_book"} <= set(found)
    assert found == sorted(path.stem for path in BENCHMARKS.iterdir() if path.name.startswith("bench_")
                           and path.suffix == ".py")


def test_the_runner_prints_every_module_s_table_and_refuses_a_wrong_one(tmp_path, capsys):
    for name in ("bench_b", "bench_a"):
        (tmp_path / f"{name}.py").write_text(f"def run():\n    return [{{'ratio': 'row of {name}'}}]\n")
    bench_run.main([], folder=tmp_path)
    out = capsys.readouterr().out
    assert out.index("== bench_a (") < out.index("row of bench_a") < out.index("== bench_b (")
    assert out.index("== bench_b (") < out.index("row of bench_b")
    with pytest.raises(ValueError, match="bench_a.*bench_b.*got 'bench_c'"):
        bench_run.main(["bench_c"], folder=tmp_path)
    (tmp_path / "bench_c.py").write_text("RUN = None\n")
    with pytest.raises(TypeError, match="bench_c must define run"):
        bench_run.main(["bench_a", "bench_c"], folder=tmp_path)
    assert "== bench_a" not in capsys.readouterr().out, "a wrong name must fail before anything runs"


@pytest.mark.parametrize("name", bench_run.discover())
def test_every_benchmark_module_loads_and_has_run(name):
    assert callable(bench_run.load(name).run)


def test_interleaved_alternates_and_merges_every_round():
    order = []

    class Recording:  # a Timer that records when each round measures it
        def __init__(self, who):
            self.who, self.timer = who, bench_run.benchmark.Timer("sum(range(10))", description=who)

        def blocked_autorange(self, min_run_time):
            order.append(self.who)
            return self.timer.blocked_autorange(min_run_time=min_run_time)

    timers = {who: Recording(who) for who in ("ours", "pytorch")}
    measured = bench_run.interleaved(timers, rounds=3, min_run_time=1e-4)
    assert order == ["ours", "pytorch", "pytorch", "ours", "ours", "pytorch"]
    assert [m.task_spec.description for m in measured.values()] == ["ours", "pytorch"]
    assert all(len(m.times) >= 3 for m in measured.values()), "every round's blocks are kept"
    with pytest.raises(ValueError, match="rounds must be a positive int, got 0"):
        bench_run.interleaved(timers, rounds=0, min_run_time=1e-4)


TINY = [("tiny", 3, 8, 16, 2)]


def test_attention_rows_have_the_ratios_for_every_mask_and_mode(rounded_ratio):
    attention = bench_run.load("bench_attention")
    rows = attention.run(rounds=1, threads=1, sizes=TINY, min_run_time=1e-3, compare=False)
    cases = {(row["benchmark"], row["mask"]) for row in rows}
    for mode in ("forward", "fwd+bwd"):
        assert {(f"MultiHeadAttention {mode}, fused", kind) for kind in ("none", "causal", "padding")} <= cases
    assert ("MultiHeadAttention fwd+bwd, explicit", "none") in cases
    for row in rows:  # the times are rounded to 0.01 ms, the ratio from the unrounded ones to 0.001
        assert rounded_ratio(row["ratio"], row["ours_ms"], row["pytorch_ms"], 0.01, 0.001)
        assert row["ratio_of_minima"] > 0 and row["threads"] == 1
        fused = row["benchmark"].endswith("fused")
        assert (row["goal"], row["met"]) == ((1.10, row["ratio"] <= 1.10) if fused else ("", ""))


def test_attention_masks_are_the_same_for_both_and_the_padding_varies():
    attention = bench_run.load("bench_attention")
    masks = attention.make_masks(batch=4, seq=8)
    ours, theirs = masks["padding"]
    assert ours["mask"].shape == (4, 1, 1, 8)
    assert ours["mask"][:, 0, 0].sum(-1).tolist() == [8, 6, 4, 2]  # lengths from seq down to seq / 4
    assert bool((ours["mask"][:, 0, 0] == ~theirs["key_padding_mask"]).all())
    ours, theirs = masks["causal"]
    assert bool((ours["mask"] == ~theirs["attn_mask"]).all()) and theirs["is_causal"]


def test_attention_refuses_to_time_modules_that_disagree(monkeypatch):
    attention = bench_run.load("bench_attention")
    make_masks = attention.make_masks

    def wrong_convention(batch, seq):  # PyTorch given True = may attend, its opposite
        masks = make_masks(batch, seq)
        masks["padding"] = (masks["padding"][0], {"key_padding_mask": ~masks["padding"][1]["key_padding_mask"]})
        return masks

    monkeypatch.setattr(attention, "make_masks", wrong_convention)
    with pytest.raises(AssertionError, match="mask padding"):
        attention.run(rounds=1, threads=1, sizes=TINY, min_run_time=1e-3, compare=False)


def test_training_rows_have_the_ratios(monkeypatch):
    training = bench_run.load("bench_training")
    data, overrides, options = training.TASKS["reverse"]
    tiny = (dict(data, num_train=300, max_len=4), overrides, dict(options, batch_size=16))
    monkeypatch.setattr(training, "TASKS", {"reverse": tiny})
    for name, value in (("NUM_VALID", 20), ("NUM_TEST", 20), ("TIME_LIMIT", 0.3), ("EVAL_EVERY", 5),
                        ("STEP_ROUNDS", 1), ("STEP_MIN_RUN_TIME", 1e-3)):
        monkeypatch.setattr(training, name, value)
    rows = training.run(threads=1)
    assert [row["model"] for row in rows] == ["ours", "pytorch"]
    pytorch = rows[1]
    for key in ("ratio per step", "ratio to goal", "ratio per step, alternating"):
        assert float(pytorch[key]) > 0, key
    assert pytorch["ratio goal"] in {"met", "NOT met"}

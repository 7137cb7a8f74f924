"""The book build script: library-aware cache invalidation and failing-cell reports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

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
    assert build_book.library_hash(root) != second


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

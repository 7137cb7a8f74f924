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

"""tools/numeric_matrix.py: each selection under each configuration, and a table that names what failed where."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "numeric_matrix.py"

# passes everywhere but on PyTorch's kernels without vector code (the test reads the variable the
# configuration sets, so no torch is needed to tell the configurations apart)
PROBE = """
import os

def test_everywhere():
    assert True

def test_not_on_default_kernels():
    assert os.environ.get("ATEN_CPU_CAPABILITY") != "default"
"""


def matrix(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_the_table_names_the_test_and_the_configuration_that_failed(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    done = matrix("--configs", "aten-default,mkl-compatible", "--jobs", "2",
                  "--select", f"{probe}::test_not_on_default_kernels", "--select", f"{probe}::test_everywhere",
                  "--", "-p", "no:cacheprovider")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    table = done.stdout[done.stdout.index("== test x configuration"):]
    assert "1 of 2 passed everywhere" in table
    row = next(line for line in table.splitlines() if "test_not_on_default_kernels" in line)
    assert row.split("|")[1].strip() == "FAIL" and row.split("|")[2].strip() == "pass", row
    assert "test_everywhere" not in table  # only what failed somewhere is listed


def test_it_passes_when_every_configuration_passes(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    done = matrix("--configs", "aten-avx2,mkl-compatible", "--jobs", "2", "--select", str(probe),
                  "--", "-p", "no:cacheprovider")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 passed everywhere" in done.stdout


def test_an_unknown_configuration_is_named():
    done = matrix("--configs", "avx9000", "--select", "x")
    assert done.returncode == 2 and "--configs: expected names among" in done.stderr and "avx9000" in done.stderr

"""The training scripts' ``--device``: the CPU by default, CUDA when asked, a clear error where there is none.

``make shakespeare``, ``make translation`` and ``make ablations`` pass ``--device`` through their
``*_ARGS`` variables. A run on the CPU records its device; asking for CUDA on a machine without it
stops at the command line, naming the option, before any data is read. (The CUDA path itself
needs a machine with an NVIDIA GPU and a CUDA build of torch.)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import devices  # noqa: E402

CUDA = torch.cuda.is_available()


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # ablations' dataclass and workers look it up by name
    spec.loader.exec_module(module)
    return sys.modules[name] if name == "ablations" else module


def test_cpu_is_the_default_and_is_recorded_as_such():
    device = devices.choose_device("cpu")
    assert device == torch.device("cpu")
    assert devices.describe(device) == {"device": "cpu", "gpu": None}


@pytest.mark.parametrize("name", ["tpu", "gpu", "", "cuda:x", "meta"])
def test_another_kind_of_device_is_refused_by_name(name):
    with pytest.raises(ValueError, match=rf"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}"):
        devices.choose_device(name)


@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the error is for machines without it")
def test_cuda_without_a_gpu_says_so():
    with pytest.raises(ValueError, match=r"device 'cuda': CUDA is not available on this machine .*use --device cpu"):
        devices.choose_device("cuda")


@pytest.mark.skipif(not CUDA, reason="needs an NVIDIA GPU and a CUDA build of torch")
def test_cuda_with_a_gpu_is_used():
    device = devices.choose_device("cuda")
    assert device.type == "cuda" and devices.describe(device)["gpu"]


@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the error is for machines without it")
@pytest.mark.parametrize("name", ["train_shakespeare", "train_translation", "ablations"])
def test_each_script_stops_at_the_command_line_without_cuda(name, monkeypatch, capsys):
    module = script(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--device", "cuda"])
    with pytest.raises(SystemExit) as info:
        module.main()
    assert info.value.code == 2
    assert "argument --device: device 'cuda': CUDA is not available on this machine" in capsys.readouterr().err


@pytest.mark.slow
def test_an_ablation_run_on_the_cpu_records_its_device(tmp_path, one_thread):
    ablations = script("ablations")
    out = tmp_path / "results.json"
    ablations.main(["--variants", "reverse_no_smoothing", "--seeds", "0", "--steps", "12", "--jobs", "1",
                    "--device", "cpu", "--out", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    run = results["runs"]["reverse_no_smoothing/seed0"]
    assert run["device"] == "cpu" and run["settings"]["training"]["steps"] == 12
    assert results["invocations"][-1]["hardware"]["device"] == "cpu"
    assert "--device cpu" in results["invocations"][-1]["command"]

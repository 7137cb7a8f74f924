"""The ``--device`` option of the training scripts: the CPU by default, an NVIDIA GPU when asked.

The scripts move the model to the device and the library moves each batch to the model's
device (``tl.train``, ``language_model_loss``, ``translate``). The records note the device, and
a GPU's name, beside the hardware. ``make shakespeare SHAKESPEARE_ARGS="--device cuda"`` (and
``TRANSLATION_ARGS``, ``ABLATIONS_ARGS``) passes it through ``make``.
"""

from __future__ import annotations

import argparse

import torch

KINDS = ("cpu", "cuda")


def choose_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a ``torch.device``, after checking it can be used here.

    Raises ``ValueError`` naming the option, what it accepts and what came: another kind of
    device, or CUDA on a machine (or a build of torch) without it.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}") from exc
    if device.type not in KINDS:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise ValueError(
                f"device {name!r}: CUDA is not available on this machine (torch {torch.__version__}, {build}, "
                f"sees no GPU); use --device cpu, or a machine with an NVIDIA GPU and a CUDA build of torch"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r}: this machine has {count} CUDA device(s), numbered from 0")
    return device


def device_argument(name: str) -> torch.device:
    """:func:`choose_device` for ``argparse``: its message becomes the command line's error."""
    try:
        return choose_device(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device_argument, default="cpu",
                        help="cpu (default) or cuda / cuda:N, an NVIDIA GPU")  # fmt: skip


def describe(device: torch.device) -> dict[str, str | None]:
    """What the record says of the device: its name and, for a GPU, the card."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "gpu": gpu}

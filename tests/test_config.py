"""Tests for transformer_lib.config: the presets, their stated parameter counts, the vocabulary rules."""

import dataclasses
import inspect
import re

import pytest
import torch

import transformer_lib as tl
from transformer_lib import config as config_module


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

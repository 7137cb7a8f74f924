"""Tests for transformer_lib.embeddings: token vectors scaled by sqrt(d_model), plus positions."""

import math

import pytest
import torch

import transformer_lib as tl

D = 32


def test_embeddings_scale_by_sqrt_d_model_and_add_sinusoidal_positions():
    torch.manual_seed(0)
    emb = tl.Embeddings(10, D, dropout=0.0)
    tokens = torch.tensor([[4, 5, 6]])
    pe = torch.from_numpy(tl.sinusoidal_encoding(3, D)).float()
    expected = emb.token_embedding.weight[tokens] * math.sqrt(D) + pe
    torch.testing.assert_close(emb(tokens), expected)


def test_embeddings_bert_style_learned_positions_token_types_and_norm():
    torch.manual_seed(0)
    emb = tl.Embeddings(10, D, dropout=0.0, positional="learned", max_len=8, scale=False, num_token_types=2,
                        norm=True, layer_norm_eps=1e-12)  # fmt: skip
    tokens = torch.tensor([[4, 5, 6]])
    types = torch.tensor([[0, 1, 1]])
    raw = emb.token_embedding.weight[tokens] + emb.position.embedding.weight[:3]
    raw = raw + emb.token_type_embedding.weight[types]
    torch.testing.assert_close(emb(tokens, types), emb.norm(raw))
    torch.testing.assert_close(emb(tokens), emb(tokens, torch.zeros_like(tokens)))  # type 0 by default


def test_embeddings_from_config_read_the_config():
    config = tl.TransformerConfig.preset("bert-tiny")
    emb = tl.Embeddings.from_config(config, 32)
    assert emb.token_embedding.weight.shape == (32, 64) and emb.positional == "learned" and not emb.scale
    assert emb.token_type_embedding.num_embeddings == 2 and emb.norm.eps == 1e-12


def test_embeddings_errors_name_the_argument():
    emb = tl.Embeddings(10, D)
    with pytest.raises(ValueError, match=r"tokens .*\[0, 10\).*12"):
        emb(torch.tensor([[0, 12]]))
    with pytest.raises(TypeError, match=r"tokens .*integer.*float32"):
        emb(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"tokens .*\(batch, seq\)"):
        emb(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positional must be one of.*'rotary'"):
        tl.Embeddings(10, D, positional="rotary")
    with pytest.raises(ValueError, match=r"num_token_types.*non-negative.*-1"):
        tl.Embeddings(10, D, num_token_types=-1)
    with pytest.raises(ValueError, match="no token types"):
        emb(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))

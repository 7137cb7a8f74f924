"""Tests for transformer_lib.model: embeddings, stacks, config presets, the models, parameter counts."""

import dataclasses
import math

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import from_torch, to_torch

D, H, D_FF = 32, 4, 64


def rel_err(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def small_config(**overrides) -> tl.TransformerConfig:
    options = dict(src_vocab_size=11, tgt_vocab_size=13, d_model=D, num_heads=H, num_layers=2, d_ff=D_FF,
                   dropout=0.1)  # fmt: skip
    return tl.TransformerConfig(**{**options, **overrides})


def batch(seed: int = 0):
    """Right-padded source and target ids (pad 0) and our masks."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 11, (3, 8), generator=g)
    tgt = torch.randint(3, 13, (3, 6), generator=g)
    for i, (s, t) in enumerate([(8, 6), (5, 3), (2, 5)]):
        src[i, s:] = 0
        tgt[i, t:] = 0
    src_mask = tl.padding_mask(src, 0)  # (batch, 1, 1, src_len)
    tgt_mask = tl.causal_mask(6) & tl.padding_mask(tgt, 0)  # (batch, 1, tgt_len, tgt_len)
    return src, tgt, src_mask, tgt_mask


# --------------------------------------------------------------------------- Embeddings


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


def test_embeddings_errors_name_the_argument():
    emb = tl.Embeddings(10, D)
    with pytest.raises(ValueError, match=r"tokens must hold ids in \[0, 10\) .* got ids from 0 to 12"):
        emb(torch.tensor([[0, 12]]))
    with pytest.raises(TypeError, match="tokens must hold integer token ids, got dtype torch.float32"):
        emb(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, seq\)"):
        emb(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="positional must be one of"):
        tl.Embeddings(10, D, positional="rotary")
    with pytest.raises(ValueError, match="no token types"):
        emb(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


# --------------------------------------------------------------------------- Encoder and Decoder


def test_stacks_have_separate_layer_weights_and_the_final_norm_rule():
    enc = tl.Encoder(11, D, H, 3, D_FF)
    assert len(enc.layers) == 3 and enc.norm is None  # post-norm: no final norm
    w = [layer.self_attn.W_q.weight for layer in enc.layers]
    assert w[0] is not w[1] and not torch.equal(w[0], w[1])
    assert tl.Encoder(11, D, H, 2, D_FF, norm_first=True).norm is not None  # pre-norm: a final norm
    assert tl.Decoder(11, D, H, 2, D_FF, final_norm=True).norm is not None
    assert tl.Decoder(11, D, H, 2, D_FF, norm_first=True, final_norm=False).norm is None


def test_encoder_and_decoder_shapes():
    src, tgt, src_mask, tgt_mask = batch()
    enc, dec = tl.Encoder(11, D, H, 2, D_FF).eval(), tl.Decoder(13, D, H, 2, D_FF).eval()
    memory = enc(src, src_mask)
    assert memory.shape == (3, 8, D)
    assert dec(tgt, memory, src_mask, tgt_mask).shape == (3, 6, D)
    assert enc.attention_maps(index=1).shape == (2, H, 8, 8)
    assert dec.attention_maps("cross", index=2).shape == (2, H, 6, 8)
    assert dec.attention_maps("self").shape == (2, H, 6, 6)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch_encoder(norm_first):
    torch.manual_seed(0)
    enc = tl.Encoder(11, D, H, 2, D_FF, norm_first=norm_first).eval()
    theirs = to_torch(enc)
    assert isinstance(theirs, nn.TransformerEncoder) and (theirs.norm is None) == (not norm_first)
    src, _, src_mask, _ = batch()
    x = enc.embed(src)  # nn.TransformerEncoder starts from vectors
    ours = enc(src, src_mask)
    with torch.no_grad():  # eval mode without gradients: PyTorch's fast path (nested tensors when post-norm)
        ref = theirs(x, src_key_padding_mask=src == 0)
    real = src != 0  # PyTorch's nested-tensor fast path zeroes padded positions; compare the rest
    assert rel_err(ours[real], ref[real]) <= 1e-5
    back = from_torch(theirs)
    assert isinstance(back, tl.Encoder) and back.embedding is None
    assert rel_err(back(x, src_mask)[real], ref[real]) <= 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_stacks_match_nn_transformer(norm_first):
    """Both stacks through to_torch, with source padding, causal+padding target and memory masks."""
    torch.manual_seed(0)
    model = tl.Transformer(small_config(norm_first=norm_first)).eval()
    theirs = to_torch(model)
    assert isinstance(theirs, nn.Transformer) and theirs.batch_first and not theirs.training
    assert (theirs.encoder.norm is None) == (theirs.decoder.norm is None) == (not norm_first)
    src, tgt, src_mask, tgt_mask = batch()
    g = torch.Generator().manual_seed(5)
    memory_mask = torch.rand(6, 8, generator=g) > 0.4
    memory_mask[:, 0] = True
    ours = model.decoder(tgt, model.encode(src, src_mask), src_mask & memory_mask, tgt_mask)
    ref = theirs(
        model.encoder.embed(src), model.decoder.embed(tgt),
        tgt_mask=~tl.causal_mask(6), memory_mask=~memory_mask,
        src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
    )  # fmt: skip
    assert rel_err(ours, ref) <= 1e-5
    # and the log-probabilities are the generator on top
    torch.testing.assert_close(model(src, tgt, src_mask, tgt_mask)[0], model.generator(model.decoder(
        tgt, model.encode(src, src_mask), src_mask, tgt_mask))[0])  # fmt: skip


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("norm_first", [False, True])
def test_from_nn_transformer_keeps_its_final_norms(norm_first):
    torch.manual_seed(3)
    theirs = nn.Transformer(D, H, 2, 2, D_FF, 0.1, batch_first=True, norm_first=norm_first).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, tl.Transformer) and ours.generator is None
    assert ours.encoder.norm is not None and ours.decoder.norm is not None  # PyTorch always has them
    src, tgt, src_mask, tgt_mask = batch(1)
    xs, xt = torch.randn(3, 8, D), torch.randn(3, 6, D)
    ref = theirs(xs, xt, tgt_mask=~tl.causal_mask(6), src_key_padding_mask=src == 0,
                 tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)  # fmt: skip
    assert rel_err(ours(xs, xt, src_mask, tgt_mask), ref) <= 1e-5


def test_stacks_without_embeddings_take_vectors():
    enc = tl.Encoder(None, D, H, 1, D_FF)
    assert enc.embedding is None
    x = torch.randn(2, 5, D)
    assert enc(x).shape == (2, 5, D)
    with pytest.raises(TypeError, match="src must be a floating-point tensor, got dtype torch.int64"):
        enc(torch.zeros(2, 5, dtype=torch.long))  # token ids, but this encoder has no embedding
    with pytest.raises(ValueError, match=r"src must have shape \(batch, src_len, d_model=32\)"):
        enc(torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match="vocab_size must be a positive integer, got 0"):
        tl.Decoder(0, D, H, 1, D_FF)


def test_generator_is_a_linear_map_then_log_softmax():
    torch.manual_seed(0)
    gen = tl.Generator(D, 9)
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(gen(x), torch.log_softmax(x @ gen.proj.weight.T + gen.proj.bias, dim=-1))
    assert tl.Generator(D, 9, bias=False).proj.bias is None
    with pytest.raises(ValueError, match="vocab_size must be a positive integer, got -1"):
        tl.Generator(D, -1)


# --------------------------------------------------------------------------- Transformer


def test_transformer_returns_log_probabilities():
    model = tl.Transformer(small_config()).eval()
    src, tgt, src_mask, tgt_mask = batch()
    logp = model(src, tgt, src_mask, tgt_mask)
    assert logp.shape == (3, 6, 13)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 6))
    memory = model.encode(src, src_mask)
    torch.testing.assert_close(model.decode(tgt, memory, src_mask, tgt_mask), logp)


def test_transformer_masks_matter():
    """A padded source token or a future target token leaves the other outputs unchanged."""
    torch.manual_seed(0)
    model = tl.Transformer(small_config()).eval()
    src, tgt, src_mask, tgt_mask = batch()
    base = model(src, tgt, src_mask, tgt_mask)
    src2 = src.clone()
    src2[1, 5:] = 7  # overwrite the pads of sequence 1 (its mask still says "pad")
    torch.testing.assert_close(model(src2, tgt, src_mask, tgt_mask), base, rtol=0, atol=1e-6)
    tgt2 = tgt.clone()
    tgt2[0, 4] = 9 if tgt[0, 4] != 9 else 8  # change target token 4
    out = model(src, tgt2, src_mask, tgt_mask)
    torch.testing.assert_close(out[0, :4], base[0, :4], rtol=0, atol=1e-6)
    assert not torch.allclose(out[0, 4], base[0, 4])
    # without the causal mask the future leaks into the past
    no_causal = tl.padding_mask(tgt, 0)
    leaky, before = model(src, tgt2, src_mask, no_causal), model(src, tgt, src_mask, no_causal)
    assert not torch.allclose(leaky[0, :4], before[0, :4])


def test_weight_tying():
    shared = tl.Transformer(small_config(src_vocab_size=13, share_embeddings=True))
    w = shared.generator.proj.weight
    assert w is shared.decoder.embedding.token_embedding.weight
    assert w is shared.encoder.embedding.token_embedding.weight
    separate = tl.Transformer(small_config())  # different vocabularies: only output tying
    w_dec = separate.decoder.embedding.token_embedding.weight
    assert separate.generator.proj.weight is w_dec
    assert separate.encoder.embedding.token_embedding.weight is not w_dec
    untied = tl.Transformer(small_config(tie_output=False))
    assert untied.generator.proj.weight is not untied.decoder.embedding.token_embedding.weight
    assert tl.count_parameters(untied) - tl.count_parameters(separate) == 13 * D


def test_attention_maps_for_plot_attention_grid():
    model = tl.Transformer(small_config())
    src, tgt, src_mask, tgt_mask = batch()
    model.train()(src, tgt, src_mask, tgt_mask)
    with pytest.raises(ValueError, match="eval mode"):
        model.attention_maps("encoder")
    model.eval()(src, tgt, src_mask, tgt_mask)
    assert model.attention_maps("encoder", 0).shape == (2, H, 8, 8)
    assert model.attention_maps("decoder", 1).shape == (2, H, 6, 6)
    assert model.attention_maps("cross", 2).shape == (2, H, 6, 8)
    with pytest.raises(ValueError, match="kind must be one of"):
        model.attention_maps("memory")
    with pytest.raises(ValueError, match="index must pick one of the 3 sequences"):
        model.attention_maps("cross", 3)


# --------------------------------------------------------------------------- config and counts


def test_paper_presets_reproduce_table_3():
    base, big = tl.TransformerConfig.preset("base"), tl.TransformerConfig.preset("big")

    def row(c):
        return (c.num_layers, c.d_model, c.d_ff, c.num_heads, c.d_k, c.dropout, c.src_vocab_size,
                c.share_embeddings)  # fmt: skip

    assert row(base) == (6, 512, 2048, 8, 64, 0.1, 37000, True)
    assert row(big) == (6, 1024, 4096, 16, 64, 0.3, 37000, True)
    n_base, n_big = tl.count_parameters(base), tl.count_parameters(big)
    print(f"base: {n_base:,} parameters; big: {n_big:,} parameters")
    assert n_base == 63_119_496 and abs(n_base / 65e6 - 1) <= 0.03
    assert n_big == 214_282_376 and abs(n_big / 213e6 - 1) <= 0.03


def test_bert_and_gpt2_presets_from_the_same_blocks():
    bert, gpt2 = tl.TransformerConfig.preset("bert-base"), tl.TransformerConfig.preset("gpt2-small")
    n_bert, n_gpt2 = tl.count_parameters(bert), tl.count_parameters(gpt2)
    print(f"bert-base: {n_bert:,}; gpt2-small: {n_gpt2:,}")
    # BertModel has 109,482,240 (with its pooler); our masked-LM head adds its 30,522 biases
    assert n_bert == 109_482_240 + 30_522
    assert n_gpt2 == 124_439_808  # exactly GPT-2 small
    parts = tl.count_parameters(bert, by_module=True)
    assert parts == {"encoder": 108_891_648, "generator": 30_522, "pooler": 590_592}


def test_count_parameters_counts_shared_weights_once():
    model = tl.Transformer(small_config(src_vocab_size=13, share_embeddings=True))
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert tl.count_parameters(model) == total
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive - total == 2 * 13 * D  # a naive count sees the tied matrix three times
    parts = tl.count_parameters(model, by_module=True)
    assert sum(parts.values()) == total and parts["generator"] == 13  # only its bias is its own
    with pytest.raises(TypeError, match="model must be an nn.Module or a TransformerConfig"):
        tl.count_parameters("base")


def test_config_presets_and_errors():
    tiny = tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=9)
    assert (tiny.src_vocab_size, tiny.tgt_vocab_size) == (7, 9)
    names = set(tl.TransformerConfig.preset_names())
    assert names >= {"base", "big", "tiny", "small", "bert-base", "gpt2-small"}
    assert dataclasses.is_dataclass(tiny)
    with pytest.raises(ValueError, match="name must be one of"):
        tl.TransformerConfig.preset("huge")
    with pytest.raises(TypeError, match=r"unknown \['heads'\]"):
        tl.TransformerConfig.preset("tiny", heads=3)
    with pytest.raises(ValueError, match="divisible by num_heads, got d_model=30 and num_heads=4"):
        tl.TransformerConfig(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="share_embeddings=True needs one vocabulary"):
        tl.TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=True)
    with pytest.raises(ValueError, match="num_layers must be a positive integer, got 0"):
        tl.TransformerConfig(num_layers=0)
    with pytest.raises(TypeError, match="norm_first must be True or False"):
        tl.TransformerConfig(norm_first=None)
    with pytest.raises(ValueError, match="architecture must be one of"):
        tl.TransformerConfig(architecture="encoder")
    with pytest.raises(ValueError, match="Transformer needs config.architecture='encoder-decoder'"):
        tl.Transformer(tl.TransformerConfig.preset("gpt-tiny"))
    with pytest.raises(TypeError, match="config must be a TransformerConfig, got dict"):
        tl.Transformer({"d_model": 8})


# --------------------------------------------------------------------------- encoder-only, decoder-only


def test_encoder_only_model_bert_tiny():
    model = tl.build_model(tl.TransformerConfig.preset("bert-tiny"))
    assert isinstance(model, tl.EncoderOnlyModel)
    assert model.generator.proj.weight is model.encoder.embedding.token_embedding.weight
    tokens = torch.randint(3, 32, (2, 10))
    types = torch.tensor([[0] * 5 + [1] * 5] * 2)
    model.eval()
    logp = model(tokens, tl.padding_mask(tokens, 0), types)
    assert logp.shape == (2, 10, 32)
    assert model.pool(model.encode(tokens)).shape == (2, 64)
    assert model.attention_maps().shape == (2, 4, 10, 10)


def test_decoder_only_model_is_causal_and_matches_torch_encoder_stack():
    torch.manual_seed(0)
    model = tl.build_model(tl.TransformerConfig.preset("gpt-tiny")).eval()
    assert isinstance(model, tl.DecoderOnlyModel) and model.decoder.layers[0].cross_attn is None
    tokens = torch.randint(3, 64, (2, 9))
    logp = model(tokens)
    changed = tokens.clone()
    changed[:, 6] = (tokens[:, 6] + 1) % 64
    torch.testing.assert_close(model(changed)[:, :6], logp[:, :6], rtol=0, atol=1e-6)
    theirs = to_torch(model.decoder)  # GPT-2's stack = PyTorch's encoder stack with a causal mask
    assert isinstance(theirs, nn.TransformerEncoder) and theirs.norm is not None
    ref = theirs(model.decoder.embed(tokens), mask=~tl.causal_mask(9))
    assert rel_err(model.decoder(tokens, tgt_mask=tl.causal_mask(9)), ref) <= 1e-5

"""Tests for the models: transformer_lib.transformer, .lm and .model (build_model, count_parameters)."""

import pytest
import torch
from conftest import padded_batch
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


# --------------------------------------------------------------------------- Generator, init_weights


def test_generator_is_a_linear_map_then_log_softmax():
    torch.manual_seed(0)
    gen = tl.Generator(D, 9)
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(gen(x), torch.log_softmax(x @ gen.proj.weight.T + gen.proj.bias, dim=-1))
    assert tl.Generator(D, 9, bias=False).proj.bias is None
    with pytest.raises(ValueError, match=r"vocab_size.*positive.*-1"):
        tl.Generator(D, -1)


def test_init_weights_is_xavier_uniform_on_matrices_only():
    torch.manual_seed(0)
    layer = tl.EncoderLayer(64, 4, 256)
    with torch.no_grad():
        for p in layer.parameters():
            p.fill_(7.0)
    assert tl.init_weights(layer) is layer
    w = layer.feed_forward.W_1.weight  # (256, 64): bound sqrt(6 / (64 + 256))
    bound = (6 / (64 + 256)) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert abs(w.std().item() - bound / 3**0.5) < 0.02 * bound * 3  # a uniform's std is bound / sqrt(3)
    assert torch.all(layer.feed_forward.W_1.bias == 7.0) and torch.all(layer.add_norm1.norm.weight == 7.0)
    with pytest.raises(TypeError, match=r"model must be an nn.Module.*str"):
        tl.init_weights("model")


def normal_std(w: torch.Tensor, std: float) -> bool:
    """Whether ``w`` looks drawn from N(0, std): its mean, its std, and the share beyond 2 std
    (4.6% for a normal, none for a uniform of that std)."""
    w = w.detach().flatten()
    beyond = (w.abs() > 2 * std).float().mean().item()
    return abs(w.mean().item()) < 0.05 * std and abs(w.std().item() / std - 1) < 0.05 and 0.03 < beyond < 0.065


def test_init_weights_gpt2_draws_normal_matrices_zero_biases_and_scaled_residual_projections():
    torch.manual_seed(0)
    config = tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=65, d_model=128, num_heads=4, num_layers=3,
                                         d_ff=512, max_len=64)  # fmt: skip
    model = tl.build_model(config)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.fill_(7.0)
    assert tl.init_weights(model, scheme="gpt2") is model
    decoder = model.decoder
    assert normal_std(decoder.embedding.token_embedding.weight, 0.02)
    assert normal_std(decoder.embedding.position.embedding.weight, 0.02)
    assert model.generator.proj.weight is decoder.embedding.token_embedding.weight  # still tied
    residual_std = 0.02 / (2 * 3) ** 0.5  # nanoGPT's 0.02 / sqrt(2 * n_layer)
    for layer in decoder.layers:
        attention, ffn = layer.self_attn, layer.feed_forward
        for w in (attention.W_q.weight, attention.W_k.weight, attention.W_v.weight, ffn.W_1.weight):
            assert normal_std(w, 0.02)
        assert normal_std(attention.W_o.weight, residual_std) and normal_std(ffn.W_2.weight, residual_std)
    biases = [m.bias for m in model.modules() if isinstance(m, nn.Linear) and m.bias is not None]
    assert len(biases) == 3 * 6 and all(torch.all(b == 0) for b in biases)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert norms and all(torch.all(m.weight == 7.0) and torch.all(m.bias == 0) for m in norms)  # untouched


def test_init_weights_gpt2_counts_every_residual_projection_of_an_encoder_decoder():
    torch.manual_seed(0)
    model = tl.init_weights(tl.Transformer(small_config(d_model=256, d_ff=1024, num_heads=4)), "gpt2")
    n = 2 * 2 + 3 * 2  # two per encoder layer, three per decoder layer (self, cross, feed-forward)
    assert normal_std(model.decoder.layers[1].cross_attn.W_o.weight, 0.02 / n**0.5)
    assert normal_std(model.encoder.layers[0].feed_forward.W_2.weight, 0.02 / n**0.5)
    assert normal_std(model.decoder.layers[0].cross_attn.W_q.weight, 0.02)


def test_init_weights_names_a_bad_scheme():
    layer = tl.EncoderLayer(64, 4, 256)
    with pytest.raises(ValueError, match=r"scheme must be one of \['xavier', 'gpt2'\], got 'normal'"):
        tl.init_weights(layer, scheme="normal")
    with pytest.raises(TypeError, match=r"scheme must be one of .*got int 2"):
        tl.init_weights(layer, 2)


# --------------------------------------------------------------------------- Transformer


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_stacks_match_nn_transformer(norm_first):
    """Both stacks through to_torch, with source padding, causal+padding target and memory masks."""
    torch.manual_seed(0)
    model = tl.Transformer(small_config(norm_first=norm_first)).eval()
    theirs = to_torch(model)
    assert isinstance(theirs, nn.Transformer) and theirs.batch_first and not theirs.training
    assert (theirs.encoder.norm is None) == (theirs.decoder.norm is None) == (not norm_first)
    src, tgt, src_mask, tgt_mask = padded_batch()
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
    src, tgt, src_mask, tgt_mask = padded_batch(1)
    xs, xt = torch.randn(3, 8, D), torch.randn(3, 6, D)
    ref = theirs(xs, xt, tgt_mask=~tl.causal_mask(6), src_key_padding_mask=src == 0,
                 tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)  # fmt: skip
    assert rel_err(ours(xs, xt, src_mask, tgt_mask), ref) <= 1e-5


def test_transformer_returns_log_probabilities():
    model = tl.Transformer(small_config()).eval()
    src, tgt, src_mask, tgt_mask = padded_batch()
    logp = model(src, tgt, src_mask, tgt_mask)
    assert logp.shape == (3, 6, 13)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 6))
    memory = model.encode(src, src_mask)
    torch.testing.assert_close(model.decode(tgt, memory, src_mask, tgt_mask), logp)


def test_transformer_masks_matter():
    """A padded source token or a future target token leaves the other outputs unchanged."""
    torch.manual_seed(0)
    model = tl.Transformer(small_config()).eval()
    src, tgt, src_mask, tgt_mask = padded_batch()
    base = model(src, tgt, src_mask, tgt_mask)
    src2 = src.clone()
    src2[1, 5:] = 7  # overwrite the pads of sequence 1 (its mask still says "pad")
    torch.testing.assert_close(model(src2, tgt, src_mask, tgt_mask), base, rtol=0, atol=1e-6)
    tgt2 = tgt.clone()
    tgt2[0, 4] = 9 if tgt[0, 4] != 9 else 8  # change target token 4
    out = model(src, tgt2, src_mask, tgt_mask)
    torch.testing.assert_close(out[0, :4], base[0, :4], rtol=0, atol=1e-6)
    assert not torch.allclose(out[0, 4], base[0, 4])
    # a given mask that is not causal is used as it is: the future leaks into the past
    no_causal = tl.padding_mask(tgt, 0)
    leaky, before = model(src, tgt2, src_mask, no_causal), model(src, tgt, src_mask, no_causal)
    assert not torch.allclose(leaky[0, :4], before[0, :4])


@pytest.mark.parametrize("kind", ["encoder-decoder", "decoder-only"])
def test_no_tgt_mask_means_the_causal_mask_in_both_models(kind):
    torch.manual_seed(0)
    src, tgt, src_mask, _ = padded_batch()
    if kind == "encoder-decoder":
        model = tl.Transformer(small_config()).eval()
        run = lambda t, mask=None: model(src, t, src_mask, mask)  # noqa: E731
    else:
        model = tl.build_model(tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=13)).eval()
        run = lambda t, mask=None: model(t, mask)  # noqa: E731
    default = run(tgt)
    torch.testing.assert_close(default, run(tgt, tl.causal_mask(6)), rtol=0, atol=0)
    changed = tgt.clone()
    changed[:, 5] = (tgt[:, 5] + 1) % 13  # the last token cannot move an earlier prediction
    torch.testing.assert_close(run(changed)[:, :5], default[:, :5], rtol=0, atol=1e-6)
    assert not torch.allclose(run(changed, torch.ones(6, 6, dtype=torch.bool))[:, :5], default[:, :5])


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


def test_transformer_attention_maps_from_a_pass_made_for_them():
    torch.manual_seed(0)
    model = tl.Transformer(small_config())
    src, tgt, src_mask, tgt_mask = padded_batch()
    model.eval()(src, tgt, src_mask, tgt_mask)  # an ordinary pass keeps nothing ...
    assert all(m.attention_weights is None for m in model.modules() if isinstance(m, tl.MultiHeadAttention))
    maps = model.train().get_attention_maps(src, tgt, src_mask, tgt_mask)  # ... this one is made for it
    assert model.training
    assert maps["encoder"].shape == (2, 3, H, 8, 8)
    assert maps["decoder"].shape == (2, 3, H, 6, 6)
    assert maps["cross"].shape == (2, 3, H, 6, 8)
    torch.testing.assert_close(maps["encoder"], model.encoder.get_attention_maps(src, src_mask))
    # the same in evaluation mode, whatever mode the model was in (no dropout on the weights)
    again = model.get_attention_maps(src, tgt, src_mask, tgt_mask)
    assert all(torch.equal(maps[k], again[k]) for k in maps)
    assert torch.all(maps["decoder"][:, 1, :, :, 3:] == 0)  # target 1 has 3 real tokens


# --------------------------------------------------------------------------- one-stack models, factory, counts


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
    maps = model.get_attention_maps(tokens, token_types=types)
    assert maps.shape == (2, 2, 4, 10, 10)
    torch.testing.assert_close(maps, model.encoder.get_attention_maps(tokens, None, types))


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
    maps = model.get_attention_maps(tokens)
    assert maps.shape == (2, 2, 4, 9, 9) and torch.all(maps.triu(1) == 0)


def test_build_model_picks_the_class_of_the_architecture():
    for name, cls in (("tiny", tl.Transformer), ("bert-tiny", tl.EncoderOnlyModel), ("gpt-tiny", tl.DecoderOnlyModel)):
        assert type(tl.build_model(tl.TransformerConfig.preset(name))) is cls
    with pytest.raises(TypeError, match=r"config must be a TransformerConfig.*str"):
        tl.build_model("tiny")


def test_count_parameters_counts_shared_weights_once():
    model = tl.Transformer(small_config(src_vocab_size=13, share_embeddings=True))
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert tl.count_parameters(model) == total
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive - total == 2 * 13 * D  # a naive count sees the tied matrix three times
    parts = tl.count_parameters(model, by_module=True)
    assert sum(parts.values()) == total and parts["generator"] == 13  # only its bias is its own
    with pytest.raises(TypeError, match=r"model must be an nn.Module or a TransformerConfig.*str"):
        tl.count_parameters("base")
    with pytest.raises(TypeError, match=r"by_module.*True or False"):
        tl.count_parameters(model, by_module=1)

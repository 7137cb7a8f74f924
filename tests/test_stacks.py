"""Tests for transformer_lib.stacks: Encoder and Decoder built from an embedding, layers and a norm."""

import pytest
import torch
from conftest import padded_batch
from torch import nn

import transformer_lib as tl
from transformer_lib import from_torch, to_torch

D, H, D_FF = 32, 4, 64


def rel_err(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def encoder(vocab: int | None = 11, num_layers: int = 2, norm_first: bool = False, **layer_options) -> tl.Encoder:
    embedding = None if vocab is None else tl.Embeddings(vocab, D, dropout=0.0)
    layers = [tl.EncoderLayer(D, H, D_FF, norm_first=norm_first, **layer_options) for _ in range(num_layers)]
    return tl.Encoder(embedding, layers, nn.LayerNorm(D) if norm_first else None)


def decoder(vocab: int | None = 13, num_layers: int = 2, cross_attention: bool = True) -> tl.Decoder:
    embedding = None if vocab is None else tl.Embeddings(vocab, D, dropout=0.0)
    layers = [tl.DecoderLayer(D, H, D_FF, cross_attention=cross_attention) for _ in range(num_layers)]
    return tl.Decoder(embedding, layers)


def test_a_stack_is_its_embedding_its_layers_and_its_norm():
    torch.manual_seed(0)
    enc = encoder(num_layers=3).eval()
    assert len(enc.layers) == 3 and isinstance(enc.layers, nn.ModuleList) and enc.norm is None
    w = [layer.self_attn.W_q.weight for layer in enc.layers]
    assert w[0] is not w[1] and not torch.equal(w[0], w[1])  # separate weights
    src, _, src_mask, _ = padded_batch()
    h = enc.embedding(src)
    for layer in enc.layers:
        h = layer(h, src_mask)
    torch.testing.assert_close(enc(src, src_mask), h)
    pre = encoder(norm_first=True).eval()
    torch.testing.assert_close(pre(src, src_mask), pre.norm(pre.layers[1](pre.layers[0](pre.embed(src), src_mask),
                                                                         src_mask)))  # fmt: skip


def test_parts_are_registered_in_reading_order():
    """init_weights draws the matrices in parameter order: embedding, layers, norm, as before the split."""
    for stack in (encoder(norm_first=True), decoder()):
        assert [name for name, _ in stack.named_children()][:2] == ["embedding", "layers"]
        assert next(iter(stack.state_dict())).startswith("embedding.")


def test_from_config_follows_the_final_norm_rule():
    def stacks(**overrides):
        config = tl.TransformerConfig.preset("tiny", **overrides)
        return tl.Encoder.from_config(config), tl.Decoder.from_config(config)

    assert all(s.norm is None for s in stacks())  # post-norm: no final norm
    assert all(isinstance(s.norm, nn.LayerNorm) for s in stacks(norm_first=True))
    assert all(s.norm is not None for s in stacks(final_norm=True))
    assert all(s.norm is None for s in stacks(norm_first=True, final_norm=False))
    assert tl.Decoder.from_config(tl.TransformerConfig.preset("gpt-tiny")).cross_attention is False


def test_encoder_and_decoder_shapes():
    src, tgt, src_mask, tgt_mask = padded_batch()
    enc, dec = encoder().eval(), decoder().eval()
    memory = enc(src, src_mask)
    assert memory.shape == (3, 8, D)
    assert dec(tgt, memory, src_mask, tgt_mask).shape == (3, 6, D)
    assert len(enc.hidden_states(src, src_mask)) == 3


def test_the_decoder_reads_no_mask_as_the_causal_mask():
    torch.manual_seed(0)
    enc, dec = encoder().eval(), decoder().eval()
    src, tgt, src_mask, _ = padded_batch()
    memory = enc(src, src_mask)
    causal = dec(tgt, memory, src_mask, tl.causal_mask(6))
    torch.testing.assert_close(dec(tgt, memory, src_mask), causal, rtol=0, atol=0)
    # a given mask is used as it is: all True lets the future in
    everything = torch.ones(6, 6, dtype=torch.bool)
    assert not torch.allclose(dec(tgt, memory, src_mask, everything)[:, :5], causal[:, :5])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch_encoder(norm_first):
    torch.manual_seed(0)
    enc = encoder(norm_first=norm_first, dropout=0.1).eval()
    theirs = to_torch(enc)
    assert isinstance(theirs, nn.TransformerEncoder) and (theirs.norm is None) == (not norm_first)
    src, _, src_mask, _ = padded_batch()
    x = enc.embed(src)  # nn.TransformerEncoder starts from vectors
    ours = enc(src, src_mask)
    with torch.no_grad():  # eval mode without gradients: PyTorch's fast path (nested tensors when post-norm)
        ref = theirs(x, src_key_padding_mask=src == 0)
    real = src != 0  # PyTorch's nested-tensor fast path zeroes padded positions; compare the rest
    assert rel_err(ours[real], ref[real]) <= 1e-5
    back = from_torch(theirs)
    assert isinstance(back, tl.Encoder) and back.embedding is None
    assert rel_err(back(x, src_mask)[real], ref[real]) <= 1e-5


def test_stacks_without_embeddings_take_vectors():
    enc = encoder(vocab=None, num_layers=1)
    assert enc.embedding is None
    x = torch.randn(2, 5, D)
    assert enc(x).shape == (2, 5, D)
    with pytest.raises(TypeError, match=r"src .*floating-point.*int64"):
        enc(torch.zeros(2, 5, dtype=torch.long))  # token ids, but this encoder has no embedding
    with pytest.raises(ValueError, match=r"src .*\(batch, src_len, d_model=32\)"):
        enc(torch.zeros(2, 5, 8))


def test_stack_errors_name_the_argument():
    layer = tl.EncoderLayer(D, H, D_FF)
    with pytest.raises(TypeError, match=r"embedding must be an nn.Module.*int"):
        tl.Encoder(11, [layer])
    with pytest.raises(TypeError, match=r"layers must be a list of EncoderLayer.*one EncoderLayer"):
        tl.Encoder(None, layer)
    with pytest.raises(ValueError, match=r"layers must be a non-empty list"):
        tl.Encoder(None, [])
    with pytest.raises(TypeError, match=r"layers must all be EncoderLayer.*DecoderLayer"):
        tl.Encoder(None, [layer, tl.DecoderLayer(D, H, D_FF)])
    with pytest.raises(ValueError, match=r"layers must share one d_model.*16, 32"):
        tl.Encoder(None, [layer, tl.EncoderLayer(16, H, D_FF)])
    with pytest.raises(ValueError, match=r"embedding and layers must share d_model.*16.*32"):
        tl.Encoder(tl.Embeddings(10, 16), [layer])
    with pytest.raises(TypeError, match=r"norm must be an nn.Module.*bool"):
        tl.Encoder(None, [layer], True)
    with pytest.raises(ValueError, match=r"cross-attention.*mix"):
        tl.Decoder(None, [tl.DecoderLayer(D, H, D_FF), tl.DecoderLayer(D, H, D_FF, cross_attention=False)])


# --------------------------------------------------------------------------- attention maps


def all_attentions(module: nn.Module) -> list[tl.MultiHeadAttention]:
    return [m for m in module.modules() if isinstance(m, tl.MultiHeadAttention)]


def test_forward_passes_keep_no_weights_in_either_mode():
    src, tgt, src_mask, tgt_mask = padded_batch()
    enc, dec = encoder(), decoder()
    for training in (True, False):
        enc.train(training), dec.train(training)
        dec(tgt, enc(src, src_mask), src_mask, tgt_mask)
        assert all(a.attention_weights is None for a in all_attentions(enc) + all_attentions(dec))


def test_encoder_attention_maps_are_the_layers_own_weights():
    torch.manual_seed(0)
    enc = encoder(dropout=0.5).train()
    src, _, src_mask, _ = padded_batch()
    maps = enc.get_attention_maps(src, src_mask)
    assert maps.shape == (2, 3, H, 8, 8)  # (layers, batch, heads, q, k)
    assert enc.training and not maps.requires_grad  # the mode is restored; no graph kept
    assert all(a.attention_weights is None for a in all_attentions(enc))  # and nothing left behind
    # layer 0's weights, recomputed by hand from its input: the embeddings (no dropout in eval mode)
    layer = enc.layers[0]
    with torch.no_grad():
        x = enc.eval().embed(src)
        q = layer.self_attn.W_q(x).view(3, 8, H, D // H).transpose(1, 2)  # (batch, heads, q, d_k)
        k = layer.self_attn.W_k(x).view(3, 8, H, D // H).transpose(1, 2)
        _, expected = tl.scaled_dot_product_attention(q, k, k, src_mask)
    torch.testing.assert_close(maps[0], expected)
    assert torch.all(maps[:, 1, :, :, 5:] == 0)  # sequence 1 has 5 real tokens: no weight on its pads
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 3, H, 8))


def test_decoder_attention_maps_self_and_cross():
    torch.manual_seed(0)
    enc, dec = encoder().eval(), decoder().eval()
    src, tgt, src_mask, _ = padded_batch()
    memory = enc(src, src_mask)
    maps = dec.get_attention_maps(tgt, memory, src_mask)
    assert maps["self"].shape == (2, 3, H, 6, 6) and maps["cross"].shape == (2, 3, H, 6, 8)
    assert torch.all(maps["self"].triu(1) == 0)  # tgt_mask=None is causal here too
    assert torch.all(maps["cross"][:, 2, :, :, 2:] == 0)  # sequence 2 has 2 real source tokens
    only_self = decoder(cross_attention=False).get_attention_maps(tgt)
    assert set(only_self) == {"self"}

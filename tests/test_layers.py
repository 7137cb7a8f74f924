"""Tests for transformer_lib.layers: FeedForward, AddNorm, EncoderLayer, DecoderLayer (against PyTorch's)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lib as tl
from transformer_lib import from_torch, to_torch

D, H, D_FF = 32, 4, 64


def rel_err(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def padded_tokens(batch: int, length: int, lengths: list[int], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, 10, (batch, length), generator=g)
    for i, n in enumerate(lengths):
        tokens[i, n:] = 0
    return tokens


# --------------------------------------------------------------------------- FeedForward


def test_feed_forward_is_two_linear_maps_with_relu_between():
    torch.manual_seed(0)
    ff = tl.FeedForward(D, D_FF, dropout=0.0)
    x = torch.randn(2, 5, D)
    expected = F.relu(x @ ff.W_1.weight.T + ff.W_1.bias) @ ff.W_2.weight.T + ff.W_2.bias
    torch.testing.assert_close(ff(x), expected)
    assert ff.W_1.weight.shape == (D_FF, D) and ff.W_2.weight.shape == (D, D_FF)


@pytest.mark.parametrize("activation, fn", [
    ("gelu", F.gelu),
    ("gelu_tanh", lambda z: F.gelu(z, approximate="tanh")),
])  # fmt: skip
def test_feed_forward_gelu_options(activation, fn):
    torch.manual_seed(0)
    ff = tl.FeedForward(D, D_FF, dropout=0.0, activation=activation)
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(ff(x), ff.W_2(fn(ff.W_1(x))))


def test_feed_forward_acts_on_each_position_separately():
    torch.manual_seed(0)
    ff = tl.FeedForward(D, D_FF, dropout=0.0)
    x = torch.randn(1, 6, D)
    whole = ff(x)
    for t in range(6):
        torch.testing.assert_close(whole[:, t], ff(x[:, t : t + 1])[:, 0])


def test_feed_forward_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"activation must be one of.*'tanh'"):
        tl.FeedForward(D, D_FF, activation="tanh")
    with pytest.raises(TypeError, match=r"activation must be one of.*function"):
        tl.FeedForward(D, D_FF, activation=F.relu)
    with pytest.raises(ValueError, match=r"d_ff .*positive.*0"):
        tl.FeedForward(D, 0)
    with pytest.raises(ValueError, match=r"dropout .*\[0, 1\).*1.5"):
        tl.FeedForward(D, D_FF, dropout=1.5)
    with pytest.raises(ValueError, match=r"x .*\(batch, seq, d_model=32\).*\(2, 5, 8\)"):
        tl.FeedForward(D, D_FF)(torch.randn(2, 5, 8))


# --------------------------------------------------------------------------- AddNorm


def test_add_norm_post_norm_is_layernorm_of_the_sum():
    torch.manual_seed(0)
    add_norm = tl.AddNorm(D, dropout=0.0)
    x = torch.randn(2, 5, D)
    sub = nn.Linear(D, D)
    expected = F.layer_norm(x + sub(x), (D,), add_norm.norm.weight, add_norm.norm.bias, 1e-5)
    torch.testing.assert_close(add_norm(x, sub), expected)


def test_add_norm_pre_norm_keeps_the_residual_path_an_identity():
    torch.manual_seed(0)
    add_norm = tl.AddNorm(D, dropout=0.0, norm_first=True, layer_norm_eps=1e-12)
    x = torch.randn(2, 5, D)
    sub = nn.Linear(D, D)
    torch.testing.assert_close(add_norm(x, sub), x + sub(F.layer_norm(x, (D,), eps=1e-12)))
    torch.testing.assert_close(add_norm(x, torch.zeros_like), x)  # a zero sublayer passes x through
    assert add_norm.norm.eps == 1e-12


def test_add_norm_errors():
    with pytest.raises(TypeError, match=r"sublayer .*callable.*Tensor"):
        tl.AddNorm(D)(torch.randn(1, 2, D), torch.randn(1, 2, D))
    with pytest.raises(TypeError, match=r"norm_first .*True or False.*'yes'"):
        tl.AddNorm(D, norm_first="yes")
    with pytest.raises(ValueError, match=r"layer_norm_eps .*positive.*0"):
        tl.AddNorm(D, layer_norm_eps=0)


# --------------------------------------------------------------------------- EncoderLayer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    ours = tl.EncoderLayer(D, H, D_FF, dropout=0.1, norm_first=norm_first, activation=activation).eval()
    theirs = to_torch(ours)
    assert isinstance(theirs, nn.TransformerEncoderLayer) and theirs.norm_first == norm_first
    assert not theirs.training and theirs.self_attn.batch_first
    src = padded_tokens(3, 7, [7, 4, 2])
    x = torch.randn(3, 7, D)
    out = ours(x, tl.padding_mask(src, 0))
    with torch.no_grad():  # eval mode without gradients: PyTorch takes its fused fast path
        ref = theirs(x, src_key_padding_mask=src == 0)
    assert rel_err(out, ref) <= 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_from_torch_matches(norm_first):
    torch.manual_seed(1)
    theirs = nn.TransformerEncoderLayer(D, H, D_FF, 0.1,
                                        "gelu", 1e-6, batch_first=True, norm_first=norm_first)
    theirs.eval()
    ours = from_torch(theirs)
    assert isinstance(ours, tl.EncoderLayer) and not ours.training
    assert ours.feed_forward.activation == "gelu" and ours.add_norm2.norm.eps == 1e-6
    x = torch.randn(2, 6, D)
    attn_mask = torch.rand(6, 6) > 0.3
    attn_mask |= torch.eye(6, dtype=torch.bool)  # every query keeps at least one key
    assert rel_err(ours(x, attn_mask), theirs(x, src_mask=~attn_mask)) <= 1e-5


def test_encoder_layer_padded_source_tokens_do_not_matter():
    torch.manual_seed(0)
    layer = tl.EncoderLayer(D, H, D_FF).eval()
    src = padded_tokens(2, 6, [6, 3])
    mask = tl.padding_mask(src, 0)
    x = torch.randn(2, 6, D)
    y = x.clone()
    y[1, 3:] = torch.randn(3, D)  # change the vectors at the padded positions
    out_x, out_y = layer(x, mask), layer(y, mask)
    torch.testing.assert_close(out_x[1, :3], out_y[1, :3], rtol=0, atol=1e-6)
    torch.testing.assert_close(out_x[0], out_y[0], rtol=0, atol=0)
    # without the mask the change does reach the real positions
    assert not torch.allclose(layer(x)[1, :3], layer(y)[1, :3])


def test_encoder_layer_keeps_weights_only_when_asked():
    torch.manual_seed(0)
    layer = tl.EncoderLayer(D, H, D_FF, dropout=0.0)
    src = padded_tokens(2, 5, [5, 2])
    x = torch.randn(2, 5, D)
    mask = tl.padding_mask(src, 0)
    for training in (True, False):  # the fused kernel in both modes: nothing kept
        layer.train(training)(x, mask)
        assert layer.self_attn.attention_weights is None
    fused = layer(x, mask)
    explicit = layer(x, mask, need_weights=True)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-6)  # same maths, two paths
    weights = layer.self_attn.attention_weights
    assert weights.shape == (2, H, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 5))
    assert torch.all(weights[1, :, :, 2:] == 0)  # no attention to pads
    layer(x, mask)
    assert layer.self_attn.attention_weights is None  # the next ordinary call drops them


def test_encoder_layer_errors_name_the_argument():
    layer = tl.EncoderLayer(D, H, D_FF)
    with pytest.raises(ValueError, match=r"d_model.*divisible by num_heads.*30.*4"):
        tl.EncoderLayer(30, 4, D_FF)
    with pytest.raises(ValueError, match=r"x .*\(batch, src_len, d_model=32\).*\(5, 32\)"):
        layer(torch.randn(5, D))
    with pytest.raises(TypeError, match=r"x .*floating-point.*int64"):
        layer(torch.ones(1, 5, D, dtype=torch.long))
    with pytest.raises(TypeError, match=r"src_mask .*boolean.*float32"):
        layer(torch.randn(1, 5, D), torch.ones(1, 1, 1, 5))
    with pytest.raises(ValueError, match=r"src_mask .*\(1, 1, 1, 4\).*broadcast.*\(1, 4, 5, 5\)"):
        layer(torch.randn(1, 5, D), torch.ones(1, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"src_mask .*torch.Tensor.*list"):
        layer(torch.randn(1, 5, D), [[True] * 5])
    with pytest.raises(TypeError, match=r"need_weights .*True or False"):
        layer(torch.randn(1, 5, D), need_weights=1)


# --------------------------------------------------------------------------- DecoderLayer


def decoder_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = padded_tokens(3, 7, [7, 5, 3], seed)
    tgt = padded_tokens(3, 6, [6, 4, 2], seed + 1)
    memory = torch.randn(3, 7, D, generator=g)
    x = torch.randn(3, 6, D, generator=g)
    memory_mask = torch.rand(6, 7, generator=g) > 0.4
    memory_mask[:, 0] = True  # every query keeps at least one source position
    return src, tgt, memory, x, memory_mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch_with_causal_padding_and_memory_masks(norm_first):
    torch.manual_seed(0)
    ours = tl.DecoderLayer(D, H, D_FF, dropout=0.1, norm_first=norm_first).eval()
    theirs = to_torch(ours)
    assert isinstance(theirs, nn.TransformerDecoderLayer) and theirs.norm_first == norm_first
    src, tgt, memory, x, memory_mask = decoder_inputs()
    tgt_mask = tl.causal_mask(6) & tl.padding_mask(tgt, 0)  # (batch, 1, tgt_len, tgt_len)
    src_mask = memory_mask & tl.padding_mask(src, 0)  # (batch, 1, tgt_len, src_len)
    out = ours(x, memory, src_mask, tgt_mask)
    ref = theirs(
        x, memory,
        tgt_mask=~tl.causal_mask(6), memory_mask=~memory_mask,
        tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
    )  # fmt: skip
    assert rel_err(out, ref) <= 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_from_torch_matches(norm_first):
    torch.manual_seed(2)
    theirs = nn.TransformerDecoderLayer(D, H, D_FF, 0.0, batch_first=True, norm_first=norm_first).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, tl.DecoderLayer) and ours.norm_first == norm_first
    src, tgt, memory, x, _ = decoder_inputs(3)
    out = ours(x, memory, tl.padding_mask(src, 0), tl.causal_mask(6))
    ref = theirs(x, memory, tgt_mask=~tl.causal_mask(6), memory_key_padding_mask=src == 0)
    assert rel_err(out, ref) <= 1e-5


def test_decoder_layer_without_cross_attention_is_a_causal_encoder_layer():
    torch.manual_seed(0)
    ours = tl.DecoderLayer(D, H, D_FF, norm_first=True, activation="gelu_tanh", cross_attention=False).eval()
    assert ours.cross_attn is None and ours.add_norm2 is None
    theirs = to_torch(ours)
    assert isinstance(theirs, nn.TransformerEncoderLayer)
    x = torch.randn(2, 5, D)
    ref = theirs(x, src_mask=~tl.causal_mask(5))
    assert rel_err(ours(x, tgt_mask=tl.causal_mask(5)), ref) <= 1e-5
    with pytest.raises(ValueError, match="no cross-attention"):
        ours(x, x)


def test_decoder_layer_future_target_and_padded_source_do_not_matter():
    torch.manual_seed(0)
    layer = tl.DecoderLayer(D, H, D_FF).eval()
    src, tgt, memory, x, _ = decoder_inputs()
    src_mask = tl.padding_mask(src, 0)
    tgt_mask = tl.causal_mask(6) & tl.padding_mask(tgt, 0)
    base = layer(x, memory, src_mask, tgt_mask)
    # 1) a future target position: earlier outputs unchanged
    x2 = x.clone()
    x2[:, 4] = torch.randn(3, D)
    changed = layer(x2, memory, src_mask, tgt_mask)
    torch.testing.assert_close(changed[:, :4], base[:, :4], rtol=0, atol=1e-6)
    assert not torch.allclose(changed[0, 4], base[0, 4])
    # 2) a padded source position: nothing changes
    memory2 = memory.clone()
    memory2[2, 3:] = torch.randn(4, D)
    torch.testing.assert_close(layer(x, memory2, src_mask, tgt_mask), base, rtol=0, atol=1e-6)
    # and the masks are what protects them
    assert not torch.allclose(layer(x2, memory, causal=False)[:, :4], layer(x, memory, causal=False)[:, :4])


def test_decoder_layer_reads_a_missing_tgt_mask_as_the_causal_mask_as_the_stack_does():
    """One meaning of ``tgt_mask=None`` in the layer, the stack and the models: the causal mask."""
    torch.manual_seed(0)
    layer = tl.DecoderLayer(D, H, D_FF).eval()
    _, _, memory, x, _ = decoder_inputs()
    causal = layer(x, memory, tgt_mask=tl.causal_mask(6))
    torch.testing.assert_close(layer(x, memory), causal, rtol=0, atol=0)
    torch.testing.assert_close(tl.Decoder(None, [layer])(x, memory), causal, rtol=0, atol=0)
    x2 = x.clone()
    x2[:, 4] = torch.randn(3, D)  # a future position: no earlier output moves
    torch.testing.assert_close(layer(x2, memory)[:, :4], causal[:, :4], rtol=0, atol=1e-6)
    # with a cache, None is the causal mask over the cached keys and the new ones
    self_cache, cross_cache = tl.KVCache(grows=True), tl.KVCache(grows=False)
    first = layer(x[:, :4], memory, self_cache=self_cache, cross_cache=cross_cache)
    rest = layer(x[:, 4:], memory, self_cache=self_cache, cross_cache=cross_cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), causal, rtol=1e-5, atol=1e-5)
    # a windowed cache: None is the causal mask over the window
    window = tl.causal_mask(6, window=3)
    windowed = tl.KVCache(grows=True, window=3)
    steps = [layer(x[:, i : i + 2], memory, self_cache=windowed, cross_cache=tl.KVCache(grows=False))
             for i in range(0, 6, 2)]  # fmt: skip
    torch.testing.assert_close(torch.cat(steps, dim=1), layer(x, memory, tgt_mask=window), rtol=1e-5, atol=1e-5)


def test_decoder_layer_without_a_mask_only_when_asked_by_name():
    """``causal=False`` asks for no mask: every position sees every other, as with a mask of all True."""
    torch.manual_seed(0)
    layer = tl.DecoderLayer(D, H, D_FF).eval()
    _, _, memory, x, _ = decoder_inputs()
    everywhere = torch.ones(6, 6, dtype=torch.bool)
    unmasked = layer(x, memory, causal=False)
    torch.testing.assert_close(unmasked, layer(x, memory, tgt_mask=everywhere))
    assert not torch.allclose(unmasked[:, :5], layer(x, memory)[:, :5])
    with pytest.raises(ValueError, match=r"causal=False .*no self-attention mask.*tgt_mask of shape \(6, 6\)"):
        layer(x, memory, tgt_mask=everywhere, causal=False)
    with pytest.raises(TypeError, match=r"causal must be True or False, got NoneType None"):
        layer(x, memory, causal=None)


def test_decoder_layer_keeps_self_and_cross_attention_weights_when_asked():
    torch.manual_seed(0)
    layer = tl.DecoderLayer(D, H, D_FF).eval()
    src, tgt, memory, x, _ = decoder_inputs()
    layer(x, memory, tl.padding_mask(src, 0), tl.causal_mask(6))
    assert layer.self_attn.attention_weights is None and layer.cross_attn.attention_weights is None
    layer(x, memory, tl.padding_mask(src, 0), tl.causal_mask(6), need_weights=True)
    self_w, cross_w = layer.self_attn.attention_weights, layer.cross_attn.attention_weights
    assert self_w.shape == (3, H, 6, 6) and cross_w.shape == (3, H, 6, 7)
    assert torch.all(self_w.triu(1) == 0)  # nothing above the diagonal: no peeking ahead
    assert torch.all(cross_w[2, :, :, 3:] == 0)


def test_decoder_layer_errors_name_the_argument():
    layer = tl.DecoderLayer(D, H, D_FF)
    x, memory = torch.randn(2, 4, D), torch.randn(2, 6, D)
    with pytest.raises(ValueError, match=r"memory .*required.*None"):
        layer(x)
    with pytest.raises(ValueError, match=r"memory .*\(batch, src_len, d_model=32\).*\(2, 6, 8\)"):
        layer(x, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match=r"batch sizes of x and memory .*2 and 3"):
        layer(x, torch.randn(3, 6, D))
    with pytest.raises(ValueError, match=r"tgt_mask .*\(5, 5\).*broadcast"):
        layer(x, memory, tgt_mask=tl.causal_mask(5))
    with pytest.raises(ValueError, match=r"src_mask .*\(2, 1, 1, 4\).*broadcast"):
        layer(x, memory, src_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"cross_attention .*True or False.*1"):
        tl.DecoderLayer(D, H, D_FF, cross_attention=1)


def test_to_torch_and_from_torch_refuse_what_they_cannot_convert():
    with pytest.raises(ValueError, match="batch_first=True"):
        from_torch(nn.TransformerEncoderLayer(D, H, D_FF))
    with pytest.raises(ValueError, match="activation must be ReLU or GELU"):
        from_torch(nn.TransformerEncoderLayer(D, H, D_FF, activation=torch.tanh, batch_first=True))

"""Tests for the parts of today's decoders, each against PyTorch's or transformers' own implementation.

RMSNorm against ``torch.nn.RMSNorm``; the gated feed-forward network against Llama's
``LlamaMLP``; grouped-query attention against ``F.scaled_dot_product_attention`` with
``enable_gqa=True`` and with repeated keys and values; the "rotate half" layout against
Llama's ``apply_rotary_pos_emb``; tiled attention against ``F.scaled_dot_product_attention``;
the whole Llama-style model against ``LlamaForCausalLM``. Nothing is downloaded: the Llama
models are small random ones built from a ``LlamaConfig``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRotaryEmbedding, apply_rotary_pos_emb

import transformer_lib as tl
from transformer_lib.layers import FeedForward, make_norm
from transformer_lib.llama import config_from_llama, llama_config
from transformer_lib.torch_attention import KVCache, MultiHeadAttention

# --------------------------------------------------------------------------- RMSNorm


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
def test_rms_norm_equals_torch_rms_norm(eps):
    torch.manual_seed(0)
    ours, theirs = tl.RMSNorm(24, eps=eps), nn.RMSNorm(24, eps=eps)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 24) * 4 + 1
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-6, atol=1e-6)
    x64 = x.double()
    torch.testing.assert_close(ours.double()(x64), theirs.double()(x64), rtol=1e-12, atol=1e-12)


def test_rms_norm_drops_the_mean_and_the_bias():
    """Unlike LayerNorm, a constant shift of the input changes RMSNorm's output, and it has only a gain."""
    x = torch.randn(2, 16)
    rms, layer = tl.RMSNorm(16), nn.LayerNorm(16)
    assert [n for n, _ in rms.named_parameters()] == ["weight"]
    torch.testing.assert_close(layer(x + 3.0), layer(x), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(rms(x + 3.0), rms(x), atol=1e-2)


def test_norm_type_puts_rms_norms_everywhere():
    config = tl.TransformerConfig.preset("gpt-tiny", norm_type="rms")
    model = tl.build_model(config)
    norms = [m for m in model.modules() if isinstance(m, tl.RMSNorm | nn.LayerNorm)]
    assert norms and all(isinstance(m, tl.RMSNorm) for m in norms)
    assert len(norms) == 2 * config.num_layers + 1  # two per layer, and the final one
    assert isinstance(make_norm("layer", 8, 1e-5), nn.LayerNorm)


# --------------------------------------------------------------------------- SwiGLU


def test_glu_hidden_size_is_llamas():
    assert tl.glu_hidden_size(4096) == 11008  # Llama 2 7B
    assert tl.glu_hidden_size(4096, multiple_of=1024, multiplier=1.3) == 14336  # Llama 3 8B
    assert tl.glu_hidden_size(96, multiple_of=1) == 256  # exactly 2/3 of 4 * 96
    config = tl.TransformerConfig.preset("gpt-tiny", ffn_type="glu", d_ff=None)
    assert config.d_ff == tl.glu_hidden_size(64)
    assert tl.TransformerConfig.preset("gpt-tiny", d_ff=None).d_ff == 256  # the paper's kind: 4 * d_model


@pytest.mark.parametrize("activation, hidden_act", [("silu", "silu"), ("gelu", "gelu")])
def test_glu_feed_forward_equals_llama_mlp(activation, hidden_act):
    torch.manual_seed(0)
    hf = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=80, hidden_act=hidden_act))
    ours = FeedForward(32, 80, dropout=0.0, activation=activation, kind="glu", bias=False)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
        ours.W_1.weight.copy_(hf.gate_proj.weight)
        ours.W_3.weight.copy_(hf.up_proj.weight)
        ours.W_2.weight.copy_(hf.down_proj.weight)
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(ours(x), hf(x), rtol=1e-6, atol=1e-6)
    assert sum(p.numel() for p in ours.parameters()) == 3 * 32 * 80


# --------------------------------------------------------------------------- grouped-query attention


def _qkv(mha: MultiHeadAttention, x: torch.Tensor):
    """Queries, keys and values of ``mha`` for ``x``, with the key-value heads not repeated."""
    b, n, _ = x.shape
    q = mha.W_q(x).view(b, n, mha.num_heads, mha.d_k).transpose(1, 2)
    k = mha.W_k(x).view(b, n, mha.num_kv_heads, mha.d_k).transpose(1, 2)
    v = mha.W_v(x).view(b, n, mha.num_kv_heads, mha.d_k).transpose(1, 2)
    return q, k, v


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masked", ["none", "causal", "padding"])
def test_grouped_query_attention_equals_torch(num_kv_heads, need_weights, masked):
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 8, num_kv_heads=num_kv_heads).eval()
    assert mha.W_k.weight.shape == (num_kv_heads * 8, 64)
    x = torch.randn(2, 6, 64)
    mask = {"none": None, "causal": tl.causal_mask(6),
            "padding": torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool)[:, None, None, :]}[masked]
    with torch.no_grad():
        ours = mha(x, x, x, mask, need_weights=need_weights)
        q, k, v = _qkv(mha, x)
        gqa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        groups = 8 // num_kv_heads
        repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                                  attn_mask=mask)  # fmt: skip
    torch.testing.assert_close(gqa, repeated, rtol=1e-5, atol=1e-6)
    expected = mha.W_o(gqa.transpose(1, 2).reshape(2, 6, 64))
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_the_cache_holds_only_the_key_value_heads(num_kv_heads):
    torch.manual_seed(0)
    config = tl.TransformerConfig.preset("gpt-tiny", num_kv_heads=num_kv_heads, positional="rotary")
    model = tl.build_model(config).eval()
    ids = torch.randint(0, 64, (2, 12))
    cache = model.new_cache()
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.self_attn[0].k.shape == (2, num_kv_heads, 12, config.d_k)
    assert torch.equal(tl.generate(model, ids[:, :3], 8, greedy=True),
                       tl.generate(model, ids[:, :3], 8, greedy=True, use_cache=False))


# --------------------------------------------------------------------------- rotary layouts


def test_rotate_half_equals_llamas_rotary():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters={"rope_type": "default",
                                                                                  "rope_theta": 500000.0})
    q, k = torch.randn(2, 4, 10, 16), torch.randn(2, 4, 10, 16)
    positions = torch.arange(3, 13)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    for ours, theirs in ((q, q_hf), (k, k_hf)):
        rotated = tl.apply_rotary(ours, positions, base=500000.0, layout="half")
        torch.testing.assert_close(rotated, theirs, rtol=1e-5, atol=1e-5)


def test_the_permutation_maps_one_layout_to_the_other():
    torch.manual_seed(0)
    perm = tl.rotary_permutation(8)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert tl.rotary_permutation(4, num_heads=2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    x = torch.randn(3, 11, 8, dtype=torch.float64)
    torch.testing.assert_close(tl.apply_rotary(x[..., perm], layout="half"), tl.apply_rotary(x)[..., perm])
    assert not torch.allclose(tl.apply_rotary(x, layout="half"), tl.apply_rotary(x))


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_permuted_projections_give_equal_attention(num_kv_heads):
    """Interleaved weights with their rows reordered, in the half layout: the same attention, weights included."""
    torch.manual_seed(0)
    inter = MultiHeadAttention(64, 4, rotary=True, num_kv_heads=num_kv_heads).eval()
    half = MultiHeadAttention(64, 4, rotary=True, num_kv_heads=num_kv_heads, rotary_layout="half").eval()
    half.load_state_dict(inter.state_dict())
    with torch.no_grad():
        for name, heads in (("W_q", 4), ("W_k", num_kv_heads)):
            perm = tl.rotary_permutation(16, heads)
            getattr(half, name).weight.copy_(getattr(inter, name).weight[perm])
            getattr(half, name).bias.copy_(getattr(inter, name).bias[perm])
    x = torch.randn(2, 9, 64)
    with torch.no_grad():
        a, b = inter(x, x, x, tl.causal_mask(9)), half(x, x, x, tl.causal_mask(9))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(inter.attention_weights, half.attention_weights, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # without the reordering the half layout computes something else
        half.load_state_dict(inter.state_dict())
        assert not torch.allclose(half(x, x, x, tl.causal_mask(9)), a, atol=1e-3)


# --------------------------------------------------------------------------- sliding window


def test_sliding_window_mask():
    n, w = 7, 3
    expected = torch.tensor([[0 <= i - j < w for j in range(n)] for i in range(n)])
    assert torch.equal(tl.causal_mask(n, window=w), expected)
    past = 4
    expected = torch.tensor([[0 <= past + i - j < w for j in range(past + n)] for i in range(n)])
    assert torch.equal(tl.causal_mask(n, past=past, window=w), expected)
    assert torch.equal(tl.causal_mask(n, window=n), tl.causal_mask(n))


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_windowed_decoder_and_its_bounded_cache(positional):
    torch.manual_seed(0)
    w = 4
    config = tl.TransformerConfig.preset("gpt-tiny", window=w, positional=positional, num_kv_heads=2)
    model = tl.build_model(config).eval()
    plain = tl.build_model(dataclasses.replace(config, window=None)).eval()
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(0, 64, (2, 15))
    with torch.no_grad():
        full = model(ids)
        torch.testing.assert_close(full, plain(ids, tgt_mask=tl.causal_mask(15, window=w)))
        assert not torch.allclose(full, plain(ids), atol=1e-3)  # the window changes the model
        cache = model.new_cache()
        steps = [model(ids[:, :6], cache=cache)]
        held = []
        for t in range(6, 15):
            steps.append(model(ids[:, t : t + 1], cache=cache))
            held.append(cache.self_attn[0].length)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert max(held) == w - 1 and cache.length == 15 and cache.self_attn[0].dropped == 15 - (w - 1)
    assert torch.equal(tl.generate(model, ids[:, :5], 10, greedy=True),
                       tl.generate(model, ids[:, :5], 10, greedy=True, use_cache=False))


def test_sliding_window_equals_mistral():
    """Mistral is Llama with a sliding window: its weights in our model with ``window`` give its outputs."""
    from transformers import MistralConfig, MistralForCausalLM

    from transformer_lib.llama import load_llama_tensors

    torch.manual_seed(0)
    hf = MistralForCausalLM(MistralConfig(
        hidden_size=64, intermediate_size=172, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=100, max_position_embeddings=128, sliding_window=4, rms_norm_eps=1e-5, initializer_range=0.1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)).eval()  # fmt: skip
    config = tl.TransformerConfig.preset("llama-tiny", d_ff=172)
    plain = load_llama_tensors(tl.build_model(config), hf.state_dict()).eval()  # Llama has no window
    ours = tl.build_model(dataclasses.replace(config, window=4)).eval()
    ours.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 100, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = torch.log_softmax(hf(ids).logits, dim=-1)
        torch.testing.assert_close(ours(ids), expected, rtol=0, atol=1e-5)
        assert (plain(ids) - expected).abs().max() > 0.1  # without the window: another model
    reference = hf_greedy(hf, ids[:, :3], 20)
    assert torch.equal(tl.generate(ours, ids[:, :3], 20, greedy=True), reference)  # the cache keeps 3 keys


# --------------------------------------------------------------------------- tiled attention


def test_online_softmax_equals_softmax():
    torch.manual_seed(0)
    x = torch.randn(5, 37, dtype=torch.float64) * 10
    x[1, :20] = float("-inf")
    x[2] = float("-inf")
    for block in (1, 4, 37, 64):
        out = tl.online_softmax(x, block)
        torch.testing.assert_close(out[[0, 1, 3, 4]], torch.softmax(x, -1)[[0, 1, 3, 4]])
        assert torch.equal(out[2], torch.zeros(37, dtype=torch.float64))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("block_size", [1, 7, 16, 200])
@pytest.mark.parametrize("q_len, k_len", [(33, 33), (20, 45), (45, 20)])
def test_tiled_attention_equals_torch(dtype, tol, block_size, q_len, k_len):
    torch.manual_seed(0)
    q = torch.randn(2, 3, q_len, 16, dtype=dtype)
    k, v = torch.randn(2, 3, k_len, 16, dtype=dtype), torch.randn(2, 3, k_len, 8, dtype=dtype)
    check = dict(rtol=tol, atol=tol)
    torch.testing.assert_close(tl.tiled_attention(q, k, v, block_size=block_size),
                               F.scaled_dot_product_attention(q, k, v), **check)
    torch.testing.assert_close(tl.tiled_attention(q, k, v, causal=True, block_size=block_size),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), **check)
    mask = torch.rand(2, 1, q_len, k_len) > 0.6
    mask[:, :, 3] = False  # fully masked rows: both give zeros
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = tl.tiled_attention(q, k, v, mask, block_size=block_size)
    torch.testing.assert_close(out, expected, **check)
    assert torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
    key_padding = torch.rand(2, 1, 1, k_len) > 0.3  # with causal=True: the top-left causal mask as well
    top_left = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    expected, _ = tl.scaled_dot_product_attention(q, k, v, key_padding & top_left)
    torch.testing.assert_close(tl.tiled_attention(q, k, v, key_padding, causal=True, block_size=block_size), expected,
                               **check)


def test_tiled_attention_scale_and_errors():
    q = torch.randn(1, 5, 4)
    torch.testing.assert_close(tl.tiled_attention(q, q, q, scale=1.0, block_size=2),
                               F.scaled_dot_product_attention(q, q, q, scale=1.0))
    with pytest.raises(ValueError, match="block_size must be a positive"):
        tl.tiled_attention(q, q, q, block_size=0)
    with pytest.raises(ValueError, match="mask"):
        tl.tiled_attention(q, q, q, torch.ones(5, 6, dtype=torch.bool))


def test_tiled_attention_memory_grows_linearly_where_the_naive_grows_quadratically():
    torch.manual_seed(0)
    peaks = {}
    for n in (256, 512, 1024):
        q = torch.randn(1, 1, n, 32)
        naive_out, naive = tl.peak_memory(tl.scaled_dot_product_attention, q, q, q)
        tiled_out, tiled = tl.peak_memory(tl.tiled_attention, q, q, q, block_size=64)
        torch.testing.assert_close(tiled_out, naive_out[0], rtol=1e-5, atol=1e-6)
        assert naive >= 2 * n * n * 4  # the scores and their softmax, float32
        peaks[n] = (naive, tiled)
    assert peaks[1024][0] / peaks[512][0] > 3.5 and peaks[512][0] / peaks[256][0] > 3.0
    assert peaks[1024][1] / peaks[512][1] < 2.5 and peaks[1024][1] < peaks[1024][0] / 10


def test_peak_memory_counts_what_lives_at_once():
    x = torch.ones(1000)  # 4,000 bytes; not counted: it existed before
    def two_alive():
        a, b = x * 2, x * 3
        return a + b  # three buffers of 4,000 bytes alive at once
    def one_at_a_time():
        for _ in range(3):
            y = x * 2
        return y.sum()
    assert tl.peak_memory(two_alive)[1] == 12000
    assert tl.peak_memory(one_at_a_time)[1] <= 8004


# --------------------------------------------------------------------------- the Llama-style model


def small_llama(tied: bool, seed: int = 0) -> LlamaForCausalLM:
    """A 4-layer Llama, 4 query heads and 2 key-value heads of width 16, a 100-token vocabulary.

    Its weights start five times larger than Llama's (``initializer_range`` 0.1), so that
    attention matters and a mapping error would show in the outputs; at ten times (0.2) the
    log-probabilities reach magnitudes where float32 rounding alone (each model against
    itself in float64) is above 1e-5.
    """
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=128,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-5,
                         tie_word_embeddings=tied, initializer_range=0.1, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)  # fmt: skip
    hf = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norm gains away from 1, so that a gain in the wrong place shows
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return hf


def hf_greedy(hf: LlamaForCausalLM, ids: torch.Tensor, new: int) -> torch.Tensor:
    """Llama's own greedy continuation, one argmax at a time over its logits."""
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, hf(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_llama_equivalence(tied, layout):
    hf = small_llama(tied)
    ours = tl.from_llama(hf, rotary_layout=layout).eval()
    assert ours.config.kv_heads == 2 and ours.config.tie_output == tied
    assert tl.count_parameters(ours) == sum(p.numel() for p in hf.parameters())
    ids = torch.randint(0, 100, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = torch.log_softmax(hf(ids).logits, dim=-1)
        got = ours(ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert (got - expected).abs().max() < 1e-5
    prompt, reference = ids[:, :4], hf_greedy(hf, ids[:, :4], 20)
    assert len(set(reference[:, 4:].flatten().tolist())) >= 6  # continuations that depend on their inputs
    assert torch.equal(tl.generate(ours, prompt, 20, greedy=True), reference)
    assert torch.equal(tl.generate(ours, prompt, 20, greedy=True, use_cache=False), reference)
    back = tl.to_llama(ours).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, hf(ids).logits, rtol=0, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), hf.state_dict().values()))


def test_llama_config_round_trip_and_refusals():
    config = tl.TransformerConfig.preset("llama-tiny", rotary_base=500000.0)
    hf_config = llama_config(config)
    assert (hf_config.num_key_value_heads, hf_config.rope_parameters["rope_theta"]) == (2, 500000.0)
    assert dataclasses.replace(config_from_llama(hf_config), rotary_base=500000.0) == config
    with pytest.raises(ValueError, match=r"config.norm_type must be 'rms'.*config.ffn_type must be 'glu'"):
        llama_config(tl.TransformerConfig.preset("gpt-tiny", positional="rotary"))
    with pytest.raises(ValueError, match="config.window must be None"):
        llama_config(dataclasses.replace(config, window=8))
    scaled = LlamaConfig(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type 'default'"):
        config_from_llama(scaled)
    with pytest.raises(ValueError, match="attention_bias and mlp_bias must be equal"):
        config_from_llama(LlamaConfig(attention_bias=True, mlp_bias=False))


def test_llama_style_model_is_the_decoder_only_model():
    model = tl.build_model(tl.TransformerConfig.preset("llama-tiny"))
    assert type(model) is tl.DecoderOnlyModel
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]


# --------------------------------------------------------------------------- options and their errors


@pytest.mark.parametrize("overrides, message", [
    (dict(num_kv_heads=3), "num_kv_heads must divide num_heads.*got num_kv_heads=3 and num_heads=4"),
    (dict(num_kv_heads=0), "num_kv_heads must be a positive"),
    (dict(norm_type="batch"), "norm_type must be one of"),
    (dict(ffn_type="moe"), "ffn_type must be one of"),
    (dict(rotary_layout="pairs"), "rotary_layout must be one of"),
    (dict(window=0), "window must be a positive"),
    (dict(rotary_base=-1.0), "rotary_base must be a positive"),
])  # fmt: skip
def test_bad_options_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        tl.TransformerConfig.preset("gpt-tiny", **overrides)


def test_bad_options_of_the_blocks_are_named():
    for preset in ("bert-tiny", "tiny"):  # the window is for decoder-only models
        with pytest.raises(ValueError, match="window applies to a decoder-only model"):
            tl.TransformerConfig.preset(preset, window=4)
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        MultiHeadAttention(64, 8, num_kv_heads=3)
    with pytest.raises(ValueError, match="kind must be one of"):
        FeedForward(8, 16, kind="gated")
    with pytest.raises(ValueError, match="layout must be one of"):
        tl.apply_rotary(torch.randn(2, 4), layout="split")
    with pytest.raises(ValueError, match="window applies to a growing"):
        KVCache(grows=False, window=3)
    with pytest.raises(ValueError, match="d must be even"):
        tl.rotary_permutation(7)


@pytest.mark.parametrize("field, value", [("norm_type", "rms"), ("ffn_type", "glu"), ("num_kv_heads", 2),
                                          ("bias", False), ("window", 4)])  # fmt: skip
def test_pytorch_and_gpt2_refuse_what_they_cannot_express(field, value):
    config = tl.TransformerConfig.preset("gpt-tiny", **{field: value})
    with pytest.raises(ValueError, match=field):
        tl.to_gpt2(tl.build_model(config))
    if field == "window":  # an encoder-decoder config refuses a window: a decoder stack built with one
        d = tl.build_model(tl.TransformerConfig.preset("small")).decoder
        decoder = tl.Decoder(d.embedding, list(d.layers), d.norm, window=value)
    else:
        decoder = tl.build_model(tl.TransformerConfig.preset("small", **{field: value})).decoder
    with pytest.raises(ValueError, match=field):
        tl.to_torch(decoder)


def test_every_option_but_the_window_in_an_encoder_decoder_decodes_alike_with_and_without_the_cache():
    torch.manual_seed(0)
    config = tl.TransformerConfig.preset("tiny", num_kv_heads=1, norm_type="rms", ffn_type="glu", d_ff=None,
                                         activation="silu", positional="rotary", rotary_layout="half", bias=False)
    model = tl.build_model(config).eval()
    src = torch.randint(3, 16, (3, 7), generator=torch.Generator().manual_seed(1))
    greedy = tl.greedy_decode(model, src, max_len=10)
    assert torch.equal(greedy, tl.greedy_decode(model, src, max_len=10, use_cache=False))
    beams = tl.beam_search(model, src, max_len=10, beam_size=3)
    assert torch.equal(beams, tl.beam_search(model, src, max_len=10, beam_size=3, use_cache=False))

"""Tests for the ablation switches of TransformerConfig: attention_scale, positional="rotary", residual,
layer_norm. Each changes what it says and nothing else; the defaults build the paper's model."""

import math

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import to_torch

D, H, D_FF = 32, 4, 64
D_K = D // H


def config(architecture: str = "encoder-decoder", **overrides) -> tl.TransformerConfig:
    options = dict(src_vocab_size=11, tgt_vocab_size=13, d_model=D, num_heads=H, num_layers=2, d_ff=D_FF,
                   dropout=0.0, architecture=architecture, max_len=64)  # fmt: skip
    if architecture == "decoder-only":
        options["src_vocab_size"] = None
    if architecture == "encoder-only":
        options["tgt_vocab_size"] = None
    return tl.TransformerConfig(**{**options, **overrides})


def seeded(cfg: tl.TransformerConfig, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return tl.build_model(cfg).double().eval()


def src_tgt(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 11, (3, 7), generator=g), torch.randint(3, 13, (3, 6), generator=g)


def encoder_decoder_output(model: nn.Module, need_weights: bool = False) -> torch.Tensor:
    """The log-probabilities of a fixed batch; ``need_weights`` runs the explicit attention path."""
    src, tgt = src_tgt()
    src_mask = tl.padding_mask(src, 0)
    if not need_weights:
        return model(src, tgt, src_mask)
    with torch.no_grad():
        for module in model.modules():  # make every layer take the explicit path
            if isinstance(module, (tl.EncoderLayer, tl.DecoderLayer)):
                module.forward = _with_weights(module.forward)
        return model(src, tgt, src_mask)


def _with_weights(forward):
    return lambda *args, **kwargs: forward(*args, **{**kwargs, "need_weights": True})


# --------------------------------------------------------------------------- the defaults


def test_the_defaults_are_the_paper_model():
    c = tl.TransformerConfig()
    assert (c.attention_scale, c.residual, c.layer_norm, c.positional) == (True, True, True, "sinusoidal")
    explicit = seeded(config(attention_scale=True, residual=True, layer_norm=True))
    plain = seeded(config())
    for (name, a), (_, b) in zip(explicit.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(a, b), name
    torch.testing.assert_close(encoder_decoder_output(explicit), encoder_decoder_output(plain), rtol=0, atol=0)
    assert not any(isinstance(m, nn.Identity) for m in plain.modules())


@pytest.mark.parametrize(
    "field, value, error, pattern",
    [
        ("attention_scale", 0, TypeError, r"attention_scale must be True or False, got int 0"),
        ("residual", "no", TypeError, r"residual must be True or False"),
        ("layer_norm", None, TypeError, r"layer_norm must be True or False, got NoneType"),
        ("positional", "rope", ValueError, r"positional must be one of .*'rotary'.*got 'rope'"),
    ],
)
def test_switch_errors_name_the_field(field, value, error, pattern):
    with pytest.raises(error, match=pattern):
        config(**{field: value})


def test_rotary_needs_an_even_head_width():
    with pytest.raises(ValueError, match=r"positional='rotary' needs an even d_k.*d_model=12 and num_heads=4"):
        config(positional="rotary", d_model=12, num_heads=4)
    config(positional="learned", d_model=12, num_heads=4)  # other positions do not care
    with pytest.raises(ValueError, match=r"rotary=True needs an even d_k.*d_k=3"):
        tl.MultiHeadAttention(12, 4, rotary=True)


# --------------------------------------------------------------------------- attention_scale


def test_unscaled_attention_is_scaled_attention_with_queries_times_sqrt_dk():
    """Scores q.k without 1/sqrt(d_k) are the scaled scores of queries multiplied by sqrt(d_k):
    the two models agree once W_q (weight and bias) is multiplied by sqrt(d_k) in every attention."""
    unscaled = seeded(config(attention_scale=False))
    scaled = seeded(config())
    with torch.no_grad():
        for module in scaled.modules():
            if isinstance(module, tl.MultiHeadAttention):
                module.W_q.weight *= math.sqrt(D_K)
                module.W_q.bias *= math.sqrt(D_K)
    for need_weights in (False, True):
        ours = encoder_decoder_output(unscaled, need_weights)
        torch.testing.assert_close(ours, encoder_decoder_output(scaled, need_weights), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(ours, encoder_decoder_output(seeded(config()), True), atol=1e-3)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_unscaled_attention_equals_gpt2_without_scale_attn_weights(attn_implementation):
    """An outside reference: transformers' GPT-2 with scale_attn_weights=False and the same weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from transformer_lib.gpt2 import gpt2_tensors

    torch.manual_seed(0)
    ours = tl.build_model(tl.TransformerConfig.preset("gpt-tiny", attention_scale=False)).eval()
    c = ours.config
    theirs = GPT2LMHeadModel(GPT2Config(
        vocab_size=c.tgt_vocab_size, n_positions=c.max_len, n_embd=c.d_model, n_layer=c.num_layers,
        n_head=c.num_heads, n_inner=c.d_ff, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, scale_attn_weights=False, attn_implementation=attn_implementation,
    )).eval()  # fmt: skip
    theirs.load_state_dict(gpt2_tensors(ours))
    ids = torch.randint(0, c.tgt_vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = torch.log_softmax(theirs(ids).logits, dim=-1)
        torch.testing.assert_close(ours(ids), expected, atol=1e-5, rtol=0)
        scaled = tl.build_model(tl.TransformerConfig.preset("gpt-tiny")).eval()
        scaled.load_state_dict(ours.state_dict())
        assert not torch.allclose(scaled(ids), expected, atol=1e-3)


def test_unscaled_scores_are_the_scaled_ones_times_sqrt_dk():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 16, dtype=torch.float64).unbind(0)
    mask = tl.causal_mask(5)
    _, scaled = tl.scaled_dot_product_attention(q, k, v, mask)
    out, unscaled = tl.scaled_dot_product_attention(q, k, v, mask, scale=1.0)
    # softmax(sqrt(d_k) * log softmax(s / sqrt(d_k))) = softmax(s): the same rows, the scale undone
    torch.testing.assert_close(unscaled, torch.softmax(4.0 * scaled.log(), dim=-1))
    torch.testing.assert_close(out, torch.softmax((q @ k.mT).masked_fill(~mask, -math.inf), -1) @ v)
    with pytest.raises(ValueError, match="scale must be a positive float, got -1"):
        tl.scaled_dot_product_attention(q, k, v, scale=-1.0)


def test_unscaled_attention_fused_equals_explicit():
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(D, H, attention_scale=False).double().eval()
    x = torch.randn(2, 6, D, dtype=torch.float64)
    mask = tl.padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]), 0)
    torch.testing.assert_close(mha(x, x, x, mask, need_weights=False), mha(x, x, x, mask, need_weights=True))
    assert "attention_scale=False" in repr(mha)


# --------------------------------------------------------------------------- rotary


def test_rotary_attention_rotates_each_heads_queries_and_keys():
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(D, H, rotary=True).double().eval()
    x = torch.randn(2, 6, D, dtype=torch.float64)
    mha(x, x, x, need_weights=True)
    q = mha.W_q(x).view(2, 6, H, D_K).transpose(1, 2)  # (batch, heads, seq, d_k)
    k = mha.W_k(x).view(2, 6, H, D_K).transpose(1, 2)
    scores = tl.apply_rotary(q) @ tl.apply_rotary(k).mT / math.sqrt(D_K)
    torch.testing.assert_close(mha.attention_weights, torch.softmax(scores, dim=-1))
    plain = tl.MultiHeadAttention(D, H).double().eval()
    plain.load_state_dict(mha.state_dict())  # the same weights, no rotation
    plain(x, x, x, need_weights=True)
    assert not torch.allclose(plain.attention_weights, mha.attention_weights, atol=1e-3)
    torch.testing.assert_close(mha(x, x, x, need_weights=False), mha(x, x, x, need_weights=True))


@pytest.mark.parametrize("positional", ["rotary", "learned", "sinusoidal"])
def test_rotary_scores_depend_only_on_offsets(positional):
    """Shift a sequence right by 3 positions (3 left pads, masked as keys): every query and key moves by
    3, so with rotary positions the scores and the outputs at the real tokens are unchanged; with
    absolute positions (learned, sinusoidal) they change."""
    model = seeded(config("encoder-only", positional=positional))
    src = torch.tensor([[5, 6, 7, 8, 9]])
    shifted = torch.cat([torch.zeros(1, 3, dtype=torch.long), src], dim=1)  # (1, 8): pads first
    maps = model.get_attention_maps(src)  # (layers, 1, heads, 5, 5)
    maps_shifted = model.get_attention_maps(shifted, tl.padding_mask(shifted, 0))[..., 3:, 3:]
    out, out_shifted = model(src), model(shifted, tl.padding_mask(shifted, 0))[:, 3:]
    if positional == "rotary":
        torch.testing.assert_close(maps_shifted, maps)
        torch.testing.assert_close(out_shifted, out)
    else:
        assert not torch.allclose(maps_shifted, maps, atol=1e-3)
        assert not torch.allclose(out_shifted, out, atol=1e-3)


def test_rotary_decoder_only_model_is_causal_and_ignores_right_padding():
    model = seeded(config("decoder-only", positional="rotary"))
    assert model.decoder.embedding.position is None
    tgt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    out = model(tgt)
    changed = tgt.clone()
    changed[0, 4:] = 3  # a different future
    torch.testing.assert_close(model(changed)[:, :4], out[:, :4])
    assert not torch.allclose(model(changed)[:, 4:], out[:, 4:], atol=1e-3)
    padded = torch.cat([tgt[:, :4], torch.zeros(1, 2, dtype=torch.long)], dim=1)
    mask = tl.causal_mask(6) & tl.padding_mask(padded, 0)
    torch.testing.assert_close(model(padded, mask)[:, :4], out[:, :4])


def test_rotary_encoder_decoder_gives_each_padded_row_its_own_answer():
    model = seeded(config(positional="rotary"))
    src, tgt = src_tgt()
    src[1, 4:] = 0
    src[2, 2:] = 0
    out = model(src, tgt, tl.padding_mask(src, 0))
    for i, n in enumerate([7, 4, 2]):
        torch.testing.assert_close(out[i : i + 1], model(src[i : i + 1, :n], tgt[i : i + 1]))
    # only the self-attentions rotate: the cross-attention compares target and source positions
    rotary = [name for name, m in model.named_modules() if getattr(m, "rotary", False)]
    assert rotary == [f"encoder.layers.{i}.self_attn" for i in range(2)] + [
        f"decoder.layers.{i}.self_attn" for i in range(2)
    ]


def test_rotary_has_no_position_parameters():
    learned, rotary = config(positional="learned"), config(positional="rotary")
    assert tl.count_parameters(learned) - tl.count_parameters(rotary) == 2 * 64 * D  # two tables of max_len
    assert tl.count_parameters(rotary) == tl.count_parameters(config(positional="none"))
    assert tl.count_parameters(rotary) == tl.count_parameters(config())  # sinusoids have no parameters


# --------------------------------------------------------------------------- residual


@pytest.mark.parametrize("norm_first", [False, True])
def test_add_norm_without_residual_replaces_x(norm_first):
    torch.manual_seed(0)
    add_norm = tl.AddNorm(D, dropout=0.0, norm_first=norm_first, residual=False).double()
    with torch.no_grad():
        add_norm.norm.weight.uniform_(0.5, 1.5)
        add_norm.norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    sublayer = nn.Linear(D, D).double()
    expected = sublayer(add_norm.norm(x)) if norm_first else add_norm.norm(sublayer(x))
    torch.testing.assert_close(add_norm(x, sublayer), expected)
    with_residual = tl.AddNorm(D, dropout=0.0, norm_first=norm_first).double()
    with_residual.load_state_dict(add_norm.state_dict())
    expected = x + sublayer(add_norm.norm(x)) if norm_first else add_norm.norm(x + sublayer(x))
    torch.testing.assert_close(with_residual(x, sublayer), expected)
    assert "residual=False" in repr(add_norm)


def test_no_residual_model_has_the_same_parameters_and_a_different_function():
    plain, ablated = seeded(config()), seeded(config(residual=False))
    assert tl.count_parameters(ablated) == tl.count_parameters(plain)
    for (name, a), (_, b) in zip(plain.state_dict().items(), ablated.state_dict().items()):
        assert torch.equal(a, b), name  # the same weights from the same seed
    assert all(not m.residual for m in ablated.modules() if isinstance(m, tl.AddNorm))
    assert sum(isinstance(m, tl.AddNorm) for m in ablated.modules()) == 2 * 2 + 3 * 2
    assert not torch.allclose(encoder_decoder_output(ablated), encoder_decoder_output(plain), atol=1e-3)


# --------------------------------------------------------------------------- layer_norm


@pytest.mark.parametrize("norm_first", [False, True])
def test_no_layer_norm_makes_every_norm_an_identity(norm_first):
    plain, ablated = seeded(config(norm_first=norm_first)), seeded(config(norm_first=norm_first, layer_norm=False))
    norms = [name for name, m in plain.named_modules() if isinstance(m, nn.LayerNorm)]
    identities = [name for name, m in ablated.named_modules() if isinstance(m, nn.Identity)]
    assert identities == norms and len(norms) == 2 * 2 + 3 * 2 + 2 * norm_first  # + the final norms
    assert not any(isinstance(m, nn.LayerNorm) for m in ablated.modules())
    assert tl.count_parameters(plain) - tl.count_parameters(ablated) == len(norms) * 2 * D
    # nothing else changes: the same matrices from the same seed, and the model is the plain one
    # with its LayerNorms taken out
    ours = ablated.state_dict()
    assert set(ours) == {k for k in plain.state_dict() if not k.startswith(tuple(norms))}
    for name, tensor in ours.items():
        assert torch.equal(tensor, plain.state_dict()[name]), name
    for name in norms:
        parent, _, child = name.rpartition(".")
        setattr(plain.get_submodule(parent), child, nn.Identity())
    torch.testing.assert_close(encoder_decoder_output(ablated), encoder_decoder_output(plain), rtol=0, atol=0)


def test_no_layer_norm_leaves_berts_embedding_norm():
    model = seeded(config("encoder-only", embedding_norm=True, layer_norm=False))
    assert [n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)] == ["encoder.embedding.norm"]


# --------------------------------------------------------------------------- conversions


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(attention_scale=False), "attention_scale=False"),
        (dict(positional="rotary"), "positional='rotary'"),
        (dict(residual=False), "residual=False"),
        (dict(layer_norm=False), "layer_norm=False"),
    ],
)
def test_conversions_to_pytorch_refuse_what_pytorch_cannot_express(overrides, field):
    model = seeded(config(**overrides))
    for part in (model, model.encoder, model.decoder, model.decoder.layers[0]):
        with pytest.raises(ValueError, match=rf"cannot be expressed by PyTorch's modules.*{field}"):
            to_torch(part)
    to_torch(seeded(config()))  # the defaults convert


def test_conversion_names_every_switch_at_once():
    model = seeded(config(attention_scale=False, residual=False))
    with pytest.raises(ValueError, match=r"attention_scale=False.*residual=False"):
        to_torch(model)

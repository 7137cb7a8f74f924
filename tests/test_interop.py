"""Tests for transformer_lib.interop: converting our modules to PyTorch's and back."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import interop


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


class TestToTorch:
    @pytest.mark.parametrize("bias", [True, False])
    def test_weights_are_copied(self, bias):
        m = tl.MultiHeadAttention(12, 3, dropout=0.25, bias=bias)
        t = tl.to_torch(m)
        assert isinstance(t, nn.MultiheadAttention)
        assert (t.embed_dim, t.num_heads, t.dropout, t.batch_first) == (12, 3, 0.25, True)
        assert same(t.in_proj_weight, torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        assert same(t.out_proj.weight, m.W_o.weight)
        if bias:
            assert same(t.in_proj_bias, torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
            assert same(t.out_proj.bias, m.W_o.bias)
        else:
            assert t.in_proj_bias is None and t.out_proj.bias is None

    def test_copies_are_independent(self):
        m = tl.MultiHeadAttention(8, 2)
        t = tl.to_torch(m)
        with torch.no_grad():
            t.out_proj.weight.zero_()
        assert not (m.W_o.weight == 0).all()
        assert t.in_proj_weight.requires_grad and t.in_proj_weight.grad_fn is None

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    @pytest.mark.parametrize("training", [True, False])
    def test_dtype_and_mode(self, dtype, training):
        m = tl.MultiHeadAttention(8, 2).to(dtype).train(training)
        t = tl.to_torch(m)
        assert t.in_proj_weight.dtype == dtype and t.out_proj.weight.dtype == dtype
        assert t.training == training

    def test_same_output(self):
        torch.manual_seed(0)
        m = tl.MultiHeadAttention(16, 4).double()
        t = tl.to_torch(m)
        x = torch.randn(2, 5, 16, dtype=torch.float64)
        mask = tl.causal_mask(5)
        ref, _ = t(x, x, x, attn_mask=interop.torch_attn_mask(mask))
        torch.testing.assert_close(m(x, x, x, mask=mask), ref, rtol=1e-12, atol=1e-12)

    def test_unknown_module(self):
        pattern = r"module .*one of \[.*MultiHeadAttention.*\] for to_torch.*Linear"
        with pytest.raises(TypeError, match=pattern):
            tl.to_torch(nn.Linear(2, 2))


class TestFromTorch:
    @pytest.mark.parametrize("bias", [True, False])
    def test_weights_are_copied(self, bias):
        torch.manual_seed(1)
        t = nn.MultiheadAttention(12, 4, dropout=0.1, bias=bias, batch_first=True)
        m = tl.from_torch(t)
        assert isinstance(m, tl.MultiHeadAttention)
        assert (m.d_model, m.num_heads, m.d_k, m.dropout) == (12, 4, 3, 0.1)
        w_q, w_k, w_v = t.in_proj_weight.chunk(3)
        assert same(m.W_q.weight, w_q) and same(m.W_k.weight, w_k) and same(m.W_v.weight, w_v)
        assert same(m.W_o.weight, t.out_proj.weight)
        if bias:
            b_q, b_k, b_v = t.in_proj_bias.chunk(3)
            assert same(m.W_q.bias, b_q) and same(m.W_k.bias, b_k) and same(m.W_v.bias, b_v)
            assert same(m.W_o.bias, t.out_proj.bias)
        else:
            assert all(getattr(m, n).bias is None for n in ("W_q", "W_k", "W_v", "W_o"))

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_dtype_mode_and_round_trip(self, dtype):
        t = nn.MultiheadAttention(8, 2, batch_first=True).to(dtype).eval()
        m = tl.from_torch(t)
        assert m.W_q.weight.dtype == dtype and not m.training
        back = tl.to_torch(m)
        for (name, a), (_, b) in zip(t.named_parameters(), back.named_parameters()):
            assert same(a, b), name

    def test_round_trip_from_ours(self):
        m = tl.MultiHeadAttention(8, 4)
        again = tl.from_torch(tl.to_torch(m))
        for (name, a), (_, b) in zip(m.named_parameters(), again.named_parameters()):
            assert same(a, b), name

    def test_unsupported_configurations(self):
        with pytest.raises(ValueError, match=r"module must use the same size for query, key and value"):
            tl.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True))
        with pytest.raises(ValueError, match=r"module must not use add_bias_kv or add_zero_attn"):
            tl.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True))
        with pytest.raises(ValueError, match=r"module must not use add_bias_kv or add_zero_attn"):
            tl.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True))

    def test_unknown_module(self):
        pattern = r"module .*one of \[.*MultiheadAttention.*\] for from_torch.*ReLU"
        with pytest.raises(TypeError, match=pattern):
            tl.from_torch(nn.ReLU())


class TestTables:
    def test_the_tables_are_plain_dicts_of_every_pair(self):
        assert type(interop.TO_TORCH) is dict and type(interop.FROM_TORCH) is dict
        assert not hasattr(interop, "register")  # nothing registers itself at import
        ours = {tl.MultiHeadAttention, tl.EncoderLayer, tl.DecoderLayer, tl.Encoder, tl.Decoder, tl.Transformer}
        theirs = {nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer,
                  nn.TransformerEncoder, nn.TransformerDecoder, nn.Transformer}  # fmt: skip
        assert set(interop.TO_TORCH) == ours and set(interop.FROM_TORCH) == theirs

    def test_a_new_pair_is_one_entry_in_each_table(self, monkeypatch):
        class Ours(nn.Linear):
            pass

        def to_fn(module):
            theirs = nn.Linear(module.in_features, module.out_features)
            interop.copy_linear(theirs, module.weight, module.bias)
            return theirs

        def from_fn(module):
            ours = Ours(module.in_features, module.out_features)
            interop.copy_linear(ours, module.weight, module.bias)
            return ours

        monkeypatch.setitem(interop.TO_TORCH, Ours, to_fn)
        monkeypatch.setitem(interop.FROM_TORCH, nn.Linear, from_fn)
        ours = Ours(3, 2).double().eval()
        theirs = tl.to_torch(ours)
        assert type(theirs) is nn.Linear and theirs.weight.dtype == torch.float64 and not theirs.training
        assert same(theirs.weight, ours.weight)
        back = tl.from_torch(theirs)
        assert type(back) is Ours and same(back.bias, ours.bias)

    def test_a_key_may_be_a_dotted_class_name(self, monkeypatch):
        """A class from an optional package is named, not imported (as a GPT-2 converter would)."""
        monkeypatch.setitem(interop.FROM_TORCH, "torch.nn.modules.activation.ReLU", lambda module: nn.Tanh())
        assert isinstance(tl.from_torch(nn.ReLU()), nn.Tanh)

    def test_subclasses_are_found(self):
        class Mine(tl.MultiHeadAttention):
            pass

        assert isinstance(tl.to_torch(Mine(4, 2)), nn.MultiheadAttention)


def test_torch_attn_mask():
    ours = tl.causal_mask(4)
    theirs = interop.torch_attn_mask(ours)
    assert theirs.dtype == torch.bool
    assert torch.equal(theirs, ~ours)
    assert theirs[0, 1] and not theirs[1, 0]  # torch: True = blocked
    assert interop.torch_attn_mask(None) is None


def test_copy_linear():
    dst = nn.Linear(3, 2)
    weight, bias = torch.randn(2, 3, requires_grad=True), torch.randn(2)
    interop.copy_linear(dst, weight, bias)
    assert torch.equal(dst.weight, weight) and torch.equal(dst.bias, bias)
    assert dst.weight.grad_fn is None and dst.weight.is_leaf
    old_bias = dst.bias.clone()
    interop.copy_linear(dst, torch.zeros(2, 3), None)  # no bias: the bias is left alone
    assert (dst.weight == 0).all() and torch.equal(dst.bias, old_bias)


def test_float64_layers_and_stacks_convert_without_rounding():
    config = tl.TransformerConfig.preset("tiny", src_vocab_size=None, tgt_vocab_size=None, num_layers=2,
                                         norm_first=True)  # fmt: skip
    ours = tl.Transformer(config).double().eval()
    with torch.no_grad():  # values float32 cannot hold, so a round trip through float32 would show
        for p in ours.parameters():
            p.add_(1e-12 * torch.randn_like(p))
    theirs = tl.to_torch(ours)
    layer, t_layer = ours.decoder.layers[1], theirs.decoder.layers[1]
    assert same(t_layer.linear1.weight, layer.feed_forward.W_1.weight)  # float64, every bit
    assert same(t_layer.multihead_attn.in_proj_weight[:32], layer.cross_attn.W_q.weight)
    assert same(theirs.encoder.norm.weight, ours.encoder.norm.weight)
    back = tl.from_torch(theirs)
    for (name, a), (_, b) in zip(ours.decoder.named_parameters(), back.decoder.named_parameters()):
        assert same(a, b), name

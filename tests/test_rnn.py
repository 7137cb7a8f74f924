"""Tests for transformer_lib.rnn: Bahdanau attention in torch and the small RNN encoder-decoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import transformer_lib as tl
from transformer_lib.rnn import BahdanauAttention, BahdanauSeq2Seq, BiRNNEncoder

PAD, BOS, EOS = 0, 1, 2


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class TestBahdanauAttention:
    def test_equals_numpy_additive_attention(self):
        attn = BahdanauAttention(d_s=5, d_h=6, d_attn=7).double()
        s = torch.randn(3, 5, dtype=torch.float64)
        H = torch.randn(3, 4, 6, dtype=torch.float64)
        context, weights = attn(s, H)
        for b in range(3):
            ref = tl.additive_attention(s[b].numpy(), H[b].numpy(), **attn.numpy_params())
            np.testing.assert_allclose(weights[b].detach().numpy(), ref.weights, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(context[b].detach().numpy(), ref.context, rtol=1e-12, atol=1e-15)

    def test_numpy_params_shapes(self):
        params = BahdanauAttention(d_s=5, d_h=6, d_attn=7).numpy_params()
        assert params["W_s"].shape == (7, 5)
        assert params["W_h"].shape == (7, 6)
        assert params["v"].shape == (7,)

    def test_weights_sum_to_one_and_context_is_their_average(self):
        attn = BahdanauAttention(4, 4, 8)
        s, H = torch.randn(2, 4), torch.randn(2, 5, 4)
        context, weights = attn(s, H)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2))
        torch.testing.assert_close(context, torch.einsum("bn,bnd->bd", weights, H))

    def test_mask_gives_zero_weight_and_ignores_masked_values(self):
        attn = BahdanauAttention(4, 4, 8)
        s, H = torch.randn(2, 4), torch.randn(2, 5, 4)
        mask = torch.tensor([[True, True, True, False, False], [True] * 5])
        context, weights = attn(s, H, mask)
        assert (weights[0, 3:] == 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(2))
        H2 = H.clone()
        H2[0, 3:] = 100.0  # whatever sits at masked positions must not matter
        context2, _ = attn(s, H2, mask)
        torch.testing.assert_close(context2, context)

    @pytest.mark.parametrize(
        ("s_shape", "H_shape", "message"),
        [((4,), (2, 5, 4), "s must have shape"), ((2, 4), (5, 4), "H must have shape"),
         ((2, 3), (2, 5, 4), "d_s"), ((2, 4), (2, 5, 3), "d_h"), ((3, 4), (2, 5, 4), "batch sizes")],
    )
    def test_bad_shapes_are_named(self, s_shape, H_shape, message):
        with pytest.raises(ValueError, match=message):
            BahdanauAttention(4, 4, 8)(torch.randn(*s_shape), torch.randn(*H_shape))

    def test_bad_sizes_are_named(self):
        with pytest.raises(ValueError, match="d_attn"):
            BahdanauAttention(4, 4, 0)


class TestBiRNNEncoder:
    def test_shapes_and_mask(self):
        enc = BiRNNEncoder(vocab_size=10, d_emb=6, d_hidden=5)
        src = torch.tensor([[3, 4, 5, PAD], [6, 7, 8, 9]])
        H, mask = enc(src)
        assert H.shape == (2, 4, 10)
        assert mask.tolist() == [[True, True, True, False], [True] * 4]
        assert (H[0, 3] == 0).all()

    def test_annotations_see_both_directions(self):
        enc = BiRNNEncoder(vocab_size=10, d_emb=6, d_hidden=5)
        a, _ = enc(torch.tensor([[3, 4, 5, 6]]))
        b, _ = enc(torch.tensor([[3, 4, 5, 7]]))  # only the last word differs
        # the first annotation changes through its backward half only
        torch.testing.assert_close(a[0, 0, :5], b[0, 0, :5])
        assert not torch.allclose(a[0, 0, 5:], b[0, 0, 5:])

    def test_padding_does_not_change_the_annotations(self):
        enc = BiRNNEncoder(vocab_size=10, d_emb=6, d_hidden=5)
        short, _ = enc(torch.tensor([[3, 4, 5]]))
        padded, _ = enc(torch.tensor([[3, 4, 5, PAD, PAD]]))
        torch.testing.assert_close(padded[:, :3], short)

    def test_errors(self):
        enc = BiRNNEncoder(vocab_size=10, d_emb=6, d_hidden=5)
        with pytest.raises(ValueError, match="only of padding"):
            enc(torch.tensor([[PAD, PAD]]))
        with pytest.raises(ValueError, match=r"ids in \[0, 9\]"):
            enc(torch.tensor([[3, 12]]))
        with pytest.raises(TypeError, match="integer token ids"):
            enc(torch.zeros(1, 3))


def _reverse_task(num: int, generator: torch.Generator):
    """Sequences of 3-5 symbols (ids 3..8) and their reverses, padded."""
    src = torch.full((num, 5), PAD)
    tgt_in = torch.full((num, 6), PAD)
    tgt_out = torch.full((num, 6), PAD)
    for b in range(num):
        n = int(torch.randint(3, 6, (1,), generator=generator))
        seq = torch.randint(3, 9, (n,), generator=generator)
        src[b, :n] = seq
        tgt_in[b, 0], tgt_in[b, 1 : n + 1] = BOS, seq.flip(0)
        tgt_out[b, :n], tgt_out[b, n] = seq.flip(0), EOS
    return src, tgt_in, tgt_out


class TestBahdanauSeq2Seq:
    def test_forward_shapes_and_weights(self):
        model = BahdanauSeq2Seq(src_vocab_size=9, tgt_vocab_size=9, d_emb=8, d_hidden=12, d_attn=10)
        src = torch.tensor([[3, 4, 5, PAD], [6, 7, 8, 3]])
        out = model(src, torch.tensor([[BOS, 3, 4], [BOS, 5, 6]]))
        assert out.logits.shape == (2, 3, 9)
        assert out.weights.shape == (2, 3, 4)
        assert out.states.shape == (2, 3, 12)
        assert (out.weights[0, :, 3] == 0).all()
        torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 3))

    def test_states_are_the_queries_of_the_numpy_function(self):
        model = BahdanauSeq2Seq(9, 9, d_emb=8, d_hidden=12, d_attn=10).double()
        src = torch.tensor([[3, 4, 5, 6]])
        out = model(src, torch.tensor([[BOS, 3, 4]]))
        H, _ = model.encoder(src)
        ref = tl.additive_attention(out.states[0].detach().numpy(), H[0].detach().numpy(),
                                    **model.attention.numpy_params())
        np.testing.assert_allclose(out.weights[0].detach().numpy(), ref.weights, rtol=1e-10)

    def test_greedy_decode_agrees_with_teacher_forcing_on_its_own_output(self):
        model = BahdanauSeq2Seq(9, 9, d_emb=8, d_hidden=12, d_attn=10)
        src = torch.tensor([[3, 4, 5, 6], [7, 8, 3, PAD]])
        tr = model.greedy_decode(src, BOS, EOS, max_len=5)
        tgt_in = torch.cat([torch.full((2, 1), BOS), tr.ids[:, :-1]], dim=1)
        forced = model(src, tgt_in)
        assert torch.equal(forced.logits.argmax(-1)[:, 0], tr.ids[:, 0])
        torch.testing.assert_close(forced.weights, tr.weights)

    @pytest.mark.slow
    def test_learns_to_reverse(self):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: one thread is faster than two
        try:
            self._learn_to_reverse()
        finally:
            torch.set_num_threads(threads)

    def _learn_to_reverse(self):
        generator = torch.Generator().manual_seed(0)
        model = BahdanauSeq2Seq(9, 9, d_emb=16, d_hidden=32, d_attn=32)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(120):
            src, tgt_in, tgt_out = _reverse_task(64, generator)
            logits = model(src, tgt_in).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
        src, tgt_in, tgt_out = _reverse_task(100, generator)
        tr = model.greedy_decode(src, BOS, EOS, max_len=6)
        real = tgt_out != PAD
        accuracy = (tr.ids == tgt_out)[real].float().mean()
        assert accuracy > 0.95
        # the alignment of a reversal is the anti-diagonal
        n = int((src[0] != PAD).sum())
        assert tr.weights[0, :n, :n].argmax(-1).tolist() == list(range(n - 1, -1, -1))

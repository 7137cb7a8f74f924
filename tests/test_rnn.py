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
        with pytest.raises(ValueError, match=r"src .*\[0, 10\).*3 to 12"):
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

    def test_decode_is_log_softmax_of_teacher_forcing(self):
        model = BahdanauSeq2Seq(9, 9, d_emb=8, d_hidden=12, d_attn=10)
        src = torch.tensor([[3, 4, 5, 6], [7, 8, 3, PAD]])
        tgt = torch.tensor([[BOS, 3, 4], [BOS, 5, 5]])
        memory = model.encode(src)
        log_probs = model.decode(tgt, memory, tl.padding_mask(src, PAD), tl.causal_mask(3))
        torch.testing.assert_close(log_probs, torch.log_softmax(model(src, tgt).logits, dim=-1))
        # the source mask given is the one used: without it the pad is attended to
        assert not torch.allclose(model.decode(tgt, memory)[1], log_probs[1])
        with pytest.raises(ValueError, match=r"tgt_mask .*later"):
            model.decode(tgt, memory, tgt_mask=torch.ones(3, 3, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"memory .*\(batch, src_len, 2 d_hidden=24\)"):
            model.decode(tgt, memory[..., :5])

    def test_greedy_decode_follows_the_library_contract(self):
        model = BahdanauSeq2Seq(9, 9, d_emb=8, d_hidden=12, d_attn=10)
        src = torch.tensor([[3, 4, 5, 6], [7, 8, 3, PAD]])
        ids = tl.greedy_decode(model, src, max_len=5, bos_id=BOS, eos_id=EOS, pad_id=PAD)
        assert ids.shape[0] == 2 and ids.shape[1] <= 5 and BOS not in ids[:, 0].tolist()
        # each token is the argmax after the tokens before it, run step by step with the cell
        with torch.no_grad():
            H, mask = model.encoder(src)
            s, y = model.initial_state(H), torch.full((2,), BOS)
            for t in range(ids.shape[1]):
                logits, s, _ = model.step(y, s, H, mask)
                y = logits.argmax(-1)
                for b in range(2):
                    if EOS not in ids[b, :t].tolist():  # rows still going: the argmax; after <eos>: pads
                        assert ids[b, t] == y[b]
                    else:
                        assert ids[b, t] == PAD
        # teacher forcing on its own output gives the weights and states of that translation
        tgt_in = torch.cat([torch.full((2, 1), BOS), ids[:, :-1]], dim=1)
        row = ids[0].tolist()
        n = row.index(EOS) + 1 if EOS in row else len(row)  # up to its <eos>; pads after it
        assert torch.equal(model(src, tgt_in).logits.argmax(-1)[0, :n], ids[0, :n])

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
        ids = tl.greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS, pad_id=PAD)
        ids = torch.nn.functional.pad(ids, (0, 6 - ids.shape[1]), value=PAD)  # (100, 6), as tgt_out
        real = tgt_out != PAD
        accuracy = (ids == tgt_out)[real].float().mean()
        assert accuracy > 0.95
        # the alignment of a reversal is the anti-diagonal
        with torch.no_grad():
            weights = model(src, torch.cat([torch.full((100, 1), BOS), ids[:, :-1]], dim=1)).weights
        n = int((src[0] != PAD).sum())
        assert weights[0, :n, :n].argmax(-1).tolist() == list(range(n - 1, -1, -1))

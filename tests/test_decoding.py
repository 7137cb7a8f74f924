"""Tests for transformer_lib.decoding: greedy decoding, beam search, generation."""

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.decoding import beam_search, generate, greedy_decode, length_penalty

PAD, BOS, EOS = 0, 1, 2
A, B, C, D = 3, 4, 5, 6
V = 7


class MarkovStub:
    """A 'model' whose next-token distribution depends only on the last token: ``table[last]``."""

    def __init__(self, table: dict[int, dict[int, float]]):
        probs = torch.full((V, V), 1e-12)
        for last, row in table.items():
            for token, p in row.items():
                probs[last, token] = p
        self.log_table = (probs / probs.sum(-1, keepdim=True)).log()  # (V, V)
        self.calls = 0

    def encode(self, src, src_mask):
        return torch.zeros(src.shape[0], src.shape[1], 1)  # (batch, src_len, 1): unused

    def decode(self, tgt, memory, src_mask, tgt_mask):
        self.calls += 1
        assert tgt_mask.shape == (tgt.shape[1], tgt.shape[1])  # a causal mask each step
        return self.log_table[tgt]  # (batch, tgt_len, V)

    def __call__(self, tokens):  # as a decoder-only language model
        return self.log_table[tokens]


SRC = torch.tensor([[3, 4, 5], [3, 0, 0]])

# greedy takes A (0.6), then the best after A is C (0.36) -> "A C <eos>" with p = 0.216;
# the best sequence is "B <eos>" with p = 0.4 * 0.99 = 0.396, which beam search finds.
TRAP = MarkovStub({BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.3, C: 0.36, D: 0.34}, B: {EOS: 0.99, D: 0.01},
                   C: {EOS: 1.0}, D: {EOS: 1.0}})  # fmt: skip


def test_greedy_and_beam_agree_on_a_peaked_known_distribution():
    chain = MarkovStub({BOS: {A: 0.9, B: 0.1}, A: {C: 0.8, EOS: 0.2}, C: {D: 0.7, A: 0.3}, D: {EOS: 0.95, A: 0.05}})
    expected = [[A, C, D, EOS], [A, C, D, EOS]]
    assert greedy_decode(chain, SRC, max_len=10).tolist() == expected
    out, scores = beam_search(chain, SRC, max_len=10, beam_size=3, return_scores=True)
    assert out.tolist() == expected
    log_p = math.log(0.9 * 0.8 * 0.7 * 0.95)
    torch.testing.assert_close(scores, torch.full((2,), log_p / length_penalty(4, 0.6)))


def test_beam_search_escapes_the_greedy_trap():
    assert greedy_decode(TRAP, SRC[:1], max_len=5).tolist() == [[A, C, EOS]]
    assert beam_search(TRAP, SRC[:1], max_len=5, beam_size=2).tolist() == [[B, EOS]]
    assert beam_search(TRAP, SRC[:1], max_len=5, beam_size=1).tolist() == [[A, C, EOS]]


def test_length_normalisation_changes_the_winner():
    # "A <eos>" (p = 0.45) against the longer "A B <eos>" (p = 0.40)
    stub = MarkovStub({BOS: {A: 1.0}, A: {EOS: 0.45, B: 0.40, C: 0.15}, B: {EOS: 1.0}, C: {EOS: 1.0}})
    # raw scores: "A <eos>" log 0.45 beats "A B <eos>" log 0.40
    assert beam_search(stub, SRC[:1], max_len=5, beam_size=2, alpha=0.0).tolist() == [[A, EOS]]
    # strong normalisation divides the longer one's score by more and lets it win
    assert beam_search(stub, SRC[:1], max_len=5, beam_size=2, alpha=2.0).tolist() == [[A, B, EOS]]
    assert length_penalty(3, 0.0) == 1.0 and length_penalty(1, 1.0) == 1.0


def test_beam_width_one_equals_greedy_when_eos_is_the_runner_up():
    # <eos> is second best at the first step: with one beam it must not end the search
    stub = MarkovStub({BOS: {A: 0.6, EOS: 0.4}, A: {B: 0.55, EOS: 0.45}, B: {EOS: 1.0}})
    assert greedy_decode(stub, SRC, max_len=5).tolist() == [[A, B, EOS]] * 2
    assert beam_search(stub, SRC, max_len=5, beam_size=1).tolist() == [[A, B, EOS]] * 2


def test_an_eos_ranked_below_the_beam_does_not_finish_a_hypothesis():
    # step 2 ranks: "A <eos>" .286 (finished), "A C" .264, "B <eos>" .2475 (rank 2 >= beam: ignored), "B D" .2025
    stub = MarkovStub({BOS: {A: 0.55, B: 0.45}, A: {EOS: 0.52, C: 0.48}, B: {EOS: 0.55, D: 0.45},
                       C: {EOS: 1.0}, D: {EOS: 1.0}})  # fmt: skip
    # so the search goes on, and with strong length normalisation "A C <eos>" wins
    assert beam_search(stub, SRC[:1], max_len=5, beam_size=2, alpha=2.0).tolist() == [[A, C, EOS]]


def test_beam_search_goes_on_while_a_live_hypothesis_can_still_win():
    # two hypotheses end by step 2 ("<eos>" and "A <eos>"), but the live "A C" goes on to
    # "A C D <eos>" at no further cost, and with alpha = 2 its normalised score is the best:
    # log 0.275 / ((5 + 4) / 6)**2 = -0.574 against log 0.45 / 1 = -0.799
    stub = MarkovStub({BOS: {A: 0.55, EOS: 0.45}, A: {EOS: 0.5, C: 0.5}, C: {D: 1.0}, D: {EOS: 1.0}})
    out, score = beam_search(stub, SRC[:1], max_len=5, beam_size=2, alpha=2.0, return_scores=True)
    assert out.tolist() == [[A, C, D, EOS]]
    torch.testing.assert_close(score, torch.tensor([math.log(0.275) / length_penalty(4, 2.0)]))
    # without normalisation nothing live can beat "<eos>" (log 0.45) after step 2
    assert beam_search(stub, SRC[:1], max_len=5, beam_size=2, alpha=0.0).tolist() == [[EOS]]


def test_the_stopping_rule_bounds_a_live_hypothesis_at_max_len():
    # After step 1 "<eos>" is finished (log 0.45 = -0.799) and "A" is live (log 0.30). "A" can
    # still win only because its bound is normalised at max_len: -1.204 / lp(8) = -0.257. A
    # bound normalised at its current length, -1.204 / lp(2) = -0.885, would stop the search
    # and return "<eos>", although "A C D <eos>" scores -1.204 / lp(4) = -0.535.
    stub = MarkovStub({BOS: {EOS: 0.45, A: 0.30, B: 0.25}, A: {C: 1.0}, B: {EOS: 1.0}, C: {D: 1.0}, D: {EOS: 1.0}})
    out, score = beam_search(stub, SRC[:1], max_len=8, beam_size=2, alpha=2.0, return_scores=True)
    assert out.tolist() == [[A, C, D, EOS]]
    torch.testing.assert_close(score, torch.tensor([math.log(0.30) / length_penalty(4, 2.0)]))


def test_beam_width_one_equals_greedy_on_a_transformer():
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9)).eval()
    src = torch.randint(3, 9, (6, 7))
    src[2, 4:] = PAD
    greedy = greedy_decode(model, src, max_len=9)
    beam = beam_search(model, src, max_len=9, beam_size=1)
    width = max(greedy.shape[1], beam.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=PAD)  # noqa: E731
    assert torch.equal(pad(greedy), pad(beam))


def test_decoding_stops_at_eos_and_pads_after_it():
    stub = MarkovStub({BOS: {A: 1.0}, A: {EOS: 0.6, B: 0.4}, B: {B: 1.0}})
    out = greedy_decode(stub, SRC, max_len=50)
    assert out.tolist() == [[A, EOS], [A, EOS]]
    assert stub.calls == 2  # stopped as soon as every row had ended
    never_ends = MarkovStub({BOS: {B: 1.0}, B: {B: 1.0}})
    assert greedy_decode(never_ends, SRC, max_len=4).tolist() == [[B] * 4] * 2
    assert beam_search(never_ends, SRC, max_len=4, beam_size=2).tolist() == [[B] * 4] * 2


def test_rows_end_at_different_steps():
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9)).eval()
    src = torch.randint(3, 9, (8, 5))
    out = greedy_decode(model, src, max_len=6)
    for row in out.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1 :])


def test_decoding_restores_training_mode():
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9))
    model.train()
    greedy_decode(model, torch.tensor([[3, 4]]), max_len=3)
    assert model.training


def test_generate_with_a_language_model():
    stub = MarkovStub({A: {B: 0.7, C: 0.3}, B: {C: 0.9, EOS: 0.1}, C: {A: 0.6, EOS: 0.4}, EOS: {EOS: 1.0}})
    prompt = torch.tensor([[A], [B]])
    assert generate(stub, prompt, 4, greedy=True).tolist() == [[A, B, C, A, B], [B, C, A, B, C]]
    assert torch.equal(generate(stub, prompt, 4, top_k=1), generate(stub, prompt, 4, greedy=True))
    g = torch.Generator().manual_seed(0)
    sampled = generate(stub, prompt, 30, generator=g)
    assert sampled.shape == (2, 31)
    assert set(sampled[:, 1:].flatten().tolist()) <= {A, B, C, EOS}
    with_eos = generate(stub, torch.tensor([[C]]), 10, eos_id=EOS, greedy=True, temperature=0.5)
    assert with_eos.tolist() == [[C, A, B, C, A, B, C, A, B, C, A]]  # greedy never picks <eos> here
    model = tl.build_model(tl.TransformerConfig.preset("gpt-tiny")).eval()
    out = generate(model, torch.tensor([[5, 6, 7]]), 5, greedy=True)
    assert out.shape == (1, 8) and out[0, :3].tolist() == [5, 6, 7]


def test_decoding_errors_name_the_argument():
    with pytest.raises(TypeError, match="model must have encode"):
        greedy_decode(object(), SRC, 5)
    with pytest.raises(TypeError, match=r"src .*integer token ids.*float32"):
        greedy_decode(TRAP, SRC.float(), 5)
    with pytest.raises(ValueError, match=r"src .*\(batch, seq\).*\(3,\)"):
        beam_search(TRAP, SRC[0], 5)
    with pytest.raises(TypeError, match=r"prompt .*integer token ids.*float32"):
        generate(TRAP, SRC.float(), 3)
    with pytest.raises(TypeError, match=r"pad_id .*non-negative int.*-1"):
        beam_search(TRAP, SRC, 5, pad_id=-1)
    with pytest.raises(ValueError, match="max_len must be a positive integer, got 0"):
        greedy_decode(TRAP, SRC, 0)
    with pytest.raises(ValueError, match="beam_size must be a positive integer, got 0"):
        beam_search(TRAP, SRC, 5, beam_size=0)
    with pytest.raises(ValueError, match="alpha must be a non-negative float"):
        beam_search(TRAP, SRC, 5, alpha=-1.0)
    with pytest.raises(TypeError, match="eos_id must be a non-negative int"):
        greedy_decode(TRAP, SRC, 5, eos_id="<eos>")
    with pytest.raises(ValueError, match="temperature must be"):
        generate(TRAP, SRC, 3, temperature=-0.5)
    with pytest.raises(ValueError, match="top_k must be"):
        generate(TRAP, SRC, 3, top_k=0)


def test_generate_at_temperature_zero_is_greedy():
    """T = 0 is the limit of sampling: the greedy tokens, whatever top-k and top-p say."""
    stub = MarkovStub({C: {A: 0.6, B: 0.4}, A: {C: 0.5, D: 0.5}, B: {C: 1.0}, D: {C: 1.0}})
    greedy = generate(stub, torch.tensor([[C]]), 8, greedy=True)
    for options in (dict(), dict(top_k=2), dict(top_p=0.5)):
        assert torch.equal(generate(stub, torch.tensor([[C]]), 8, temperature=0, **options), greedy)


def test_one_contract_for_every_decoder():
    """No <bos> in the output, each row to its <eos> then pad_id, max_len counting <eos>: greedy,
    beam search and the recurrent model alike."""
    pad = 9  # any pad id: the rows are padded with the one given
    stub = MarkovStub({BOS: {A: 0.9, B: 0.1}, A: {EOS: 0.8, C: 0.2}, B: {C: 1.0}, C: {D: 1.0}, D: {EOS: 1.0}})
    for decode in (greedy_decode, lambda *a, **k: beam_search(*a, beam_size=2, **k)):
        assert decode(stub, SRC, 2, pad_id=pad).tolist() == [[A, EOS]] * 2  # <eos> counts in max_len
        assert decode(stub, SRC, 1, pad_id=pad).tolist() == [[A]] * 2  # cut at max_len: no <eos>
    two_lengths = FirstTokenByRow(MarkovStub({A: {EOS: 1.0}, B: {C: 1.0}, C: {EOS: 1.0}}), first=[A, B])
    out = greedy_decode(two_lengths, SRC, 5, pad_id=pad)
    assert out.tolist() == [[A, EOS, pad], [B, C, EOS]]  # the shorter row is padded with pad_id


class FirstTokenByRow:
    """A stub whose first token is ``first[row]``; after it, the Markov table of ``stub``."""

    def __init__(self, stub: MarkovStub, first: list[int]):
        self.stub, self.first = stub, first

    def encode(self, src, src_mask):
        return self.stub.encode(src, src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        log_probs = self.stub.log_table[tgt].clone()  # (batch, t, V)
        log_probs[:, 0] = -1e9
        log_probs[torch.arange(len(self.first)), 0, torch.tensor(self.first)] = 0.0
        return log_probs


def test_the_recurrent_model_decodes_through_the_same_functions():
    torch.manual_seed(0)
    model = tl.BahdanauSeq2Seq(9, 9, d_emb=8, d_hidden=12, d_attn=10)
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 3, PAD]])
    greedy = greedy_decode(model, src, max_len=6)
    beam = beam_search(model, src, max_len=6, beam_size=1)
    width = max(greedy.shape[1], beam.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=PAD)  # noqa: E731
    assert torch.equal(pad(greedy), pad(beam)) and greedy.shape[1] <= 6
    assert beam_search(model, src, max_len=6, beam_size=3).shape[0] == 2

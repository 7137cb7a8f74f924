"""Tests for transformer_lib.sampling: greedy, temperature, top-k and top-p against Hugging Face's warpers."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import transformer_lib as tl
from transformer_lib import sampling


def hf_distribution(scores: torch.Tensor, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    """What ``generate(do_sample=True, ...)`` samples from: its warpers in its order, then a softmax."""
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(float(temperature)))
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return torch.softmax(warpers(None, scores.clone()), dim=-1)


def random_case(g: torch.Generator, ties: bool):
    """Log-probabilities of a random batch and random settings; ``ties`` rounds scores so many are equal."""
    batch, vocab = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(2, 80, (1,), generator=g))
    logits = 3 * torch.randn(batch, vocab, generator=g)
    if ties:
        logits = logits.round()  # about a dozen distinct values per row: ties at the top-k and top-p edges
    temperature = 0.05 + 2 * float(torch.rand(1, generator=g))
    top_k = int(torch.randint(1, vocab + 3, (1,), generator=g))
    top_p = 0.01 + 0.99 * float(torch.rand(1, generator=g))
    return torch.log_softmax(logits, dim=-1), temperature, top_k, top_p


class TestAgainstTransformers:
    @pytest.mark.parametrize("ties", [False, True])
    def test_random_inputs(self, ties):
        g = torch.Generator().manual_seed(0)
        kept_fewer = 0
        for _ in range(300):
            log_probs, temperature, top_k, top_p = random_case(g, ties)
            for options in (
                dict(temperature=temperature),
                dict(top_k=top_k),
                dict(top_p=top_p),
                dict(temperature=temperature, top_k=top_k, top_p=top_p),
            ):
                ours = tl.sampling_distribution(log_probs, **options)
                ref = hf_distribution(log_probs, **options)
                assert torch.equal(ours > 0, ref > 0), options  # the same tokens kept
                torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
                kept_fewer += int((ours > 0).sum() < (log_probs > -math.inf).sum())
        assert kept_fewer > 300  # the filters did drop tokens in many of the cases

    def test_logits_or_log_probs_alike(self):
        logits = 4 * torch.randn(3, 50, generator=torch.Generator().manual_seed(1)) + 7.0
        options = dict(temperature=0.7, top_k=20, top_p=0.8)
        torch.testing.assert_close(tl.sampling_distribution(logits, **options),
                                   tl.sampling_distribution(torch.log_softmax(logits, -1), **options),
                                   rtol=0, atol=1e-6)  # fmt: skip
        torch.testing.assert_close(tl.sampling_distribution(logits, **options),
                                   hf_distribution(logits, **options), rtol=0, atol=1e-6)  # fmt: skip

    def test_temperature_then_top_k_then_top_p(self):
        # top-p after temperature: at T = 0.5 the top token holds 0.8 of the mass, so p = 0.7 keeps it alone;
        # at T = 1 it holds 2/3, so p = 0.7 also needs the second token
        log_probs = torch.log(torch.tensor([[4.0, 2.0, 0.0]]) / 6).clamp(min=-1e30)
        assert (tl.sampling_distribution(log_probs, top_p=0.7) > 0).sum() == 2
        assert (tl.sampling_distribution(log_probs, temperature=0.5, top_p=0.7) > 0).sum() == 1
        # top-p measures the mass left by top-k: top-k 2 turns 0.4, 0.35, 0.25 into 0.53, 0.47, so 0.5 needs
        # one token (top-p first would need two, 0.4 + 0.35, and top-k 2 would keep both)
        log_probs = torch.log(torch.tensor([[0.4, 0.35, 0.25]]))
        assert (tl.sampling_distribution(log_probs, top_p=0.5) > 0).sum() == 2
        assert (tl.sampling_distribution(log_probs, top_k=2, top_p=0.5) > 0).sum() == 1


class TestEdges:
    def test_top_p_reaches_p(self):
        # probabilities that float32 holds exactly, so the mass at each edge is exact
        probs = torch.tensor([[0.125, 0.5, 0.125, 0.25]])
        log_probs = probs.log()
        kept = lambda p: (tl.sampling_distribution(log_probs, top_p=p) > 0)[0].tolist()  # noqa: E731
        assert kept(0.5) == [False, True, False, False]  # 0.5 alone reaches 0.5
        assert kept(0.5 + 1e-6) == [False, True, False, True]  # just over: the 0.25 is needed too
        assert kept(0.75) == [False, True, False, True]
        three = kept(0.8)  # one of the two tied 0.125s is enough: the smallest set, so exactly one
        assert three[1] and three[3] and three[0] + three[2] == 1
        assert three == (hf_distribution(log_probs, top_p=0.8) > 0)[0].tolist()  # the same one as HF
        assert kept(1.0) == [True] * 4
        assert kept(1e-9) == [False, True, False, False]  # always at least the most probable token

    def test_top_k_keeps_ties_and_clamps(self):
        log_probs = torch.log(torch.tensor([[0.1, 0.3, 0.3, 0.2, 0.1]]))
        assert (tl.sampling_distribution(log_probs, top_k=1) > 0).sum() == 2  # both 0.3s tie for first
        assert (tl.sampling_distribution(log_probs, top_k=4) > 0).sum() == 5  # both 0.1s tie for fourth
        torch.testing.assert_close(tl.sampling_distribution(log_probs, top_k=99), log_probs.exp())

    def test_banned_tokens_stay_banned(self):
        log_probs = torch.log_softmax(torch.tensor([[1.0, 2.0, -math.inf, 0.5]]), -1)
        for options in (dict(), dict(temperature=3.0), dict(top_k=4), dict(top_p=0.999)):
            assert tl.sampling_distribution(log_probs, **options)[0, 2] == 0

    def test_low_precision_worked_in_float32(self):
        log_probs = torch.log_softmax(torch.randn(2, 30, generator=torch.Generator().manual_seed(2)), -1)
        for dtype in (torch.float16, torch.bfloat16):
            probs = tl.sampling_distribution(log_probs.to(dtype), temperature=0.8, top_p=0.9)
            assert probs.dtype == torch.float32
            torch.testing.assert_close(probs.sum(-1), torch.ones(2))

    def test_filters_alone(self):
        scores = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
        assert sampling.top_k_filter(scores, 2).tolist() == [[-math.inf, 3.0, -math.inf, 2.0]]
        assert torch.equal(sampling.apply_temperature(scores, 0.5), scores * 2)
        # softmax gives the scores 0.03, 0.64, 0.09, 0.24: the top token alone reaches 0.6, not 0.7
        assert (sampling.top_p_filter(scores, 0.6) > -math.inf).tolist() == [[False, True, False, False]]
        assert (sampling.top_p_filter(scores, 0.7) > -math.inf).tolist() == [[False, True, False, True]]


class TestGreedy:
    def test_temperature_zero_and_greedy_are_argmax(self):
        log_probs = torch.log_softmax(torch.randn(6, 40, generator=torch.Generator().manual_seed(3)), -1)
        best = log_probs.argmax(-1)
        one_hot = torch.nn.functional.one_hot(best, 40).float()
        assert torch.equal(tl.sampling_distribution(log_probs, temperature=0), one_hot)
        assert torch.equal(tl.sampling_distribution(log_probs, greedy=True, top_k=5, top_p=0.3), one_hot)
        assert torch.equal(tl.sample_next(log_probs, temperature=0), best)
        g = torch.Generator().manual_seed(0)
        state = g.get_state()
        assert torch.equal(tl.sample_next(log_probs, greedy=True, generator=g), best)
        assert torch.equal(g.get_state(), state)  # greedy draws nothing

    def test_first_of_tied_maxima(self):
        log_probs = torch.log(torch.tensor([[0.2, 0.4, 0.4]]))
        assert tl.sample_next(log_probs, greedy=True).item() == 1

    def test_low_temperature_tends_to_greedy(self):
        """As T -> 0 the distribution tends to one-hot on the argmax: greedy decoding is the limit."""
        g = torch.Generator().manual_seed(4)
        log_probs = torch.log_softmax(2 * torch.randn(8, 100, generator=g), -1)
        top2 = log_probs.topk(2).values
        gap = (top2[:, 0] - top2[:, 1]).min().item()  # the smallest lead of a row's best token
        one_hot = tl.sampling_distribution(log_probs, temperature=0)
        temperatures = [1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001]
        distances = [(tl.sampling_distribution(log_probs, temperature=t) - one_hot).abs().max().item()
                     for t in temperatures]  # fmt: skip
        assert all(a > b for a, b in zip(distances, distances[1:]))  # closer at every step down
        assert distances[0] > 0.5 and distances[-1] < 1e-6
        # the rate the maths gives: at temperature T, the runner-up has at most exp(-gap / T) of the best's mass
        assert distances[-2] <= 2 * 99 * math.exp(-gap / 0.003) + 1e-7


class TestSampling:
    def test_seeded_generator_reproducible(self):
        log_probs = torch.log_softmax(torch.randn(4, 200, generator=torch.Generator().manual_seed(5)), -1)
        draws = [tl.sample_next(log_probs, temperature=1.3, top_p=0.9, generator=torch.Generator().manual_seed(7))
                 for _ in range(2)]  # fmt: skip
        assert torch.equal(*draws) and draws[0].dtype == torch.long and draws[0].shape == (4,)
        g = torch.Generator().manual_seed(7)
        many = torch.stack([tl.sample_next(log_probs, temperature=1.3, generator=g) for _ in range(20)])
        assert len(set(many.flatten().tolist())) > 10  # a generator that moves on draws different tokens

    @pytest.mark.parametrize("options", [dict(), dict(temperature=0.6, top_k=6), dict(top_p=0.8)])
    def test_frequencies_match_distribution(self, options):
        # 20 tokens with unequal probabilities; 100,000 draws in one batch
        logits = torch.linspace(0, 3, 20)[None]  # (1, 20)
        probs = tl.sampling_distribution(logits, **options)[0]
        n = 100_000
        draws = tl.sample_next(logits.expand(n, -1), generator=torch.Generator().manual_seed(0), **options)
        counts = torch.bincount(draws, minlength=20).double()
        kept = probs > 0
        assert counts[~kept].sum() == 0  # a filtered token is never drawn
        expected = n * probs[kept].double()
        chi2 = (((counts[kept] - expected) ** 2) / expected).sum().item()
        df = int(kept.sum()) - 1
        # chi-square with df degrees of freedom: mean df, sd sqrt(2 df); allow 5 sd
        assert chi2 < df + 5 * math.sqrt(2 * df), (chi2, df)
        # the same bound rejects the draws as samples of the unfiltered distribution (when something was filtered)
        if options:
            wrong = n * torch.softmax(logits[0].double(), -1)  # (20,)
            assert (((counts - wrong) ** 2) / wrong).sum().item() > 19 + 5 * math.sqrt(2 * 19)

    def test_per_step_in_a_loop(self):
        """One call per step on the last position, as a generation loop does."""
        model = tl.DecoderOnlyModel(tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=64))
        torch.manual_seed(0)
        ids = torch.randint(0, 64, (2, 3))
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for _ in range(5):
                ids = torch.cat([ids, tl.sample_next(model(ids)[:, -1], top_k=10, generator=g)[:, None]], 1)
        assert ids.shape == (2, 8)


class TestErrors:
    LOG_PROBS = torch.log_softmax(torch.zeros(2, 5), -1)

    @pytest.mark.parametrize(
        "options, error, pattern",
        [
            (dict(temperature=-0.1), ValueError, r"temperature must be a non-negative number.*-0\.1"),
            (dict(temperature=math.inf), ValueError, r"temperature.*inf"),
            (dict(temperature="hot"), TypeError, r"temperature must be a non-negative number, got str"),
            (dict(top_k=0), ValueError, r"top_k must be None or an integer >= 1, got 0"),
            (dict(top_k=2.0), TypeError, r"top_k must be None or an integer >= 1, got float"),
            (dict(top_p=0.0), ValueError, r"top_p must be None or a number in \(0, 1\], got 0\.0"),
            (dict(top_p=1.5), ValueError, r"top_p .*\(0, 1\], got 1\.5"),
            (dict(top_p=-1), ValueError, r"top_p .*got -1"),
            (dict(greedy=1), TypeError, r"greedy must be True or False"),
        ],
    )
    def test_bad_settings(self, options, error, pattern):
        with pytest.raises(error, match=pattern):
            tl.sampling_distribution(self.LOG_PROBS, **options)
        with pytest.raises(error, match=pattern):
            tl.sample_next(self.LOG_PROBS, **options)

    @pytest.mark.parametrize(
        "log_probs, error, pattern",
        [
            ([0.0, 1.0], TypeError, r"log_probs must be a torch.Tensor, got list"),
            (torch.zeros(2, 3, dtype=torch.long), TypeError, r"log_probs must be a floating-point tensor"),
            (torch.zeros(5), ValueError, r"log_probs must have shape \(batch, vocab\), got shape \(5,\)"),
            (torch.zeros(2, 0), ValueError, r"vocab >= 1"),
            (torch.tensor([[0.0, math.nan]]), ValueError, r"log_probs .*got NaN or \+inf"),
            (torch.tensor([[0.0, math.inf]]), ValueError, r"log_probs .*got NaN or \+inf"),
            (torch.tensor([[0.0, 0.0], [-math.inf, -math.inf]]), ValueError, r"log_probs .*rows \[1\]"),
        ],
    )
    def test_bad_scores(self, log_probs, error, pattern):
        with pytest.raises(error, match=pattern):
            tl.sample_next(log_probs)

    def test_bad_generator_and_filters(self):
        with pytest.raises(TypeError, match=r"generator must be None or a torch.Generator, got int"):
            tl.sample_next(self.LOG_PROBS, generator=0)
        with pytest.raises(ValueError, match=r"temperature must be positive .* got 0"):
            sampling.apply_temperature(self.LOG_PROBS, 0)
        with pytest.raises(TypeError, match=r"top_k must be an integer >= 1, got None"):
            sampling.top_k_filter(self.LOG_PROBS, None)
        with pytest.raises(ValueError, match=r"scores must have shape"):
            sampling.top_p_filter(torch.zeros(3), 0.5)

    def test_messages_in_full(self):
        with pytest.raises(ValueError, match=r"^log_probs must hold log-probabilities or logits \(finite, or -inf for "
                                             r"banned tokens\), got NaN or \+inf$"):  # fmt: skip
            tl.sample_next(torch.tensor([[0.0, math.nan]]))
        # seven rows with no possible token: the message names the first five
        with pytest.raises(ValueError, match=r"^log_probs must leave at least one token possible in every row, "
                                             r"got rows \[0, 1, 2, 3, 4\] entirely -inf$"):  # fmt: skip
            tl.sample_next(torch.full((7, 3), -math.inf))
        with pytest.raises(TypeError, match=r"^top_p must be None or a number in \(0, 1\], got str 'high'$"):
            tl.sampling_distribution(self.LOG_PROBS, top_p="high")
        with pytest.raises(TypeError, match=r"^greedy must be True or False, got int 1$"):
            tl.sampling_distribution(self.LOG_PROBS, greedy=1)

    def test_filters_name_their_arguments(self):
        for call in (lambda s: sampling.apply_temperature(s, 0.5), lambda s: sampling.top_k_filter(s, 2),
                     lambda s: sampling.top_p_filter(s, 0.5)):  # fmt: skip
            with pytest.raises(ValueError, match=r"^scores must have shape \(batch, vocab\), got shape \(3,\)$"):
                call(torch.zeros(3))
        with pytest.raises(ValueError, match=r"^temperature must be positive to divide by it, got 0 \(use greedy "
                                             r"decoding\)$"):  # fmt: skip
            sampling.apply_temperature(self.LOG_PROBS, 0)
        with pytest.raises(TypeError, match=r"^top_k must be an integer >= 1, got None$"):
            sampling.top_k_filter(self.LOG_PROBS, None)
        with pytest.raises(TypeError, match=r"^top_p must be a number in \(0, 1\], got None$"):
            sampling.top_p_filter(self.LOG_PROBS, None)


def test_check_sampling_options_defaults():
    """With no options: temperature 1, no filters, not greedy (the model's own distribution)."""
    assert sampling.check_sampling_options() == (1.0, None, None, False)


def test_top_p_one_leaves_scores_untouched():
    # a token whose probability underflows to 0 in float32 keeps its finite score: top_p=1 filters nothing
    scores = torch.tensor([[0.0, -200.0, -math.inf, 1.0]])
    assert torch.equal(sampling.top_p_filter(scores, 1.0), scores)


def test_sampling_with_a_single_possible_token():
    """A draw when the filters leave one token (or the vocabulary has one) returns that token."""
    log_probs = torch.log_softmax(torch.randn(4, 30, generator=torch.Generator().manual_seed(8)), -1)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(tl.sample_next(log_probs, top_k=1, generator=g), log_probs.argmax(-1))
    assert torch.equal(tl.sample_next(log_probs, top_p=1e-9, generator=g), log_probs.argmax(-1))
    assert tl.sample_next(torch.zeros(3, 1), generator=g).tolist() == [0, 0, 0]

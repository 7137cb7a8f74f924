"""Tests for the key-value cache: KVCache, DecoderCache, the cached decoder pass, and the decoding
functions with and without it (the same tokens, the same log-probabilities to float rounding)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.stacks import DecoderCache
from transformer_lib.torch_attention import KVCache

POSITIONALS = ["learned", "sinusoidal", "rotary", "none"]
PAD, BOS, EOS = 0, 1, 2


def language_model(positional: str = "learned", max_len: int = 64, seed: int = 0) -> tl.DecoderOnlyModel:
    torch.manual_seed(seed)
    config = tl.TransformerConfig.preset("gpt-tiny", positional=positional, max_len=max_len, tgt_vocab_size=40)
    return tl.build_model(config).eval()


def translation_model(positional: str = "sinusoidal", seed: int = 0, **overrides) -> tl.Transformer:
    torch.manual_seed(seed)
    config = tl.TransformerConfig.preset("small", positional=positional, src_vocab_size=20, tgt_vocab_size=20,
                                         **overrides)  # fmt: skip
    return tl.build_model(config).eval()


def padded_source(seed: int = 0) -> torch.Tensor:
    """Four source sentences of lengths 9, 6, 3 and 1, right-padded with PAD."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 20, (4, 9), generator=g)
    for i, n in enumerate([9, 6, 3, 1]):
        src[i, n:] = PAD
    return src


def stepwise(model, tokens: torch.Tensor, prompt_len: int, *decode_args) -> torch.Tensor:
    """``tokens``' log-probabilities through a cache: the first ``prompt_len`` at once, then one by one."""
    cache = model.new_cache()
    run = (lambda t: model.decode(t, *decode_args, cache=cache)) if decode_args else (lambda t: model(t, cache=cache))
    with torch.no_grad():
        parts = [run(tokens[:, :prompt_len])]
        parts += [run(tokens[:, t : t + 1]) for t in range(prompt_len, tokens.shape[1])]
    assert cache.length == tokens.shape[1]
    return torch.cat(parts, dim=1)  # (batch, len, vocab)


class Recorder:
    """Counts the target positions each call of a decoder runs (a forward pre-hook)."""

    def __init__(self, decoder: torch.nn.Module):
        self.lengths: list[int] = []
        decoder.register_forward_pre_hook(lambda module, args: self.lengths.append(args[0].shape[1]))


# --------------------------------------------------------------------------- the pieces


def test_kv_cache_grows_or_stays_fixed_and_reorders():
    k1, v1 = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    k2, v2 = torch.randn(2, 3, 1, 8), torch.randn(2, 3, 1, 8)
    growing = KVCache(grows=True)
    assert growing.length == 0
    growing.update(k1, v1)
    k, v = growing.update(k2, v2)
    assert growing.length == 5
    torch.testing.assert_close(k, torch.cat([k1, k2], dim=2))
    torch.testing.assert_close(v, torch.cat([v1, v2], dim=2))
    fixed = KVCache(grows=False)
    fixed.update(k1, v1)
    k, v = fixed.update(None, None)  # later calls reuse the first call's keys and values
    assert k is k1 and v is v1 and fixed.length == 4
    growing.reorder(torch.tensor([1, 1, 0]))
    torch.testing.assert_close(growing.k, torch.cat([k1, k2], dim=2)[[1, 1, 0]])
    assert growing.v.shape == (3, 3, 5, 8)


def test_causal_mask_with_cached_positions():
    assert tl.causal_mask(2, past=3).tolist() == [[True, True, True, True, False], [True] * 5]
    torch.testing.assert_close(tl.causal_mask(4, past=0), tl.causal_mask(4))
    with pytest.raises(ValueError, match="past must be a non-negative integer, got -1"):
        tl.causal_mask(2, past=-1)


def test_positions_start_after_the_cached_ones():
    pe = tl.PositionalEncoding(8, max_len=10)
    x = torch.zeros(1, 3, 8)
    torch.testing.assert_close(pe(x, start=4), pe.pe[4:7][None])
    learned = tl.LearnedPositionalEmbedding(10, 8)
    torch.testing.assert_close(learned(x, start=7), learned.embedding.weight[7:10][None])
    with pytest.raises(ValueError, match=r"x has 3 positions from start=8, more than max_len=10"):
        learned(x, start=8)
    with pytest.raises(ValueError, match="start must be a non-negative integer"):
        pe(x, start=-1)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_rotary_attention_with_a_cache_rotates_new_tokens_at_their_positions(positional):
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(16, 2, rotary=positional == "rotary").eval()
    x = torch.randn(2, 6, 16)
    full = mha(x, x, x, tl.causal_mask(6), need_weights=False)
    cache = KVCache()
    first = mha(x[:, :4], x[:, :4], x[:, :4], tl.causal_mask(4), need_weights=False, cache=cache)
    rest = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], None, need_weights=True, cache=cache)
            for t in (4, 5)]  # fmt: skip
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------------- the models, step by step


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("prompt_len", [1, 5])
def test_decoder_only_log_probabilities_step_by_step_equal_the_whole_pass(positional, prompt_len):
    model = language_model(positional)
    tokens = torch.randint(3, 40, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(stepwise(model, tokens, prompt_len), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_encoder_decoder_log_probabilities_step_by_step_equal_the_whole_pass(positional):
    model = translation_model(positional)
    src = padded_source()
    src_mask = tl.padding_mask(src, PAD)
    tgt = torch.randint(3, 20, (4, 12), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = BOS
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
    torch.testing.assert_close(stepwise(model, tgt, 1, memory, src_mask), full, atol=1e-5, rtol=0)


def test_the_cross_attention_memory_is_projected_once():
    model = translation_model()
    calls = []
    for layer in model.decoder.layers:
        layer.cross_attn.W_k.register_forward_hook(lambda *args: calls.append(1))
    src = padded_source()
    tl.greedy_decode(model, src, max_len=6, eos_id=99)  # an id never produced: 6 steps
    assert len(calls) == len(model.decoder.layers)  # one projection of memory per layer, not per step
    calls.clear()
    tl.greedy_decode(model, src, max_len=6, eos_id=99, use_cache=False)
    assert len(calls) == 6 * len(model.decoder.layers)


# --------------------------------------------------------------------------- decoding with and without


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("new_tokens", [1, 7, 30])
def test_greedy_generation_is_identical_with_and_without_cache(positional, new_tokens):
    model = language_model(positional)
    prompt = torch.randint(3, 40, (3, 5), generator=torch.Generator().manual_seed(3))
    recorder = Recorder(model.decoder)
    cached = tl.generate(model, prompt, new_tokens, greedy=True)
    assert recorder.lengths == [5] + [1] * (new_tokens - 1)  # the cache is the default: one token a step
    assert torch.equal(cached, tl.generate(model, prompt, new_tokens, greedy=True, use_cache=False))
    assert recorder.lengths[new_tokens:] == list(range(5, 5 + new_tokens))  # without: the whole prefix


@pytest.mark.parametrize("options", [dict(), dict(temperature=0.7, top_k=10), dict(top_p=0.8, temperature=1.3)])
def test_seeded_sampling_is_identical_with_and_without_cache(options):
    model = language_model("rotary")
    prompt = torch.randint(3, 40, (4, 3), generator=torch.Generator().manual_seed(4))
    runs = [tl.generate(model, prompt, 40, generator=torch.Generator().manual_seed(5), use_cache=use, **options)
            for use in (True, False)]  # fmt: skip
    assert torch.equal(*runs)
    other_seed = tl.generate(model, prompt, 40, generator=torch.Generator().manual_seed(6), **options)
    assert not torch.equal(runs[0], other_seed)  # the draws depend on the generator, so the check can fail


def test_generation_past_max_len_crops_the_same_way_with_and_without_cache():
    model = language_model("learned", max_len=12)
    prompt = torch.randint(3, 40, (2, 4), generator=torch.Generator().manual_seed(7))
    cached = tl.generate(model, prompt, 20, greedy=True)
    assert cached.shape == (2, 24)
    assert torch.equal(cached, tl.generate(model, prompt, 20, greedy=True, use_cache=False))
    sampled = [tl.generate(model, prompt, 20, top_k=5, generator=torch.Generator().manual_seed(8), use_cache=u)
               for u in (True, False)]  # fmt: skip
    assert torch.equal(*sampled)


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("max_len", [1, 4, 15])
def test_greedy_decode_is_identical_with_and_without_cache(positional, max_len):
    model = translation_model(positional)
    src = padded_source()
    recorder = Recorder(model.decoder)
    cached = tl.greedy_decode(model, src, max_len=max_len)
    assert set(recorder.lengths) == {1}  # one new token per step
    assert torch.equal(cached, tl.greedy_decode(model, src, max_len=max_len, use_cache=False))
    # each row alone, unpadded, gives the same tokens: the cache follows the source padding mask
    for i, n in enumerate([9, 6, 3, 1]):
        alone = tl.greedy_decode(model, src[i : i + 1, :n], max_len=max_len)
        assert alone[0].tolist() == cached[i, : alone.shape[1]].tolist()


def test_greedy_decode_ends_rows_at_their_eos_with_and_without_cache():
    """A model whose generator prefers <eos> ends rows at different steps; both ways agree."""
    model = translation_model(seed=3)
    with torch.no_grad():
        model.generator.proj.bias[EOS] += 3.5
    src = padded_source(seed=5)
    cached = tl.greedy_decode(model, src, max_len=12)
    assert (cached == EOS).any() and (cached == PAD).any()  # some rows ended early, then padding
    assert torch.equal(cached, tl.greedy_decode(model, src, max_len=12, use_cache=False))


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_beam_search_is_identical_with_and_without_cache(positional, beam_size):
    model = translation_model(positional, seed=1)
    with torch.no_grad():
        model.generator.proj.bias[EOS] += 2.0  # hypotheses finish at different lengths
    src = padded_source(seed=2)
    cached, scores = tl.beam_search(model, src, 10, beam_size, return_scores=True)
    plain, plain_scores = tl.beam_search(model, src, 10, beam_size, return_scores=True, use_cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(scores, plain_scores, atol=1e-5, rtol=0)
    if beam_size == 1:
        assert torch.equal(cached, tl.greedy_decode(model, src, 10))


def test_models_without_a_cache_decode_the_old_way():
    """The recurrent model has no new_cache: use_cache=True decodes it by recomputing the prefix."""
    torch.manual_seed(0)
    rnn = tl.BahdanauSeq2Seq(20, 20, d_emb=8, d_hidden=8, d_attn=8).eval()
    src = padded_source()
    assert torch.equal(tl.greedy_decode(rnn, src, 5), tl.greedy_decode(rnn, src, 5, use_cache=False))


# --------------------------------------------------------------------------- errors


def test_cache_errors_name_the_argument():
    model = language_model()
    tokens = torch.randint(3, 40, (2, 4))
    cache = model.new_cache()
    model(tokens, cache=cache)
    with pytest.raises(ValueError, match=r"cache must hold the query's batch of 3 rows, got 2"):
        model(torch.randint(3, 40, (3, 1)), cache=cache)
    with pytest.raises(TypeError, match=r"cache must be this decoder's DecoderCache.*got list"):
        model(tokens, cache=[])
    with pytest.raises(TypeError, match=r"cache must be a KVCache or None, got dict"):
        model.decoder.layers[0].self_attn(*(torch.zeros(1, 2, 64),) * 3, cache={})
    with pytest.raises(ValueError, match=r"x has 62 positions from start=4, more than max_len=64"):
        model(torch.randint(3, 40, (2, 62)), cache=cache)
    with pytest.raises(ValueError, match="memory, src_mask and cross_cache must be None"):
        model.decoder.layers[0](torch.zeros(1, 1, 64), cross_cache=KVCache(grows=False))
    with pytest.raises(TypeError, match="use_cache must be True or False, got int 1"):
        tl.generate(model, tokens, 2, use_cache=1)
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        tl.greedy_decode(translation_model(), padded_source(), 2, use_cache=None)
    with pytest.raises(ValueError, match=r"top_p must be None or a number in \(0, 1\], got 1.5"):
        tl.generate(model, tokens, 2, top_p=1.5)
    assert isinstance(cache, DecoderCache) and cache.cross_attn is None and cache.length == 4


def test_a_given_target_mask_covers_the_cached_positions():
    model = language_model()
    tokens = torch.randint(3, 40, (2, 6), generator=torch.Generator().manual_seed(9))
    cache = model.new_cache()
    with torch.no_grad():
        first = model(tokens[:, :3], cache=cache)
        rest = model(tokens[:, 3:], tl.causal_mask(3, past=3), cache=cache)
        full = model(tokens)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"tgt_mask of shape \(3, 3\) does not broadcast to .*cached \+ tgt_len"):
        model(tokens[:, :3], tl.causal_mask(3), cache=cache)


# --------------------------------------------------------------------------- the benchmark's rows


def test_the_generation_benchmark_rows(rounded_ratio):
    """Tiny sizes and one short round: only the rows' shape and arithmetic, no real timing."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("bench_generation", folder / "bench_generation.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        rows = bench.run(rounds=1, new_tokens=(2, 4), batches=(2,), min_run_time=1e-3, compare=False,
                         model=dict(bench.MODEL, n_layer=1, n_positions=16))  # fmt: skip
    finally:
        sys.path.remove(str(folder))
    timed, growth = rows[:2], rows[2]
    assert [row["new_tokens"] for row in timed] == [2, 4] and growth["new_tokens"] == "2-4"
    for row in timed:
        assert rounded_ratio(row["speed_up"], row["no_cache_ms"], row["cache_ms"], 0.001, 0.01)
    assert timed[0]["goal"] == "" and timed[1]["goal"] == bench.GOAL and isinstance(timed[1]["met"], bool)
    assert rounded_ratio(timed[1]["cache_x_per_doubling"], timed[1]["cache_ms"], timed[0]["cache_ms"], 0.001, 0.01)
    assert bench.exponent([1, 2, 4], [3.0, 12.0, 48.0]) == pytest.approx(2.0)
    assert bench.exponent([1, 2, 4], [3.0, 6.0, 12.0]) == pytest.approx(1.0)

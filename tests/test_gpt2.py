"""Tests for transformer_lib.gpt2: our DecoderOnlyModel computes what Hugging Face's GPT2LMHeadModel does.

Nothing is downloaded: the GPT-2 models are small random ones built from a ``GPT2Config``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import transformer_lib as tl
from transformer_lib import gpt2

VOCAB, POSITIONS = 100, 64


def small_config(**overrides) -> GPT2Config:
    """A 2-layer, 4-head, 64-wide GPT-2 with a 100-token vocabulary, no dropout.

    Its weights start 10 times larger than GPT-2's (``initializer_range`` 0.2, not 0.02), so
    that attention matters: at GPT-2's scale a random model's greedy continuation repeats one
    token whatever the attention computes, and a mapping error there would go unseen.
    """
    fields = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=POSITIONS, resid_pdrop=0.0,
                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
                  initializer_range=0.2)  # fmt: skip
    return GPT2Config(**{**fields, **overrides})


def small_gpt2(seed: int = 0, attn_implementation: str = "eager", **overrides) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = small_config(**overrides)
    return GPT2LMHeadModel._from_config(config, attn_implementation=attn_implementation).eval()


def hf_log_probs(hf: GPT2LMHeadModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(hf(ids).logits, dim=-1)  # (batch, seq, vocab)


def our_log_probs(model: tl.DecoderOnlyModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)  # (batch, seq, vocab)


def greedy(model: tl.DecoderOnlyModel, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, float]:
    """Greedy continuation one step at a time; also the smallest lead of the chosen token over the next."""
    ids, lead = prompt, float("inf")
    with torch.no_grad():
        for _ in range(steps):
            log_probs = model(ids)[:, -1]  # (batch, vocab)
            top2 = log_probs.topk(2, dim=-1).values
            lead = min(lead, (top2[:, 0] - top2[:, 1]).min().item())
            ids = torch.cat([ids, tl.sample_next(log_probs, greedy=True)[:, None]], dim=1)
    return ids, lead


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def hf(request) -> GPT2LMHeadModel:
    return small_gpt2(0, request.param)


class TestFromGPT2:
    def test_config(self, hf):
        config = tl.from_gpt2(hf).config
        assert (config.architecture, config.d_model, config.num_heads, config.num_layers, config.d_ff) == (
            "decoder-only", 64, 4, 2, 256)  # fmt: skip
        assert (config.tgt_vocab_size, config.max_len, config.activation, config.norm_first) == (
            VOCAB, POSITIONS, "gelu_tanh", True)  # fmt: skip
        assert (config.positional, config.scale_embeddings, config.generator_bias, config.tie_output) == (
            "learned", False, False, True)  # fmt: skip

    @pytest.mark.parametrize("length", [1, 5, 17, POSITIONS])
    def test_same_next_token_log_probs(self, hf, length):
        model = tl.from_gpt2(hf)
        ids = torch.randint(0, VOCAB, (3, length), generator=torch.Generator().manual_seed(length))
        ours, theirs = our_log_probs(model, ids), hf_log_probs(hf, ids)
        assert ours.shape == theirs.shape == (3, length, VOCAB)
        assert (ours - theirs).abs().max().item() <= 1e-5

    def test_same_greedy_continuation(self, hf):
        model = tl.from_gpt2(hf)
        prompt = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(1))
        ours, lead = greedy(model, prompt, 20)
        with torch.no_grad():
            theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=20, pad_token_id=0)  # fmt: skip
        assert theirs.shape == (2, 26)
        assert torch.equal(ours, theirs)
        assert lead > 1e-4  # no near-tie decided the match: 1e-5 of rounding cannot swap the two best
        assert min(len(set(row[6:].tolist())) for row in ours) >= 5  # a varied continuation, not one token

    def test_weights_are_copies(self, hf):
        model = tl.from_gpt2(hf)
        w_q = model.decoder.layers[1].self_attn.W_q.weight
        torch.testing.assert_close(w_q, hf.transformer.h[1].attn.c_attn.weight[:, :64].T, rtol=0, atol=0)
        assert model.generator.proj.weight is model.decoder.embedding.token_embedding.weight  # tied, as GPT-2's
        with torch.no_grad():
            w_q.zero_()
        assert hf.transformer.h[1].attn.c_attn.weight.abs().min() > 0  # GPT-2's own untouched

    def test_float64_to_rounding(self):
        hf = small_gpt2(2).double()
        with torch.no_grad():  # weights that float32 cannot hold, so a detour through float32 shows
            for p in hf.parameters():
                p.add_(1e-12 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()),
                                           dtype=torch.float64))  # fmt: skip
        model = tl.from_gpt2(hf)
        assert same_state(tl.to_gpt2(model), hf)
        assert model.decoder.layers[0].feed_forward.W_1.weight.dtype == torch.float64
        ids = torch.randint(0, VOCAB, (2, 30), generator=torch.Generator().manual_seed(0))
        assert (our_log_probs(model, ids) - hf_log_probs(hf, ids)).abs().max().item() < 1e-12

    @pytest.mark.parametrize("training", [True, False])
    def test_mode_follows_the_source(self, training):
        assert tl.from_gpt2(small_gpt2(0).train(training)).training == training

    def test_untied_output_layer(self):
        hf = small_gpt2(3, tie_word_embeddings=False)
        assert not torch.equal(hf.lm_head.weight, hf.transformer.wte.weight)
        model = tl.from_gpt2(hf)
        assert not model.config.tie_output
        assert model.generator.proj.weight is not model.decoder.embedding.token_embedding.weight
        ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
        assert (our_log_probs(model, ids) - hf_log_probs(hf, ids)).abs().max().item() <= 1e-5
        assert same_state(tl.to_gpt2(model), hf)

    def test_other_activation_and_widths(self):
        hf = small_gpt2(4, activation_function="relu", n_inner=96, layer_norm_epsilon=1e-6, n_layer=3)
        model = tl.from_gpt2(hf)
        assert (model.config.activation, model.config.d_ff, model.config.layer_norm_eps) == ("relu", 96, 1e-6)
        ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
        assert (our_log_probs(model, ids) - hf_log_probs(hf, ids)).abs().max().item() <= 1e-5


class TestRoundTrip:
    def test_to_gpt2_of_from_gpt2_is_identical(self, hf):
        back = tl.to_gpt2(tl.from_gpt2(hf))
        assert isinstance(back, GPT2LMHeadModel)
        assert same_state(back, hf)
        assert back.lm_head.weight is back.transformer.wte.weight
        assert not back.training

    def test_our_model_to_gpt2_and_back(self):
        config = tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=50, dropout=0.1)
        torch.manual_seed(5)
        model = tl.DecoderOnlyModel(config).eval()
        hf = tl.to_gpt2(model, attn_implementation="eager")
        assert hf.config._attn_implementation == "eager"
        assert hf.config.n_positions == config.max_len and hf.config.attn_pdrop == 0.1
        assert hf.config.eos_token_id is None  # GPT-2's 50256 is not an id of a 50-token vocabulary
        ids = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(0))
        assert (our_log_probs(model, ids) - hf_log_probs(hf, ids)).abs().max().item() <= 1e-5
        again = tl.from_gpt2(hf)
        assert dataclasses.asdict(again.config) == dataclasses.asdict(config)
        assert same_state(again, model)

    def test_gpt2_vocabulary_keeps_its_special_id(self):
        config = tl.TransformerConfig.preset("gpt2-small", d_model=16, num_heads=2, num_layers=1, d_ff=32,
                                             max_len=8)  # fmt: skip
        assert gpt2.gpt2_config(config).eos_token_id == 50256


class TestFolders:
    def test_save_pretrained_folder(self, hf, tmp_path):
        hf.save_pretrained(tmp_path)
        for source in (tmp_path, str(tmp_path)):
            model = tl.from_gpt2(source)
            assert not model.training
            assert same_state(tl.to_gpt2(model), hf)

    def test_hub_id_goes_to_from_pretrained(self, hf, monkeypatch):
        asked = []

        def fake_from_pretrained(name, *args, **kwargs):
            asked.append(name)
            return hf

        monkeypatch.setattr(GPT2LMHeadModel, "from_pretrained", fake_from_pretrained)
        model = tl.from_gpt2("openai-community/gpt2")
        assert asked == ["openai-community/gpt2"] and same_state(tl.to_gpt2(model), hf)

    def test_hub_failure_names_the_id(self, monkeypatch):
        def offline(name, *args, **kwargs):
            raise OSError("no network")

        monkeypatch.setattr(GPT2LMHeadModel, "from_pretrained", offline)
        with pytest.raises(OSError, match=r"model_or_path 'gpt2': could not load it .*no network"):
            tl.from_gpt2("gpt2")


class TestErrors:
    @pytest.mark.parametrize(
        "overrides, pattern",
        [
            (dict(norm_first=False), r"config.norm_first must be True \(GPT-2 is pre-norm.*got False"),
            (dict(positional="sinusoidal"), r"config.positional must be 'learned'.*got 'sinusoidal'"),
            (dict(scale_embeddings=True), r"config.scale_embeddings must be False"),
            (dict(generator_bias=True), r"config.generator_bias must be False"),
            (dict(final_norm=False), r"config.final_norm must be None or True"),
            (dict(embedding_norm=True, num_token_types=2), r"num_token_types must be 0.*embedding_norm must be False"),
            (dict(positional="rotary"), r"config.positional must be 'learned'.*got 'rotary'"),
            (dict(attention_scale=False), r"config.attention_scale must be True"),
            (dict(residual=False), r"config.residual must be True"),
            (dict(layer_norm=False), r"config.layer_norm must be True"),
        ],
    )
    def test_configs_gpt2_cannot_express(self, overrides, pattern):
        config = tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=20, **overrides)
        model = tl.DecoderOnlyModel(config)
        with pytest.raises(ValueError, match=pattern):
            tl.to_gpt2(model)

    def test_not_a_decoder_only_model(self):
        model = tl.Transformer(tl.TransformerConfig.preset("tiny"))
        with pytest.raises(TypeError, match=r"model must be a DecoderOnlyModel, got Transformer"):
            tl.to_gpt2(model)
        with pytest.raises(ValueError, match=r"config.architecture must be 'decoder-only'"):
            gpt2.gpt2_config(model.config)

    @pytest.mark.parametrize(
        "overrides, pattern",
        [
            (dict(scale_attn_by_inverse_layer_idx=True), r"scale_attn_by_inverse_layer_idx must be False"),
            (dict(scale_attn_weights=False), r"scale_attn_weights must be True"),
            (dict(activation_function="gelu_fast"), r"activation_function must be one of .*got 'gelu_fast'"),
            (dict(resid_pdrop=0.1), r"embd_pdrop, attn_pdrop and resid_pdrop must be equal .*dropout="),
            (dict(add_cross_attention=True), r"add_cross_attention must be False"),
        ],
    )
    def test_gpt2_configs_we_cannot_express(self, overrides, pattern):
        with pytest.raises(ValueError, match=pattern):
            gpt2.config_from_gpt2(small_config(**overrides))

    def test_one_dropout_given(self):
        config = gpt2.config_from_gpt2(small_config(resid_pdrop=0.1, attn_pdrop=0.2), dropout=0.05)
        assert config.dropout == 0.05
        with pytest.raises(ValueError, match=r"model_type 'gpt2'.*got 'bert'"):
            gpt2.config_from_gpt2({"model_type": "bert"})

    def test_bad_sources(self, tmp_path):
        with pytest.raises(TypeError, match=r"model_or_path must be a transformers.GPT2LMHeadModel.*got int"):
            tl.from_gpt2(42)
        with pytest.raises(FileNotFoundError, match=r"model_or_path must be an existing folder.*no such folder"):
            tl.from_gpt2(tmp_path / "missing")
        with pytest.raises(FileNotFoundError, match=r"model_or_path: the folder .* holds no config.json"):
            tl.from_gpt2(tmp_path)

    def test_bad_tensors(self, hf):
        model = tl.from_gpt2(hf)
        tensors = dict(hf.state_dict())
        with pytest.raises(KeyError, match=r"missing 1 GPT-2 tensor.*transformer.h.1.mlp.c_fc.weight"):
            gpt2.load_gpt2_tensors(model, {k: v for k, v in tensors.items() if k != "transformer.h.1.mlp.c_fc.weight"})
        with pytest.raises(ValueError, match=r"'transformer.h.0.mlp.c_fc.weight' must have shape \(64, 256\).*"
                                             r"got \(256, 64\)"):  # fmt: skip
            gpt2.load_gpt2_tensors(model, {**tensors, "transformer.h.0.mlp.c_fc.weight": torch.zeros(256, 64)})
        with pytest.raises(ValueError, match=r"no place for: \['transformer.h.0.crossattention.c_attn.weight'\]"):
            gpt2.load_gpt2_tensors(model, {**tensors, "transformer.h.0.crossattention.c_attn.weight": torch.zeros(1)})
        with pytest.raises(ValueError, match=r"lm_head.weight that differs from transformer.wte.weight"):
            gpt2.load_gpt2_tensors(model, {**tensors, "lm_head.weight": torch.zeros(VOCAB, 64)})
        legacy = {**tensors, "transformer.h.0.attn.bias": torch.ones(1, 1, 4, 4)}  # old checkpoints' mask buffer
        assert same_state(tl.to_gpt2(gpt2.load_gpt2_tensors(model, legacy)), hf)


class TestBenchmark:
    """benchmarks/bench_gpt2.py at a tiny size: the rows it reports, and its refusal to time models that differ."""

    TINY = dict(rounds=1, threads=1, contexts=(8,), new_tokens=(3,), batch=2, prompt_len=4, min_run_time=1e-3,
                model=dict(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16), compare=False)

    @pytest.fixture(scope="class")
    @classmethod
    def bench(cls):
        import importlib.util
        import sys
        from pathlib import Path

        folder = Path(__file__).resolve().parent.parent / "benchmarks"
        sys.path.insert(0, str(folder))  # the module imports benchmarks/run.py as ``run``
        spec = importlib.util.spec_from_file_location("bench_gpt2", folder / "bench_gpt2.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def test_rows(self, bench, rounded_ratio):
        train, gen = bench.run(**self.TINY)
        assert (train["benchmark"], train["size"]) == ("GPT-2 train step", "2 x 8")
        cache = "KV cache" if bench.OUR_CACHE else "no KV cache"
        assert (gen["benchmark"], gen["size"]) == (f"GPT-2 generate (ours: {cache})", "2 x (4 + 3)")
        for row in (train, gen):
            assert rounded_ratio(row["ratio"], row["ours_ms"], row["transformers_ms"], 0.001, 0.001)
            assert row["ratio_of_minima"] > 0 and row["threads"] == 1
        assert train["ratio, fused GELU"] > 0 and (train["goal"], train["met"]) == (1.10, train["ratio"] <= 1.10)
        assert (gen["goal"], gen["met"]) == ("", "")

    def test_refuses_models_that_differ(self, bench, monkeypatch):
        convert = tl.from_gpt2

        def off(hf):
            model = convert(hf)
            with torch.no_grad():
                model.decoder.layers[0].feed_forward.W_2.bias[0] += 0.1  # one: LayerNorm undoes a shift of all
            return model

        monkeypatch.setattr(bench.tl, "from_gpt2", off)
        with pytest.raises(AssertionError, match="ours and transformers disagree"):
            bench.run(**self.TINY)

    def test_sizes_must_fit_the_positions(self, bench):
        with pytest.raises(ValueError, match=r"contexts \(32,\) .* must fit the model's 16 positions"):
            bench.run(**{**self.TINY, "contexts": (32,)})

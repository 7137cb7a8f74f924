"""The stacks and the models: embeddings, Encoder, Decoder, the configuration, the Transformer.

Read top to bottom:

* :class:`Embeddings`: token embedding scaled by ``sqrt(d_model)``, plus positions
  (sinusoidal or learned), optionally token types and a LayerNorm (BERT), then dropout.
* :class:`Encoder` (chapter 09) and :class:`Decoder` (chapter 10): embeddings, then
  ``num_layers`` layers with separate weights, then an optional final LayerNorm.
* :class:`Generator`: the output layer, linear then log-softmax over the vocabulary.
* :class:`TransformerConfig`: a typed dataclass with named presets (``"base"``,
  ``"big"``, ``"tiny"``, ...; ``"bert-base"``, ``"gpt2-small"``, ``"minilm-l6"``).
* :class:`Transformer` (chapter 11): encoder-decoder with a generator and weight tying;
  :class:`EncoderOnlyModel` (BERT) and :class:`DecoderOnlyModel` (GPT-2) build the
  chapter 13 models from the same blocks; :func:`build_model` picks one from a config.
* :func:`count_parameters`: shared weights counted once; also takes a config.

The final LayerNorm of a stack. A pre-norm layer leaves its output un-normalised, so a
pre-norm stack ends with one LayerNorm (GPT-2's ``ln_f``); a post-norm layer already ends
with a LayerNorm, so the paper's stacks have none. ``final_norm=None`` (the default)
follows that rule: a final norm exactly when ``norm_first``. ``nn.Transformer`` always
adds a final LayerNorm to both stacks, even in post-norm; :func:`transformer_lib.to_torch`
leaves it out (``norm=None``) when our stack has none, and :func:`transformer_lib.from_torch`
gives our stack one (``final_norm=True``) when PyTorch's has it, so both directions are exact.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import _checks, interop
from .torch_attention import causal_mask
from .layers import (
    DecoderLayer,
    EncoderLayer,
    _activation_name,
    _check_hidden,
    _copy_norm,
    _decoder_layer_from_torch,
    _decoder_layer_to_torch,
    _encoder_layer_from_torch,
    _encoder_layer_to_torch,
    _flag,
    _layer_norm_eps,
)
from .positional import LearnedPositionalEmbedding, PositionalEncoding

POSITIONAL = ("sinusoidal", "learned", "none")
ARCHITECTURES = ("encoder-decoder", "encoder-only", "decoder-only")


def _check_tokens(tokens: Any, name: str, vocab_size: int) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    _checks.ndim_exactly(tokens, 2, name, "(batch, seq)")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size}) for a vocabulary of {vocab_size}, "
            f"got ids from {int(tokens.min())} to {int(tokens.max())}"
        )


def _choice(value: Any, name: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {list(options)}, got {type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def _optional_vocab(value: Any, name: str) -> int | None:
    return None if value is None else _checks.positive_int(value, name)


class Embeddings(nn.Module):
    """Token ids to vectors: ``embedding(tokens) * sqrt(d_model) + positions``, then dropout.

    Args:
        vocab_size: number of token ids.
        d_model: width of the vectors.
        dropout: dropout on the sum (the paper applies it to embeddings plus positions).
        positional: ``"sinusoidal"`` (the paper), ``"learned"`` (BERT, GPT-2) or ``"none"``.
        max_len: the longest sequence the positions cover.
        scale: multiply the token embedding by ``sqrt(d_model)`` (the paper; BERT and
            GPT-2 do not).
        num_token_types: if positive, add a learned embedding per token type (BERT's
            segment embedding for sentence A / sentence B).
        norm: apply a LayerNorm to the sum before the dropout (BERT).
        layer_norm_eps: that LayerNorm's ``eps``.

    ``forward(tokens, token_types=None)``: ``(batch, seq)`` ids (and types) to
    ``(batch, seq, d_model)``. Taught in chapter 10 (scaling, tying) and 13 (BERT's extras).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        dropout: float = 0.1,
        positional: str = "sinusoidal",
        max_len: int = 5000,
        scale: bool = True,
        num_token_types: int = 0,
        norm: bool = False,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.vocab_size = _checks.positive_int(vocab_size, "vocab_size")
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.positional = _choice(positional, "positional", POSITIONAL)
        max_len = _checks.positive_int(max_len, "max_len")
        self.scale = _flag(scale, "scale")
        if isinstance(num_token_types, bool) or not isinstance(num_token_types, int) or num_token_types < 0:
            raise ValueError(f"num_token_types must be a non-negative int, got {num_token_types!r}")
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if positional == "sinusoidal":
            self.position = PositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(max_len, d_model)
        else:
            self.position = None
        self.token_type_embedding = nn.Embedding(num_token_types, d_model) if num_token_types else None
        eps = _layer_norm_eps(layer_norm_eps)
        self.norm = nn.LayerNorm(d_model, eps=eps) if _flag(norm, "norm") else None
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        _check_tokens(tokens, "tokens", self.vocab_size)
        # 1) look up each token's vector, scaled by sqrt(d_model) as in the paper
        x = self.token_embedding(tokens)  # (batch, seq, d_model)
        if self.scale:
            x = x * math.sqrt(self.d_model)
        # 2) add the positions (and the token types)
        if self.position is not None:
            x = self.position(x)
        if token_types is not None:
            if self.token_type_embedding is None:
                raise ValueError("token_types given, but this model has no token types (num_token_types=0)")
            _check_tokens(token_types, "token_types", self.token_type_embedding.num_embeddings)
            if token_types.shape != tokens.shape:
                raise ValueError(
                    f"token_types must have the shape of tokens {tuple(tokens.shape)}, "
                    f"got {tuple(token_types.shape)}"
                )
            x = x + self.token_type_embedding(token_types)
        elif self.token_type_embedding is not None:
            x = x + self.token_type_embedding.weight[0]  # every token of type 0 by default
        # 3) normalise (BERT), then dropout
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


def _stack_maps(layers: nn.ModuleList, attn: str, index: int, what: str) -> torch.Tensor:
    maps = []
    for i, layer in enumerate(layers):
        weights = getattr(layer, attn).attention_weights
        if weights is None:
            raise ValueError(
                f"layer {i} kept no {what} weights: run a forward pass in eval mode (model.eval()) "
                "or set the layers' need_weights = True first"
            )
        if not -weights.shape[0] <= index < weights.shape[0]:
            raise ValueError(f"index must pick one of the {weights.shape[0]} sequences in the batch, "
                             f"got {index}")
        maps.append(weights[index])  # (heads, q_len, k_len)
    return torch.stack(maps)  # (layers, heads, q_len, k_len)


class Encoder(nn.Module):
    """The encoder: embeddings, then ``num_layers`` encoder layers (separate weights), then a final norm.

    Args:
        vocab_size: source vocabulary size; ``None`` for a stack without embeddings whose
            ``forward`` takes vectors ``(batch, src_len, d_model)``, like ``nn.TransformerEncoder``.
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps: as in
            :class:`~transformer_lib.layers.EncoderLayer`.
        num_layers: number of layers N.
        final_norm: a LayerNorm after the last layer; ``None`` means "exactly when
            ``norm_first``" (see the module docstring).
        positional, max_len, scale_embeddings, num_token_types, embedding_norm: options of
            :class:`Embeddings`.

    Submodules: ``embedding`` (:class:`Embeddings` or ``None``), ``layers``
    (``nn.ModuleList`` of :class:`~transformer_lib.layers.EncoderLayer`), ``norm``
    (``nn.LayerNorm`` or ``None``). Taught in chapter 09.
    """

    def __init__(
        self,
        vocab_size: int | None,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        *,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        final_norm: bool | None = None,
        positional: str = "sinusoidal",
        max_len: int = 5000,
        scale_embeddings: bool = True,
        num_token_types: int = 0,
        embedding_norm: bool = False,
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        num_layers = _checks.positive_int(num_layers, "num_layers")
        norm_first = _flag(norm_first, "norm_first")
        final_norm = norm_first if final_norm is None else _flag(final_norm, "final_norm")
        self.embedding = None
        if _optional_vocab(vocab_size, "vocab_size") is not None:
            self.embedding = Embeddings(
                vocab_size, d_model, dropout, positional, max_len, scale_embeddings,
                num_token_types, embedding_norm, layer_norm_eps,
            )  # fmt: skip
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if final_norm else None

    @classmethod
    def from_config(cls, config: TransformerConfig) -> Encoder:
        """The encoder described by a :class:`TransformerConfig` (its ``src_vocab_size``)."""
        return cls(config.src_vocab_size, **config._stack_options())

    def embed(self, src: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``(batch, src_len, d_model)`` vectors (identity without embeddings)."""
        if self.embedding is None:
            _check_hidden(src, "src", self.d_model, "(batch, src_len, d_model={}) (no embedding here)")
            return src
        return self.embedding(src, token_types)

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Encode a batch of source sequences.

        Args:
            src: ``(batch, src_len)`` token ids (or ``(batch, src_len, d_model)`` vectors
                for a stack without embeddings).
            src_mask: optional boolean mask, ``True`` where attention is allowed,
                broadcastable to ``(batch, heads, src_len, src_len)``; usually
                ``padding_mask(src, pad_id)``.
            token_types: optional ``(batch, src_len)`` token types (BERT).

        Returns:
            ``memory``, ``(batch, src_len, d_model)``.
        """
        # 1) embed the tokens and add their positions
        x = self.embed(src, token_types)  # (batch, src_len, d_model)
        # 2) N encoder layers, each with its own weights
        for layer in self.layers:
            x = layer(x, src_mask)
        # 3) the final LayerNorm of a pre-norm stack
        return x if self.norm is None else self.norm(x)

    def hidden_states(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The vectors after the embeddings and after every layer: ``num_layers + 1`` tensors.

        Each is ``(batch, src_len, d_model)``; the last equals :meth:`forward`'s output
        (with the final LayerNorm applied, when the stack has one). Used in chapter 14 to
        follow one word's vector up the stack.
        """
        states = [self.embed(src, token_types)]  # (batch, src_len, d_model)
        for layer in self.layers:
            states.append(layer(states[-1], src_mask))
        if self.norm is not None:
            states[-1] = self.norm(states[-1])
        return states

    def attention_maps(self, index: int = 0) -> torch.Tensor:
        """The self-attention weights of every layer for sequence ``index`` of the last batch.

        Returns ``(layers, heads, src_len, src_len)``, ready for ``viz.plot_attention_grid``.
        """
        return _stack_maps(self.layers, "self_attn", index, "self-attention")


class Decoder(nn.Module):
    """The decoder: embeddings, then ``num_layers`` decoder layers, then a final norm.

    Args:
        vocab_size: target vocabulary size; ``None`` for a stack without embeddings whose
            ``forward`` takes vectors ``(batch, tgt_len, d_model)``, like ``nn.TransformerDecoder``.
        cross_attention: ``False`` builds a decoder-only stack (GPT-2, chapter 13) whose
            layers have no encoder-decoder attention.
        The other arguments are those of :class:`Encoder`.

    Submodules: ``embedding``, ``layers`` (of :class:`~transformer_lib.layers.DecoderLayer`),
    ``norm``. ``forward`` returns hidden vectors; :class:`Generator` turns them into
    log-probabilities. Taught in chapter 10.
    """

    def __init__(
        self,
        vocab_size: int | None,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        *,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        final_norm: bool | None = None,
        positional: str = "sinusoidal",
        max_len: int = 5000,
        scale_embeddings: bool = True,
        num_token_types: int = 0,
        embedding_norm: bool = False,
        cross_attention: bool = True,
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        num_layers = _checks.positive_int(num_layers, "num_layers")
        norm_first = _flag(norm_first, "norm_first")
        final_norm = norm_first if final_norm is None else _flag(final_norm, "final_norm")
        self.cross_attention = _flag(cross_attention, "cross_attention")
        self.embedding = None
        if _optional_vocab(vocab_size, "vocab_size") is not None:
            self.embedding = Embeddings(
                vocab_size, d_model, dropout, positional, max_len, scale_embeddings,
                num_token_types, embedding_norm, layer_norm_eps,
            )  # fmt: skip
        self.layers = nn.ModuleList(
            DecoderLayer(
                d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, cross_attention
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if final_norm else None

    @classmethod
    def from_config(cls, config: TransformerConfig, cross_attention: bool = True) -> Decoder:
        """The decoder described by a :class:`TransformerConfig` (its ``tgt_vocab_size``)."""
        return cls(config.tgt_vocab_size, **config._stack_options(), cross_attention=cross_attention)

    def embed(self, tgt: torch.Tensor) -> torch.Tensor:
        """``(batch, tgt_len)`` ids to ``(batch, tgt_len, d_model)`` vectors (identity without embeddings)."""
        if self.embedding is None:
            _check_hidden(tgt, "tgt", self.d_model, "(batch, tgt_len, d_model={}) (no embedding here)")
            return tgt
        return self.embedding(tgt)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decode the target so far, attending to the encoder output.

        Args:
            tgt: ``(batch, tgt_len)`` token ids, shifted right (they start with ``<bos>``),
                or ``(batch, tgt_len, d_model)`` vectors for a stack without embeddings.
            memory: ``(batch, src_len, d_model)`` encoder output (``None`` for decoder-only).
            src_mask: optional boolean memory mask, broadcastable to
                ``(batch, heads, tgt_len, src_len)``; usually the source padding mask.
            tgt_mask: optional boolean self-attention mask, broadcastable to
                ``(batch, heads, tgt_len, tgt_len)``: causal and padding together.
                ``None`` means no mask (as in PyTorch), which lets a position see the future.

        Returns:
            ``(batch, tgt_len, d_model)``.
        """
        # 1) embed the target tokens and add their positions
        x = self.embed(tgt)  # (batch, tgt_len, d_model)
        # 2) N decoder layers: masked self-attention, cross-attention, feed-forward
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        # 3) the final LayerNorm of a pre-norm stack
        return x if self.norm is None else self.norm(x)

    def attention_maps(self, kind: str = "self", index: int = 0) -> torch.Tensor:
        """The ``"self"`` or ``"cross"`` attention weights of every layer for sequence ``index``.

        Returns ``(layers, heads, tgt_len, tgt_len or src_len)`` for ``viz.plot_attention_grid``.
        """
        kind = _choice(kind, "kind", ("self", "cross"))
        if kind == "cross" and not self.cross_attention:
            raise ValueError("kind='cross' needs cross-attention, but this decoder has none")
        attn = "self_attn" if kind == "self" else "cross_attn"
        return _stack_maps(self.layers, attn, index, f"{kind}-attention")


class Generator(nn.Module):
    """The output layer: ``log_softmax(x W + b)`` over the vocabulary.

    Args:
        d_model: width of the decoder's vectors.
        vocab_size: number of output tokens.
        bias: whether the projection has a bias (the paper's does; GPT-2's does not).

    ``forward(x)``: ``(batch, seq, d_model)`` to log-probabilities ``(batch, seq, vocab_size)``.
    ``proj.weight`` is tied to the target embedding in :class:`Transformer`. Taught in chapter 10.
    """

    def __init__(self, d_model: int, vocab_size: int, bias: bool = True):
        super().__init__()
        d_model = _checks.positive_int(d_model, "d_model")
        vocab_size = _checks.positive_int(vocab_size, "vocab_size")
        self.proj = nn.Linear(d_model, vocab_size, bias=_flag(bias, "bias"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(x), dim=-1)


@dataclass
class TransformerConfig:
    """Everything that defines a model, with named presets (``TransformerConfig.preset(name)``).

    Fields (the paper's names): ``src_vocab_size``, ``tgt_vocab_size`` (``None``: stacks
    of vectors without embeddings), ``d_model``, ``num_heads`` (h), ``num_layers`` (N, in
    the encoder and in the decoder), ``d_ff``, ``dropout`` (P_drop), ``share_embeddings``
    (one embedding matrix for source and target; needs equal vocabularies),
    ``tie_output`` (the generator reuses the target embedding matrix), ``norm_first``
    (pre-norm), ``final_norm`` (``None``: exactly when ``norm_first``), ``activation``,
    ``layer_norm_eps``, ``positional`` (``"sinusoidal"``, ``"learned"``, ``"none"``),
    ``max_len``, ``scale_embeddings`` (by ``sqrt(d_model)``), ``num_token_types`` and
    ``embedding_norm`` (BERT), ``generator_bias``, ``pooler`` (BERT's pooler), ``lm_head``
    (an encoder-only model's masked-language-model output layer; a checkpoint of the
    bare encoder, such as all-MiniLM-L6-v2, has none),
    ``architecture`` (``"encoder-decoder"``, ``"encoder-only"``, ``"decoder-only"``).

    Encoder-only models read ``src_vocab_size``, decoder-only ones ``tgt_vocab_size``.
    Taught in chapter 11 (and 13 for the BERT and GPT-2 presets).
    """

    src_vocab_size: int | None = 37000
    tgt_vocab_size: int | None = 37000
    d_model: int = 512
    num_heads: int = 8
    num_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    share_embeddings: bool = False
    tie_output: bool = True
    norm_first: bool = False
    final_norm: bool | None = None
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    positional: str = "sinusoidal"
    max_len: int = 5000
    scale_embeddings: bool = True
    num_token_types: int = 0
    embedding_norm: bool = False
    generator_bias: bool = True
    pooler: bool = False
    lm_head: bool = True
    architecture: str = "encoder-decoder"

    def __post_init__(self) -> None:
        _optional_vocab(self.src_vocab_size, "src_vocab_size")
        _optional_vocab(self.tgt_vocab_size, "tgt_vocab_size")
        for name in ("d_model", "num_heads", "num_layers", "d_ff", "max_len"):
            _checks.positive_int(getattr(self, name), name)
        if self.d_model % self.num_heads:
            raise ValueError(
                "d_model must be divisible by num_heads, "
                f"got d_model={self.d_model} and num_heads={self.num_heads}"
            )
        _checks.probability(self.dropout, "dropout")
        for name in ("share_embeddings", "tie_output", "norm_first", "scale_embeddings", "embedding_norm",
                     "generator_bias", "pooler", "lm_head"):  # fmt: skip
            _flag(getattr(self, name), name)
        if self.final_norm is not None:
            _flag(self.final_norm, "final_norm")
        _activation_name(self.activation)
        _layer_norm_eps(self.layer_norm_eps)
        _choice(self.positional, "positional", POSITIONAL)
        _choice(self.architecture, "architecture", ARCHITECTURES)
        if isinstance(self.num_token_types, bool) or not isinstance(self.num_token_types, int):
            raise TypeError(f"num_token_types must be a non-negative int, got {self.num_token_types!r}")
        if self.num_token_types < 0:
            raise ValueError(f"num_token_types must be a non-negative int, got {self.num_token_types}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary for source and target, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )

    @property
    def d_k(self) -> int:
        """Width of one head, ``d_model / num_heads``."""
        return self.d_model // self.num_heads

    def _stack_options(self) -> dict:
        return dict(
            d_model=self.d_model, num_heads=self.num_heads, num_layers=self.num_layers, d_ff=self.d_ff,
            dropout=self.dropout, norm_first=self.norm_first, activation=self.activation,
            layer_norm_eps=self.layer_norm_eps, final_norm=self.final_norm, positional=self.positional,
            max_len=self.max_len, scale_embeddings=self.scale_embeddings,
            num_token_types=self.num_token_types, embedding_norm=self.embedding_norm,
        )  # fmt: skip

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named preset, optionally with some fields changed (``preset("tiny", src_vocab_size=13)``)."""
        if not isinstance(name, str):
            raise TypeError(f"name must be one of {sorted(PRESETS)}, got {type(name).__name__} {name!r}")
        if name not in PRESETS:
            raise ValueError(f"name must be one of {sorted(PRESETS)}, got {name!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"overrides must be TransformerConfig fields, got unknown {unknown}")
        return cls(**{**PRESETS[name], **overrides})

    @staticmethod
    def preset_names() -> list[str]:
        """The names :meth:`preset` accepts."""
        return sorted(PRESETS)


_BERT = dict(
    architecture="encoder-only", positional="learned", max_len=512, scale_embeddings=False,
    activation="gelu", layer_norm_eps=1e-12, num_token_types=2, embedding_norm=True, pooler=True,
    norm_first=False, share_embeddings=True, tie_output=True,
)  # fmt: skip
_GPT2 = dict(
    architecture="decoder-only", positional="learned", max_len=1024, scale_embeddings=False,
    activation="gelu_tanh", norm_first=True, share_embeddings=True, tie_output=True, generator_bias=False,
)  # fmt: skip

# Parameter counts are count_parameters(build_model(preset)), printed by the tests.
PRESETS: dict[str, dict[str, Any]] = {
    # Vaswani et al. (2017), Table 3: a shared 37,000-token vocabulary, all three embeddings tied.
    "base": dict(src_vocab_size=37000, tgt_vocab_size=37000, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, share_embeddings=True),  # 63,119,496 (~65M in the paper)
    "big": dict(src_vocab_size=37000, tgt_vocab_size=37000, d_model=1024, num_heads=16, num_layers=6,
                d_ff=4096, dropout=0.3, share_embeddings=True),  # 214,282,376 (~213M in the paper)
    # Small models for the toy tasks (set the vocabulary sizes from the task's Vocab).
    "tiny": dict(src_vocab_size=16, tgt_vocab_size=16, d_model=32, num_heads=2, num_layers=1,
                 d_ff=64, dropout=0.0),  # 22,416; for tests and quick demos
    "small": dict(src_vocab_size=16, tgt_vocab_size=16, d_model=64, num_heads=4, num_layers=2,
                  d_ff=128, dropout=0.0),  # 169,488; the toy tasks of chapter 11
    "medium": dict(src_vocab_size=64, tgt_vocab_size=64, d_model=128, num_heads=4, num_layers=3,
                   d_ff=512, dropout=0.1),  # 1,404,992
    # Encoder-only and decoder-only models of chapter 13, from the same blocks.
    "bert-base": dict(_BERT, src_vocab_size=30522, tgt_vocab_size=30522, d_model=768, num_heads=12,
                      num_layers=12, d_ff=3072, dropout=0.1),  # 109,512,762 (~110M)
    # all-MiniLM-L6-v2 (chapter 14): a bare BERT-style encoder, no masked-LM head.
    "minilm-l6": dict(_BERT, src_vocab_size=30522, tgt_vocab_size=30522, d_model=384, num_heads=12,
                      num_layers=6, d_ff=1536, dropout=0.1, lm_head=False),  # 22,713,216 (22.7M)
    "bert-tiny": dict(_BERT, src_vocab_size=32, tgt_vocab_size=32, d_model=64, num_heads=4,
                      num_layers=2, d_ff=256, dropout=0.0, max_len=64),  # 110,560; masked-LM demo
    "gpt2-small": dict(_GPT2, src_vocab_size=50257, tgt_vocab_size=50257, d_model=768, num_heads=12,
                       num_layers=12, d_ff=3072, dropout=0.1),  # 124,439,808 (~124M)
    "gpt-tiny": dict(_GPT2, src_vocab_size=64, tgt_vocab_size=64, d_model=64, num_heads=4,
                     num_layers=2, d_ff=256, dropout=0.0, max_len=128),  # 112,384; text generation
}  # fmt: skip


def _init_weights(model: nn.Module) -> None:
    """Xavier-uniform on every matrix, as the Annotated Transformer and ``nn.Transformer`` do."""
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


def _check_architecture(config: Any, expected: str, cls: str) -> TransformerConfig:
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if config.architecture != expected:
        raise ValueError(
            f"{cls} needs config.architecture={expected!r}, got {config.architecture!r}; "
            "build_model(config) picks the right class"
        )
    return config


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017).

    Args:
        config: a :class:`TransformerConfig` with ``architecture="encoder-decoder"``.

    Submodules: ``encoder`` (:class:`Encoder`), ``decoder`` (:class:`Decoder`),
    ``generator`` (:class:`Generator`, ``None`` when ``tgt_vocab_size`` is ``None``).
    With ``tie_output`` the generator's weight is the target embedding matrix; with
    ``share_embeddings`` the source embedding is that same matrix too (three uses, one
    tensor). Weights start Xavier-uniform.

    Taught in chapter 11. ``to_torch(model)`` gives the ``nn.Transformer`` holding the two
    stacks (PyTorch's has no embeddings or generator: feed it ``model.encoder.embed(src)``
    and ``model.decoder.embed(tgt)``).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_architecture(config, "encoder-decoder", "Transformer")
        self.encoder = Encoder.from_config(config)
        self.decoder = Decoder.from_config(config)
        self.generator = None
        if config.tgt_vocab_size is not None:
            self.generator = Generator(config.d_model, config.tgt_vocab_size, config.generator_bias)
        _init_weights(self)
        # tie after initialising, so the shared matrix is initialised once
        if config.share_embeddings and self.encoder.embedding is not None:
            self.decoder.embedding.token_embedding.weight = self.encoder.embedding.token_embedding.weight
        if config.tie_output and self.generator is not None:
            self.generator.proj.weight = self.decoder.embedding.token_embedding.weight

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``memory`` ``(batch, src_len, d_model)``."""
        return self.encoder(src, src_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token log-probabilities ``(batch, tgt_len, tgt_vocab)`` for every target prefix.

        ``tgt`` is ``(batch, tgt_len)`` ids starting with ``<bos>``; position t predicts
        token t + 1. Without a generator (``tgt_vocab_size=None``) it returns the decoder's
        vectors ``(batch, tgt_len, d_model)``.
        """
        x = self.decoder(tgt, memory, src_mask, tgt_mask)
        return x if self.generator is None else self.generator(x)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-probabilities ``(batch, tgt_len, tgt_vocab)`` of the next target token.

        Args:
            src: ``(batch, src_len)`` source ids.
            tgt: ``(batch, tgt_len)`` target ids shifted right (starting with ``<bos>``).
            src_mask: boolean, broadcastable to ``(batch, heads, src_len, src_len)`` and to
                ``(batch, heads, tgt_len, src_len)``: the source padding mask
                ``(batch, 1, 1, src_len)``; used by encoder self-attention and cross-attention.
            tgt_mask: boolean, broadcastable to ``(batch, heads, tgt_len, tgt_len)``: causal
                and padding together. ``None`` means no mask (as in PyTorch).
        """
        # 1) encode the source once
        memory = self.encode(src, src_mask)  # (batch, src_len, d_model)
        # 2) decode every target position in parallel (teacher forcing), then the generator
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def attention_maps(self, kind: str = "encoder", index: int = 0) -> torch.Tensor:
        """Attention weights of every layer for sequence ``index`` of the last batch.

        ``kind``: ``"encoder"`` (encoder self-attention), ``"decoder"`` (masked decoder
        self-attention) or ``"cross"`` (encoder-decoder attention). Returns
        ``(layers, heads, q_len, k_len)`` for ``viz.plot_attention_grid``; the model must
        have run in eval mode.
        """
        kind = _choice(kind, "kind", ("encoder", "decoder", "cross"))
        if kind == "encoder":
            return self.encoder.attention_maps(index)
        return self.decoder.attention_maps("self" if kind == "decoder" else "cross", index)


class EncoderOnlyModel(nn.Module):
    """An encoder-only model (BERT): the :class:`Encoder`, a generator for masked-token prediction, a pooler.

    Args:
        config: a :class:`TransformerConfig` with ``architecture="encoder-only"`` (e.g.
            ``preset("bert-base")``); reads ``src_vocab_size``.

    ``forward(src, src_mask=None, token_types=None)`` returns log-probabilities
    ``(batch, src_len, vocab)`` for every position (the masked-language-model head, tied
    to the token embedding with ``tie_output``), or, with ``config.lm_head=False`` (a
    bare encoder, no output layer), the vectors themselves; ``encode`` returns the
    vectors; ``pool(hidden)`` gives BERT's ``tanh(W h_0 + b)`` of the first token when
    ``config.pooler``; ``mean_pool(hidden, src_mask)`` averages the real (unpadded)
    tokens' vectors, the sentence embedding of Sentence-BERT. Taught in chapters 13 and 14.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_architecture(config, "encoder-only", "EncoderOnlyModel")
        if config.src_vocab_size is None:
            raise ValueError("EncoderOnlyModel needs config.src_vocab_size, got None")
        self.encoder = Encoder.from_config(config)
        self.generator = None
        if config.lm_head:
            self.generator = Generator(config.d_model, config.src_vocab_size, config.generator_bias)
        self.pooler = None
        if config.pooler:
            self.pooler = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.Tanh())
        _init_weights(self)
        if config.tie_output and self.generator is not None:
            self.generator.proj.weight = self.encoder.embedding.token_embedding.weight

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``(batch, src_len, d_model)`` contextual vectors."""
        return self.encoder(src, src_mask, token_types)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """BERT's pooled output ``(batch, d_model)`` from the first token's vector."""
        if self.pooler is None:
            raise ValueError("this model has no pooler (config.pooler=False)")
        return self.pooler(hidden[:, 0])

    def mean_pool(self, hidden: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mean of each sequence's real tokens' vectors, ``(batch, d_model)``.

        Args:
            hidden: ``(batch, src_len, d_model)``, the output of :meth:`encode`.
            src_mask: the padding mask given to :meth:`encode` (``padding_mask(src, pad_id)``,
                ``(batch, 1, 1, src_len)``, or ``(batch, src_len)``), ``True`` at real tokens;
                ``None`` averages every position.
        """
        _check_hidden(hidden, "hidden", self.config.d_model, "(batch, src_len, d_model={})")
        b, n, _ = hidden.shape
        if src_mask is None:
            return hidden.mean(dim=1)
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
            got = src_mask.dtype if isinstance(src_mask, torch.Tensor) else type(src_mask).__name__
            raise TypeError(f"src_mask must be a boolean tensor, got {got}")
        if src_mask.numel() != b * n or src_mask.shape[-1] != n:
            raise ValueError(f"src_mask must have shape (batch={b}, 1, 1, src_len={n}) or ({b}, {n}), "
                             f"got {tuple(src_mask.shape)}")
        keep = src_mask.reshape(b, n, 1).to(hidden.dtype)  # (batch, src_len, 1)
        # sum of the kept vectors over the number kept (at least 1: an all-padding row gives 0)
        return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.encode(src, src_mask, token_types)
        return hidden if self.generator is None else self.generator(hidden)

    def attention_maps(self, index: int = 0) -> torch.Tensor:
        """``(layers, heads, src_len, src_len)`` self-attention weights, as :meth:`Encoder.attention_maps`."""
        return self.encoder.attention_maps(index)


class DecoderOnlyModel(nn.Module):
    """A decoder-only language model (GPT-2): a :class:`Decoder` without cross-attention and a generator.

    Args:
        config: a :class:`TransformerConfig` with ``architecture="decoder-only"`` (e.g.
            ``preset("gpt2-small")``); reads ``tgt_vocab_size``.

    ``forward(tgt, tgt_mask=None)`` returns next-token log-probabilities
    ``(batch, tgt_len, vocab)``; ``tgt_mask=None`` means the causal mask (a language model
    must never see the future), a given mask is used as it is. Taught in chapter 13.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_architecture(config, "decoder-only", "DecoderOnlyModel")
        if config.tgt_vocab_size is None:
            raise ValueError("DecoderOnlyModel needs config.tgt_vocab_size, got None")
        self.decoder = Decoder.from_config(config, cross_attention=False)
        self.generator = Generator(config.d_model, config.tgt_vocab_size, config.generator_bias)
        _init_weights(self)
        if config.tie_output:
            self.generator.proj.weight = self.decoder.embedding.token_embedding.weight

    def forward(self, tgt: torch.Tensor, tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        if tgt_mask is None and isinstance(tgt, torch.Tensor) and tgt.ndim == 2 and tgt.shape[1] > 0:
            tgt_mask = causal_mask(tgt.shape[1], device=tgt.device)  # (tgt_len, tgt_len)
        return self.generator(self.decoder(tgt, None, None, tgt_mask))

    def attention_maps(self, index: int = 0) -> torch.Tensor:
        """``(layers, heads, tgt_len, tgt_len)`` masked self-attention weights."""
        return self.decoder.attention_maps("self", index)


def build_model(config: TransformerConfig) -> nn.Module:
    """The model a config describes: a Transformer, EncoderOnlyModel or DecoderOnlyModel."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    cls = {"encoder-decoder": Transformer, "encoder-only": EncoderOnlyModel, "decoder-only": DecoderOnlyModel}
    return cls[config.architecture](config)


def count_parameters(model: nn.Module | TransformerConfig, by_module: bool = False) -> int | dict[str, int]:
    """Number of parameters, each shared (tied) tensor counted once.

    Args:
        model: a module, or a :class:`TransformerConfig` (built on PyTorch's ``meta``
            device, so even the big preset costs no memory).
        by_module: return ``{child name: count}`` for the top-level children instead, a
            shared tensor counted in the first child that holds it.

    Taught in chapter 11 (the base model has about 65M parameters, the big one about 213M).
    """
    if isinstance(model, TransformerConfig):
        with torch.device("meta"):
            model = build_model(model)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module or a TransformerConfig, got {type(model).__name__}")
    if not isinstance(by_module, bool):
        raise TypeError(f"by_module must be True or False, got {type(by_module).__name__}")
    if not by_module:
        return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    seen: set[int] = set()
    counts: dict[str, int] = {}
    for name, child in model.named_children():
        fresh = [p for p in child.parameters() if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        counts[name] = sum(p.numel() for p in fresh)
    direct = [p for p in model.parameters(recurse=False) if id(p) not in seen]
    if direct:
        counts["(own)"] = sum(p.numel() for p in direct)
    return counts


# ---------------------------------------------------------------------------------------
# Conversions to and from PyTorch's stacks (registered with transformer_lib.interop)
# ---------------------------------------------------------------------------------------


def _final_norm_to_torch(norm: nn.LayerNorm | None) -> nn.LayerNorm | None:
    if norm is None:
        return None
    t = nn.LayerNorm(norm.normalized_shape, eps=norm.eps)
    _copy_norm(t, norm)
    return t


def _encoder_to_torch(m: Encoder) -> nn.TransformerEncoder:
    layers = [_encoder_layer_to_torch(layer) for layer in m.layers]
    with warnings.catch_warnings():  # PyTorch warns that pre-norm stacks cannot use nested tensors
        warnings.simplefilter("ignore")
        t = nn.TransformerEncoder(layers[0], len(layers), _final_norm_to_torch(m.norm),
                                  enable_nested_tensor=not m.layers[0].norm_first)  # fmt: skip
    t.layers = nn.ModuleList(layers)
    return t


def _decoder_to_torch(m: Decoder) -> nn.Module:
    if not m.cross_attention:  # a decoder-only stack is PyTorch's encoder stack with a causal mask
        return _encoder_to_torch(m)
    layers = [_decoder_layer_to_torch(layer) for layer in m.layers]
    t = nn.TransformerDecoder(layers[0], len(layers), _final_norm_to_torch(m.norm))
    t.layers = nn.ModuleList(layers)
    return t


def _stack_from_torch(t: nn.Module, cls: type, from_layer) -> nn.Module:
    layers = [from_layer(layer) for layer in t.layers]
    first = layers[0]
    options = dict(
        d_model=first.d_model, num_heads=first.self_attn.num_heads, num_layers=len(layers),
        d_ff=first.feed_forward.d_ff, dropout=first.self_attn.dropout, norm_first=first.norm_first,
        activation=first.feed_forward.activation, layer_norm_eps=first.add_norm1.norm.eps,
        final_norm=t.norm is not None, positional="none",
    )  # fmt: skip
    m = cls(None, **options)
    m.layers = nn.ModuleList(layers)
    if t.norm is not None:
        m.norm = nn.LayerNorm(t.norm.normalized_shape, eps=t.norm.eps)
        _copy_norm(m.norm, t.norm)
    return m


def _encoder_from_torch(t: nn.TransformerEncoder) -> Encoder:
    return _stack_from_torch(t, Encoder, _encoder_layer_from_torch)


def _decoder_from_torch(t: nn.TransformerDecoder) -> Decoder:
    return _stack_from_torch(t, Decoder, _decoder_layer_from_torch)


def _transformer_to_torch(m: Transformer) -> nn.Transformer:
    c = m.config
    # build a one-layer shell (its own weights are replaced), then put our two stacks in it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = nn.Transformer(c.d_model, c.num_heads, 1, 1, c.d_ff, c.dropout, layer_norm_eps=c.layer_norm_eps,
                           batch_first=True, norm_first=c.norm_first)  # fmt: skip
    t.encoder = _encoder_to_torch(m.encoder)
    t.decoder = _decoder_to_torch(m.decoder)
    return t


def _transformer_from_torch(t: nn.Transformer) -> Transformer:
    encoder = _encoder_from_torch(t.encoder)
    decoder = _decoder_from_torch(t.decoder)
    layer = encoder.layers[0]
    config = TransformerConfig(
        src_vocab_size=None, tgt_vocab_size=None, d_model=layer.d_model, num_heads=layer.self_attn.num_heads,
        num_layers=len(encoder.layers), d_ff=layer.feed_forward.d_ff, dropout=layer.self_attn.dropout,
        norm_first=layer.norm_first, final_norm=encoder.norm is not None,
        activation=layer.feed_forward.activation, layer_norm_eps=layer.add_norm1.norm.eps, positional="none",
    )  # fmt: skip
    if len(decoder.layers) != len(encoder.layers) or (decoder.norm is None) != (encoder.norm is None):
        raise ValueError(
            "module must have as many decoder layers as encoder layers, and final norms on both or neither"
        )
    m = Transformer(config)
    m.encoder, m.decoder = encoder, decoder
    return m


interop.register(Encoder, nn.TransformerEncoder, _encoder_to_torch, _encoder_from_torch)
interop.register(Decoder, nn.TransformerDecoder, _decoder_to_torch, _decoder_from_torch)
interop.register(Transformer, nn.Transformer, _transformer_to_torch, _transformer_from_torch)

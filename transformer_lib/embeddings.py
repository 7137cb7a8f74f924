"""Token embeddings: the first module of every stack, token ids to vectors with their positions.

:class:`Embeddings` looks up each token's vector, scales it by ``sqrt(d_model)`` (the
paper), adds the positions (sinusoidal or learned), optionally BERT's token types and a
LayerNorm, then applies dropout. The stacks (:mod:`transformer_lib.stacks`) take one as
their first module, as the Annotated Transformer's ``src_embed`` and ``tgt_embed``.
Taught in chapter 10 (scaling, tying) and 13 (BERT's extras).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import _checks
from .config import ADDED_POSITIONS, TransformerConfig
from .positional import LearnedPositionalEmbedding, PositionalEncoding


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

    Submodules: ``token_embedding`` (``nn.Embedding(vocab_size, d_model)``), ``position``
    (:class:`~transformer_lib.positional.PositionalEncoding`,
    :class:`~transformer_lib.positional.LearnedPositionalEmbedding` or ``None``),
    ``token_type_embedding`` and ``norm`` (or ``None``).

    ``forward(tokens, token_types=None, start=0)``: ``(batch, seq)`` ids (and types) to
    ``(batch, seq, d_model)``; the tokens are positions ``start .. start + seq - 1``
    (``start > 0`` when a decoder generates with a cache of the earlier tokens).
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
        self.positional = _checks.one_of(positional, "positional", ADDED_POSITIONS)
        max_len = _checks.positive_int(max_len, "max_len")
        self.scale = _checks.flag(scale, "scale")
        num_token_types = _checks.non_negative_int(num_token_types, "num_token_types")
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if positional == "sinusoidal":
            self.position = PositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(max_len, d_model)
        else:
            self.position = None
        self.token_type_embedding = nn.Embedding(num_token_types, d_model) if num_token_types else None
        eps = _checks.positive_float(layer_norm_eps, "layer_norm_eps")
        self.norm = nn.LayerNorm(d_model, eps=eps) if _checks.flag(norm, "norm") else None
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    @classmethod
    def from_config(cls, config: TransformerConfig, vocab_size: int) -> Embeddings:
        """The embeddings that ``config`` describes, for a vocabulary of ``vocab_size`` ids."""
        return cls(
            vocab_size, config.d_model, config.dropout, config.positional, config.max_len,
            config.scale_embeddings, config.num_token_types, config.embedding_norm, config.layer_norm_eps,
        )  # fmt: skip

    def forward(
        self, tokens: torch.Tensor, token_types: torch.Tensor | None = None, start: int = 0
    ) -> torch.Tensor:
        _checks.token_ids(tokens, "tokens", self.vocab_size)
        start = _checks.non_negative_int(start, "start")
        # 1) look up each token's vector, scaled by sqrt(d_model) as in the paper
        x = self.token_embedding(tokens)  # (batch, seq, d_model)
        if self.scale:
            x = x * math.sqrt(self.d_model)
        # 2) add the positions (and the token types)
        if self.position is not None:
            x = self.position(x, start)
        if token_types is not None:
            if self.token_type_embedding is None:
                raise ValueError("token_types given, but this model has no token types (num_token_types=0)")
            _checks.token_ids(token_types, "token_types", self.token_type_embedding.num_embeddings)
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

"""One-stack models from the same blocks (chapter 14): encoder-only (BERT) and decoder-only (GPT-2).

* :class:`EncoderOnlyModel`: the :class:`~transformer_lib.stacks.Encoder` with a
  masked-language-model output layer and BERT's pooler; also a bare encoder for sentence
  embeddings (all-MiniLM-L6-v2, chapter 18).
* :class:`DecoderOnlyModel`: the :class:`~transformer_lib.stacks.Decoder` without
  cross-attention and a :class:`~transformer_lib.transformer.Generator`: a language model.

Each has one vocabulary (see :mod:`transformer_lib.config`): ``src_vocab_size`` for the
encoder-only model, ``tgt_vocab_size`` for the decoder-only one. Both return
log-probabilities, never logits.
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks
from .config import TransformerConfig, check_architecture
from .stacks import Decoder, DecoderCache, Encoder
from .transformer import Generator, init_weights


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
    tokens' vectors, the sentence embedding of Sentence-BERT. ``src_mask=None`` lets every
    position see every other. Taught in chapters 14 and 18.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = check_architecture(config, "encoder-only", "EncoderOnlyModel")
        self.encoder = Encoder.from_config(config)
        self.generator = None
        if config.lm_head:
            self.generator = Generator(config.d_model, config.src_vocab_size, config.generator_bias)
        self.pooler = None
        if config.pooler:
            self.pooler = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.Tanh())
        init_weights(self)
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
        _checks.hidden(hidden, "hidden", self.config.d_model, "(batch, src_len, d_model={})")
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

    def get_attention_maps(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(layers, batch, heads, src_len, src_len)``: :meth:`Encoder.get_attention_maps` of ``src``."""
        return self.encoder.get_attention_maps(src, src_mask, token_types)


class DecoderOnlyModel(nn.Module):
    """A decoder-only language model (GPT-2): a :class:`Decoder` without cross-attention and a generator.

    Args:
        config: a :class:`TransformerConfig` with ``architecture="decoder-only"`` (e.g.
            ``preset("gpt2-small")``); reads ``tgt_vocab_size``.

    ``forward(tgt, tgt_mask=None)`` returns next-token log-probabilities
    ``(batch, tgt_len, vocab)``; ``tgt_mask=None`` means the causal mask (a language model
    must never see the future), as in :class:`~transformer_lib.transformer.Transformer`;
    a given mask is used as it is. ``forward(new_tokens, cache=cache)`` with a cache from
    :meth:`new_cache` runs only the tokens the cache has not seen (see
    :class:`~transformer_lib.stacks.DecoderCache`), as :func:`~transformer_lib.generate` does.
    Taught in chapter 14.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = check_architecture(config, "decoder-only", "DecoderOnlyModel")
        self.decoder = Decoder.from_config(config)
        self.generator = Generator(config.d_model, config.tgt_vocab_size, config.generator_bias)
        init_weights(self)
        if config.tie_output:
            self.generator.proj.weight = self.decoder.embedding.token_embedding.weight

    def forward(
        self, tgt: torch.Tensor, tgt_mask: torch.Tensor | None = None, cache: DecoderCache | None = None
    ) -> torch.Tensor:
        return self.generator(self.decoder(tgt, tgt_mask=tgt_mask, cache=cache))

    def new_cache(self) -> DecoderCache:
        """An empty cache of the decoder's keys and values, for generating one token at a time."""
        return self.decoder.new_cache()

    def get_attention_maps(self, tgt: torch.Tensor, tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(layers, batch, heads, tgt_len, tgt_len)`` masked self-attention weights of ``tgt``."""
        return self.decoder.get_attention_maps(tgt, tgt_mask=tgt_mask)["self"]

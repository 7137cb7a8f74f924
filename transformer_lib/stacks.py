"""The stacks: the :class:`Encoder` (chapter 09) and the :class:`Decoder` (chapter 10).

A stack is three parts: an embedding module (token ids to vectors, usually
:class:`~transformer_lib.embeddings.Embeddings`; ``None`` for a stack that takes vectors,
like ``nn.TransformerEncoder``), ``N`` layers with separate weights, and an optional final
LayerNorm. ``from_config`` builds all three from a
:class:`~transformer_lib.config.TransformerConfig`. The Annotated Transformer splits the
model differently: its ``Encoder`` and ``Decoder`` hold only the layers and a final
LayerNorm, and the embeddings sit in its ``EncoderDecoder`` (``src_embed``, ``tgt_embed``).
Its final LayerNorm is always there because its sub-layers are pre-norm (its
``SublayerConnection`` puts the norm first "for code simplicity"), not the paper's post-norm.

The final LayerNorm. A pre-norm layer leaves its output un-normalised, so a pre-norm
stack ends with one LayerNorm (GPT-2's ``ln_f``); a post-norm layer already ends with a
LayerNorm, so the paper's stacks have none. ``from_config`` follows that rule unless
``config.final_norm`` says otherwise. ``nn.Transformer`` always adds a final LayerNorm to
both stacks, even in post-norm; :func:`transformer_lib.to_torch` leaves it out
(``norm=None``) when our stack has none, and :func:`transformer_lib.from_torch` keeps it,
so both directions are exact.

Masks are boolean, ``True`` where attention is allowed. The decoder reads
``tgt_mask=None`` as the causal mask, as its layers do: a decoder never sees the future
unless it is given a mask that lets it (``nn.TransformerDecoder`` reads ``None`` as no mask
at all).

Generation with a cache. Decoding one token at a time, the decoder would recompute every
earlier token at every step; :meth:`Decoder.new_cache` gives a :class:`DecoderCache` (the
keys and values of every attention, layer by layer) and ``Decoder.forward(new_tokens, ...,
cache=cache)`` runs only the new tokens, at the positions after the cached ones. The
outputs equal those of the whole sequence without a cache (to float rounding).

Attention maps. A forward pass keeps no attention weights (the layers use the fused
kernel). ``get_attention_maps(...)`` is the method made for drawing them: it runs one
forward pass in evaluation mode without gradients, with weights requested from every
layer, returns them stacked ``(layers, batch, heads, q_len, k_len)`` and leaves the
module in the mode it was in.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from . import _checks
from .embeddings import Embeddings
from .layers import DecoderLayer, EncoderLayer, make_norm
from .torch_attention import KVCache, MultiHeadAttention, causal_mask

if TYPE_CHECKING:  # only for the type hints: the configuration is defined later
    from .config import TransformerConfig


@contextlib.contextmanager
def evaluating(module: object) -> Iterator[None]:
    """Evaluation mode and no gradients for the duration, then the module's mode as it was.

    Used by ``get_attention_maps`` and by :mod:`transformer_lib.decoding`; anything
    that is not an ``nn.Module`` (a stand-in model in a test) only loses its gradients.
    """
    was_training = isinstance(module, nn.Module) and module.training
    if was_training:
        module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            module.train()


def _check_parts(embedding: object, layers: object, norm: object, layer_type: type) -> nn.ModuleList:
    """The layers as an ``nn.ModuleList``, once the three parts of a stack are checked."""
    if embedding is not None and not isinstance(embedding, nn.Module):
        raise TypeError(
            f"embedding must be an nn.Module (token ids to vectors) or None, got {type(embedding).__name__}"
        )
    if isinstance(layers, nn.Module) and not isinstance(layers, nn.ModuleList):
        raise TypeError(f"layers must be a list of {layer_type.__name__} (one per layer, separate weights), "
                        f"got one {type(layers).__name__}")
    if not isinstance(layers, Sequence | nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"layers must be a non-empty list of {layer_type.__name__}, got {layers!r}")
    wrong = sorted({type(layer).__name__ for layer in layers if not isinstance(layer, layer_type)})
    if wrong:
        raise TypeError(f"layers must all be {layer_type.__name__}, got {wrong}")
    widths = sorted({layer.d_model for layer in layers})
    if len(widths) > 1:
        raise ValueError(f"layers must share one d_model, got {widths}")
    width = getattr(embedding, "d_model", widths[0])
    if width != widths[0]:
        raise ValueError(f"embedding and layers must share d_model, got {width} and {widths[0]}")
    if norm is not None and not isinstance(norm, nn.Module):
        raise TypeError(f"norm must be an nn.Module (the final LayerNorm) or None, got {type(norm).__name__}")
    return layers if isinstance(layers, nn.ModuleList) else nn.ModuleList(layers)


def _final_norm(config: TransformerConfig) -> nn.Module | None:
    """A config's final LayerNorm: by default exactly when the layers are pre-norm.

    With ``config.layer_norm=False`` (the ablation without normalisation) it is an
    ``nn.Identity`` where the LayerNorm would be.
    """
    wanted = config.norm_first if config.final_norm is None else config.final_norm
    if not wanted:
        return None
    return make_norm(config.norm_type, config.d_model, config.layer_norm_eps) if config.layer_norm else nn.Identity()


def _embedding(config: TransformerConfig, vocab_size: int | None) -> Embeddings | None:
    """A config's embedding for ``vocab_size`` ids (``None``: a stack that takes vectors).

    Rotary positions are not added to the embeddings (the self-attention layers rotate
    queries and keys instead), so a rotary config's embedding adds no positions.
    """
    if vocab_size is None:
        return None
    if config.positional == "rotary":
        config = dataclasses.replace(config, positional="none")
    return Embeddings.from_config(config, vocab_size)


def _layer_options(config: TransformerConfig) -> tuple[tuple, dict]:
    """The positional and keyword arguments every layer of a config's stacks takes."""
    c = config
    options = (c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first, c.activation, c.layer_norm_eps)
    switches = dict(attention_scale=c.attention_scale, rotary=c.positional == "rotary", residual=c.residual,
                    layer_norm=c.layer_norm, num_kv_heads=c.num_kv_heads, rotary_layout=c.rotary_layout,
                    rotary_base=c.rotary_base, bias=c.bias, ffn_type=c.ffn_type, norm_type=c.norm_type)  # fmt: skip
    return options, switches


def _take_weights(attention: MultiHeadAttention) -> torch.Tensor:
    """The weights an attention kept from the call just made; it keeps nothing afterwards."""
    weights, attention.attention_weights = attention.attention_weights, None
    return weights  # (batch, heads, q_len, k_len)


class Encoder(nn.Module):
    """The encoder: an embedding, then ``N`` encoder layers (separate weights), then an optional norm.

    Args:
        embedding: token ids ``(batch, src_len)`` to vectors ``(batch, src_len, d_model)``
            (an :class:`~transformer_lib.embeddings.Embeddings`); ``None`` for a stack
            whose ``forward`` takes the vectors, like ``nn.TransformerEncoder``.
        layers: the :class:`~transformer_lib.layers.EncoderLayer` s, in order.
        norm: the final LayerNorm, or ``None`` (see the module docstring).

    Submodules: ``embedding``, ``layers`` (``nn.ModuleList``), ``norm``. Taught in chapter 09.
    """

    def __init__(
        self, embedding: nn.Module | None, layers: Sequence[EncoderLayer], norm: nn.Module | None = None
    ):
        super().__init__()
        layers = _check_parts(embedding, layers, norm, EncoderLayer)
        # registered in reading order, which is the order init_weights draws them in
        self.embedding = embedding
        self.layers = layers
        self.norm = norm
        self.d_model = self.layers[0].d_model

    @classmethod
    def from_config(cls, config: TransformerConfig) -> Encoder:
        """The encoder a :class:`~transformer_lib.config.TransformerConfig` describes (``src_vocab_size``)."""
        c = config
        embedding = _embedding(c, c.src_vocab_size)
        options, switches = _layer_options(c)
        layers = [EncoderLayer(*options, **switches) for _ in range(c.num_layers)]
        return cls(embedding, layers, _final_norm(c))

    def embed(self, src: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``(batch, src_len, d_model)`` vectors (identity without embedding)."""
        if self.embedding is None:
            return _checks.hidden(src, "src", self.d_model, "(batch, src_len, d_model={}), no embedding here")
        if token_types is None:
            return self.embedding(src)
        return self.embedding(src, token_types)

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Encode a batch of source sequences.

        Args:
            src: ``(batch, src_len)`` token ids (or ``(batch, src_len, d_model)`` vectors
                for a stack without embedding).
            src_mask: optional boolean mask, ``True`` where attention is allowed,
                broadcastable to ``(batch, heads, src_len, src_len)``; usually
                ``padding_mask(src, pad_id)``. ``None``: every position sees every other.
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
        """The vectors after the embedding and after every layer: ``num_layers + 1`` tensors.

        Each is ``(batch, src_len, d_model)``; the last equals :meth:`forward`'s output
        (with the final LayerNorm applied, when the stack has one). Used in chapter 18 to
        follow one word's vector up the stack.
        """
        states = [self.embed(src, token_types)]  # (batch, src_len, d_model)
        for layer in self.layers:
            states.append(layer(states[-1], src_mask))
        if self.norm is not None:
            states[-1] = self.norm(states[-1])
        return states

    def get_attention_maps(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Every layer's self-attention weights for ``src``: ``(layers, batch, heads, src_len, src_len)``.

        One forward pass in evaluation mode without gradients (see the module docstring);
        the arguments are :meth:`forward`'s. ``maps[:, i]`` is sequence ``i``'s
        ``(layers, heads, src_len, src_len)``, ready for ``viz.plot_attention_grid``.
        """
        maps = []
        with evaluating(self):
            x = self.embed(src, token_types)  # (batch, src_len, d_model)
            for layer in self.layers:
                x = layer(x, src_mask, need_weights=True)
                maps.append(_take_weights(layer.self_attn))  # (batch, heads, src_len, src_len)
        return torch.stack(maps)  # (layers, batch, heads, src_len, src_len)


@dataclass
class DecoderCache:
    """What a :class:`Decoder` keeps between generation steps: one ``KVCache`` per attention.

    ``self_attn[i]`` is layer i's self-attention cache (it grows by the new tokens' keys
    and values at every step); ``cross_attn[i]`` is layer i's cross-attention cache (the
    keys and values of the encoder's ``memory``, computed at the first step and reused),
    or ``None`` for a decoder-only stack. See
    :class:`~transformer_lib.torch_attention.KVCache`. Build one with
    :meth:`Decoder.new_cache`, one per batch of sequences being generated.
    """

    self_attn: list[KVCache]
    cross_attn: list[KVCache] | None

    @property
    def length(self) -> int:
        """How many target positions the cache has seen: the next token is at this position.

        A sliding-window cache holds fewer keys than that (``self_attn[0].length``).
        """
        return self.self_attn[0].position

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the batch rows ``index`` ``(new_batch,)``, in that order, in every cache (beam search)."""
        for cache in self.self_attn + (self.cross_attn or []):
            cache.reorder(index)


class Decoder(nn.Module):
    """The decoder: an embedding, then ``N`` decoder layers, then an optional norm.

    Args:
        embedding: target ids ``(batch, tgt_len)`` to vectors, or ``None`` for a stack that
            takes vectors, like ``nn.TransformerDecoder``.
        layers: the :class:`~transformer_lib.layers.DecoderLayer` s, in order; all with
            cross-attention (encoder-decoder) or all without (decoder-only, GPT-2, chapter 14).
        norm: the final LayerNorm, or ``None``.
        window: sliding-window self-attention (Mistral's, chapter 19): each position sees
            only the ``window`` most recent positions, itself included, in the default
            mask and in the cache; ``None``: every earlier position. A mask given to
            ``forward`` is used as it is (the window applies only to ``tgt_mask=None``), so
            configurations allow a window in decoder-only models only: ``greedy_decode`` and
            ``beam_search`` give an encoder-decoder's decoder causal masks of their own.

    Submodules: ``embedding``, ``layers``, ``norm``; ``cross_attention`` says whether the
    layers attend to an encoder's ``memory``. ``forward`` returns hidden vectors;
    :class:`~transformer_lib.transformer.Generator` turns them into log-probabilities.
    Taught in chapter 10.
    """

    def __init__(
        self,
        embedding: nn.Module | None,
        layers: Sequence[DecoderLayer],
        norm: nn.Module | None = None,
        *,
        window: int | None = None,
    ):
        super().__init__()
        layers = _check_parts(embedding, layers, norm, DecoderLayer)
        kinds = {layer.cross_attn is not None for layer in layers}
        if len(kinds) > 1:
            raise ValueError("layers must all have cross-attention or all have none, got a mix")
        self.cross_attention = kinds.pop()
        self.window = None if window is None else _checks.positive_int(window, "window")
        self.embedding = embedding
        self.layers = layers
        self.norm = norm
        self.d_model = self.layers[0].d_model

    @classmethod
    def from_config(cls, config: TransformerConfig) -> Decoder:
        """The decoder a config describes (``tgt_vocab_size``); cross-attention unless decoder-only."""
        c = config
        embedding = _embedding(c, c.tgt_vocab_size)
        cross = c.architecture != "decoder-only"
        options, switches = _layer_options(c)
        layers = [DecoderLayer(*options, cross_attention=cross, **switches) for _ in range(c.num_layers)]
        return cls(embedding, layers, _final_norm(c), window=c.window)

    def embed(self, tgt: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``(batch, tgt_len)`` ids to ``(batch, tgt_len, d_model)`` vectors (identity without embedding).

        The tokens are positions ``start .. start + tgt_len - 1`` (``start > 0`` with a cache).
        """
        if self.embedding is None:
            return _checks.hidden(tgt, "tgt", self.d_model, "(batch, tgt_len, d_model={}), no embedding here")
        return self.embedding(tgt) if start == 0 else self.embedding(tgt, start=start)

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for this decoder's layers, for one batch of generation."""
        cross = [KVCache(grows=False) for _ in self.layers] if self.cross_attention else None
        return DecoderCache([KVCache(grows=True, window=self.window) for _ in self.layers], cross)

    def _self_mask(
        self, tgt_len: int, tgt_mask: torch.Tensor | None, device: torch.device, past: int = 0
    ) -> torch.Tensor | None:
        """``tgt_mask`` as given, or the causal (sliding-window) mask when it is ``None``.

        With ``past`` cached keys the causal mask is ``(tgt_len, past + tgt_len)``; one new
        token may see every key (a windowed cache holds only the ``window - 1`` keys before
        it), so it needs none (and the fused kernel runs unmasked).
        """
        if tgt_mask is None and tgt_len > 0 and not (past and tgt_len == 1):
            # (tgt_len, past + tgt_len): never the future (nor, with a window, the far past)
            return causal_mask(tgt_len, device=device, past=past, window=self.window)
        return tgt_mask

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """Decode the target so far, attending to the encoder output.

        Args:
            tgt: ``(batch, tgt_len)`` token ids, shifted right (they start with ``<bos>``),
                or ``(batch, tgt_len, d_model)`` vectors for a stack without embedding.
            memory: ``(batch, src_len, d_model)`` encoder output (``None`` for decoder-only).
            src_mask: optional boolean memory mask, broadcastable to
                ``(batch, heads, tgt_len, src_len)``; usually the source padding mask.
            tgt_mask: optional boolean self-attention mask, broadcastable to
                ``(batch, heads, tgt_len, tgt_len)``; ``None`` means the causal mask
                ``causal_mask(tgt_len)``. A given mask is used as it is (usually causal and
                padding together).
            cache: for generation, a :class:`DecoderCache` from :meth:`new_cache`, updated
                in place: ``tgt`` holds only the tokens not yet given (the prompt at the
                first call, then the one new token of each step), at positions
                ``cache.length`` onwards; ``tgt_mask`` then covers
                ``(tgt_len, cache.length + tgt_len)`` and ``None`` is the causal mask.

        Returns:
            ``(batch, tgt_len, d_model)``: the given tokens' vectors.
        """
        past = 0
        if cache is not None:
            if not isinstance(cache, DecoderCache) or len(cache.self_attn) != len(self.layers):
                raise TypeError(f"cache must be this decoder's DecoderCache (from new_cache()), got "
                                f"{type(cache).__name__}")
            past = cache.length
        # 1) embed the target tokens and add their positions (after the cached ones)
        x = self.embed(tgt, past)  # (batch, tgt_len, d_model)
        held = past if cache is None else cache.self_attn[0].length  # keys a windowed cache still holds
        tgt_mask = self._self_mask(x.shape[1], tgt_mask, x.device, held)
        unmasked = tgt_mask is None  # one new token after a cache: no key to hide (see _self_mask)
        # 2) N decoder layers: masked self-attention, cross-attention, feed-forward
        for i, layer in enumerate(self.layers):
            if cache is None:
                x = layer(x, memory, src_mask, tgt_mask, causal=not unmasked)
            else:
                cross = None if cache.cross_attn is None else cache.cross_attn[i]
                x = layer(x, memory, src_mask, tgt_mask, self_cache=cache.self_attn[i], cross_cache=cross,
                          causal=not unmasked)
        # 3) the final LayerNorm of a pre-norm stack
        return x if self.norm is None else self.norm(x)

    def get_attention_maps(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Every layer's attention weights for ``tgt``, as :meth:`Encoder.get_attention_maps`.

        Returns ``{"self": (layers, batch, heads, tgt_len, tgt_len)}`` and, with
        cross-attention, ``"cross": (layers, batch, heads, tgt_len, src_len)``.
        """
        maps: dict[str, list[torch.Tensor]] = {"self": [], "cross": []}
        with evaluating(self):
            x = self.embed(tgt)  # (batch, tgt_len, d_model)
            tgt_mask = self._self_mask(x.shape[1], tgt_mask, x.device)
            for layer in self.layers:
                x = layer(x, memory, src_mask, tgt_mask, need_weights=True, causal=tgt_mask is not None)
                maps["self"].append(_take_weights(layer.self_attn))  # (batch, heads, tgt_len, tgt_len)
                if layer.cross_attn is not None:
                    maps["cross"].append(_take_weights(layer.cross_attn))  # (batch, heads, tgt_len, src_len)
        return {kind: torch.stack(weights) for kind, weights in maps.items() if weights}

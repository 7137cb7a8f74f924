"""The encoder-decoder Transformer of Vaswani et al. (2017): the two stacks and an output layer.

Read top to bottom:

* :class:`Generator`: the output layer, linear then log-softmax over the vocabulary
  (chapter 10).
* :func:`init_weights`: Xavier-uniform on every matrix, the initialisation every model
  of the library starts from (chapter 10 compares it with the authors' own), or GPT-2's
  normal draw with its scaled residual projections (chapter 16 trains with both).
* :class:`Transformer` (chapter 11): an :class:`~transformer_lib.stacks.Encoder`, a
  :class:`~transformer_lib.stacks.Decoder` and a :class:`Generator`, with weight tying,
  built from a :class:`~transformer_lib.config.TransformerConfig`.

Models return log-probabilities, never logits: ``Transformer(src, tgt)`` is
``log_softmax`` over the target vocabulary at every target position.
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks
from .config import TransformerConfig, check_architecture
from .layers import FeedForward
from .stacks import Decoder, DecoderCache, Encoder, evaluating
from .torch_attention import MultiHeadAttention


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
        self.proj = nn.Linear(d_model, vocab_size, bias=_checks.flag(bias, "bias"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(x), dim=-1)


#: the initialisations :func:`init_weights` draws
INIT_SCHEMES = ("xavier", "gpt2")
#: GPT-2's standard deviation for every matrix (``initializer_range`` in Hugging Face's GPT-2)
GPT2_STD = 0.02


def init_weights(model: nn.Module, scheme: str = "xavier") -> nn.Module:
    """Draw the weights of ``model`` afresh with the initialisation ``scheme``; returns ``model``.

    Args:
        model: any ``nn.Module`` (a model, a stack, a layer).
        scheme: ``"xavier"`` (the library's default) or ``"gpt2"``.

    ``"xavier"``: every parameter with two or more dimensions (embeddings, projections,
    feed-forward weights) is drawn from ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``,
    so a layer's output has about the variance of its input, as the Annotated Transformer and
    ``nn.Transformer`` do. Nothing else is touched: the linear maps' biases keep the draw
    PyTorch gave them, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, and the norms their ones and
    zeros.

    ``"gpt2"``: GPT-2's initialisation as Hugging Face's GPT-2 and nanoGPT draw it. Every
    parameter with two or more dimensions, the token and position embeddings included, from
    ``N(0, 0.02)`` (:data:`GPT2_STD`); the biases of the linear maps set to 0; and the
    residual projections, whose outputs are added to the residual stream (each attention's
    ``W_o`` and each feed-forward network's ``W_2``), from ``N(0, 0.02 / sqrt(N))`` with
    ``N`` their number: ``2 * num_layers`` in a decoder-only model, nanoGPT's
    ``0.02 / sqrt(2 * n_layer)``. The norms are not touched.

    The models call it (with ``"xavier"``) before tying weights, so a shared matrix is drawn
    once; called on a built model it draws a tied matrix once as well. Used in chapter 09's
    training runs; chapter 10 compares it with the initialisation of the authors' code;
    chapter 16 trains nanoGPT's model with both schemes.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    _checks.one_of(scheme, "scheme", INIT_SCHEMES)
    if scheme == "xavier":
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        return model
    # 1) every matrix from N(0, 0.02), every bias of a linear map 0
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, mean=0.0, std=GPT2_STD)
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    # 2) the residual projections again, scaled down by the square root of their number
    residual = [m.W_o.weight for m in model.modules() if isinstance(m, MultiHeadAttention)]
    residual += [m.W_2.weight for m in model.modules() if isinstance(m, FeedForward)]
    for w in residual:
        nn.init.normal_(w, mean=0.0, std=GPT2_STD / len(residual) ** 0.5)
    return model


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017).

    Args:
        config: a :class:`TransformerConfig` with ``architecture="encoder-decoder"``.

    Submodules: ``encoder`` (:class:`~transformer_lib.stacks.Encoder`), ``decoder``
    (:class:`~transformer_lib.stacks.Decoder`), ``generator`` (:class:`Generator`, ``None``
    when ``tgt_vocab_size`` is ``None``). With ``tie_output`` the generator's weight is the
    target embedding matrix; with ``share_embeddings`` the source embedding is that same
    matrix too (three uses, one tensor). Weights start as :func:`init_weights` draws them.

    Masks: ``src_mask=None`` lets every source position see every other (pass
    ``padding_mask(src, pad_id)`` for padded batches); ``tgt_mask=None`` means the causal
    mask, as in :class:`~transformer_lib.lm.DecoderOnlyModel`; a given mask is used as it is.

    Taught in chapter 11. ``to_torch(model)`` gives the ``nn.Transformer`` holding the two
    stacks (PyTorch's has no embeddings or generator: feed it ``model.encoder.embed(src)``
    and ``model.decoder.embed(tgt)``).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = check_architecture(config, "encoder-decoder", "Transformer")
        self.encoder = Encoder.from_config(config)
        self.decoder = Decoder.from_config(config)
        self.generator = None
        if config.tgt_vocab_size is not None:
            self.generator = Generator(config.d_model, config.tgt_vocab_size, config.generator_bias)
        init_weights(self)
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
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """Next-token log-probabilities ``(batch, tgt_len, tgt_vocab)`` for every target prefix.

        ``tgt`` is ``(batch, tgt_len)`` ids starting with ``<bos>``; position t predicts
        token t + 1; ``tgt_mask=None`` is the causal mask. Without a generator
        (``tgt_vocab_size=None``) it returns the decoder's vectors ``(batch, tgt_len, d_model)``.
        With a ``cache`` (from :meth:`new_cache`), ``tgt`` is only the tokens the cache has
        not seen, as in :meth:`Decoder.forward <transformer_lib.stacks.Decoder.forward>`;
        the decoding functions use it so that each step runs one token.
        """
        x = self.decoder(tgt, memory, src_mask, tgt_mask, cache)
        return x if self.generator is None else self.generator(x)

    def new_cache(self) -> DecoderCache:
        """An empty cache of the decoder's keys and values, for :meth:`decode` one token at a time."""
        return self.decoder.new_cache()

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
            tgt_mask: boolean, broadcastable to ``(batch, heads, tgt_len, tgt_len)``; ``None``
                means the causal mask. A padded batch passes causal and padding together
                (``Batch.tgt_mask``).
        """
        # 1) encode the source once
        memory = self.encode(src, src_mask)  # (batch, src_len, d_model)
        # 2) decode every target position in parallel (teacher forcing), then the generator
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def get_attention_maps(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Every attention's weights for one batch, from a forward pass made for it.

        The arguments are :meth:`forward`'s. Runs in evaluation mode without gradients
        and leaves the model in the mode it was in. Returns ``{"encoder": (layers, batch,
        heads, src_len, src_len), "decoder": (layers, batch, heads, tgt_len, tgt_len),
        "cross": (layers, batch, heads, tgt_len, src_len)}``: encoder self-attention,
        masked decoder self-attention and encoder-decoder attention. ``maps[kind][:, i]``
        is sequence ``i``'s grid for ``viz.plot_attention_grid``.
        """
        with evaluating(self):
            encoder_maps = self.encoder.get_attention_maps(src, src_mask)
            memory = self.encode(src, src_mask)  # (batch, src_len, d_model)
            decoder_maps = self.decoder.get_attention_maps(tgt, memory, src_mask, tgt_mask)
        return {"encoder": encoder_maps, "decoder": decoder_maps["self"], "cross": decoder_maps["cross"]}

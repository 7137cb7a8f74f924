"""The layers of the Transformer: feed-forward, Add & Norm, one encoder layer, one decoder layer.

Read top to bottom, each piece uses only what came before it:

* :class:`FeedForward`: ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``, applied to every
  position on its own (chapter 09); or, with ``kind="glu"``, the gated network of
  Llama, ``(act(x W_1) * x W_3) W_2`` (SwiGLU with ``activation="silu"``, chapter 19).
* :class:`RMSNorm`: layer normalisation without the mean and the bias (chapter 19).
* :class:`AddNorm`: the residual connection with layer normalisation. The paper's
  post-norm ``LayerNorm(x + Dropout(Sublayer(x)))`` by default; the pre-norm
  ``x + Dropout(Sublayer(LayerNorm(x)))`` with ``norm_first=True`` (chapter 09). Two
  switches take a part away for controlled experiments: ``residual=False`` (the sublayer's
  output replaces ``x`` instead of adding to it) and ``layer_norm=False`` (no normalisation);
  ``norm_type="rms"`` normalises with :class:`RMSNorm` instead of ``nn.LayerNorm``.
* :class:`EncoderLayer`: self-attention, then the feed-forward network, each wrapped in
  Add & Norm (chapter 09).
* :class:`DecoderLayer`: masked self-attention, encoder-decoder (cross) attention with
  queries from the decoder and keys and values from the encoder output ``memory``, then
  the feed-forward network (chapter 10). With ``cross_attention=False`` it is the block
  of a decoder-only model such as GPT-2 (chapter 14).

The layers pass two switches to their attentions (see
:class:`~transformer_lib.torch_attention.MultiHeadAttention`): ``attention_scale`` (divide
the scores by ``sqrt(d_k)``) to every attention, ``rotary`` (rotary position embeddings)
to the self-attention only; and ``residual`` and ``layer_norm`` to every Add & Norm. The
defaults are the paper's layer. The options of today's decoders (chapter 19) pass the same
way: ``num_kv_heads``, ``rotary_layout`` and ``rotary_base`` to the self-attention (and
``num_kv_heads`` to the cross-attention), ``bias`` to every projection, ``ffn_type`` to
the feed-forward network and ``norm_type`` to every Add & Norm.

Masks follow the attention core: boolean, ``True`` where attention is allowed,
broadcastable to ``(batch, heads, q_len, k_len)``. A decoder layer reads ``tgt_mask=None``
as the causal mask, as the decoder stack and the models do; ``causal=False`` asks it for no mask.

Attention weights: a layer's forward pass runs PyTorch's fused attention kernel and keeps
no weights, in training and evaluation alike. ``need_weights=True`` runs the explicit
matmul-softmax path instead (the same output) and leaves each attention's weights of this
call in its ``attention_weights``, ``(batch, heads, q_len, k_len)``; the stacks'
``get_attention_maps`` collects them layer by layer.

The layers convert to and from ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``) with :func:`transformer_lib.to_torch`
and :func:`transformer_lib.from_torch` (:mod:`transformer_lib.interop`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .config import ACTIVATIONS, FFN_TYPES, NORM_TYPES
from .torch_attention import KVCache, MultiHeadAttention, causal_mask

# The function behind each name of ``config.ACTIVATIONS``. "gelu" is the exact (erf) GELU of
# BERT and of ``F.gelu``; "gelu_tanh" is the tanh approximation that GPT-2 uses.
ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,  # x * sigmoid(x), the "Swish" of SwiGLU (Llama)
}


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation (Zhang and Sennrich, 2019): ``x / rms(x) * g``.

    LayerNorm subtracts the mean, divides by the standard deviation, multiplies by a
    gain and adds a bias. RMSNorm keeps only the rescaling: it divides by
    ``rms(x) = sqrt(mean(x**2) + eps)`` over the last dimension and multiplies by a
    learned gain ``weight`` (ones at first); no mean, no bias. Llama, Mistral and Gemma
    normalise this way. Equal to ``torch.nn.RMSNorm(d_model, eps=eps)`` with the same weight.

    Args:
        d_model: width of the vectors being normalised.
        eps: added to the mean square, so that a zero vector gives no division by zero.

    ``forward(x)`` maps ``(..., d_model)`` to the same shape. Taught in chapter 19.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.eps = _checks.positive_float(eps, "eps")
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.float_tensor(x, "x")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")
        # 1) the root mean square of each vector's features
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        # 2) rescale to unit rms, then by the learned gain
        return x * inverse_rms * self.weight

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


def make_norm(norm_type: str, d_model: int, eps: float) -> nn.Module:
    """An ``nn.LayerNorm`` (``norm_type="layer"``) or an :class:`RMSNorm` (``"rms"``) of width ``d_model``."""
    _checks.one_of(norm_type, "norm_type", NORM_TYPES)
    return nn.LayerNorm(d_model, eps=eps) if norm_type == "layer" else RMSNorm(d_model, eps=eps)


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``FFN(x) = act(x W_1 + b_1) W_2 + b_2``.

    The same two linear maps are applied to every position separately (like two
    convolutions with kernel size 1); the inner width ``d_ff`` is usually ``4 * d_model``.

    With ``kind="glu"`` it is a gated linear unit (Shazeer, 2020), as in Llama: a third
    matrix ``W_3`` makes a second, linear, projection that multiplies the activated one
    feature by feature, ``FFN(x) = (act(x W_1) * x W_3) W_2``. With ``activation="silu"``
    that is SwiGLU. ``W_1`` is Llama's ``gate_proj``, ``W_3`` its ``up_proj``, ``W_2`` its
    ``down_proj``; :func:`~transformer_lib.config.glu_hidden_size` gives Llama's ``d_ff``.

    Args:
        d_model: width of the input and output.
        d_ff: width of the hidden layer.
        dropout: dropout on the hidden activations during training.
        activation: ``"relu"`` (the paper), ``"gelu"`` (BERT), ``"gelu_tanh"`` (GPT-2) or
            ``"silu"`` (Llama's SwiGLU).
        kind: ``"mlp"`` (the paper's two matrices) or ``"glu"`` (gated, three).
        bias: whether the linear maps have biases (Llama's have none).

    ``forward(x)`` maps ``(batch, seq, d_model)`` to ``(batch, seq, d_model)``.
    Taught in chapter 09 (and chapter 19 for the gated kind).
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "relu", *, kind: str = "mlp",
        bias: bool = True,
    ):  # fmt: skip
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.d_ff = _checks.positive_int(d_ff, "d_ff")
        self.activation = _checks.one_of(activation, "activation", ACTIVATIONS)
        self.kind = _checks.one_of(kind, "kind", FFN_TYPES)
        bias = _checks.flag(bias, "bias")
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.W_3 = nn.Linear(d_model, d_ff, bias=bias) if kind == "glu" else None
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.hidden(x, "x", self.d_model)
        # 1) widen to d_ff and apply the non-linearity (gated: times a second, linear projection)
        hidden = ACTIVATION_FUNCTIONS[self.activation](self.W_1(x))  # (batch, seq, d_ff)
        if self.W_3 is not None:
            hidden = hidden * self.W_3(x)  # (batch, seq, d_ff)
        # 2) project back to d_model
        return self.W_2(self.dropout(hidden))  # (batch, seq, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}" + (", kind='glu'" if self.kind == "glu" else "")


class AddNorm(nn.Module):
    """Residual connection with layer normalisation around one sublayer ("Add & Norm").

    * post-norm (the paper, ``norm_first=False``): ``LayerNorm(x + Dropout(sublayer(x)))``;
    * pre-norm (``norm_first=True``): ``x + Dropout(sublayer(LayerNorm(x)))``. The residual
      path stays an identity from input to output, which makes deep stacks easier to
      train; a stack of pre-norm layers then needs one final LayerNorm.

    For ablations, either part can be taken away. Without the residual connection
    (``residual=False``) the sublayer's output replaces its input: ``LayerNorm(Dropout(
    sublayer(x)))`` in post-norm, ``Dropout(sublayer(LayerNorm(x)))`` in pre-norm, so the
    signal must pass through every sublayer. Without layer normalisation
    (``layer_norm=False``) ``norm`` is ``nn.Identity`` (no parameters): ``x +
    Dropout(sublayer(x))`` in both orders.

    Args:
        d_model: width of the vectors being normalised.
        dropout: dropout on the sublayer's output during training.
        norm_first: pre-norm instead of the paper's post-norm.
        layer_norm_eps: the ``eps`` of the LayerNorm (1e-5 as in PyTorch; BERT uses 1e-12).
        residual: add the sublayer's output to its input (the paper); ``False`` replaces it.
        layer_norm: normalise (the paper); ``False`` makes ``norm`` an ``nn.Identity``.
        norm_type: ``"layer"`` (``nn.LayerNorm``, the paper) or ``"rms"`` (:class:`RMSNorm`,
            with ``layer_norm_eps`` as its eps).

    ``forward(x, sublayer)`` takes ``x`` ``(batch, seq, d_model)`` and a callable
    ``sublayer`` mapping ``(batch, seq, d_model)`` to the same shape. Taught in chapter 09.
    """

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        *,
        residual: bool = True,
        layer_norm: bool = True,
        norm_type: str = "layer",
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.norm_first = _checks.flag(norm_first, "norm_first")
        self.residual = _checks.flag(residual, "residual")
        eps = _checks.positive_float(layer_norm_eps, "layer_norm_eps")
        _checks.one_of(norm_type, "norm_type", NORM_TYPES)
        keep = _checks.flag(layer_norm, "layer_norm")
        self.norm = make_norm(norm_type, d_model, eps) if keep else nn.Identity()
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    @property
    def layer_norm(self) -> bool:
        """Whether ``norm`` normalises (``False``: it is ``nn.Identity``)."""
        return not isinstance(self.norm, nn.Identity)

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if not callable(sublayer):
            raise TypeError(
                "sublayer must be a callable mapping (batch, seq, d_model) to the same shape "
                f"(e.g. a module or a lambda), got {type(sublayer).__name__}"
            )
        if self.norm_first:
            out = self.dropout(sublayer(self.norm(x)))
            return x + out if self.residual else out
        out = self.dropout(sublayer(x))
        return self.norm(x + out if self.residual else out)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}" + ("" if self.residual else ", residual=False")


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then the feed-forward network, each with Add & Norm.

    Args:
        d_model: width of the token vectors.
        num_heads: attention heads; must divide ``d_model``.
        d_ff: width of the feed-forward hidden layer.
        dropout: dropout on attention weights, feed-forward activations and sublayer outputs.
        norm_first: pre-norm instead of the paper's post-norm.
        activation: ``"relu"``, ``"gelu"`` or ``"gelu_tanh"``.
        layer_norm_eps: the LayerNorms' ``eps``.
        attention_scale, rotary: passed to the self-attention
            (:class:`~transformer_lib.torch_attention.MultiHeadAttention`).
        residual, layer_norm: passed to both :class:`AddNorm` s.
        num_kv_heads, rotary_layout, rotary_base, bias: passed to the self-attention
            (``bias`` to the feed-forward network too).
        ffn_type: the feed-forward network's ``kind``, ``"mlp"`` or ``"glu"``.
        norm_type: the Add & Norms' ``"layer"`` or ``"rms"``.

    Submodules: ``self_attn`` (:class:`MultiHeadAttention`), ``feed_forward``
    (:class:`FeedForward`), ``add_norm1`` and ``add_norm2`` (:class:`AddNorm`).
    Taught in chapter 09; equal to ``nn.TransformerEncoderLayer(batch_first=True)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        *,
        attention_scale: bool = True,
        rotary: bool = False,
        residual: bool = True,
        layer_norm: bool = True,
        num_kv_heads: int | None = None,
        rotary_layout: str = "interleaved",
        rotary_base: float = 10000.0,
        bias: bool = True,
        ffn_type: str = "mlp",
        norm_type: str = "layer",
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, bias, attention_scale=attention_scale,
                                            rotary=rotary, num_kv_heads=num_kv_heads, rotary_layout=rotary_layout,
                                            rotary_base=rotary_base)  # fmt: skip
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, kind=ffn_type, bias=bias)
        sublayer = dict(residual=residual, layer_norm=layer_norm, norm_type=norm_type)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first, layer_norm_eps, **sublayer)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first, layer_norm_eps, **sublayer)

    @property
    def norm_first(self) -> bool:
        return self.add_norm1.norm_first

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> torch.Tensor:
        """Encode ``x``.

        Args:
            x: ``(batch, src_len, d_model)``.
            src_mask: optional boolean mask, ``True`` where attention is allowed,
                broadcastable to ``(batch, heads, src_len, src_len)``; usually
                ``padding_mask(src, pad_id)`` of shape ``(batch, 1, 1, src_len)``.
                ``None`` means no mask.
            need_weights: run the explicit attention path and leave this call's weights
                in ``self_attn.attention_weights``; by default the fused kernel, no weights.

        Returns:
            ``(batch, src_len, d_model)``.
        """
        _checks.hidden(x, "x", self.d_model, "(batch, src_len, d_model={})")
        b, n, _ = x.shape
        h = self.self_attn.num_heads
        if src_mask is not None:
            layout = "(batch, heads, src_len, src_len)"
            _checks.bool_mask(src_mask, "src_mask", (b, h, n, n), layout, tensor=True)
        need_weights = _checks.flag(need_weights, "need_weights")
        # 1) self-attention: every position attends to every (unmasked) position
        x = self.add_norm1(x, lambda y: self.self_attn(y, y, y, src_mask, need_weights=need_weights))
        # 2) position-wise feed-forward network
        return self.add_norm2(x, self.feed_forward)


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention, feed-forward, each with Add & Norm.

    Args:
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps: as in
            :class:`EncoderLayer`.
        cross_attention: ``False`` drops the encoder-decoder attention, giving the block
            of a decoder-only model (GPT-2, chapter 14).
        attention_scale: passed to both attentions.
        rotary: passed to the self-attention only (cross-attention compares target and
            source positions, which rotary embeddings do not relate).
        residual, layer_norm: passed to every :class:`AddNorm`.
        num_kv_heads, rotary_layout, rotary_base, bias, ffn_type, norm_type: as in
            :class:`EncoderLayer` (``num_kv_heads`` and ``bias`` to the cross-attention too).

    Submodules: ``self_attn``, ``cross_attn`` (``None`` without cross-attention),
    ``feed_forward``, ``add_norm1`` (self-attention), ``add_norm2`` (cross-attention,
    ``None`` without it) and ``add_norm3`` (feed-forward).
    Taught in chapter 10; equal to ``nn.TransformerDecoderLayer(batch_first=True)`` given the
    same masks (PyTorch's layer reads a missing ``tgt_mask`` as no mask, ours as the causal one).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        cross_attention: bool = True,
        *,
        attention_scale: bool = True,
        rotary: bool = False,
        residual: bool = True,
        layer_norm: bool = True,
        num_kv_heads: int | None = None,
        rotary_layout: str = "interleaved",
        rotary_base: float = 10000.0,
        bias: bool = True,
        ffn_type: str = "mlp",
        norm_type: str = "layer",
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, bias, attention_scale=attention_scale,
                                            rotary=rotary, num_kv_heads=num_kv_heads, rotary_layout=rotary_layout,
                                            rotary_base=rotary_base)  # fmt: skip
        sublayer = dict(residual=residual, layer_norm=layer_norm, norm_type=norm_type)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first, layer_norm_eps, **sublayer)
        if _checks.flag(cross_attention, "cross_attention"):
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout, bias, attention_scale=attention_scale,
                                                 num_kv_heads=num_kv_heads)  # fmt: skip
            self.add_norm2 = AddNorm(d_model, dropout, norm_first, layer_norm_eps, **sublayer)
        else:
            self.cross_attn = None
            self.add_norm2 = None
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, kind=ffn_type, bias=bias)
        self.add_norm3 = AddNorm(d_model, dropout, norm_first, layer_norm_eps, **sublayer)

    @property
    def norm_first(self) -> bool:
        return self.add_norm1.norm_first

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        *,
        causal: bool = True,
    ) -> torch.Tensor:
        """Decode ``x`` (the target so far) while attending to the encoder output ``memory``.

        Args:
            x: ``(batch, tgt_len, d_model)``.
            memory: ``(batch, src_len, d_model)``, the encoder's output (``None`` without
                cross-attention).
            src_mask: optional boolean memory mask for cross-attention, broadcastable to
                ``(batch, heads, tgt_len, src_len)``; usually the source padding mask
                ``(batch, 1, 1, src_len)``.
            tgt_mask: optional boolean mask for self-attention, broadcastable to
                ``(batch, heads, tgt_len, tgt_len)`` and used as it is; usually causal and
                padding together. ``None`` is the causal mask ``causal_mask(tgt_len)``, as in
                the stacks and models (PyTorch's layer reads ``None`` as no mask).
            need_weights: run the explicit attention path and leave this call's weights in
                ``self_attn.attention_weights`` and ``cross_attn.attention_weights``.
            self_cache, cross_cache: for generation, the
                :class:`~transformer_lib.torch_attention.KVCache` s of the self-attention
                (growing: ``x`` holds only the new tokens, which attend to the cached ones;
                ``tgt_mask`` then covers ``(tgt_len, cached + tgt_len)``) and of the
                cross-attention (fixed: the memory's keys and values, computed once).
                With a growing cache, ``tgt_mask=None`` is
                ``causal_mask(tgt_len, past=cached, window=self_cache.window)``.
            causal: ``False`` asks for no self-attention mask at all, every position seeing
                every other, in place of the causal mask that ``tgt_mask=None`` means; it
                cannot go with a ``tgt_mask``.

        Returns:
            ``(batch, tgt_len, d_model)``.
        """
        _checks.hidden(x, "x", self.d_model, "(batch, tgt_len, d_model={})")
        causal = _checks.flag(causal, "causal")
        if self.cross_attn is None:
            if memory is not None or src_mask is not None or cross_cache is not None:
                raise ValueError(
                    "this DecoderLayer has no cross-attention (cross_attention=False), "
                    "so memory, src_mask and cross_cache must be None"
                )
        else:
            if memory is None:
                raise ValueError("memory (the encoder output, (batch, src_len, d_model)) is required, "
                                 "got None")
            _checks.hidden(memory, "memory", self.d_model, "(batch, src_len, d_model={})")
            _checks.same_size(x.shape[0], memory.shape[0], "the batch sizes of x and memory")
        b, t, _ = x.shape
        h = self.self_attn.num_heads
        past = 0 if self_cache is None else self_cache.length  # the keys of earlier steps
        if tgt_mask is not None:
            layout = "(batch, heads, tgt_len, tgt_len)" if not past else "(batch, heads, tgt_len, cached + tgt_len)"
            _checks.bool_mask(tgt_mask, "tgt_mask", (b, h, t, past + t), layout, tensor=True)
            if not causal:
                raise ValueError("causal=False asks for no self-attention mask, but a tgt_mask of shape "
                                 f"{tuple(tgt_mask.shape)} came too: pass one or the other")
        elif causal and t:  # None: the causal mask, over the cached keys too
            window = None if self_cache is None else self_cache.window
            tgt_mask = causal_mask(t, device=x.device, past=past, window=window)  # (tgt_len, past + tgt_len)
        if src_mask is not None:
            layout = "(batch, heads, tgt_len, src_len)"
            _checks.bool_mask(src_mask, "src_mask", (b, h, t, memory.shape[1]), layout, tensor=True)
        need_weights = _checks.flag(need_weights, "need_weights")
        # 1) masked self-attention over the target so far
        x = self.add_norm1(x, lambda y: self.self_attn(y, y, y, tgt_mask, need_weights, self_cache))
        # 2) encoder-decoder attention: queries from the decoder, keys and values from memory
        if self.cross_attn is not None:
            x = self.add_norm2(x, lambda y: self.cross_attn(y, memory, memory, src_mask, need_weights, cross_cache))
        # 3) position-wise feed-forward network
        return self.add_norm3(x, self.feed_forward)

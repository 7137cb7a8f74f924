"""The layers of the Transformer: feed-forward, Add & Norm, one encoder layer, one decoder layer.

Read top to bottom, each piece uses only what came before it:

* :class:`FeedForward`: ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``, applied to every
  position on its own (chapter 09).
* :class:`AddNorm`: the residual connection with layer normalisation. The paper's
  post-norm ``LayerNorm(x + Dropout(Sublayer(x)))`` by default; the pre-norm
  ``x + Dropout(Sublayer(LayerNorm(x)))`` with ``norm_first=True`` (chapter 09).
* :class:`EncoderLayer`: self-attention, then the feed-forward network, each wrapped in
  Add & Norm (chapter 09).
* :class:`DecoderLayer`: masked self-attention, encoder-decoder (cross) attention with
  queries from the decoder and keys and values from the encoder output ``memory``, then
  the feed-forward network (chapter 10). With ``cross_attention=False`` it is the block
  of a decoder-only model such as GPT-2 (chapter 13).

Masks follow the attention core: boolean, ``True`` where attention is allowed,
broadcastable to ``(batch, heads, q_len, k_len)``.

Attention weights: in evaluation mode (``model.eval()``) every attention keeps its last
weights in ``attention_weights`` ``(batch, heads, q_len, k_len)`` so chapters can draw
them; in training mode the layers use PyTorch's fused attention kernel (the same output,
faster, no weights). Set a layer's ``need_weights`` to ``True`` or ``False`` to override.

The layers convert to and from ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``) with :func:`transformer_lib.to_torch`
and :func:`transformer_lib.from_torch`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, interop
from .torch_attention import MultiHeadAttention

# The activations the feed-forward network offers. "gelu" is the exact (erf) GELU of BERT
# and of ``F.gelu``; "gelu_tanh" is the tanh approximation that GPT-2 uses.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
}


def _activation_name(activation: object) -> str:
    if not isinstance(activation, str):
        raise TypeError(
            f"activation must be one of {sorted(ACTIVATIONS)}, got {type(activation).__name__} {activation!r}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    return activation


def _layer_norm_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"layer_norm_eps must be a positive float, got {type(eps).__name__} {eps!r}")
    if not eps > 0:
        raise ValueError(f"layer_norm_eps must be a positive float, got {eps}")
    return float(eps)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_hidden(x: object, name: str, d_model: int, layout: str = "(batch, seq, d_model={})") -> None:
    layout = layout.format(d_model)
    _checks.float_tensor(x, name)
    _checks.ndim_exactly(x, 3, name, layout)
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape {layout}, got shape {tuple(x.shape)}")


def _check_mask(mask: object, name: str, target: tuple[int, ...], layout: str) -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a boolean torch.Tensor (True where attention is allowed), "
            f"got {type(mask).__name__}"
        )
    _checks.bool_mask(mask, name, target, layout)


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``FFN(x) = act(x W_1 + b_1) W_2 + b_2``.

    The same two linear maps are applied to every position separately (like two
    convolutions with kernel size 1); the inner width ``d_ff`` is usually ``4 * d_model``.

    Args:
        d_model: width of the input and output.
        d_ff: width of the hidden layer.
        dropout: dropout on the hidden activations during training.
        activation: ``"relu"`` (the paper), ``"gelu"`` (BERT) or ``"gelu_tanh"`` (GPT-2).

    ``forward(x)`` maps ``(batch, seq, d_model)`` to ``(batch, seq, d_model)``.
    Taught in chapter 09.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.d_ff = _checks.positive_int(d_ff, "d_ff")
        self.activation = _activation_name(activation)
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_hidden(x, "x", self.d_model)
        # 1) widen to d_ff and apply the non-linearity
        hidden = ACTIVATIONS[self.activation](self.W_1(x))  # (batch, seq, d_ff)
        # 2) project back to d_model
        return self.W_2(self.dropout(hidden))  # (batch, seq, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


class AddNorm(nn.Module):
    """Residual connection with layer normalisation around one sublayer ("Add & Norm").

    * post-norm (the paper, ``norm_first=False``): ``LayerNorm(x + Dropout(sublayer(x)))``;
    * pre-norm (``norm_first=True``): ``x + Dropout(sublayer(LayerNorm(x)))``. The residual
      path stays an identity from input to output, which makes deep stacks easier to
      train; a stack of pre-norm layers then needs one final LayerNorm.

    Args:
        d_model: width of the vectors being normalised.
        dropout: dropout on the sublayer's output during training.
        norm_first: pre-norm instead of the paper's post-norm.
        layer_norm_eps: the ``eps`` of the LayerNorm (1e-5 as in PyTorch; BERT uses 1e-12).

    ``forward(x, sublayer)`` takes ``x`` ``(batch, seq, d_model)`` and a callable
    ``sublayer`` mapping ``(batch, seq, d_model)`` to the same shape. Taught in chapter 09.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.1, norm_first: bool = False, layer_norm_eps: float = 1e-5
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.norm_first = _flag(norm_first, "norm_first")
        self.norm = nn.LayerNorm(d_model, eps=_layer_norm_eps(layer_norm_eps))
        self.dropout = nn.Dropout(_checks.probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if not callable(sublayer):
            raise TypeError(
                "sublayer must be a callable mapping (batch, seq, d_model) to the same shape "
                f"(e.g. a module or a lambda), got {type(sublayer).__name__}"
            )
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


class _AttentionLayer(nn.Module):
    """What the encoder and decoder layers share: the choice of attention path."""

    need_weights: bool | None = None  # None: keep weights in eval mode, fused kernel in training

    def _keep_weights(self) -> bool:
        return (not self.training) if self.need_weights is None else bool(self.need_weights)


class EncoderLayer(_AttentionLayer):
    """One encoder layer: self-attention, then the feed-forward network, each with Add & Norm.

    Args:
        d_model: width of the token vectors.
        num_heads: attention heads; must divide ``d_model``.
        d_ff: width of the feed-forward hidden layer.
        dropout: dropout on attention weights, feed-forward activations and sublayer outputs.
        norm_first: pre-norm instead of the paper's post-norm.
        activation: ``"relu"``, ``"gelu"`` or ``"gelu_tanh"``.
        layer_norm_eps: the LayerNorms' ``eps``.

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
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first, layer_norm_eps)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first, layer_norm_eps)

    @property
    def norm_first(self) -> bool:
        return self.add_norm1.norm_first

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Encode ``x``.

        Args:
            x: ``(batch, src_len, d_model)``.
            src_mask: optional boolean mask, ``True`` where attention is allowed,
                broadcastable to ``(batch, heads, src_len, src_len)``; usually
                ``padding_mask(src, pad_id)`` of shape ``(batch, 1, 1, src_len)``.

        Returns:
            ``(batch, src_len, d_model)``.
        """
        _check_hidden(x, "x", self.d_model, "(batch, src_len, d_model={})")
        b, n, _ = x.shape
        h = self.self_attn.num_heads
        _check_mask(src_mask, "src_mask", (b, h, n, n), "(batch, heads, src_len, src_len)")
        need_weights = self._keep_weights()
        # 1) self-attention: every position attends to every (unmasked) position
        x = self.add_norm1(x, lambda y: self.self_attn(y, y, y, src_mask, need_weights=need_weights))
        # 2) position-wise feed-forward network
        return self.add_norm2(x, self.feed_forward)


class DecoderLayer(_AttentionLayer):
    """One decoder layer: masked self-attention, cross-attention, feed-forward, each with Add & Norm.

    Args:
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps: as in
            :class:`EncoderLayer`.
        cross_attention: ``False`` drops the encoder-decoder attention, giving the block
            of a decoder-only model (GPT-2, chapter 13).

    Submodules: ``self_attn``, ``cross_attn`` (``None`` without cross-attention),
    ``feed_forward``, ``add_norm1`` (self-attention), ``add_norm2`` (cross-attention,
    ``None`` without it) and ``add_norm3`` (feed-forward).
    Taught in chapter 10; equal to ``nn.TransformerDecoderLayer(batch_first=True)``.
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
    ):
        super().__init__()
        self.d_model = _checks.positive_int(d_model, "d_model")
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first, layer_norm_eps)
        if _flag(cross_attention, "cross_attention"):
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
            self.add_norm2 = AddNorm(d_model, dropout, norm_first, layer_norm_eps)
        else:
            self.cross_attn = None
            self.add_norm2 = None
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.add_norm3 = AddNorm(d_model, dropout, norm_first, layer_norm_eps)

    @property
    def norm_first(self) -> bool:
        return self.add_norm1.norm_first

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
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
                ``(batch, heads, tgt_len, tgt_len)``; usually causal and padding together.
                ``None`` means no mask at all (as in PyTorch): pass the causal mask.

        Returns:
            ``(batch, tgt_len, d_model)``.
        """
        _check_hidden(x, "x", self.d_model, "(batch, tgt_len, d_model={})")
        if self.cross_attn is None:
            if memory is not None or src_mask is not None:
                raise ValueError(
                    "this DecoderLayer has no cross-attention (cross_attention=False), "
                    "so memory and src_mask must be None"
                )
        else:
            if memory is None:
                raise ValueError("memory (the encoder output, (batch, src_len, d_model)) is required, "
                                 "got None")
            _check_hidden(memory, "memory", self.d_model, "(batch, src_len, d_model={})")
            _checks.same_size(x.shape[0], memory.shape[0], "the batch sizes of x and memory")
        b, t, _ = x.shape
        h = self.self_attn.num_heads
        _check_mask(tgt_mask, "tgt_mask", (b, h, t, t), "(batch, heads, tgt_len, tgt_len)")
        if memory is not None:
            s = memory.shape[1]
            _check_mask(src_mask, "src_mask", (b, h, t, s), "(batch, heads, tgt_len, src_len)")
        need_weights = self._keep_weights()
        # 1) masked self-attention over the target so far
        x = self.add_norm1(x, lambda y: self.self_attn(y, y, y, tgt_mask, need_weights=need_weights))
        # 2) encoder-decoder attention: queries from the decoder, keys and values from memory
        if self.cross_attn is not None:
            x = self.add_norm2(
                x, lambda y: self.cross_attn(y, memory, memory, src_mask, need_weights=need_weights)
            )
        # 3) position-wise feed-forward network
        return self.add_norm3(x, self.feed_forward)


# ---------------------------------------------------------------------------------------
# Conversions to and from PyTorch's layers (registered with transformer_lib.interop)
# ---------------------------------------------------------------------------------------


def _torch_activation(name: str):
    return {"relu": F.relu, "gelu": F.gelu}.get(name, ACTIVATIONS[name])


def _activation_from_torch(t: nn.Module) -> str:
    act = t.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    if isinstance(act, functools.partial) and act.func is F.gelu and act.keywords == {"approximate": "tanh"}:
        return "gelu_tanh"
    raise ValueError(f"module's activation must be ReLU or GELU, got {act!r}")


def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def _layer_options_from_torch(t: nn.Module) -> dict:
    if not t.self_attn.batch_first:
        raise ValueError("module must be built with batch_first=True, as our layers are")
    if t.linear1.bias is None or t.norm1.bias is None:
        raise ValueError("module must use biases (bias=True), as our layers do")
    return dict(
        d_model=t.self_attn.embed_dim,
        num_heads=t.self_attn.num_heads,
        d_ff=t.linear1.out_features,
        dropout=t.dropout.p,
        norm_first=t.norm_first,
        activation=_activation_from_torch(t),
        layer_norm_eps=t.norm1.eps,
    )


def _encoder_layer_to_torch(m: EncoderLayer | DecoderLayer) -> nn.TransformerEncoderLayer:
    # also serves a DecoderLayer without cross-attention (GPT-2's block), given a causal mask
    t = nn.TransformerEncoderLayer(
        m.d_model,
        m.self_attn.num_heads,
        m.feed_forward.d_ff,
        dropout=m.self_attn.dropout,
        activation=_torch_activation(m.feed_forward.activation),
        layer_norm_eps=m.add_norm1.norm.eps,
        batch_first=True,
        norm_first=m.norm_first,
    )
    t.self_attn = interop.to_torch(m.self_attn)
    interop.copy_linear(t.linear1, m.feed_forward.W_1.weight, m.feed_forward.W_1.bias)
    interop.copy_linear(t.linear2, m.feed_forward.W_2.weight, m.feed_forward.W_2.bias)
    _copy_norm(t.norm1, m.add_norm1.norm)
    _copy_norm(t.norm2, m.add_norm3.norm if isinstance(m, DecoderLayer) else m.add_norm2.norm)
    return t


def _encoder_layer_from_torch(t: nn.TransformerEncoderLayer) -> EncoderLayer:
    m = EncoderLayer(**_layer_options_from_torch(t))
    m.self_attn = interop.from_torch(t.self_attn)
    interop.copy_linear(m.feed_forward.W_1, t.linear1.weight, t.linear1.bias)
    interop.copy_linear(m.feed_forward.W_2, t.linear2.weight, t.linear2.bias)
    _copy_norm(m.add_norm1.norm, t.norm1)
    _copy_norm(m.add_norm2.norm, t.norm2)
    return m


def _decoder_layer_to_torch(m: DecoderLayer) -> nn.Module:
    if m.cross_attn is None:
        return _encoder_layer_to_torch(m)
    t = nn.TransformerDecoderLayer(
        m.d_model,
        m.self_attn.num_heads,
        m.feed_forward.d_ff,
        dropout=m.self_attn.dropout,
        activation=_torch_activation(m.feed_forward.activation),
        layer_norm_eps=m.add_norm1.norm.eps,
        batch_first=True,
        norm_first=m.norm_first,
    )
    t.self_attn = interop.to_torch(m.self_attn)
    t.multihead_attn = interop.to_torch(m.cross_attn)
    interop.copy_linear(t.linear1, m.feed_forward.W_1.weight, m.feed_forward.W_1.bias)
    interop.copy_linear(t.linear2, m.feed_forward.W_2.weight, m.feed_forward.W_2.bias)
    _copy_norm(t.norm1, m.add_norm1.norm)
    _copy_norm(t.norm2, m.add_norm2.norm)
    _copy_norm(t.norm3, m.add_norm3.norm)
    return t


def _decoder_layer_from_torch(t: nn.TransformerDecoderLayer) -> DecoderLayer:
    m = DecoderLayer(**_layer_options_from_torch(t))
    m.self_attn = interop.from_torch(t.self_attn)
    m.cross_attn = interop.from_torch(t.multihead_attn)
    interop.copy_linear(m.feed_forward.W_1, t.linear1.weight, t.linear1.bias)
    interop.copy_linear(m.feed_forward.W_2, t.linear2.weight, t.linear2.bias)
    _copy_norm(m.add_norm1.norm, t.norm1)
    _copy_norm(m.add_norm2.norm, t.norm2)
    _copy_norm(m.add_norm3.norm, t.norm3)
    return m


interop.register(EncoderLayer, nn.TransformerEncoderLayer, _encoder_layer_to_torch, _encoder_layer_from_torch)
interop.register(DecoderLayer, nn.TransformerDecoderLayer, _decoder_layer_to_torch, _decoder_layer_from_torch)

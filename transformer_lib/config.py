"""The configuration of a model: one typed dataclass and its named presets.

:class:`TransformerConfig` holds everything that defines a model, in the paper's names;
:func:`transformer_lib.build_model` builds the model it describes. The presets range from
the paper's base and big models to BERT, GPT-2 and all-MiniLM-L6-v2, and tiny ones for
the toy tasks; each preset's comment gives its parameter count (a test checks every one
against ``count_parameters(build_model(preset))``).

Vocabularies. An encoder-decoder model has two, ``src_vocab_size`` and ``tgt_vocab_size``
(``share_embeddings`` makes them one matrix, so they must be equal). An encoder-only model
(BERT) has one, ``src_vocab_size``; a decoder-only model (GPT-2) has one, ``tgt_vocab_size``.
For those the other size is ignored: it must be ``None`` or equal, and ``share_embeddings``
must stay ``False`` (``tie_output`` ties their one embedding to the output layer).

Switches for controlled experiments (ablations). Each takes one idea of the paper away,
and its default is the paper's model, so a config that does not mention them builds
exactly what it did before: ``attention_scale`` (the ``1 / sqrt(d_k)`` of the scores),
``positional="rotary"`` (rotary embeddings in every self-attention instead of positions
added to the embeddings), ``residual`` (the residual connections) and ``layer_norm`` (every
LayerNorm of the layers and the final one; BERT's ``embedding_norm`` is its own switch).
PyTorch's modules and GPT-2 express only the defaults, so :func:`transformer_lib.to_torch`
refuses a model built without them, naming the field.

The parts of today's decoders (Llama, Mistral), each an option with the paper's part as its
default: ``norm_type`` (``"rms"``: RMSNorm), ``ffn_type`` (``"glu"``: the gated
feed-forward network, SwiGLU with ``activation="silu"``; ``d_ff=None`` then takes Llama's
width, :func:`glu_hidden_size`), ``num_kv_heads`` (grouped-query
or multi-query attention), ``rotary_layout`` and ``rotary_base`` (which features rotary
positions pair, and their frequency base), ``window`` (sliding-window self-attention in a
decoder-only model) and ``bias`` (biases in the attention and feed-forward projections; Llama has
none). The ``"llama-tiny"`` preset puts them together.

The options. Each field that names a choice has its tuple of names here, defined once:
the modules that build the parts (:mod:`~transformer_lib.positional`,
:mod:`~transformer_lib.embeddings`, :mod:`~transformer_lib.layers`,
:mod:`~transformer_lib.torch_attention`) import them from this module, which imports no
module of ``nn.Module`` s: only the input checks and the standard library.
Taught in chapter 11 (and 14 for the BERT and GPT-2 presets, 19 for the modern options).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from . import _checks

ARCHITECTURES = ("encoder-decoder", "encoder-only", "decoder-only")
ADDED_POSITIONS = ("sinusoidal", "learned", "none")  # the positions Embeddings adds to the token vectors
POSITIONAL = (*ADDED_POSITIONS, "rotary")  # "rotary": nothing added, the self-attentions rotate q and k
ROTARY_LAYOUTS = ("interleaved", "half")  # rotary pairs (2k, 2k+1), or (k, k + d/2) as Llama's checkpoints
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")  # the feed-forward network's; layers.ACTIVATION_FUNCTIONS
FFN_TYPES = ("mlp", "glu")  # the paper's two-layer network, or the gated one of GLU variants
NORM_TYPES = ("layer", "rms")  # nn.LayerNorm, or RMSNorm


def glu_hidden_size(d_model: int, multiple_of: int = 256, multiplier: float | None = None) -> int:
    """Llama's hidden width for a gated feed-forward network: ``2/3 * 4 d``, rounded up to ``multiple_of``.

    A gated network has three matrices where the paper's has two; a hidden width of
    ``2/3`` of ``4 * d_model`` keeps its parameter count that of the paper's network with
    ``d_ff = 4 * d_model`` (Shazeer, 2020). Llama then multiplies by ``multiplier``
    (its ``ffn_dim_multiplier``, ``None``: 1) and rounds up to a multiple of
    ``multiple_of`` (256 in Llama), as Meta's code does. Llama 2 7B: ``d_model=4096`` gives
    11008. The width a config with ``ffn_type="glu"`` and ``d_ff=None`` takes. Taught in chapter 19.
    """
    d_model = _checks.positive_int(d_model, "d_model")
    multiple_of = _checks.positive_int(multiple_of, "multiple_of")
    hidden = int(2 * 4 * d_model / 3)
    if multiplier is not None:
        hidden = int(_checks.positive_float(multiplier, "multiplier") * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass
class TransformerConfig:
    """Everything that defines a model, with named presets (``TransformerConfig.preset(name)``)."""

    src_vocab_size: int | None = None  # source tokens (encoder); None: the encoder takes vectors
    tgt_vocab_size: int | None = None  # target tokens (decoder); None: vectors in, no generator
    d_model: int = 512  # width of every token vector
    num_heads: int = 8  # h, the heads of each attention; must divide d_model
    num_layers: int = 6  # N, layers in the encoder and in the decoder
    d_ff: int | None = 2048  # feed-forward hidden width; None: 4 * d_model, or glu_hidden_size for "glu"
    dropout: float = 0.1  # P_drop, on embeddings, attention weights and every sublayer
    share_embeddings: bool = False  # one matrix for source and target embeddings (encoder-decoder)
    tie_output: bool = True  # the generator reuses the (target) embedding matrix
    norm_first: bool = False  # pre-norm layers instead of the paper's post-norm
    final_norm: bool | None = None  # a LayerNorm after each stack; None: exactly when norm_first
    activation: str = "relu"  # of the feed-forward network: "relu", "gelu" or "gelu_tanh"
    layer_norm_eps: float = 1e-5  # every LayerNorm's eps (BERT: 1e-12)
    positional: str = "sinusoidal"  # "sinusoidal", "learned", "rotary" (RoPE on q and k) or "none"
    max_len: int = 5000  # the longest sequence the positions cover
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(d_model), as the paper
    num_token_types: int = 0  # BERT's segment embeddings (sentence A / B); 0: none
    embedding_norm: bool = False  # a LayerNorm on the embeddings (BERT)
    generator_bias: bool = True  # the output layer has a bias (GPT-2's has none)
    pooler: bool = False  # BERT's pooler, tanh(W h_0 + b) (encoder-only)
    lm_head: bool = True  # the masked-LM output layer; False: a bare encoder (encoder-only)
    architecture: str = "encoder-decoder"  # or "encoder-only" (BERT), "decoder-only" (GPT-2)
    # switches for ablations; the defaults are the paper's model
    attention_scale: bool = True  # divide q.k by sqrt(d_k); False: raw dot products
    residual: bool = True  # x + Sublayer(x); False: the sublayer's output replaces x
    layer_norm: bool = True  # the layers' LayerNorms and the final one; False: nn.Identity
    # the parts of today's decoders (chapter 19); the defaults are the paper's
    norm_type: str = "layer"  # "layer" (LayerNorm) or "rms" (RMSNorm), every norm of the stacks
    ffn_type: str = "mlp"  # "mlp" (two matrices) or "glu" (gated, three: SwiGLU with activation="silu")
    num_kv_heads: int | None = None  # key-value heads; None: num_heads; fewer: grouped-query; 1: multi-query
    rotary_layout: str = "interleaved"  # rotary pairs (2k, 2k+1), or "half": (k, k + d_k/2) as Llama
    rotary_base: float = 10000.0  # rotary positions' frequency base (Llama's rope_theta)
    window: int | None = None  # sliding-window self-attention (decoder-only): the keys each query sees
    bias: bool = True  # biases in the attention and feed-forward projections (Llama: none)

    def __post_init__(self) -> None:
        _checks.one_of(self.ffn_type, "ffn_type", FFN_TYPES)
        if self.d_ff is None:  # the width that keeps the paper's parameter count (d_model is checked below)
            d_model = _checks.positive_int(self.d_model, "d_model")
            self.d_ff = glu_hidden_size(d_model) if self.ffn_type == "glu" else 4 * d_model
        for name in ("src_vocab_size", "tgt_vocab_size"):
            if getattr(self, name) is not None:
                _checks.positive_int(getattr(self, name), name)
        for name in ("d_model", "num_heads", "num_layers", "d_ff", "max_len"):
            _checks.positive_int(getattr(self, name), name)
        if self.d_model % self.num_heads:
            raise ValueError(
                "d_model must be divisible by num_heads, "
                f"got d_model={self.d_model} and num_heads={self.num_heads}"
            )
        _checks.probability(self.dropout, "dropout")
        for name in ("share_embeddings", "tie_output", "norm_first", "scale_embeddings", "embedding_norm",
                     "generator_bias", "pooler", "lm_head", "attention_scale", "residual",
                     "layer_norm"):  # fmt: skip
            _checks.flag(getattr(self, name), name)
        if self.final_norm is not None:
            _checks.flag(self.final_norm, "final_norm")
        _checks.one_of(self.activation, "activation", ACTIVATIONS)
        _checks.one_of(self.norm_type, "norm_type", NORM_TYPES)
        _checks.flag(self.bias, "bias")
        if self.num_kv_heads is not None:
            _checks.positive_int(self.num_kv_heads, "num_kv_heads")
            if self.num_heads % self.num_kv_heads:
                raise ValueError(f"num_kv_heads must divide num_heads (each key-value head serves a group of "
                                 f"query heads), got num_kv_heads={self.num_kv_heads} and "
                                 f"num_heads={self.num_heads}")
        _checks.one_of(self.rotary_layout, "rotary_layout", ROTARY_LAYOUTS)
        _checks.positive_float(self.rotary_base, "rotary_base")
        if self.window is not None:
            _checks.positive_int(self.window, "window")
            if self.architecture != "decoder-only":
                raise ValueError("window applies to a decoder-only model's causal self-attention (greedy_decode and "
                                 "beam_search give an encoder-decoder's decoder masks of their own), got window="
                                 f"{self.window} for an {self.architecture} model")
        _checks.positive_float(self.layer_norm_eps, "layer_norm_eps")
        _checks.one_of(self.positional, "positional", POSITIONAL)
        if self.positional == "rotary" and self.d_model // self.num_heads % 2:
            raise ValueError(
                "positional='rotary' needs an even d_k = d_model / num_heads (features turn in pairs), "
                f"got d_model={self.d_model} and num_heads={self.num_heads}"
            )
        _checks.one_of(self.architecture, "architecture", ARCHITECTURES)
        _checks.non_negative_int(self.num_token_types, "num_token_types")
        self._check_vocabularies()

    def _check_vocabularies(self) -> None:
        """The vocabulary rules of the module docstring, with errors that say which field to set."""
        kind = self.architecture
        if kind != "encoder-only" and (self.pooler or not self.lm_head):
            raise ValueError(f"pooler and lm_head apply to encoder-only models, got pooler={self.pooler} and "
                             f"lm_head={self.lm_head} for a {kind} one")
        src, tgt = self.src_vocab_size, self.tgt_vocab_size
        if kind == "encoder-decoder":
            if self.share_embeddings and src != tgt:
                raise ValueError(
                    "share_embeddings=True needs one vocabulary for source and target, got "
                    f"src_vocab_size={src} and tgt_vocab_size={tgt}"
                )
            return
        read, ignored = ("src", "tgt") if kind == "encoder-only" else ("tgt", "src")
        size, other = getattr(self, f"{read}_vocab_size"), getattr(self, f"{ignored}_vocab_size")
        if size is None:
            raise ValueError(f"{read}_vocab_size must be set: a {kind} model has one vocabulary, "
                             f"{read}_vocab_size, got None")
        if other is not None and other != size:
            raise ValueError(
                f"{ignored}_vocab_size must be None or equal to {read}_vocab_size: a {kind} model has one "
                f"vocabulary, {read}_vocab_size; got {read}_vocab_size={size} and "
                f"{ignored}_vocab_size={other}"
            )
        if self.share_embeddings:
            raise ValueError("share_embeddings ties an encoder-decoder model's source and target "
                             f"embeddings; a {kind} model has one embedding (tie_output ties it to the "
                             "output layer), got share_embeddings=True")

    @property
    def d_k(self) -> int:
        """Width of one head, ``d_model / num_heads``."""
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """The key-value heads of each attention: ``num_kv_heads``, or ``num_heads`` when it is ``None``."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named preset, optionally with some fields changed (``preset("tiny", src_vocab_size=13)``)."""
        _checks.one_of(name, "name", sorted(PRESETS))
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"overrides must be TransformerConfig fields, got unknown {unknown}")
        return cls(**{**PRESETS[name], **overrides})

    @staticmethod
    def preset_names() -> list[str]:
        """The names :meth:`preset` accepts."""
        return sorted(PRESETS)


BERT = dict(
    architecture="encoder-only", positional="learned", max_len=512, scale_embeddings=False,
    activation="gelu", layer_norm_eps=1e-12, num_token_types=2, embedding_norm=True, pooler=True,
)  # fmt: skip
GPT2 = dict(
    architecture="decoder-only", positional="learned", max_len=1024, scale_embeddings=False,
    activation="gelu_tanh", norm_first=True, generator_bias=False,
)  # fmt: skip
#: Llama's block (Touvron et al., 2023): pre-norm RMSNorm, SwiGLU, rotary positions in the half
#: layout, no biases, no dropout, unscaled embeddings and an output layer of its own
LLAMA = dict(
    architecture="decoder-only", positional="rotary", rotary_layout="half", norm_type="rms", ffn_type="glu",
    activation="silu", bias=False, norm_first=True, scale_embeddings=False, generator_bias=False,
    tie_output=False, dropout=0.0, layer_norm_eps=1e-5, max_len=2048,
)  # fmt: skip

# Each preset's comment line: "name: its parameter count, from count_parameters(build_model(preset))".
PRESETS: dict[str, dict[str, Any]] = {
    # base: 63,119,496 parameters (~65M in the paper); Vaswani et al. (2017), Table 3, all embeddings tied
    "base": dict(src_vocab_size=37000, tgt_vocab_size=37000, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, share_embeddings=True),
    # big: 214,282,376 parameters (~213M in the paper)
    "big": dict(src_vocab_size=37000, tgt_vocab_size=37000, d_model=1024, num_heads=16, num_layers=6,
                d_ff=4096, dropout=0.3, share_embeddings=True),
    # tiny: 22,416 parameters; for tests and quick demos (set the vocabularies from the task's Vocab)
    "tiny": dict(src_vocab_size=16, tgt_vocab_size=16, d_model=32, num_heads=2, num_layers=1,
                 d_ff=64, dropout=0.0),
    # small: 169,488 parameters; the toy tasks of chapter 11
    "small": dict(src_vocab_size=16, tgt_vocab_size=16, d_model=64, num_heads=4, num_layers=2,
                  d_ff=128, dropout=0.0),
    # medium: 1,404,992 parameters
    "medium": dict(src_vocab_size=64, tgt_vocab_size=64, d_model=128, num_heads=4, num_layers=3,
                   d_ff=512, dropout=0.1),
    # bert-base: 109,512,762 parameters (~110M; BertModel's 109,482,240 and our masked-LM bias)
    "bert-base": dict(BERT, src_vocab_size=30522, d_model=768, num_heads=12, num_layers=12, d_ff=3072,
                      dropout=0.1),
    # minilm-l6: 22,713,216 parameters; all-MiniLM-L6-v2 (chapter 18), a bare encoder, no masked-LM head
    "minilm-l6": dict(BERT, src_vocab_size=30522, d_model=384, num_heads=12, num_layers=6, d_ff=1536,
                      dropout=0.1, lm_head=False),
    # bert-tiny: 110,560 parameters; the masked-LM demo of chapter 14
    "bert-tiny": dict(BERT, src_vocab_size=32, d_model=64, num_heads=4, num_layers=2, d_ff=256,
                      dropout=0.0, max_len=64),
    # gpt2-small: 124,439,808 parameters (~124M), exactly GPT-2 small
    "gpt2-small": dict(GPT2, tgt_vocab_size=50257, d_model=768, num_heads=12, num_layers=12, d_ff=3072,
                       dropout=0.1),
    # gpt-tiny: 112,384 parameters; the left-to-right model of chapter 14
    "gpt-tiny": dict(GPT2, tgt_vocab_size=64, d_model=64, num_heads=4, num_layers=2, d_ff=256,
                     dropout=0.0, max_len=128),
    # llama-tiny: 209,984 parameters; a small Llama-style model (chapter 19): 2 key-value heads
    "llama-tiny": dict(LLAMA, tgt_vocab_size=100, d_model=64, num_heads=4, num_kv_heads=2, num_layers=4,
                       d_ff=192, max_len=128),
}  # fmt: skip


def check_architecture(config: Any, expected: str, cls: str) -> TransformerConfig:
    """Return ``config`` if it is a :class:`TransformerConfig` for the ``expected`` architecture."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if config.architecture != expected:
        raise ValueError(
            f"{cls} needs config.architecture={expected!r}, got {config.architecture!r}; "
            "build_model(config) picks the right class"
        )
    return config

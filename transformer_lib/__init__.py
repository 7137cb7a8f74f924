"""transformer_lib: the small library the course builds, chapter by chapter.

Everything a chapter, exercise or test needs is importable from here::

    import transformer_lib as tl
    mha = tl.MultiHeadAttention(d_model=64, num_heads=4)

The core (numpy and torch maths) never imports plotting or widgets; those live in
``transformer_lib.viz`` and ``transformer_lib.widgets`` on top of it.

Glossary (used in code and prose alike): ``d_model`` width of the token vectors;
``num_heads`` (h) heads; ``d_k = d_v = d_model / h`` per-head width; ``d_ff`` width of the
feed-forward layer; ``num_layers`` (N) stacked layers; ``W_q, W_k, W_v, W_o`` the
projections; ``src``/``tgt`` source and target token ids; ``memory`` the encoder's output;
``src_mask``/``tgt_mask`` boolean masks, True where attention is allowed. A mask of
``None`` means: no mask for ``src_mask``, the causal mask for ``tgt_mask`` in the decoder
layer, the decoder stack and the models alike (``DecoderLayer``, ``Decoder``,
``Transformer``, ``DecoderOnlyModel``), which never see the future unless a given mask
lets them (a ``DecoderLayer`` takes ``causal=False`` for no mask); a given mask is used as
it is. Models return log-probabilities (log-softmax), never logits.
``get_attention_maps(...)`` on a stack or model runs a forward pass made for reading the
attention weights, ``(layers, batch, heads, q_len, k_len)``; ordinary forward passes keep none.
"""

from .checkpoints import load_checkpoint, save_checkpoint
from .config import TransformerConfig
from .data import Batch, BucketBatchSampler, Vocab, make_batch
from .decoding import beam_search, generate, greedy_decode, length_penalty
from .embeddings import Embeddings
from .interop import from_torch, to_torch
from .layers import AddNorm, DecoderLayer, EncoderLayer, FeedForward
from .lm import DecoderOnlyModel, EncoderOnlyModel
from .model import build_model, count_parameters
from .numpy_attention import (
    AdditiveAttention,
    additive_attention,
    attention,
    cosine_attention,
    cosine_similarity,
    softmax,
)
from .optim import LabelSmoothingLoss, cosine_lr, make_adamw, make_optimizer, smoothed_targets, warmup_lr
from .positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    apply_rotary,
    frequencies,
    offset_matrix,
    rotation_matrix,
    sinusoidal_encoding,
)
from .pretrained import load_pretrained_encoder, sentence_embeddings
from .rnn import BahdanauAttention, BahdanauSeq2Seq, BiRNNEncoder
from .stacks import Decoder, Encoder
from .tasks import Seq2SeqDataset, make_splits, make_task, number_to_words
from .text import TextBatch, TextDataset, split_text
from .tokenizer import BPETokenizer, CharTokenizer
from .torch_attention import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention
from .training import History, exact_match, language_model_loss, train
from .transformer import Generator, Transformer, init_weights

__all__ = [
    "Batch",
    "History",
    "LabelSmoothingLoss",
    "Seq2SeqDataset",
    "Vocab",
    "beam_search",
    "exact_match",
    "generate",
    "greedy_decode",
    "length_penalty",
    "load_pretrained_encoder",
    "load_checkpoint",
    "make_batch",
    "make_optimizer",
    "make_splits",
    "make_task",
    "number_to_words",
    "save_checkpoint",
    "sentence_embeddings",
    "smoothed_targets",
    "train",
    "warmup_lr",
    "BucketBatchSampler",
    "TextBatch",
    "TextDataset",
    "cosine_lr",
    "language_model_loss",
    "make_adamw",
    "split_text",
    "AddNorm",
    "Decoder",
    "DecoderLayer",
    "DecoderOnlyModel",
    "Embeddings",
    "Encoder",
    "EncoderLayer",
    "EncoderOnlyModel",
    "FeedForward",
    "Generator",
    "Transformer",
    "TransformerConfig",
    "build_model",
    "count_parameters",
    "init_weights",
    "AdditiveAttention",
    "BahdanauAttention",
    "BahdanauSeq2Seq",
    "BiRNNEncoder",
    "BPETokenizer",
    "CharTokenizer",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionalEncoding",
    "additive_attention",
    "apply_rotary",
    "attention",
    "causal_mask",
    "cosine_attention",
    "cosine_similarity",
    "frequencies",
    "from_torch",
    "offset_matrix",
    "padding_mask",
    "rotation_matrix",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "softmax",
    "to_torch",
]

# Choosing the next token, and GPT-2 (Hugging Face's GPT2LMHeadModel) in our parts (chapters 16 and 14).
from .gpt2 import from_gpt2, to_gpt2  # noqa: E402
from .sampling import sample_next, sampling_distribution  # noqa: E402

__all__ += ["from_gpt2", "sample_next", "sampling_distribution", "to_gpt2"]

# English -> French on real sentences: the Tatoeba pairs, the split by sentence, BLEU (chapter 12).
from .translation import (  # noqa: E402
    TranslationData,
    corpus_bleu,
    load_pairs,
    load_translation_model,
    make_translation_data,
    save_translation_model,
    sentence_bleu,
    train_with_bleu,
    translate,
)

__all__ += ["TranslationData", "corpus_bleu", "load_pairs", "load_translation_model", "make_translation_data",
            "save_translation_model", "sentence_bleu", "train_with_bleu", "translate"]  # fmt: skip

# Today's decoders (chapter 19): RMSNorm, SwiGLU, rotary layouts, grouped-query attention, tiled attention, Llama.
from .config import glu_hidden_size  # noqa: E402
from .layers import RMSNorm  # noqa: E402
from .llama import from_llama, to_llama  # noqa: E402
from .positional import rotary_permutation  # noqa: E402
from .tiled import online_softmax, peak_memory, tiled_attention  # noqa: E402
from .torch_attention import KVCache, repeat_kv  # noqa: E402

__all__ += ["KVCache", "RMSNorm", "from_llama", "glu_hidden_size", "online_softmax", "peak_memory", "repeat_kv",
            "rotary_permutation", "tiled_attention", "to_llama"]  # fmt: skip

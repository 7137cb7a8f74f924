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

# One import per public name, grouped in the order of the README's table of modules.

# attention in numpy
from .numpy_attention import (
    additive_attention,
    AdditiveAttention,
    attention,
    cosine_attention,
    cosine_similarity,
    softmax,
)
# attention, masks and the key-value cache in PyTorch
from .torch_attention import (
    causal_mask,
    KVCache,
    MultiHeadAttention,
    padding_mask,
    repeat_kv,
    scaled_dot_product_attention,
)
# positions
from .positional import (
    apply_rotary,
    frequencies,
    LearnedPositionalEmbedding,
    offset_matrix,
    PositionalEncoding,
    rotary_permutation,
    rotation_matrix,
    sinusoidal_encoding,
)
# the layers
from .layers import AddNorm, DecoderLayer, EncoderLayer, FeedForward, RMSNorm
# token embeddings
from .embeddings import Embeddings
# the configuration
from .config import glu_hidden_size, TransformerConfig
# the stacks
from .stacks import Decoder, Encoder
# the encoder-decoder model
from .transformer import Generator, init_weights, Transformer
# the encoder-only and decoder-only models
from .lm import DecoderOnlyModel, EncoderOnlyModel
# one factory, one count
from .model import build_model, count_parameters
# to and from PyTorch's own modules
from .interop import from_torch, to_torch
# decoding
from .decoding import beam_search, generate, greedy_decode, length_penalty
# choosing the next token
from .sampling import sample_next, sampling_distribution
# Hugging Face's GPT-2 (the hf extra)
from .gpt2 import from_gpt2, to_gpt2
# Hugging Face's Llama (the hf extra)
from .llama import from_llama, to_llama
# attention block by block
from .tiled import online_softmax, peak_memory, tiled_attention
# the recurrent model
from .rnn import BahdanauAttention, BahdanauSeq2Seq, BiRNNEncoder
# a pretrained encoder (the hf extra)
from .pretrained import load_pretrained_encoder, sentence_embeddings
# batches
from .data import Batch, BucketBatchSampler, make_batch, Vocab
# the toy tasks
from .tasks import make_splits, make_task, number_to_words, Seq2SeqDataset
# text for a language model
from .text import split_text, TextBatch, TextDataset
# tokenisers
from .tokenizer import BPETokenizer, CharTokenizer
# the Tatoeba pairs and BLEU
from .tatoeba import load_pairs, make_translation_data, TranslationData
from .bleu import corpus_bleu, sentence_bleu
# English to French
from .translation import load_translation_model, save_translation_model, train_with_bleu, translate
# losses and schedules
from .optim import cosine_lr, LabelSmoothingLoss, make_adamw, make_optimizer, smoothed_targets, warmup_lr
# training
from .training import exact_match, History, language_model_loss, train
# checkpoints
from .checkpoints import load_checkpoint, save_checkpoint

__all__ = [
    # numpy_attention
    "additive_attention", "AdditiveAttention", "attention", "cosine_attention", "cosine_similarity",
    "softmax",
    # torch_attention
    "causal_mask", "KVCache", "MultiHeadAttention", "padding_mask", "repeat_kv",
    "scaled_dot_product_attention",
    # positional
    "apply_rotary", "frequencies", "LearnedPositionalEmbedding", "offset_matrix", "PositionalEncoding",
    "rotary_permutation", "rotation_matrix", "sinusoidal_encoding",
    # layers
    "AddNorm", "DecoderLayer", "EncoderLayer", "FeedForward", "RMSNorm",
    # embeddings
    "Embeddings",
    # config
    "glu_hidden_size", "TransformerConfig",
    # stacks
    "Decoder", "Encoder",
    # transformer
    "Generator", "init_weights", "Transformer",
    # lm
    "DecoderOnlyModel", "EncoderOnlyModel",
    # model
    "build_model", "count_parameters",
    # interop
    "from_torch", "to_torch",
    # decoding
    "beam_search", "generate", "greedy_decode", "length_penalty",
    # sampling
    "sample_next", "sampling_distribution",
    # gpt2
    "from_gpt2", "to_gpt2",
    # llama
    "from_llama", "to_llama",
    # tiled
    "online_softmax", "peak_memory", "tiled_attention",
    # rnn
    "BahdanauAttention", "BahdanauSeq2Seq", "BiRNNEncoder",
    # pretrained
    "load_pretrained_encoder", "sentence_embeddings",
    # data
    "Batch", "BucketBatchSampler", "make_batch", "Vocab",
    # tasks
    "make_splits", "make_task", "number_to_words", "Seq2SeqDataset",
    # text
    "split_text", "TextBatch", "TextDataset",
    # tokenizer
    "BPETokenizer", "CharTokenizer",
    # tatoeba, bleu
    "load_pairs", "make_translation_data", "TranslationData", "corpus_bleu", "sentence_bleu",
    # translation
    "load_translation_model", "save_translation_model", "train_with_bleu", "translate",
    # optim
    "cosine_lr", "LabelSmoothingLoss", "make_adamw", "make_optimizer", "smoothed_targets", "warmup_lr",
    # training
    "exact_match", "History", "language_model_loss", "train",
    # checkpoints
    "load_checkpoint", "save_checkpoint",
]  # fmt: skip

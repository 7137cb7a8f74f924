"""Checks for the graded exercises: one checker per answer, used by public and hidden tests alike.

Every test in an instructor notebook is a small function that builds an input and hands the
student's function to a checker, for example ``check_softmax(softmax, x)``. A checker

1. calls the student's function through :func:`call` (on copies of the inputs, so an answer
   that writes into its input cannot spoil the comparison);
2. computes the expected value with ``transformer_lib`` or PyTorch, never from stored numbers,
   so the hidden tests hold inputs but no answers;
3. compares the two and, when they differ, says what is wrong in words a student can act on:
   the shape, a NaN, the axis, or a named classic mistake ("you divided by d_k instead of
   sqrt(d_k)") recognised by recomputing that mistake and finding it equal to the answer.

Grading runs each checker twice (see ``exercises/grading``): in the grading kernel, where the
reference library is not installed, :func:`call` records the answer and stops the test; in the
grader's own process the same tests run again on :class:`Replay` placeholders, and only that
verdict counts. So rebinding ``np.allclose``, patching these modules or otter inside the
notebook, or rewriting the test files cannot move the score.

The package, read in this order:

- :mod:`.recording`: calling, recording and replaying answers (:func:`call`, :class:`Replay`);
- :mod:`.reference`: the course library as the reference, absent in the grading kernel;
- :mod:`.compare`: :func:`expect_array` and the other comparisons, with their messages;
- :mod:`.inputs`: inputs tests build (:func:`random_params`, :class:`ToyLanguageModel`);
- one module per exercise set, ``set01_softmax_cosine`` to ``set09_translation``, holding
  the checkers of its questions and the mistakes each one recognises.

Names shared between modules are public in the module that defines them; names with an
underscore stay inside their module. The exercises' conventions are the library's: masks are
boolean, ``True`` where attention is allowed (``tl.causal_mask`` ``(n, n)``, ``tl.padding_mask``
``(batch, 1, 1, seq)``); weight matrices are stored as ``nn.Linear`` stores them, ``(out, in)``,
and applied as ``x @ W.T + b``; the greedy decoder returns what ``tl.greedy_decode`` returns.
"""

from .compare import ATOL, RTOL, expect_array, expect_order, expect_tuple
from .inputs import ToyLanguageModel, random_params
from .recording import RECORD_DIR_ENV, Replay, call, fingerprint, load_answer, save_answer, to_plain
from .set01_softmax_cosine import (
    check_cosine_attention,
    check_cosine_similarity,
    check_softmax,
    check_softmax_with_temperature,
)
from .set02_masked_attention import (
    check_attention_scores,
    check_causal_mask,
    check_decoder_mask,
    check_masked_attention,
    check_padding_mask,
)
from .set03_multi_head import (
    check_count_parameters,
    check_merge_heads,
    check_multi_head_attention,
    check_split_heads,
)
from .set04_positional import (
    check_offset_matrix,
    check_rotation_matrix,
    check_shift_encoding,
    check_sinusoidal_encoding,
)
from .set05_layers_decoding import (
    check_encoder_layer,
    check_feed_forward,
    check_greedy_decode,
    check_layer_norm,
)
from .set06_tokenisation import (
    bpe_merges,
    check_decode,
    check_encode,
    check_merge,
    check_pair_counts,
    check_round_trip,
    check_train_bpe,
)
from .set07_language_model import (
    check_causal_self_attention,
    check_decoder_block,
    check_next_token_loss,
    check_uniform_loss,
)
from .set08_generation import (
    cache_of,
    check_attention_over_sequence,
    check_attention_step,
    check_sample_tokens,
    check_temperature_probs,
    check_top_k_filter,
    check_top_p_filter,
    sinusoidal_table,
)
from .set09_translation import (
    TableScorer,
    ToyScorer,
    check_beam_search,
    check_brevity_penalty,
    check_clipped_counts,
    check_corpus_bleu,
)

__all__ = [
    "ATOL",
    "RECORD_DIR_ENV",
    "RTOL",
    "Replay",
    "TableScorer",
    "ToyLanguageModel",
    "ToyScorer",
    "bpe_merges",
    "cache_of",
    "call",
    "check_attention_over_sequence",
    "check_attention_scores",
    "check_attention_step",
    "check_beam_search",
    "check_causal_self_attention",
    "check_brevity_penalty",
    "check_causal_mask",
    "check_clipped_counts",
    "check_cosine_attention",
    "check_cosine_similarity",
    "check_corpus_bleu",
    "check_count_parameters",
    "check_decode",
    "check_decoder_block",
    "check_decoder_mask",
    "check_encode",
    "check_encoder_layer",
    "check_feed_forward",
    "check_greedy_decode",
    "check_layer_norm",
    "check_masked_attention",
    "check_merge",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_next_token_loss",
    "check_offset_matrix",
    "check_padding_mask",
    "check_pair_counts",
    "check_rotation_matrix",
    "check_round_trip",
    "check_sample_tokens",
    "check_shift_encoding",
    "check_sinusoidal_encoding",
    "check_softmax",
    "check_softmax_with_temperature",
    "check_split_heads",
    "check_temperature_probs",
    "check_top_k_filter",
    "check_top_p_filter",
    "check_train_bpe",
    "check_uniform_loss",
    "expect_array",
    "expect_order",
    "expect_tuple",
    "fingerprint",
    "load_answer",
    "random_params",
    "save_answer",
    "sinusoidal_table",
    "to_plain",
]

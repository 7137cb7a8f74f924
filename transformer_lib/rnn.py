"""A recurrent encoder-decoder with Bahdanau (additive) attention, in PyTorch.

This is the model attention was invented for (Bahdanau, Cho and Bengio, 2014, who called it
RNNsearch), kept small enough to train on a laptop CPU in seconds. It reads top to bottom:

1. :class:`BahdanauAttention`: the alignment model ``e_{t,i} = v^T tanh(W_s s_{t-1} + W_h h_i)``,
   its softmax over the source positions and the context vector ``c_t = sum_i alpha_{t,i} h_i``.
   It is the torch twin of :func:`transformer_lib.additive_attention` (numpy), which it equals.
2. :class:`BiRNNEncoder`: the "reader". A bidirectional GRU writes one annotation per source
   word, ``h_i = [forward_i ; backward_i]``, which summarises the whole sentence with a focus
   around word ``i``.
3. :class:`BahdanauSeq2Seq`: the "exploiter". A GRU decoder that, before producing each target
   word, attends over the annotations (the "memory") with its previous state as the query.
   It has the ``encode``/``decode`` pair of the library's Transformer, so
   :func:`transformer_lib.greedy_decode` and :func:`transformer_lib.beam_search` translate
   with it under the one decoding contract of :mod:`transformer_lib.decoding`.

Two simplifications against the paper, both common: a GRU cell instead of the paper's gated
unit written out by hand, and a linear read-out instead of its maxout layer.

Shape notation: ``b`` batch, ``n`` source length, ``m`` target length, ``d_emb`` embedding
width, ``d_hidden`` recurrent state width (annotations are ``2 * d_hidden`` wide), ``d_attn``
width of the alignment model's hidden layer.

Taught in chapter 01 (why attention).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from . import _checks
from .torch_attention import causal_mask


class BahdanauAttention(nn.Module):
    """Additive attention of decoder states over encoder annotations.

    ``e_{t,i} = v^T tanh(W_s s + W_h h_i)``; ``alpha_t = softmax_i(e_{t,i})`` over the
    source positions allowed by ``mask``; ``c_t = sum_i alpha_{t,i} h_i``.

    Args:
        d_s: width of the decoder state (the query).
        d_h: width of an annotation (the keys, which are also the values).
        d_attn: width of the hidden layer of the alignment model.

    Attributes ``W_s`` (``nn.Linear(d_s, d_attn)``), ``W_h`` (``nn.Linear(d_h, d_attn)``) and
    ``v`` (``nn.Linear(d_attn, 1)``) carry no biases, as in the paper.
    """

    def __init__(self, d_s: int, d_h: int, d_attn: int) -> None:
        super().__init__()
        d_s = _checks.positive_int(d_s, "d_s")
        d_h = _checks.positive_int(d_h, "d_h")
        d_attn = _checks.positive_int(d_attn, "d_attn")
        self.W_s = nn.Linear(d_s, d_attn, bias=False)
        self.W_h = nn.Linear(d_h, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def forward(
        self, s: torch.Tensor, H: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Context vectors and weights for one decoder state per sentence.

        Args:
            s: ``(b, d_s)`` decoder states ``s_{t-1}``.
            H: ``(b, n, d_h)`` annotations.
            mask: optional ``(b, n)`` boolean, True at real (non-padding) source positions.

        Returns:
            ``(context, weights)``: ``(b, d_h)`` and ``(b, n)``.
        """
        _checks.float_tensor(s, "s")
        _checks.float_tensor(H, "H")
        _checks.ndim_exactly(s, 2, "s", "(batch, d_s)")
        _checks.ndim_exactly(H, 3, "H", "(batch, n, d_h)")
        _checks.same_size(s.shape[0], H.shape[0], "the batch sizes of s and H")
        _checks.same_size(s.shape[1], self.W_s.in_features, "the width of s and W_s's input (d_s)")
        _checks.same_size(H.shape[2], self.W_h.in_features, "the width of H and W_h's input (d_h)")
        hidden = torch.tanh(self.W_s(s)[:, None, :] + self.W_h(H))  # (b, n, d_attn)
        scores = self.v(hidden).squeeze(-1)  # (b, n): e_{t,i}
        if mask is not None:
            _checks.bool_mask(mask, "mask", tuple(scores.shape), "(batch, n)")
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (b, n): alpha_{t,i}
        context = (weights[:, :, None] * H).sum(dim=1)  # (b, d_h): c_t
        return context, weights

    def numpy_params(self) -> dict[str, np.ndarray]:
        """The weights as numpy arrays, named as :func:`transformer_lib.additive_attention` takes them.

        ``tl.additive_attention(s, H, **attn.numpy_params())`` computes what this module does.
        """
        return {
            "W_s": self.W_s.weight.detach().cpu().numpy(),  # (d_attn, d_s)
            "W_h": self.W_h.weight.detach().cpu().numpy(),  # (d_attn, d_h)
            "v": self.v.weight.detach().cpu().numpy()[0],  # (d_attn,)
        }


class BiRNNEncoder(nn.Module):
    """Embedding plus a bidirectional GRU: one annotation ``h_i = [forward_i ; backward_i]`` per word.

    Padding positions (``pad_id``) are skipped by both directions, so the backward GRU starts
    at each sentence's own last word; their annotations are zero.

    Args:
        vocab_size: number of source tokens.
        d_emb: embedding width.
        d_hidden: state width of each direction (annotations are ``2 * d_hidden`` wide).
        pad_id: id of the padding token.
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int, pad_id: int = 0) -> None:
        super().__init__()
        self.vocab_size = _checks.positive_int(vocab_size, "vocab_size")
        self.d_hidden = _checks.positive_int(d_hidden, "d_hidden")
        self.pad_id = _checks.token_id(pad_id, "pad_id")
        self.embedding = nn.Embedding(vocab_size, _checks.positive_int(d_emb, "d_emb"), padding_idx=pad_id)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True, bidirectional=True)

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Annotations and the source mask.

        Args:
            src: ``(b, n)`` token ids, padded with ``pad_id`` at the end.

        Returns:
            ``(H, mask)``: annotations ``(b, n, 2 * d_hidden)`` and ``(b, n)`` boolean, True at words.
        """
        _checks.token_ids(src, "src", self.vocab_size)
        mask = src != self.pad_id  # (b, n)
        lengths = mask.sum(dim=1)
        if (lengths == 0).any():
            raise ValueError("src has a sentence made only of padding; every sentence needs a word")
        embedded = self.embedding(src)  # (b, n, d_emb)
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        H, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=src.shape[1])
        return H, mask  # (b, n, 2 * d_hidden), (b, n)


class Seq2SeqOutput(NamedTuple):
    """What :meth:`BahdanauSeq2Seq.forward` returns."""

    logits: torch.Tensor  # (b, m, tgt_vocab_size)
    weights: torch.Tensor  # (b, m, n): alpha_{t,i}, one row per target step
    states: torch.Tensor  # (b, m, d_hidden): s_{t-1}, the query used at step t


class BahdanauSeq2Seq(nn.Module):
    """RNN encoder-decoder with additive attention (Bahdanau et al., 2014), small.

    At target step ``t`` the decoder

    1. attends with its previous state ``s_{t-1}`` over the annotations: ``c_t, alpha_t``;
    2. updates its state: ``s_t = GRUCell([E y_{t-1} ; c_t], s_{t-1})``;
    3. scores the next word: ``logits_t = W_out [s_t ; c_t ; E y_{t-1}]``.

    The first state is ``s_0 = tanh(W_init backward_1)``, from the backward annotation of the
    first source word, as in the paper.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        d_emb: embedding width (source and target).
        d_hidden: recurrent state width (encoder directions and decoder).
        d_attn: hidden width of the alignment model.
        pad_id: padding id, the same in both vocabularies.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_emb: int = 32,
        d_hidden: int = 64,
        d_attn: int = 64,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.tgt_vocab_size = _checks.positive_int(tgt_vocab_size, "tgt_vocab_size")
        self.encoder = BiRNNEncoder(src_vocab_size, d_emb, d_hidden, pad_id)
        self.attention = BahdanauAttention(d_hidden, 2 * d_hidden, d_attn)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_emb, padding_idx=pad_id)
        self.init_state = nn.Linear(d_hidden, d_hidden)
        self.cell = nn.GRUCell(d_emb + 2 * d_hidden, d_hidden)
        self.out = nn.Linear(d_hidden + 2 * d_hidden + d_emb, tgt_vocab_size)

    def initial_state(self, H: torch.Tensor) -> torch.Tensor:
        """``s_0 = tanh(W_init backward_1)``: ``(b, d_hidden)`` from annotations ``(b, n, 2 d_hidden)``."""
        backward_first = H[:, 0, self.encoder.d_hidden :]  # (b, d_hidden)
        return torch.tanh(self.init_state(backward_first))

    def step(
        self, y_prev: torch.Tensor, s_prev: torch.Tensor, H: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder step: ``(logits (b, V), s_t (b, d_hidden), weights (b, n))``."""
        e = self.tgt_embedding(y_prev)  # (b, d_emb)
        context, weights = self.attention(s_prev, H, mask)  # (b, 2 d_hidden), (b, n)
        s = self.cell(torch.cat([e, context], dim=-1), s_prev)  # (b, d_hidden)
        logits = self.out(torch.cat([s, context, e], dim=-1))  # (b, V)
        return logits, s, weights

    def _teacher_forced(self, H: torch.Tensor, mask: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Run the decoder over ``tgt_in`` ``(b, m)``, fed the given previous word at every step."""
        s = self.initial_state(H)
        logits, weights, states = [], [], []
        for t in range(tgt_in.shape[1]):
            states.append(s)
            step_logits, s, step_weights = self.step(tgt_in[:, t], s, H, mask)
            logits.append(step_logits)
            weights.append(step_weights)
        return Seq2SeqOutput(torch.stack(logits, 1), torch.stack(weights, 1), torch.stack(states, 1))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Teacher forcing: the decoder is fed the true previous target word at every step.

        Args:
            src: ``(b, n)`` source ids.
            tgt_in: ``(b, m)`` target ids shifted right (starting with the begin token).

        Returns:
            :class:`Seq2SeqOutput` with logits ``(b, m, V)``, weights ``(b, m, n)`` and the
            decoder states ``s_{t-1}`` that queried the memory ``(b, m, d_hidden)``. Run it on
            a translation's own output (``<bos>`` then all but its last token) to get the
            weights and states of that translation.
        """
        _checks.token_ids(tgt_in, "tgt_in", self.tgt_vocab_size)
        _checks.same_size(src.shape[0], tgt_in.shape[0], "the batch sizes of src and tgt_in")
        H, mask = self.encoder(src)
        return self._teacher_forced(H, mask, tgt_in)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The annotations ``H`` ``(b, n, 2 d_hidden)``: the memory the decoder attends to.

        ``src_mask`` is accepted for the decoding interface (``encode(src, src_mask)``) and
        not needed: the encoder skips the ``pad_id`` positions of ``src`` itself.
        """
        H, _ = self.encoder(src)
        return H

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token log-probabilities ``(b, m, V)`` for every prefix of ``tgt``, as ``Transformer.decode``.

        Args:
            tgt: ``(b, m)`` target ids starting with the begin token.
            memory: ``(b, n, 2 d_hidden)`` annotations from :meth:`encode`.
            src_mask: ``(b, 1, 1, n)`` boolean, True at real source words (``padding_mask(src,
                pad_id)``); ``None``: every position is a word.
            tgt_mask: ``None`` or a mask that lets no position see a later one (the causal
                mask, maybe with padding). A recurrent decoder reads left to right, so it is
                causal whatever the mask, and padding at the end of ``tgt`` changes nothing
                before it.

        With :meth:`encode` this is what :func:`transformer_lib.greedy_decode` and
        :func:`transformer_lib.beam_search` call; each call reruns the decoder over the
        whole prefix, which costs ``m`` steps where a cached state would cost one.
        """
        _checks.token_ids(tgt, "tgt", self.tgt_vocab_size)
        _checks.hidden(memory, "memory", 2 * self.encoder.d_hidden, "(batch, src_len, 2 d_hidden={})")
        (b, m), n = tgt.shape, memory.shape[1]
        _checks.same_size(b, memory.shape[0], "the batch sizes of tgt and memory")
        mask = torch.ones(b, n, dtype=torch.bool, device=memory.device)  # (b, n)
        if src_mask is not None:
            _checks.bool_mask(src_mask, "src_mask", (b, 1, 1, n), "(batch, 1, 1, src_len)", tensor=True)
            mask = src_mask.expand(b, 1, 1, n)[:, 0, 0]  # (b, n)
        if tgt_mask is not None and m > 0:
            _checks.bool_mask(tgt_mask, "tgt_mask", (b, 1, m, m), "(batch, 1, tgt_len, tgt_len)", tensor=True)
            if bool((tgt_mask & ~causal_mask(m, device=tgt.device)).any()):
                raise ValueError("tgt_mask must let no position see a later one (this decoder is causal)")
        return torch.log_softmax(self._teacher_forced(memory, mask, tgt).logits, dim=-1)

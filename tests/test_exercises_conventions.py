"""The exercises meet the library's objects: masks, weights and decoding follow ``transformer_lib``.

A student who later reads the library should meet the same objects as in the exercises. So the
instructor notebooks' solutions are run here on what the library itself holds and returns:
``tl.causal_mask`` and ``tl.padding_mask`` (shape and meaning), the weights of
``tl.MultiHeadAttention`` and ``tl.FeedForward`` taken as they are (no transposes), and
``tl.greedy_decode`` on a small Transformer of the library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

import transformer_lib as tl

EXERCISES = Path(__file__).resolve().parent.parent / "exercises"


def _forget_checks() -> None:
    for name in [n for n in sys.modules if n == "exercise_checks" or n.startswith("exercise_checks.")]:
        del sys.modules[name]


def _solutions(name: str, monkeypatch) -> dict:
    """The names an instructor notebook defines (its solutions and givens), without running its tests."""
    monkeypatch.syspath_prepend(str(EXERCISES / name))
    _forget_checks()
    namespace: dict = {"__name__": "__main__"}
    for cell in nbformat.read(EXERCISES / name / "instructor.ipynb", as_version=4).cells:
        if cell.cell_type == "code" and "def test_" not in cell.source:
            exec(compile(cell.source, f"{name}/instructor.ipynb", "exec"), namespace)
    _forget_checks()
    return namespace


@pytest.fixture(scope="module")
def masks(request):
    with pytest.MonkeyPatch.context() as mp:
        return _solutions("02_masked_attention", mp)


@pytest.mark.parametrize("pad_id", [0, 3])
def test_the_masks_are_the_librarys(masks, pad_id):
    tokens = np.array([[5, 7, pad_id, pad_id], [3, 3, 3, 3], [pad_id, 4, 6, 8]])
    padding = tl.padding_mask(torch.from_numpy(tokens), pad_id).numpy()
    causal = tl.causal_mask(tokens.shape[1]).numpy()
    for got, want in [(masks["padding_mask"](tokens, pad_id), padding), (masks["causal_mask"](4), causal),
                      (masks["decoder_mask"](tokens, pad_id), causal & padding)]:
        assert got.dtype == bool and got.shape == want.shape and (got == want).all(), (got.shape, want.shape)
    assert masks["decoder_mask"](tokens, pad_id).shape == (3, 1, 4, 4)  # as tl.make_batch's tgt_mask


def test_multi_head_attention_takes_the_librarys_weights_as_they_are(monkeypatch):
    solutions = _solutions("03_multi_head", monkeypatch)
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(8, num_heads=2).double().eval()
    params = {f"{kind}_{n}": getattr(mha, f"W_{n}").__getattr__("weight" if kind == "W" else "bias").detach().numpy()
              for n in "qkvo" for kind in ("W", "b")}
    q, kv = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    mask = tl.padding_mask(torch.tensor([[4, 5, 6, 0, 0], [7, 8, 9, 1, 0]]), 0)
    with torch.no_grad():
        want = mha(q, kv, kv, mask=mask).numpy()
    out, weights = solutions["multi_head_attention"](q.numpy(), kv.numpy(), kv.numpy(), params, 2, mask.numpy())
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights, mha.attention_weights.numpy(), rtol=1e-10, atol=1e-12)


def test_the_feed_forward_network_takes_the_librarys_weights_as_they_are(monkeypatch):
    solutions = _solutions("05_layers_decoding", monkeypatch)
    torch.manual_seed(0)
    ffn = tl.FeedForward(6, 10, dropout=0.0).double().eval()
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    weights = [getattr(ffn, f"W_{i}").__getattr__(part).detach().numpy() for i in (1, 2) for part in ("weight", "bias")]
    assert weights[0].shape == (10, 6)  # nn.Linear's (out_features, in_features), as the exercise says
    with torch.no_grad():
        want = ffn(x).numpy()
    np.testing.assert_allclose(solutions["feed_forward"](x.numpy(), *weights), want, rtol=1e-10, atol=1e-12)


class _EndsSooner:
    """A model of the library whose <eos> gets ``bias`` added to its log-probability (argmax moves)."""

    def __init__(self, model, eos_id: int, bias: float):
        self.model, self.eos_id, self.bias = model, eos_id, bias

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        out = self.model.decode(tgt, memory, src_mask, tgt_mask).clone()  # (batch, tgt_len, vocab)
        out[..., self.eos_id] += self.bias
        return out


def test_greedy_decoding_returns_what_the_librarys_greedy_decode_returns(monkeypatch):
    """On a small Transformer of the library: the same tokens, without <bos>, <eos> kept, max_len counted alike."""
    solutions = _solutions("05_layers_decoding", monkeypatch)
    torch.manual_seed(0)
    bos_id, eos_id, pad_id, max_len = 1, 2, 0, 6
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, pad_id], [12, 13, pad_id, pad_id]])
    src_mask = tl.padding_mask(src, pad_id)
    ended = running = 0
    for bias in (0.0, 1.0, 3.0):  # a larger bias makes <eos> likelier, so sentences end before max_len
        model = _EndsSooner(tl.build_model(tl.TransformerConfig.preset("tiny", dropout=0.0)).eval(), eos_id, bias)
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            want = tl.greedy_decode(model, src, max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
        for i in range(src.shape[0]):
            def next_token_logits(tokens, i=i, model=model, memory=memory):
                with torch.no_grad():
                    causal = tl.causal_mask(len(tokens))
                    logits = model.decode(torch.tensor([tokens]), memory[i:i + 1], src_mask[i:i + 1], causal)
                    return logits[0, -1].numpy()

            got = solutions["greedy_decode"](next_token_logits, max_len, bos_id=bos_id, eos_id=eos_id)
            row = want[i].tolist()
            row = row[: row.index(eos_id) + 1] if eos_id in row else row
            assert got == row, (bias, i, got, want[i].tolist())
            ended += eos_id in got
            running += len(got) == max_len and eos_id not in got
    assert ended and running, "both endings must occur: at <eos> and at max_len"

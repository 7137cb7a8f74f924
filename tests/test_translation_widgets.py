"""Chapter 12's cross-attention widget: every frame distinct and drawing the map it names, every
frame within the book's column, the maps the model's own for its own translation, and the
computation behind a frame fast."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "12_translation"
# the widget shows the shipped model; the chapter's live 800-step run of a smaller one, its
# figure, its translations and the checks of its numbers are not needed here
CELLS_NOT_NEEDED = {"6d7340cf": "the live run", "85aeaeef": "its curves", "1c001526": "its translations",
                    "f2004566": "its checks"}  # fmt: skip
# nor the shipped model's translation of the whole test set (the widget translates its four
# sentences itself), nor the cells that read those translations
CELLS_NOT_NEEDED |= {"c517e42c": "the test set translated", "421b2f3c": "BLEU with and without twins",
                     "07ebe1f6": "its numbers", "bd0619ff": "the record's numbers, with its BLEU",
                     "f9bdecea": "exact translations", "a2eb4f2c": "examples", "4e8e2d8a": "more examples",
                     "f21b5617": "the loop", "66f97997": "unknown words", "bd5eeea1": "their numbers",
                     "3b7f0c21": "BLEU from counts, twins' bootstrap", "3b7f0c22": "its numbers",
                     "6a2e9d40": "the recorded beam translations, checked against the model",
                     "6a2e9d41": "beam widths' paired bootstrap", "6a2e9d42": "its numbers",
                     "4c8d1e51": "what else the unknown-word sentences differ in",
                     "1f19ed0a": "training sentences translated", "1f19ed0b": "their numbers"}  # fmt: skip


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = cross_widget.frames.outputs
expected = len(shown) * model.config.num_layers * model.config.num_heads
assert len(frames) == expected == 48, (len(frames), expected)  # 4 sentences x 3 layers x 4 heads
assert len(set(frames.values())) == len(frames)
"""
    )


def test_each_frame_draws_the_map_it_names(chapter):
    chapter.inject(
        """
for sentence in shown:
    w = attention[sentence][0]
    for layer in range(1, w.shape[0] + 1):
        for head in range(1, w.shape[1] + 1):
            fig = render_cross(sentence, layer, head)
            drawn = fig.axes[0].images[0].get_array()
            np.testing.assert_allclose(drawn, w[layer - 1, head - 1].numpy(), rtol=0, atol=1e-6)
            plt.close(fig)
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "cross_widget")


def test_the_maps_are_the_models_for_its_own_translation(chapter):
    chapter.inject(
        """
for sentence in shown:
    w, x_labels, y_labels = attention[sentence]
    layers, heads = model.config.num_layers, model.config.num_heads
    assert tuple(w.shape) == (layers, heads, len(y_labels), len(x_labels)), w.shape
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(w.shape[:-1]))
    assert x_labels == tr.tokenise(sentence, "en") and y_labels[-1] == "<eos>"
    # row i is the position that predicts label i: the model's greedy choice there (never <unk>)
    b = tl.make_batch([(src_vocab.encode(x_labels), tgt_vocab.encode(y_labels[:-1]))])
    with torch.no_grad():
        log_probs = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)[0]  # (fr + 1, vocab)
    log_probs[:, tgt_vocab.token_to_id["<unk>"]] = -float("inf")
    assert tgt_vocab.decode(log_probs.argmax(dim=-1), strip=False) == y_labels
    # and the weights are the model's cross-attention for that pair
    again = model.get_attention_maps(b.src, b.tgt_in, b.src_mask, b.tgt_mask)["cross"][:, 0]
    torch.testing.assert_close(w, again)
"""
    )


def test_the_computation_behind_a_frame_is_fast(chapter):
    chapter.inject(
        """
seconds = _best_seconds(lambda: plt.close(render_cross(shown[1], 2, 3)))
seconds += _best_seconds(lambda: cross_attention(shown[1]))
assert seconds < 0.5, seconds
"""
    )

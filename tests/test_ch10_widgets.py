"""Chapter 10's widget (a trained decoder, step by step): fast, every frame different, drawn for the column."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "10_decoder"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    # the computation behind a frame: one decoding step of the trained model;
    # the best of five runs, so that a busy machine does not decide the result
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: decode_step(t), number=1, repeat=5)) for t in steps)"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(box.frames.outputs.values())\n"
        "assert len(outputs) == len(steps) == 5, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs), 'two steps draw the same picture'"
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "box")


def test_the_widget_replays_a_trained_model(chapter):
    # the decoder that the widget replays (the recorded model) writes the example right, step by step
    chapter.inject(
        "assert replayed_accuracy > 0.95\n"
        "for t, s in steps.items():\n"
        "    want = tgt_vocab.decode(example_batch.tgt_out[0], strip=False)[t]\n"
        "    best = int(s['probs'].argmax())\n"
        "    assert tgt_vocab.decode([best], strip=False)[0] == want, (t, want)"
    )

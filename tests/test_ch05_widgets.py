"""Chapter 05's widget: fast to compute, every frame different, and drawn for the column."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "05_masking"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: masked_weights(s, p, c), number=1, repeat=3))"
        " for s in sentences for p in ('off', 'on') for c in ('off', 'on'))"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(mask_box.frames.outputs.values())\n"
        "assert len(outputs) == 12, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs)"
    )


def test_the_padding_mask_blanks_the_pad_keys_in_every_frame(chapter):
    chapter.inject(
        "for s in sentences:\n"
        "    for c in ('off', 'on'):\n"
        "        w = masked_weights(s, 'on', c)\n"
        "        pads = [t == '<pad>' for t in labels[sentences.index(s)]]\n"
        "        assert (w[:, torch.tensor(pads)] == 0).all(), (s, c)"
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "mask_box")

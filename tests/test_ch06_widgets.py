"""Chapter 06's widget: fast to compute, every frame different, and drawn for the column."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "06_multi_head_attention"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: head_maps(h, s), number=1, repeat=3))"
        " for h in (1, 2, 4) for s in range(3))"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(heads_box.frames.outputs.values())\n"
        "assert len(outputs) == 9, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs)"
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "heads_box")


def test_the_first_example_tells_content_from_position(chapter):
    # no partner is the previous or the next token, and the partners follow no fixed offset
    chapter.inject(
        "p = examples[0][3][0]\n"
        "offsets = (p - torch.arange(N_TOK)) % N_TOK\n"
        "assert not ((offsets == 1) | (offsets == N_TOK - 1)).any(), offsets\n"
        "assert len(set(offsets.tolist())) > 1, offsets"
    )

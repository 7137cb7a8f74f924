"""Chapter 04's saturation widget: fast to compute, every frame different, drawn for the column."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "04_queries_keys_values"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: saturation(d, s), number=1, repeat=3))"
        " for d in WIDGET_D_KS for s in ('none', 'sqrt(d_k)', 'd_k'))"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(saturation_box.frames.outputs.values())\n"
        "assert len(outputs) == len(WIDGET_D_KS) * 3, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs), 'two settings draw the same picture'"
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "saturation_box")


"""Chapter 03's word widget: fast to compute, every frame different, each frame what render draws."""

from __future__ import annotations

CHAPTER = "03_cosine_attention"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: render_word(s, p), number=1, repeat=3))"
        " for s in sentences for p in range(1, 11))"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(word_box.frames.outputs.values())\n"
        "assert len(outputs) == 3 * 10, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs), 'two views are the same'"
    )


def test_each_frame_is_what_render_draws(chapter):
    chapter.inject(
        "for (s, p), html_ in word_box.frames.outputs.items():\n"
        "    assert html_ == render_word(s, p), (s, p)\n"
        "    assert f'sum to {1.0:.2f}' in html_  # the weights of a word sum to 1"
    )

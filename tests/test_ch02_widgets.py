"""Chapter 02's neighbour widget: fast to compute, every frame different, each what render draws."""

from __future__ import annotations

CHAPTER = "02_embeddings"


def test_one_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: render_neighbours(w), number=1, repeat=3)) for w in words)"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_every_frame_differs(chapter):
    chapter.inject(
        "outputs = list(neighbours_box.frames.outputs.values())\n"
        "assert len(outputs) == len(words) == 12, len(outputs)\n"
        "assert len(set(outputs)) == len(outputs), 'two words show the same view'"
    )


def test_each_frame_is_what_render_draws(chapter):
    chapter.inject(
        "for (w,), html_ in neighbours_box.frames.outputs.items():\n"
        "    assert html_ == render_neighbours(w), w\n"
        "    assert html_.count('<tr>') == 2 * 11  # eleven neighbours, twice"
    )

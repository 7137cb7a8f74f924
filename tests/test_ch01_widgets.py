"""Chapter 01's two widgets: fast to compute, every frame different, drawn for the column."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "01_why_attention"


def test_one_memory_frame_is_computed_in_under_a_tenth_of_a_second(chapter):
    # the Jacobians are computed once, above the widget; a frame reads one row
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: last_output_influence(T), number=1, repeat=3))"
        " for T in lengths)"
    )
    assert slowest < 0.1, f"the slowest frame took {slowest:.1e} s to compute"


def test_one_memory_frame_is_drawn_in_under_half_a_second(chapter):
    # drawing six curves with matplotlib: a guard against a frame that grows heavy
    slowest = chapter.value(
        "max(min(__import__('timeit').repeat("
        "lambda: plt.close(render_memory(T)), number=1, repeat=3))"
        " for T in lengths)"
    )
    assert slowest < 0.5, f"the slowest frame took {slowest:.1e} s to draw"


def test_one_decoder_step_is_computed_in_under_a_tenth_of_a_second(chapter):
    # what one frame of the step widget shows: the encoder's memory and one
    # attention step over it, recomputed from scratch
    chapter.inject(
        "import timeit\n"
        "def one_step(pair=examples[0]):\n"
        "    with torch.no_grad():\n"
        "        H, _ = model.encoder(torch.tensor([[src_id[w] for w in pair[0]]]))\n"
        "    s = np.zeros(model.attention.W_s.in_features)\n"
        "    return tl.additive_attention(s, H[0].numpy(), **model.attention.numpy_params())\n"
        "seconds = min(timeit.repeat(one_step, number=1, repeat=3))\n"
        "assert seconds < 0.1, seconds\n"
        "seconds = max(min(timeit.repeat(lambda: render_step(s, t), number=1, repeat=3))\n"
        "              for s in example_names for t in range(1, 9))\n"
        "assert seconds < 0.1, seconds"
    )


def test_every_frame_differs(chapter):
    chapter.inject(
        "for box, n in ((memory_box, len(lengths)), (steps_box, 4 * 8)):\n"
        "    outputs = list(box.frames.outputs.values())\n"
        "    assert len(outputs) == n, len(outputs)\n"
        "    assert len(set(outputs)) == n, 'two views are the same'"
    )


def test_each_step_frame_is_what_render_draws(chapter):
    chapter.inject(
        "for (s, t), html_ in steps_box.frames.outputs.items():\n"
        "    assert html_ == render_step(s, t), (s, t)\n"
        "    assert '(sum = 1.00)' in html_  # the weights of a step sum to 1"
    )


def test_every_memory_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "memory_box")

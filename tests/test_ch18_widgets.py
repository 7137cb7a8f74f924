"""Chapter 18's widgets: every frame differs, and the work behind one frame is quick.

The chapter is executed once (the ``chapter`` fixture); the checks call the same render
functions and data the widgets were built from. Times are processor time, best of five,
so a busy machine does not decide the result.
"""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "18_real_model"


def test_every_attention_frame_differs(chapter):
    chapter.inject(
        """
outputs = layer_box.frames.outputs
assert len(outputs) == 6 * len(HEAD_GROUPS) == 12
assert len(set(outputs.values())) == len(outputs)
"""
    )


def test_attention_frames_fit_the_column(chapter):
    # each frame is one PNG at most 700 pixels wide (bytes 16-24 hold width, height)
    assert_frames_fit_the_column(chapter, "layer_box")


def test_drawing_one_attention_frame_is_quick(chapter):
    # the maps are computed once; a frame slices them and builds a figure of six
    # labelled heatmaps, about 0.12 s of processor time here (hence 0.3 s, not 0.1 s)
    chapter.inject(
        """
import matplotlib.pyplot as plt


def one_frame():
    plt.close(render_layer(4, "1 to 6"))


assert _best_seconds(one_frame) < 0.3
"""
    )


def test_every_search_frame_differs(chapter):
    chapter.inject(
        """
outputs = search_box.frames.outputs
assert len(outputs) == len(QUERIES) == 6
assert len(set(outputs.values())) == len(outputs)
"""
    )


def test_drawing_one_search_frame_is_quick(chapter):
    chapter.inject(
        """
assert _best_seconds(lambda: render_ranking("Which team won the match?")) < 0.1
"""
    )

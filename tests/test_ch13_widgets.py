"""Chapter 13's local-attention widget: every frame distinct, and the computation and
drawing behind one frame fast."""

from __future__ import annotations

CHAPTER = "13_transformers_vs_rnns"


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = window_box.frames.outputs
assert len(frames) == 21, len(frames)  # 7 windows x 3 depths
assert len(set(frames.values())) == len(frames)
"""
    )


def test_one_frame_is_fast(chapter):
    chapter.inject(
        """
import time
seconds = []
for window in (1, 2, 3, 4, 6, 8, 15):
    start = time.perf_counter()
    render_window(window, 3)  # the computation and the HTML behind one frame
    seconds.append(time.perf_counter() - start)
assert sorted(seconds)[len(seconds) // 2] < 0.1, seconds
"""
    )

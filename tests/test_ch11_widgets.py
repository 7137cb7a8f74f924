"""Chapter 11's attention widget: every frame distinct, every frame within the book's
column, and the computation behind one frame (a forward pass and its maps) fast."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "11_full_transformer"
# the widget shows the shipped (recorded) model; the chapter's live training run, its checks and
# figure, the warm-up runs and the decoding of the live model are not needed here
CELLS_NOT_NEEDED = {"072272a8": "the live run", "2210a234": "its accuracy", "f3013e0b": "its check",
                    "82bd144c": "its curves", "9492cfac": "its glued numbers", "bd28922f": "warm-up schedule",
                    "47dc7e1c": "warm-up runs", "a1933b25": "their checks",
                    "4008cbdf": "the live model decoded"}  # fmt: skip


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = maps_widget.frames.outputs
assert len(frames) == 9, len(frames)  # 3 examples x 3 kinds of attention
assert len(set(frames.values())) == len(frames)
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "maps_widget")


def test_the_computation_behind_a_frame_is_fast(chapter):
    chapter.inject(
        """
import time
seconds = []
for _ in range(5):  # the best of five, so that a busy machine does not decide
    start = time.perf_counter()
    b = data.make_batch([(vocab.encode(shown[0][0]), vocab.encode(shown[0][1]))])
    model.get_attention_maps(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    seconds.append(time.perf_counter() - start)
assert min(seconds) < 0.1, seconds
"""
    )

"""Chapter 07's clock widget: every position draws a different picture, and fast."""

from __future__ import annotations

CHAPTER = "07_positional_encoding"


def test_every_clock_frame_differs(chapter):
    chapter.inject(
        """
        outputs = clock_widget.frames.outputs
        assert len(outputs) == len(clock_positions)
        assert len(set(outputs.values())) == len(outputs), "two positions draw the same clocks"
        """
    )


def test_a_clock_frame_renders_in_under_a_tenth_of_a_second(chapter):
    chapter.inject(
        """
        import time
        start = time.perf_counter()
        for position in clock_positions:
            render_clocks(position)
        per_frame = (time.perf_counter() - start) / len(clock_positions)
        assert per_frame < 0.1, f"{per_frame:.3f} s per frame"
        """
    )

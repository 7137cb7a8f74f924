"""Chapter 08's shift widget: every (phi, t) draws a different picture, and fast."""

from __future__ import annotations

CHAPTER = "08_rotation_proof"


def test_every_shift_frame_differs(chapter):
    chapter.inject(
        """
        outputs = shift_widget.frames.outputs
        assert len(outputs) == len(shift_controls["phi"]) * len(shift_controls["t"]) == 30
        assert len(set(outputs.values())) == len(outputs), "two settings draw the same picture"
        """
    )


def test_a_shift_frame_renders_in_under_a_tenth_of_a_second(chapter):
    chapter.inject(
        """
        import time
        start = time.perf_counter()
        for phi in shift_controls["phi"]:
            for t in shift_controls["t"]:
                render_shift(phi, t)
        per_frame = (time.perf_counter() - start) / 30
        assert per_frame < 0.1, f"{per_frame:.3f} s per frame"
        """
    )

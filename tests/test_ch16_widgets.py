"""Chapter 16's sampling widget: every frame distinct, every frame within the book's column, and
the computation behind one frame (a next-character distribution and an 80-character sample) quick.

The chapter is executed once (the ``chapter`` fixture); the checks call the same render function
and data the widget was built from. Times are processor time, best of five, so a busy machine
does not decide the result.
"""

from __future__ import annotations

CHAPTER = "16_language_model"


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = sampling_widget.frames.outputs
assert len(frames) == 3 * len(KEEP) == 15, len(frames)
assert len(set(frames.values())) == len(frames)
"""
    )


def test_every_frame_fits_the_column(chapter):
    chapter.inject(
        """
import struct
widths = [struct.unpack(">II", png[16:24])[0] for png in sampling_widget.frames.outputs.values()]
assert max(widths) <= 700, widths
"""
    )


def test_each_frame_shows_its_own_distribution_and_sample(chapter):
    # the blue bars are the distribution the chosen temperature and filter leave, and the text
    # is the prompt continued with the same options (not the same frame with another title)
    chapter.inject(
        """
import matplotlib.pyplot as plt
for T in (0.5, 1.0, 1.5):
    for keep, options in KEEP.items():
        fig = render_sampling(T, keep)
        bars = [b.get_height() for b in fig.axes[0].containers[1]]
        q = tl.sampling_distribution(flat, T, **options)[0]
        np.testing.assert_allclose(bars, q[order].numpy(), atol=1e-7, err_msg=f"{T} {keep}")
        shown = fig.axes[1].texts[0].get_text()
        sample = continue_text(WIDGET_PROMPT, 80, temperature=T, **options)
        assert "".join(shown.split()) == "".join(sample.split()), (T, keep)
        plt.close(fig)
"""
    )


def test_the_computation_behind_a_frame_is_quick(chapter):
    # a frame: an 80-character sample and its figure; about 0.2 s of processor time here
    chapter.inject(
        """
import matplotlib.pyplot as plt
def one_frame():
    plt.close(render_sampling(1.0, "top-p 0.9"))
assert _best_seconds(one_frame, repeats=3) < 0.5
"""
    )

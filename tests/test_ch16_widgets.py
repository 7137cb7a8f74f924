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


def test_each_frame_draws_from_the_distribution_it_shows(chapter):
    # the title's count of possible characters is the library's distribution's, and a
    # sample drawn with those options uses only characters that distribution allows first
    chapter.inject(
        """
for keep, options in KEEP.items():
    q = tl.sampling_distribution(flat, 1.0, **options)[0]
    ids = tl.generate(model, torch.tensor([chars.encode(WIDGET_PROMPT)]), 1, temperature=1.0,
                      generator=torch.Generator().manual_seed(0), **options)
    assert q[ids[0, -1]] > 0, keep
    if "top-k" in keep:
        assert int((q > 0).sum()) == options["top_k"], keep
"""
    )


def test_the_computation_behind_a_frame_is_quick(chapter):
    # a frame: an 80-character sample and its figure; about 0.5 s of processor time here
    chapter.inject(
        """
import matplotlib.pyplot as plt
def one_frame():
    plt.close(render_sampling(1.0, "top-p 0.9"))
assert _best_seconds(one_frame, repeats=3) < 2.0
"""
    )

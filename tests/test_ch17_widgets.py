"""Chapter 17's curves widget: one frame per group of variants and way of drawing the seeds, every
frame distinct and within the book's column, each what the render function draws, and quick to draw."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "17_ablations"
# the widget draws the recorded runs; the chapter's replay of one run (600 steps) is not needed here
CELLS_NOT_NEEDED = {"579e3c9f": "the replayed run", "adaf83d1": "its curve against the record"}


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = curves_widget.frames.outputs
assert len(frames) == len(GROUPS) * 2 == 12, len(frames)  # 6 groups x (mean and range, each seed)
assert len(set(frames.values())) == len(frames)
# and not only by their titles: the curves drawn differ from frame to frame
drawn = set()
for group in GROUPS:
    for seeds in ("mean and range", "each seed"):
        fig = render_curves(group, seeds)
        drawn.add(tuple(tuple(np.round(line.get_ydata(), 4)) for line in fig.axes[0].get_lines()))
        plt.close(fig)
assert len(drawn) == len(frames), len(drawn)
"""
    )


def test_every_group_draws_the_baseline_and_its_variants(chapter):
    chapter.inject(
        """
for group, names in GROUPS.items():
    for seeds in ("mean and range", "each seed"):
        fig = render_curves(group, seeds)
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        expected = [variants[n]["label"] for n in names]
        if names[0] != "deep_pre":
            expected = ["baseline", *expected]
        assert labels == expected, (group, labels)
        # one line per variant, or one per variant and seed (some variants have more seeds than others)
        drawn = ["baseline", *names] if names[0] != "deep_pre" else names
        lines = len(drawn) if seeds == "mean and range" else sum(len(seeds_of(n)) for n in drawn)
        assert len(ax.get_lines()) == lines, (group, seeds)
        assert ax.get_xlabel() == "step" and "validation loss" in ax.get_ylabel()
        plt.close(fig)
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "curves_widget")


def test_a_frame_is_quick_to_draw(chapter):
    chapter.inject(
        """
seconds = _best_seconds(lambda: plt.close(render_curves("positions", "each seed")))
assert seconds < 0.5, seconds
"""
    )

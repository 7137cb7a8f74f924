"""Chapter 16's sampling widget and key-value cache timing, checked beside the chapter.

The widget: every frame distinct, every frame within the book's column, each frame showing its
own distribution and sample, and the computation behind one frame (a next-character
distribution and an 80-character sample) quick. The timing: the chapter's prose says that
generation without the cache grows faster with the length than with it, but at these lengths more
slowly than the square of the length, that with it a step's cost barely grows, and that the
speed-up grows with the length; the measured numbers are checked here, not in the chapter,
because timings vary from run to run.

The chapter is executed once (the ``chapter`` fixture), without the cells no check reads; the
checks call the same render function and data the widget was built from. A frame's time is
processor time, the best of three, so a busy machine does not decide it; the generation times
are timed again here the same way (the chapter's own timing cell is left out).
"""

from __future__ import annotations

import json

from conftest import ROOT, assert_frames_fit_the_column

CHAPTER = "16_language_model"
# the cells no check here reads (nbval runs them all): the live run of 200 steps and what reads
# it, and the chapter's own timing, which the last test repeats as processor time
CELLS_NOT_NEEDED = {
    "7d49cecb": "the live run", "6d3a6d0e": "its curves", "7768826d": "its losses against the record",
    "c1744d99": "the losses of twelve initial draws", "5c5ffe53": "the numbers of both",
    "7cfb4a03": "the chapter's timing", "c917c07a": "its figure",
}
TEMPERATURES = "(0, 0.5, 1.0, 1.5, 2.0)"
LENGTHS = "[16, 32, 64, 128, 256]"


def test_every_frame_differs(chapter):
    chapter.inject(
        """
frames = sampling_widget.frames.outputs
assert len(frames) == 5 * len(KEEP) == 25, len(frames)
assert len(set(frames.values())) == len(frames)
"""
    )


def test_the_widget_offers_greedy_and_a_high_temperature(chapter):
    chapter.inject(
        f"""
frames = sampling_widget.frames
assert frames.names == ("temperature", "keep"), frames.names
assert frames.values[0] == {TEMPERATURES}, frames.values[0]
assert all((T, keep) in frames.outputs for T in {TEMPERATURES} for keep in KEEP)
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "sampling_widget")


def test_each_frame_shows_its_own_distribution_and_sample(chapter):
    # the blue bars are the distribution the chosen temperature and filter leave, and the text
    # is the prompt continued with the same options (not the same frame with another title)
    chapter.inject(
        f"""
import matplotlib.pyplot as plt
for T in {TEMPERATURES}:
    for keep, options in KEEP.items():
        fig = render_sampling(T, keep)
        bars = [b.get_height() for b in fig.axes[0].containers[1]]
        q = tl.sampling_distribution(flat, T, **options)[0]
        np.testing.assert_allclose(bars, q[order].numpy(), atol=1e-7, err_msg=f"{{T}} {{keep}}")
        shown = fig.axes[1].texts[0].get_text()
        if T == 0:  # greedy: one character can be drawn, and the text is the greedy one
            assert "greedy" in fig.axes[0].get_title() and (q > 0).sum() == 1
            sample = continue_text(WIDGET_PROMPT, 80, greedy=True)
        else:
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


def test_the_chapter_times_the_lengths_timed_here():
    # the chapter's timing cell is left out of the run above, so its lengths are read from its source
    cells = json.loads((ROOT / "chapters" / f"{CHAPTER}.ipynb").read_text())["cells"]
    timing = "".join(next(c for c in cells if c.get("id") == "7cfb4a03")["source"])
    assert f"lengths = np.array({LENGTHS})" in timing


def test_the_uncached_time_grows_faster_and_the_cached_one_about_linearly(chapter):
    # the chapter's prose: without the cache the fitted exponent is larger than with it but below
    # 2 (a step's fixed cost still matters at these lengths), with it a step's cost barely grows
    # (the exponent stays close to 1), and the speed-up grows with the length. The chapter's own
    # timing is not asserted there, so the same generation is timed again here as processor time,
    # best of three, on one thread
    chapter.inject(
        f"""
lengths = np.array({LENGTHS})
torch.set_num_threads(1)
checked = np.array([[_best_seconds(lambda: tl.generate(wide, start, int(n), greedy=True, use_cache=c),
                                   repeats=3) for c in (False, True)] for n in lengths])
without, with_ = [np.polyfit(np.log(lengths), np.log(checked[:, j]), 1)[0] for j in (0, 1)]
assert with_ + 0.2 < without < 2, (without, with_, checked)
assert 0.7 < with_ < 1.3, (without, with_, checked)
speed_up = checked[:, 0] / checked[:, 1]
# grows with the length: the longest text gains most, and more than twice the shortest's
assert speed_up.argmax() == len(lengths) - 1 and speed_up[-1] > 2 * speed_up[0], speed_up
print(without, with_, speed_up)
"""
    )

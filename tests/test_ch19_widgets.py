"""Chapter 19's online-softmax widget, checked beside the chapter.

Every frame distinct and within the book's column, each frame showing its own state (the keys
read so far, the running maximum and sum, the weights of the output so far, the output after
each block), and the computation behind one frame quick. The chapter is executed once (the
``chapter`` fixture), without the cells no check reads; the checks call the same functions the
widget was drawn from.
"""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "19_modern_decoders"
# the cells no check here reads (nbval runs them all): the comparisons with transformers'
# Llama (its import alone takes seconds) and the peak-memory measurement
CELLS_NOT_NEEDED = {
    "4e9ac338": "LlamaMLP against ours", "027ba6bf": "LlamaForCausalLM against ours",
    "e013513b": "the peak memory of both attentions",
}
ORDERS = '("as drawn", "rising", "falling")'
BLOCKS = "(1, 2, 3, 4)"


def test_every_frame_differs(chapter):
    chapter.inject(
        f"""
frames = online_widget.frames
assert frames.names == ("order", "blocks"), frames.names
assert frames.values == ({ORDERS}, {BLOCKS}), frames.values
assert len(frames.outputs) == 3 * 4 == 12, len(frames.outputs)
assert len(set(frames.outputs.values())) == len(frames.outputs)
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "online_widget")


def test_each_frame_shows_its_own_state(chapter):
    # the blue bars of the top panel are the keys read, the red line their maximum; the middle
    # bars are the softmax of the keys read (tl.online_softmax) and the markers the exact one;
    # the bottom line is the output after each block, which ends at the exact output
    chapter.inject(
        f"""
import matplotlib.pyplot as plt
for order in {ORDERS}:
    i = ORDERS[order]
    for blocks in {BLOCKS}:
        fig = render_online(order, blocks)
        top, mid, bottom = fig.axes
        read = blocks * BLOCK
        seen = drawn[i][:read]
        m, l = seen.max().item(), torch.exp(seen - seen.max()).sum().item()
        colours = [tuple(b.get_facecolor()) for b in top.containers[0]]
        assert len(set(colours[:read])) == 1 and colours[0] not in colours[read:], (order, blocks)
        assert abs(top.lines[0].get_ydata()[0] - m) < 1e-12, (order, blocks)
        assert f"l = {{l:.3f}}" in top.get_title() and f"block {{blocks}} of 4" in top.get_title()
        bars = [b.get_height() for b in mid.containers[0]]
        np.testing.assert_allclose(bars, tl.online_softmax(seen, BLOCK).numpy(), atol=1e-12)
        np.testing.assert_allclose(mid.lines[0].get_ydata(), torch.softmax(drawn[i], -1).numpy())
        outputs = bottom.lines[0].get_ydata()
        assert len(outputs) == blocks, (order, blocks, outputs)
        so_far = (tl.online_softmax(seen, BLOCK) @ values[i][:read]).item()
        assert abs(outputs[-1] - so_far) < 1e-12, (order, blocks)
        if blocks == 4:
            assert abs(outputs[-1] - exact) < 1e-12, order
        plt.close(fig)
"""
    )


def test_the_computation_behind_a_frame_is_quick(chapter):
    # the numbers behind one frame: under a tenth of a second of processor time (about 0.1 ms
    # here); drawing the frame, its figure and the PNG the widget keeps, about 0.3 s here on a
    # busy 2-core machine
    chapter.inject(
        """
from transformer_lib.widgets import figure_to_png
assert _best_seconds(lambda: online_view("rising", 4)) < 0.1
assert _best_seconds(lambda: figure_to_png(render_online("rising", 4)), repeats=3) < 0.8
"""
    )

"""Chapter 14's widget: every frame differs, and the work behind one frame is quick.

The chapter is executed once (the ``chapter`` fixture); the checks call the same render
functions and data the widget was built from. Times are processor time, best of five,
so a busy machine does not decide the result.
"""

from __future__ import annotations

CHAPTER = "14_encoder_only_decoder_only"


def test_every_guess_frame_differs(chapter):
    chapter.inject(
        """
outputs = guess_box.frames.outputs
assert len(outputs) == len(WIDGET_SENTENCES) * 7 == 21
assert len(set(outputs.values())) == len(outputs)
"""
    )


def test_drawing_one_guess_frame_is_quick(chapter):
    # a frame's computation: BERT's and GPT's top five for one hidden word
    chapter.inject(
        """
assert _best_seconds(lambda: guesses_for(WIDGET_SENTENCES[0], 3)) < 0.1
assert _best_seconds(lambda: render_guesses(WIDGET_SENTENCES[0], 3)) < 0.1
"""
    )

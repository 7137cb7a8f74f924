"""Chapter 15's token widget: every frame distinct, each what render draws (one coloured box per
token of the tokeniser's own encoding), a byte that is part of a character shown as its escape,
within the book's column, and quick to draw."""

from __future__ import annotations

from conftest import assert_frames_fit_the_column

CHAPTER = "15_tokenisation"
# the widget draws only the library's tokenisers (bpe); these cells compare them with others
CELLS_NOT_NEEDED = {"ch15-37d": "BPE from scratch", "ch15-40": "tokenizers' BPE at each size",
                    "ch15-42": "where its merges differ", "ch15-43a": "how far they move",
                    "0bdc7321": "their numbers", "ch15-44": "renumbered like tokenizers",
                    "ch15-54h": "the GPT-4 pattern", "ch15-54i": "its numbers"}  # fmt: skip


def test_the_controls_offer_every_vocabulary_and_sentence(chapter):
    chapter.inject(
        """
frames = tokens_widget.frames
assert frames.names == ("vocab_size", "sentence"), frames.names
assert frames.values == ((256, 512, 1024, 2048, 4096), tuple(SENTENCES)), frames.values
assert len(frames.outputs) == 5 * 4 == len(set(frames.outputs)), len(frames.outputs)
"""
    )


def test_every_frame_shows_a_different_tokenisation(chapter):
    # the token boxes themselves differ, not only the caption that names the vocabulary
    chapter.inject(
        """
import re as re_module

outputs = list(tokens_widget.frames.outputs.values())
assert len(set(outputs)) == len(outputs), "two choices show the same view"
boxes = [tuple(re_module.findall(r"<span[^>]*>(.*?)</span>", shown)) for shown in outputs]
assert all(boxes), "a frame shows no tokens"
assert len(set(boxes)) == len(boxes), "two choices cut their sentence into the same tokens"
"""
    )


def test_each_frame_is_what_render_draws(chapter):
    chapter.inject(
        """
import html as html_module
import re as re_module

for (V, sentence), shown in tokens_widget.frames.outputs.items():
    assert shown == render_tokens(V, sentence), (V, sentence)
    ids = bpe[V].encode(sentence)
    boxes = re_module.findall(r"<span style='[^']*'>(.*?)</span>", shown)
    # one box per token, in order, spelling the tokens with spaces shown as ␣
    expected = [s.replace(" ", "␣") for s in bpe[V].token_strings(ids)]
    assert [html_module.unescape(b) for b in boxes] == expected, (V, sentence)
    assert f"{len(ids)} tokens for {len(sentence)} characters" in shown
    assert f"{len(ids) / len(sentence):.2f} tokens per character" in shown
"""
    )


def test_a_byte_that_is_part_of_a_character_shows_as_its_escape(chapter):
    # the prose promises it: the two UTF-8 bytes of a non-ASCII letter, which no merge learned
    # from Shakespeare (plain ASCII) joins, are two boxes, \xc3 and \xaf, at every size
    chapter.inject(
        """
import re as re_module

beyond_ascii = [s for s in SENTENCES if not s.isascii()]
assert beyond_ascii, "every sentence is plain ASCII: no byte shows as its escape"
for V in bpe:
    for sentence in beyond_ascii:
        shown = tokens_widget.frames.outputs[(V, sentence)]
        boxes = re_module.findall(r"<span style='[^']*'>(.*?)</span>", shown)
        escapes = [b for b in boxes if "\\\\x" in b]
        assert escapes, (V, sentence, boxes)
        assert all(re_module.fullmatch(r"\\\\x[89a-f][0-9a-f]", b) for b in escapes), escapes
"""
    )


def test_every_frame_fits_the_column(chapter):
    assert_frames_fit_the_column(chapter, "tokens_widget")


def test_one_frame_is_drawn_quickly(chapter):
    slowest = chapter.value(
        "max(_best_seconds(lambda: render_tokens(V, s)) for V in bpe for s in SENTENCES)"
    )
    assert slowest < 0.01, f"the slowest frame took {slowest:.1e} s of processor time"

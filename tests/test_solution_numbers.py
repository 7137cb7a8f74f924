"""The numbers that exercise solutions quote in their prose.

A solution's own ``assert`` lines are the checks a reader would write (the right sentence
still wins, the margins shrink). The exact numbers its prose quotes ("between 0.051 and
0.106") are regression pins: they live here, checked against the names the solution's code
leaves behind, so that a changed library cannot leave stale prose and the reader's code
stays free of them. Each solution runs as in test_solutions.py: the chapter's setup cell,
then the solution's code blocks, in a fresh namespace.
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest
from test_solutions import ROOT, SOLUTIONS, setup_cell


def run_solution(label: str) -> dict:
    """The namespace a solution's code leaves, after the chapter's setup cell."""
    (chapter, code), = [(ch, code) for ch, lab, code in SOLUTIONS if lab == label]
    cells = json.loads((ROOT / "chapters" / chapter).read_text())["cells"]
    namespace: dict = {"__name__": f"solution_{label}"}
    exec(compile(setup_cell(cells), f"{chapter}:setup", "exec"), namespace)
    exec(compile(code, f"{chapter}:{label}", "exec"), namespace)
    plt.close("all")
    return namespace


def test_ch14_ex1_counts():
    ns = run_solution("ch14-ex1")
    # "335.2M (the paper rounds to 340M, 1.4% more) and GPT-2 medium to 354.8M"
    assert (ns["bert_large"], ns["gpt2_medium"]) == (335_172_410, 354_823_168)
    assert round(100 * (340e6 - ns["bert_large"]) / ns["bert_large"], 1) == 1.4
    # "24 x 12,596,224 = 302.3M, against 12 x 7,087,872 = 85.1M"
    assert ns["layer_params"](1024, 4096) == 12_596_224
    assert ns["layer_params"](768, 3072) == 7_087_872
    assert (ns["layers_large"], ns["layers_base"]) == (302_309_376, 85_054_464)


def test_ch14_ex2_untied():
    ns = run_solution("ch14-ex2")
    # "38,597,376" more, and "30,522 parameters for BERT, 0.03% of the model"
    assert ns["untied"] - ns["tied"] == 38_597_376 and ns["untied"] == 163_037_184
    assert round(100 * 30_522 / ns["bert"], 2) == 0.03


@pytest.mark.slow
def test_ch14_ex4_guesses():
    ns = run_solution("ch14-ex4")
    copy_loss, copy_top, copy_frog = ns["result"][False]
    _, hidden_top, hidden_frog = ns["result"][True]
    # "in our run its top guess was "big", and "frog" got 0.05 ... finds the frog (0.98)"
    assert copy_top == "big" and round(copy_frog, 2) == 0.05
    assert hidden_top == "frog" and round(hidden_frog, 2) == 0.98


def test_ch18_ex1_margins():
    ns = run_solution("ch18-ex1")
    # "between 0.051 and 0.106, against 0.073 to 0.344 ... (0.080 against 0.196 on average)"
    assert ns["summary"] == [(0.051, 0.106, 0.08), (0.073, 0.344, 0.196)]


def test_ch18_ex2_moves():
    ns = run_solution("ch18-ex2")
    moved = ns["moved"]
    # "their cosines with the correct vectors fall to between 0.954 and 0.998"
    assert (round(moved[1:].min().item(), 3), round(moved[1:].max().item(), 3)) == (0.954, 0.998)
    assert round(ns["batch_cos"], 3) == 0.595  # "cosine 0.595"


def test_ch18_ex3_relu():
    ns = run_solution("ch18-ex3")
    similar = ns["similar"]
    # "their cosines with the GELU vectors lie between 0.384 and 0.676"
    assert (round(similar.min().item(), 3), round(similar.max().item(), 3)) == (0.384, 0.676)


def test_ch18_ex4_shares():
    ns = run_solution("ch18-ex4")
    d, V, per_layer = ns["d"], ns["V"], ns["per_layer"]
    # "11,720,448 parameters, 51.6% of the model; the six layers together hold 10,646,784
    # (each: 591,360 in attention, 1,181,568 in the feed-forward network and 1,536 ...)"
    assert (V * d, 6 * per_layer) == (11_720_448, 10_646_784)
    assert round(100 * ns["share"], 1) == 51.6
    assert per_layer == 591_360 + 1_181_568 + 1_536
    assert round(ns["bert_share"], 2) == 0.21  # "about a fifth"
    assert ns["parts"]["pooler"][0] == 147_840  # "The pooler's 147,840 parameters"

"""Sets 06 (tokenisation) and 07 (a language model): slips named, alternative solutions, the library's contracts.

On the session's release (built once by ``test_exercises.py``):

- each classic slip of these sets fails a public test of its question whose message names it, and
  an answer with the slip also fails at least one test of the question (``SLIPS``);
- two solutions written differently from the reference (``ALTERNATIVES``) pass every public and
  hidden test;
- graded as whole notebooks by ``exercises/grade.py``, in the sandbox where there is one, each
  notebook with a slip gets fewer than full marks and each alternative full marks;
- the given code and the reference solutions follow the library: ``pre_split`` is
  ``tl.BPETokenizer``'s pre-tokenisation, ``train_bpe`` learns ``tl.BPETokenizer``'s merges on a
  longer text, and the decoder block is ``tl.DecoderLayer`` in GPT-2's configuration.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import nbformat
import pytest
from test_exercises import EXERCISES, _run_question, grade_tool, shared_build, shared_release

TOKENS = "06_tokenisation"

# --------------------------------------------------------------------------------------------
# Set 06: the slips, and two alternative solutions
# --------------------------------------------------------------------------------------------

_SOLUTION_MERGE = """
def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
"""

_PRE_SPLIT = '''
import regex
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""
def pre_split(text):
    return regex.findall(GPT2_PATTERN, text)
'''

_TRAIN = """
def train_bpe(text, num_merges):
    word_counts = {}
    for word in WORDS:
        key = tuple(word.encode("utf-8"))
        word_counts[key] = word_counts.get(key, 0) + 1
    words = [list(w) for w in word_counts]
    freqs = list(word_counts.values())
    merges = {}
    for k in range(num_merges):
        total = {}
        for w, n in zip(words, freqs):
            for pair in zip(w, w[1:]):
                total[pair] = total.get(pair, 0) + n
        if not total:
            break
        best = BEST
        merges[best] = 256 + k
        words = [merge(w, best, 256 + k) for w in words]
    return merges
"""


def _train(words: str = "pre_split(text)", best: str = "min(total, key=lambda p: (-total[p], p))") -> str:
    return _PRE_SPLIT + _SOLUTION_MERGE + _TRAIN.replace("WORDS", words).replace("BEST", best)


_OVERLAPPING_MERGE = """
def merge(ids, pair, new_id):
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)  # a pair starts here
        elif i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
            continue  # the second half of the pair just merged
        else:
            out.append(ids[i])
    return out
"""

_TOKEN_BY_TOKEN = """
def decode(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return "".join(vocab[i].decode("utf-8", errors=ERRORS) for i in ids)
"""

# slip: (set, question, answers (the first is the one replaced in a notebook), source,
#        words a failing public test's message must hold)
SLIPS = {
    "merging overlapping pairs twice, as in 'aaa'": (
        TOKENS, "q2", "merge", _OVERLAPPING_MERGE, ["merge([97, 97, 97], (97, 97), 256)", "overlapping",
                                                    "[new_id, 97]"]),
    "a trainer counting pairs across word boundaries": (
        TOKENS, "q3", "train_bpe", _train(words="[text]"), ["across word boundaries", "pre_split"]),
    "decoding token by token (broken UTF-8)": (
        TOKENS, "q5", "decode", _TOKEN_BY_TOKEN.replace("ERRORS", '"replace"'),
        ["decoded on its own", "part of a character", "Join the bytes"]),
    "decoding token by token, strictly": (
        TOKENS, "q5", "decode", _TOKEN_BY_TOKEN.replace("ERRORS", '"strict"'),
        ["UnicodeDecodeError", "part of a character", "Join the bytes"]),
    "pair counts that skip past a counted pair": (TOKENS, "q1", "pair_counts", """
def pair_counts(ids):
    counts, i = {}, 0
    while i + 1 < len(ids):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return counts
""", ["(97, 97) twice", "every adjacent position"]),
    "a trainer breaking ties by the first pair seen": (
        TOKENS, "q3", "train_bpe", _train(best="max(total, key=total.get)"), ["first pair seen", "smallest"]),
    "a trainer splitting on white space": (
        TOKENS, "q3", "train_bpe", _train(words="text.split()"), ["str.split", "pre_split"]),
    "encoding the text as one sequence": (TOKENS, "q4", "encode", _SOLUTION_MERGE + """
def encode(text, merges):
    tokens = list(text.encode("utf-8"))
    for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):
        tokens = merge(tokens, pair, new_id)
    return tokens
""", ["across word boundaries", "pre_split"]),
    "encoding the leftmost pair first": (TOKENS, "q4", "encode", _PRE_SPLIT + """
def encode(text, merges):
    ids = []
    for word in pre_split(text):
        tokens = list(word.encode("utf-8"))
        while True:
            at = [i for i in range(len(tokens) - 1) if (tokens[i], tokens[i + 1]) in merges]
            if not at:
                break
            i = at[0]
            tokens[i:i + 2] = [merges[(tokens[i], tokens[i + 1])]]
        ids += tokens
    return ids
""", ["leftmost pair first", "order learned"]),
    "decoding bytes as Latin-1": (TOKENS, "q5", "decode", """
def decode(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return "".join(chr(b) for i in ids for b in vocab[i])
""", ["Latin-1", "utf-8"]),
}

# The slips the issue lists for each set: graded as whole notebooks, each gets fewer than full marks.
GRADED_SLIPS = [
    "merging overlapping pairs twice, as in 'aaa'",
    "a trainer counting pairs across word boundaries",
    "decoding token by token (broken UTF-8)",
]

# alternative: (set, {answer: source}); each source defines its answer (and what it needs)
ALTERNATIVES = {
    "tokenisation with Counter, a heap and GPT-2's encoding loop": (TOKENS, {
        "pair_counts": """
from collections import Counter


def pair_counts(ids):
    return Counter(zip(ids, ids[1:]))
""",
        "merge": """
def merge(ids, pair, new_id):
    out = list(ids)
    i = 0
    while i < len(out) - 1:
        if (out[i], out[i + 1]) == tuple(pair):
            out[i:i + 2] = [new_id]
        i += 1
    return out
""",
        "train_bpe": """
import heapq
from collections import Counter


def train_bpe(text, num_merges):
    # the pair counts once, then only the changes: a heap with stale entries skipped
    freq = Counter(tuple(w.encode("utf-8")) for w in pre_split(text))
    words, n = [list(w) for w in freq], list(freq.values())
    counts = Counter()
    for w, c in zip(words, n):
        for p, k in pair_counts(w).items():
            counts[p] += c * k
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)
    merges = {}
    while len(merges) < num_merges and heap:
        c, p = heapq.heappop(heap)
        if counts.get(p, 0) != -c:
            continue  # stale
        new_id = 256 + len(merges)
        merges[p] = new_id
        for i, w in enumerate(words):
            new = merge(w, p, new_id)
            if len(new) == len(w):
                continue
            before, after = pair_counts(w), pair_counts(new)
            counts.subtract({q: k * n[i] for q, k in before.items()})
            counts.update({q: k * n[i] for q, k in after.items()})
            for q in set(before) | set(after):
                if counts[q] > 0:
                    heapq.heappush(heap, (-counts[q], q))
            words[i] = new
        counts = +counts  # drop the pairs that are gone
    return merges
""",
        "encode": """
def encode(text, merges):
    out = []
    for word in pre_split(text):
        t = list(word.encode("utf-8"))
        while len(t) > 1:
            pair = min(zip(t, t[1:]), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                break
            t = merge(t, pair, merges[pair])
        out += t
    return out
""",
        "decode": """
def decode(ids, merges):
    parts = {v: k for k, v in merges.items()}

    def spell(i):
        if i < 256:
            return bytes([i])
        a, b = parts[i]
        return spell(a) + spell(b)

    data = bytearray()
    for i in ids:
        data += spell(i)
    return data.decode("utf-8", "replace")
""",
    }),
    "tokenisation with numpy, recursion and max": (TOKENS, {
        "pair_counts": """
import numpy as np


def pair_counts(ids):
    a = np.asarray(ids, dtype=np.int64)
    if a.size < 2:
        return {}
    pairs, counts = np.unique(np.stack([a[:-1], a[1:]], axis=1), axis=0, return_counts=True)
    return {(int(x), int(y)): int(c) for (x, y), c in zip(pairs, counts)}
""",
        "merge": """
def merge(ids, pair, new_id):
    if len(ids) < 2:
        return list(ids)
    if ids[0] == pair[0] and ids[1] == pair[1]:
        return [new_id] + merge(ids[2:], pair, new_id)
    return [ids[0]] + merge(ids[1:], pair, new_id)
""",
        "train_bpe": """
from collections import Counter


def train_bpe(text, num_merges):
    words = Counter(pre_split(text))
    seqs = {w: list(w.encode("utf-8")) for w in words}
    merges = {}
    for k in range(num_merges):
        counts = Counter()
        for w, n in words.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                counts[s[i], s[i + 1]] += n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges[best] = 256 + k
        seqs = {w: merge(s, best, 256 + k) for w, s in seqs.items()}
    return merges
""",
        "encode": """
def encode(text, merges):
    by_id = {v: k for k, v in merges.items()}
    ids = []
    for word in pre_split(text):
        t = list(word.encode())
        for new_id in sorted(by_id):
            if len(t) < 2:
                break
            t = merge(t, by_id[new_id], new_id)
        ids += t
    return ids
""",
        "decode": """
def decode(ids, merges):
    vocab = [bytes([i]) for i in range(256)] + [b""] * len(merges)
    for (a, b), new_id in sorted(merges.items(), key=lambda kv: kv[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
""",
    }),
}


# --------------------------------------------------------------------------------------------
# Question by question, in this process
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    """The session's release, the one test_exercises.py reads (built once, shared)."""
    return shared_release(tmp_path_factory, worker_id)


def _question_tests(release: Path, set_name: str) -> dict[str, list[str]]:
    """Each question of a set and the answers its tests take."""
    import inspect

    from otter.test_files import ExceptionTestFile

    info = grade_tool.load_release(release)[set_name]
    out = {}
    for q, source in info.tests.items():
        cases = ExceptionTestFile.from_string(source, path=f"tests/{q}.py").test_cases
        out[q] = sorted({n for c in cases for n in inspect.signature(c.body.test_func).parameters})
    return out


def _namespace_of(release: Path, set_name: str, replaced: dict[str, str]) -> dict:
    """The reference solutions' namespace (the givens run too) with some answers replaced."""
    import numpy as np

    nb = nbformat.read(release / set_name / "autograder" / f"{set_name}.ipynb", as_version=4)
    namespace: dict = {"np": np, "__name__": "__main__"}
    for cell in nb.cells:
        if cell.cell_type != "code" or "grader" in cell.source or "otter" in cell.source:
            continue
        if any(cell.source.startswith(f"def {name}(") for name in replaced):
            continue
        if cell.source.startswith("def ") or cell.source.startswith(("import", "from", "GPT2")):
            exec(cell.source, namespace)
    for source in replaced.values():
        exec(source, namespace)
    return namespace


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_public_self_check_names_the_slip(release, slip, monkeypatch):
    """The answer with the slip fails a public test of its question, whose message names the slip."""
    set_name, question, answer, source, words = SLIPS[slip]
    public, hidden = _run_question(release, set_name, question, answer, source, monkeypatch)
    messages = [r.message for r in public if not r.passed]
    assert any(all(w in m for w in words) for m in messages), messages


@pytest.mark.parametrize("alternative", sorted(ALTERNATIVES))
def test_an_alternative_solution_passes_every_test(release, alternative, monkeypatch):
    """Written differently from the reference, but right: every public and hidden test of every question passes."""
    import sys

    import numpy as np
    from otter.test_files import ExceptionTestFile

    set_name, sources = ALTERNATIVES[alternative]
    info = grade_tool.load_release(release)[set_name]
    namespace = _namespace_of(release, set_name, sources)
    monkeypatch.setitem(sys.modules, "exercise_checks", info.checks)
    assert set(sources) == info.answer_names
    for question, source in info.tests.items():
        tests = ExceptionTestFile.from_string(source, path=f"tests/{question}.py")
        with np.errstate(all="ignore"):
            tests.run(namespace)
        failed = [(r.test_case.name, r.message) for r in tests.test_case_results if not r.passed]
        assert not failed, (question, failed)


# --------------------------------------------------------------------------------------------
# Whole notebooks, graded
# --------------------------------------------------------------------------------------------


def _notebook_with(release: Path, set_name: str, sources: dict[str, str]):
    """The released solution notebook of a set, with the cells of some answers replaced."""
    nb = nbformat.read(release / set_name / "autograder" / f"{set_name}.ipynb", as_version=4)
    for name, source in sources.items():
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}("))
        cell.source = source.strip("\n")
    return nb


@pytest.fixture(scope="session")
def graded_variants(tmp_path_factory, worker_id, release) -> dict:
    """The notebooks with a slip and the alternative solutions, graded by exercises/grade.py in one batch."""

    def build(root: Path) -> dict:
        folder = root / "submissions"
        folder.mkdir(parents=True)
        expected = {}
        for k, slip in enumerate(GRADED_SLIPS):
            set_name, _, answer, source, _ = SLIPS[slip]
            nbformat.write(_notebook_with(release, set_name, {answer: source}), folder / f"slip_{k}.ipynb")
            expected[f"slip_{k}.ipynb"] = {"set": set_name, "full": False, "what": slip}
        for k, alternative in enumerate(sorted(ALTERNATIVES)):
            set_name, sources = ALTERNATIVES[alternative]
            nbformat.write(_notebook_with(release, set_name, sources), folder / f"alternative_{k}.ipynb")
            expected[f"alternative_{k}.ipynb"] = {"set": set_name, "full": True, "what": alternative}
        trusted = not grade_tool.sandbox_kind()
        start = time.monotonic()
        rows = grade_tool.grade_folder(folder, root / "grades.csv", release=release, jobs=2,
                                       limits=grade_tool.Limits(cpu_seconds=60, wall_seconds=240, memory_mb=2048),
                                       progress=False, trusted=trusted)
        seconds = time.monotonic() - start
        with open(root / "grades.csv", newline="") as f:
            on_disk = list(csv.DictReader(f))
        return {"rows": rows, "on_disk": on_disk, "expected": expected, "seconds": seconds}

    return shared_build(tmp_path_factory, worker_id, "exercise_variant_grades", build)


def test_graded_slips_lose_points_and_alternatives_get_full_marks(graded_variants):
    problems = []
    rows = {r["submission"]: r for r in graded_variants["rows"]}
    assert sorted(rows) == sorted(graded_variants["expected"])
    for name, want in graded_variants["expected"].items():
        row = rows[name]
        total, possible = float(row["total"] or 0), float(row["possible"] or 0)
        if row["exercise"] != want["set"] or row["status"] != "ok" or not possible:
            problems.append(f"{name} ({want['what']}): {row['exercise']} {row['status']} {row['detail']}")
        elif want["full"] and total != possible:
            problems.append(f"{name} ({want['what']}): {total}/{possible}, expected full marks ({row['detail']})")
        elif not want["full"] and not 0 < total < possible:
            problems.append(f"{name} ({want['what']}): {total}/{possible}, expected fewer than full marks")
    assert not problems, "\n".join(problems)
    print(f"graded {len(rows)} notebooks in {graded_variants['seconds']:.1f} s")


# --------------------------------------------------------------------------------------------
# The library's contracts
# --------------------------------------------------------------------------------------------


def _solutions(name: str) -> dict:
    """The names an instructor notebook defines (solutions and givens), without running its tests."""
    import sys

    namespace: dict = {"__name__": "__main__"}
    sys.path.insert(0, str(EXERCISES / name))
    try:
        for cell in nbformat.read(EXERCISES / name / "instructor.ipynb", as_version=4).cells:
            if cell.cell_type == "code" and "def test_" not in cell.source and "otter" not in cell.source:
                exec(compile(cell.source, f"{name}/instructor.ipynb", "exec"), namespace)
    finally:
        sys.path.remove(str(EXERCISES / name))
        for module in [n for n in sys.modules if n == "exercise_checks" or n.startswith("exercise_checks.")]:
            del sys.modules[module]
    return namespace


def test_pre_split_is_the_librarys_pre_tokenisation():
    import transformer_lib as tl
    from transformer_lib.tokenizer import GPT2_PATTERN

    solutions = _solutions(TOKENS)
    assert solutions["GPT2_PATTERN"] == GPT2_PATTERN
    text = (EXERCISES.parent / "data" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:20_000]
    for s in [text, "I'll say, \"Thou art 2 naïve!\"", "ab ab  ab\n\nx", "日本語の 🤖🤖  x", ""]:
        assert solutions["pre_split"](s) == tl.BPETokenizer().pre_tokenize(s)


def test_the_trainer_encoder_and_decoder_are_the_librarys_on_shakespeare():
    """The reference solutions on 5,000 characters of Shakespeare, 60 merges: tl.BPETokenizer's merges and tokens."""
    import transformer_lib as tl

    solutions = _solutions(TOKENS)
    text = (EXERCISES.parent / "data" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:5_000]
    tok = tl.BPETokenizer().train(text, 256 + 60)
    merges = solutions["train_bpe"](text, 60)
    assert list(merges.items()) == list(tok.merges.items())
    sample = text[-300:] + " naïve 日本 🤖"
    ids = solutions["encode"](sample, merges)
    assert ids == tok.encode(sample)
    assert solutions["decode"](ids, merges) == tok.decode(ids) == sample

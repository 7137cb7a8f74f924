"""Tests for the graded exercises (``exercises/``): authoring, the release, the self-checks.

One release is built per test session (with ``otter assign``) into a temporary folder; under
pytest-xdist whichever worker gets there first builds it and the others share it through a file
lock. The tests here read it: what students and autograders get (the checks package included),
that every question has public and hidden tests, that the instructor notebooks pass their own
tests, that a released notebook's self-checks fail with pointers, that hidden tests catch naive
answers the public ones let through, and that public self-checks name classic mistakes.
Grading whole folders is tested in ``test_exercises_grading.py`` (on the same release), the
exercises' conventions against the library's in ``test_exercises_conventions.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
SETS = sorted(p.parent.name for p in EXERCISES.glob("*/instructor.ipynb"))
MIXED_SET = "01_softmax_cosine"  # the set the broken and tampering submissions are made from


def _load(name: str, package: bool = False):
    """Import ``exercises/<name>.py``, or the package ``exercises/<name>/``, without touching sys.path."""
    path = EXERCISES / name / "__init__.py" if package else EXERCISES / f"{name}.py"
    where = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(name if package else f"exercises_{name}", path,
                                                  submodule_search_locations=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


release_tool = _load("release")
grade_tool = _load("grading", package=True)


# --------------------------------------------------------------------------------------------
# The release, built once per session
# --------------------------------------------------------------------------------------------

NAIVE_SOFTMAX = """\
    x = np.asarray(x, dtype=float)
    e = np.exp(x)  # no maximum subtracted: overflows for large logits
    return e / np.sum(e, axis=axis, keepdims=True)
"""



_BUILT: dict[str, dict] = {}  # what this process built or read, by name


def shared_build(tmp_path_factory, worker_id: str, name: str, build) -> dict:
    """Build once per session: under xdist the first worker to get the lock builds, others read the result."""
    if name in _BUILT:
        return _BUILT[name]
    if worker_id == "master":
        _BUILT[name] = build(tmp_path_factory.mktemp(name))
        return _BUILT[name]
    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / f"{name}.lock")):
        cache = shared / f"{name}.json"
        if cache.is_file():
            _BUILT[name] = json.loads(cache.read_text())
        else:
            _BUILT[name] = build(shared / name)
            cache.write_text(json.dumps(_BUILT[name]))
    return _BUILT[name]


def _build_release(root: Path) -> dict:
    start = time.monotonic()
    release_tool.build_release(root / "release", jobs=2, run_tests=False)
    return {"release": str(root / "release"), "seconds": time.monotonic() - start}


def shared_release(tmp_path_factory, worker_id: str) -> Path:
    """The release built from the instructor notebooks with otter assign, once per session."""
    return Path(shared_build(tmp_path_factory, worker_id, "exercise_release", _build_release)["release"])


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    """The session's release (:func:`shared_release`)."""
    return shared_release(tmp_path_factory, worker_id)



# --------------------------------------------------------------------------------------------
# The release
# --------------------------------------------------------------------------------------------


def test_there_are_nine_sets_of_three_to_six_questions(release):
    assert len(SETS) >= 9
    sets = grade_tool.load_release(release)
    assert sorted(sets) == SETS
    for info in sets.values():
        assert 3 <= len(info.tests) <= 6, info.name
        assert all(points > 0 for points in info.possible.values())


@pytest.mark.parametrize("name", SETS)
def test_student_notebook_has_no_solutions_and_no_hidden_tests(release, name):
    student = release / name / "student"
    nb = nbformat.read(student / f"{name}.ipynb", as_version=4)
    text = json.dumps(nb)
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "hidden=True" not in text and "hidden: true" not in text
    public = nb.metadata["otter"]["tests"]
    assert public, "the public tests travel in the notebook's metadata"
    solution = nbformat.read(release / name / "autograder" / f"{name}.ipynb", as_version=4)
    solved = {c.source for c in solution.cells if c.cell_type == "code"}
    answers = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("def ")]
    assert answers and not any(a in solved for a in answers), "every answer cell must differ from the solution"


@pytest.mark.parametrize("name", SETS)
def test_every_question_has_public_and_hidden_tests(release, name):
    """Per question, not in total: one question without hidden tests fails it."""
    from otter.test_files import ExceptionTestFile

    with zipfile_open(release / name) as zf:
        tests = {n: zf.read(n).decode() for n in zf.namelist() if n.startswith("tests/") and n.endswith(".py")}
    assert len(tests) >= 3
    for path, source in sorted(tests.items()):
        cases = ExceptionTestFile.from_string(source, path=path).test_cases
        hidden = [c.name for c in cases if c.hidden]
        public = [c.name for c in cases if not c.hidden]
        assert public and hidden, f"{path}: public {public}, hidden {hidden}"


def _package_files() -> list[str]:
    """The source files of the checks package, relative to the package folder."""
    package = EXERCISES / "exercise_checks"
    return sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("name", SETS)
def test_the_checks_package_ships_with_students_and_autograders(release, name):
    """The whole package, file for file, in the student folder and in the autograder zip."""
    files = _package_files()
    assert {"__init__.py", "recording.py", "compare.py", "inputs.py"} <= set(files)
    assert len([f for f in files if f.startswith("set0")]) == len(SETS)
    for folder in (release / name / "student", release / name / "autograder"):
        shipped = folder / "exercise_checks"
        assert not shipped.is_symlink()
        for f in files:
            assert (shipped / f).read_bytes() == (EXERCISES / "exercise_checks" / f).read_bytes(), (folder, f)
    with zipfile_open(release / name) as zf:
        listed = sorted(n.removeprefix("files/exercise_checks/") for n in zf.namelist()
                        if n.startswith("files/exercise_checks/"))
    assert listed == files


def test_each_set_folder_reaches_the_package_through_a_link():
    for name in SETS:
        link = EXERCISES / name / "exercise_checks"
        assert link.is_symlink() and link.resolve() == (EXERCISES / "exercise_checks").resolve(), name


def zipfile_open(result: Path):
    import zipfile

    return zipfile.ZipFile(next((result / "autograder").glob("*-autograder_*.zip")))


# --------------------------------------------------------------------------------------------
# Instructor notebooks and student self-checks
# --------------------------------------------------------------------------------------------


def _forget_checks() -> None:
    """Drop the checks package and its modules from sys.modules, so the next import reads them anew."""
    for name in [n for n in sys.modules if n == "exercise_checks" or n.startswith("exercise_checks.")]:
        del sys.modules[name]


def _run_cells(path: Path, monkeypatch) -> tuple[dict, list[nbformat.NotebookNode], list[str]]:
    """Run a notebook's code cells top to bottom in one namespace, in its own folder.

    Like a kernel (``Restart & Run All`` with errors allowed) but in this process, where numpy,
    torch and otter are already imported. Returns the namespace, the ``grader.check`` cells
    (not run) and the errors raised by the other cells.
    """
    monkeypatch.chdir(path.parent)
    monkeypatch.syspath_prepend(str(path.parent))
    _forget_checks()
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    checks, errors = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.source.startswith("grader.check"):
            checks.append(cell)
            continue
        try:
            exec(compile(cell.source, f"{path.name}, cell {index}", "exec"), namespace)
        except Exception as e:
            errors.append(f"cell {index} ({cell.source.splitlines()[0]}): {type(e).__name__}: {e}")
    _forget_checks()
    return namespace, checks, errors


@pytest.mark.parametrize("name", SETS)
def test_instructor_notebook_passes_its_own_tests(name, monkeypatch):
    """Run the instructor notebook top to bottom: every test cell calls its test on the solution."""
    nb = nbformat.read(EXERCISES / name / "instructor.ipynb", as_version=4)
    tests = [c for c in nb.cells if c.cell_type == "code" and "\ndef test_" in "\n" + c.source]
    assert len(tests) >= 3 * 4, "each question has public and hidden tests"
    _, _, errors = _run_cells(EXERCISES / name / "instructor.ipynb", monkeypatch)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", SETS)
def test_released_student_notebook_self_checks_fail_with_pointers(release, name, tmp_path, monkeypatch):
    """Do what a student does first: run the released notebook and every grader.check; all fail, saying why."""
    student = tmp_path / "student"
    shutil.copytree(release / name / "student", student)
    namespace, checks, _ = _run_cells(student / f"{name}.ipynb", monkeypatch)
    monkeypatch.syspath_prepend(str(student))
    questions = [c for c in checks if c.source.startswith('grader.check("')]
    assert len(questions) >= 3
    for cell in questions:
        result = eval(cell.source, namespace)
        text = repr(result)
        assert not result.passed_all and "Test case failed" in text, text
        assert "returned None: its body is still `...`" in text, text
    _forget_checks()


# --------------------------------------------------------------------------------------------
# Hidden tests catch the naive answers that the public ones let through
# --------------------------------------------------------------------------------------------

NAIVE_ANSWERS = {
    "softmax that subtracts one maximum for the whole array": ("01_softmax_cosine", "q2", "softmax", """
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x))
    return e / e.sum(axis=axis, keepdims=True)
"""),
    "cosine similarity that divides by a zero norm": ("01_softmax_cosine", "q1", "cosine_similarity", """
def cosine_similarity(A, B=None):
    B = A if B is None else B
    return (A / np.linalg.norm(A, axis=1, keepdims=True)) @ (B / np.linalg.norm(B, axis=1, keepdims=True)).T
"""),
    "scores that transpose K for two or four axes only": ("02_masked_attention", "q1", "attention_scores", """
def attention_scores(Q, K):
    K_T = np.transpose(K, (0, 1, 3, 2)) if K.ndim == 4 else K.T
    return Q @ K_T / np.sqrt(Q.shape[-1])
"""),
    "masked attention whose softmax does not subtract the maximum": (
        "02_masked_attention", "q4", "masked_attention", """
def masked_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores)
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ V, weights
"""),
    "decoder mask that assumes the padding is at the end": ("02_masked_attention", "q5", "decoder_mask", """
def decoder_mask(tokens, pad_id):
    seq = tokens.shape[1]
    lengths = (tokens != pad_id).sum(axis=1)
    keep = np.arange(seq)[None, :] < lengths[:, None]
    return np.tril(np.ones((seq, seq), dtype=bool)) & keep[:, None, None, :]
"""),
    "multi-head attention that takes the values from the keys": ("03_multi_head", "q3", "multi_head_attention", """
def multi_head_attention(query, key, value, params, num_heads, mask=None):
    b, q_len, d = query.shape
    def split(x):
        return x.reshape(b, x.shape[1], num_heads, d // num_heads).transpose(0, 2, 1, 3)
    q = split(query @ params["W_q"].T + params["b_q"])
    k = split(key @ params["W_k"].T + params["b_k"])
    v = split(key @ params["W_v"].T + params["b_v"])
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d // num_heads)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return (w @ v).transpose(0, 2, 1, 3).reshape(b, q_len, d) @ params["W_o"].T + params["b_o"], w
"""),
    "a rotation that only works for whole offsets": ("04_positional", "q2", "rotation_matrix", """
def rotation_matrix(phi, omega):
    c, s = np.cos(omega * int(phi)), np.sin(omega * int(phi))
    return np.array([[c, s], [-s, c]])
"""),
    "layer norm with the variance as mean(x**2) - mean**2": ("05_layers_decoding", "q1", "layer_norm", """
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = (x ** 2).mean(-1, keepdims=True) - mean ** 2
    return (x - mean) / np.sqrt(var + eps) * gamma + beta
"""),
    "greedy decoding one token too long": ("05_layers_decoding", "q4", "greedy_decode", """
def greedy_decode(next_token_logits, max_len, *, bos_id=1, eos_id=2):
    tokens = [bos_id]
    for _ in range(max_len + 1):
        tokens.append(int(np.argmax(next_token_logits(tokens))))
        if tokens[-1] == eos_id:
            break
    return tokens[1:]
"""),
    "greedy decoding that counts the start token against max_len": ("05_layers_decoding", "q4", "greedy_decode", """
def greedy_decode(next_token_logits, max_len, *, bos_id=1, eos_id=2):
    tokens = [bos_id]
    while len(tokens) < max_len:
        tokens.append(int(np.argmax(next_token_logits(tokens))))
        if tokens[-1] == eos_id:
            break
    return tokens[1:]
"""),
}


def _run_question(release: Path, set_name: str, question: str, answer: str, source: str, monkeypatch) -> tuple:
    """Run a question's released tests (public and hidden) on an answer; its (public, hidden) results."""
    from otter.test_files import ExceptionTestFile

    info = grade_tool.load_release(release)[set_name]
    namespace: dict = {"np": np}
    exec(source, namespace)
    monkeypatch.setitem(sys.modules, "exercise_checks", info.checks)
    tests = ExceptionTestFile.from_string(info.tests[question], path=f"tests/{question}.py")
    with np.errstate(all="ignore"):
        tests.run({answer: namespace[answer]})
    public = [r for r in tests.test_case_results if not r.test_case.hidden]
    hidden = [r for r in tests.test_case_results if r.test_case.hidden]
    return public, hidden


@pytest.mark.parametrize("mistake", sorted(NAIVE_ANSWERS))
def test_hidden_tests_catch_what_the_public_ones_let_through(release, mistake, monkeypatch):
    """Each naive answer passes every public test of its question and fails a hidden one."""
    public, hidden = _run_question(release, *NAIVE_ANSWERS[mistake], monkeypatch)
    assert public and all(r.passed for r in public), [r.message for r in public if not r.passed]
    assert any(not r.passed for r in hidden)


def test_the_public_self_check_fails_a_naive_softmax_with_the_overflow_hint(release, tmp_path, monkeypatch):
    """What set 1 is about shows before grading: grader.check("q2") on a softmax that overflows fails, saying why."""
    student = tmp_path / "student"
    shutil.copytree(release / MIXED_SET / "student", student)
    path = student / f"{MIXED_SET}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def softmax("))
    cell.source = "def softmax(x, axis=-1):\n" + NAIVE_SOFTMAX
    nbformat.write(nb, path)
    namespace, _, _ = _run_cells(path, monkeypatch)
    monkeypatch.syspath_prepend(str(student))
    with np.errstate(all="ignore"):
        result = eval('grader.check("q2")', namespace)
    text = repr(result)
    _forget_checks()
    assert not result.passed_all and "All test cases passed" not in text, text
    assert "np.exp overflowed" in text and "subtract the maximum" in text, text


# --------------------------------------------------------------------------------------------
# The public self-checks name the mistakes students make
# --------------------------------------------------------------------------------------------

_MASKED = """
def masked_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / {scale}
    if mask is not None and {use_mask}:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True), nan=0.0)
    return {returned}
"""


def _masked(scale: str = "np.sqrt(d_k)", use_mask: str = "True", returned: str = "weights @ V, weights") -> str:
    return _MASKED.format(scale=scale, use_mask=use_mask, returned=returned)


_MHA = """
def multi_head_attention(query, key, value, params, num_heads, mask=None):
    b, q_len, d = query.shape
    d_k = d // num_heads
    def split(x):
        return x.reshape(b, x.shape[1], num_heads, d_k).transpose(0, 2, 1, 3)
    q = split(query @ params["W_q"]{t} + params["b_q"])
    k = split(key @ params["W_k"]{t} + params["b_k"])
    v = split(value @ params["W_v"]{t} + params["b_v"])
    {swap}
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt({scale})
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = (w @ v).transpose(0, 2, 1, 3).reshape(b, q_len, d) @ params["W_o"]{t} + params["b_o"]
    return {returned}
"""


def _mha(swap: str = "", scale: str = "d_k", returned: str = "out, w", t: str = ".T") -> str:
    return _MHA.format(swap=swap, scale=scale, returned=returned, t=t)


# mistake: (set, question, answer, source, words the message of a failing public test must hold)
MISTAKES = {
    "softmax with keepdims forgotten": ("01_softmax_cosine", "q2", "softmax", """
def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis))
    return e / e.sum(axis=axis)
""", ["softmax", "ValueError", "keepdims=True", "axis 1"]),
    "masked attention that ignores the mask": ("02_masked_attention", "q4", "masked_attention",
                                                _masked(use_mask="False"), ["mask", "ignored", "-inf"]),
    "masked attention returning (weights, output)": ("02_masked_attention", "q4", "masked_attention",
                                                     _masked(returned="weights, weights @ V"),
                                                     ["masked_attention", "wrong order", "(output, weights)"]),
    "masked attention dividing by d_k": ("02_masked_attention", "q4", "masked_attention", _masked(scale="d_k"),
                                         ["d_k", "square root"]),
    "masked attention scaling by the number of keys": ("02_masked_attention", "q4", "masked_attention",
                                                       _masked(scale="np.sqrt(K.shape[-2])"),
                                                       ["k_len", "number of keys", "d_k"]),
    "masked attention with rows of nan": ("02_masked_attention", "q4", "masked_attention",
                                          _masked().replace("np.nan_to_num(", "(").replace(", nan=0.0)", ")"),
                                          ["weights", "NaN", "nothing to attend to"]),
    "masked attention with one key too few": ("02_masked_attention", "q4", "masked_attention",
                                              _masked(returned="weights @ V, weights[..., 1:]"),
                                              ["weights", "shape", "expected"]),
    "masked attention with unrecognised weights": ("02_masked_attention", "q4", "masked_attention",
                                                   _masked(returned="weights @ V, weights ** 2"),
                                                   ["weights", "do not match"]),
    "scores scaled by the number of keys": ("02_masked_attention", "q1", "attention_scores", """
def attention_scores(Q, K):
    return Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-2])
""", ["attention_scores", "k_len", "number of keys"]),
    "decoder mask with the pad id hard-coded": ("02_masked_attention", "q5", "decoder_mask", """
def decoder_mask(tokens, pad_id):
    seq = tokens.shape[1]
    return np.tril(np.ones((seq, seq), dtype=bool)) & (tokens != 0)[:, None, None, :]
""", ["decoder_mask", "pad", "hard-coded"]),
    "padding mask without the heads axis": ("02_masked_attention", "q3", "padding_mask", """
def padding_mask(tokens, pad_id):
    return (tokens != pad_id)[:, None, :]
""", ["padding_mask", "(2, 1, 4)", "(2, 1, 1, 4)", "tl.padding_mask"]),
    "decoder mask without the heads axis": ("02_masked_attention", "q5", "decoder_mask", """
def decoder_mask(tokens, pad_id):
    seq = tokens.shape[1]
    return np.tril(np.ones((seq, seq), dtype=bool))[None] & (tokens != pad_id)[:, None, :]
""", ["decoder_mask", "(2, 4, 4)", "(2, 1, 4, 4)", "heads axis"]),
    "multi-head attention with the weights applied as x @ W": (
        "03_multi_head", "q3", "multi_head_attention", _mha(t=""), ["x @ W + b", "x @ W.T + b"]),
    "feed-forward network with the weights applied as x @ W": ("05_layers_decoding", "q2", "feed_forward", """
def feed_forward(x, W_1, b_1, W_2, b_2):
    return np.maximum(0.0, x @ W_1 + b_1) @ W_2 + b_2
""", ["feed_forward", "ValueError", "(out_features, in_features)", "x @ W.T"]),
    "greedy decoding that returns the start token": ("05_layers_decoding", "q4", "greedy_decode", """
def greedy_decode(next_token_logits, max_len, *, bos_id=1, eos_id=2):
    tokens = [bos_id]
    while len(tokens) <= max_len:
        tokens.append(int(np.argmax(next_token_logits(tokens))))
        if tokens[-1] == eos_id:
            break
    return tokens
""", ["greedy_decode", "bos_id=0", "start token", "tl.greedy_decode"]),
    "multi-head attention with keys and values swapped after projection": (
        "03_multi_head", "q3", "multi_head_attention", _mha(swap="k, v = v, k"),
        ["projected", "keys and values", "swapped"]),
    "multi-head attention scaling by the number of keys": (
        "03_multi_head", "q3", "multi_head_attention", _mha(scale="key.shape[1]"), ["sqrt(k_len)", "sqrt(d_k)"]),
    "multi-head attention returning (weights, output)": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="w, out"),
        ["multi_head_attention", "wrong order"]),
    "multi-head attention averaging the heads' weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w.mean(axis=1)"),
        ["weights", "heads axis", "missing"]),
    "multi-head attention returning one sequence's weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w[0]"),
        ["weights", "batch axis", "missing"]),
    "multi-head attention with unrecognised weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w ** 2"),
        ["weights", "multi_head_attention", "do not match"]),
}


SINGULAR_VERB_AFTER_WEIGHTS = re.compile(r"weights\b[^:\n]*? (has shape|does not match|contains|is wrong)")


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_the_public_self_check_names_the_mistake(release, mistake, monkeypatch):
    """The answer with a classic mistake fails a public test whose message names that mistake."""
    set_name, question, answer, source, words = MISTAKES[mistake]
    public, _ = _run_question(release, set_name, question, answer, source, monkeypatch)
    messages = [r.message for r in public if not r.passed]
    assert any(all(w in m for w in words) for m in messages), messages
    singular = [m for m in messages if SINGULAR_VERB_AFTER_WEIGHTS.search(m)]
    assert not singular, singular


def test_a_square_softmax_without_keepdims_is_named(monkeypatch):
    """No error from numpy for a square array: the check recognises the wrong values instead."""
    monkeypatch.syspath_prepend(str(EXERCISES))
    _forget_checks()
    import exercise_checks

    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis))
        return e / e.sum(axis=axis)

    with pytest.raises(AssertionError, match="keepdims=True"):
        exercise_checks.check_softmax(softmax, np.random.default_rng(0).normal(size=(4, 4)))
    _forget_checks()

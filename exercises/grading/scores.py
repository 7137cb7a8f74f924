"""Scores: the points computed outside the sandbox, a row per submission, the table on disk.

:func:`verify` reruns a set's tests with otter's own test runner in the grader's process, on the
answers the notebook recorded (:class:`exercise_checks.Replay` stands in for each answer), every
expected value computed here with the library: those are the points. :func:`finish_job` turns a
finished job into its row: status, points per question, total, seconds and a detail (otter's
claim from inside the kernel only serves to flag ``tampered``). :class:`ScoreTable` journals each
row at once and moves the CSV into place at the end.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .autograders import CHECKS_MODULE, ExerciseSet
from .discover import Submission
from .files import Refused, copy_regular_files, read_file, read_tail
from .jobs import CPU_LIMIT_MESSAGE, Job
from .sandbox import Limits

STATUS_ORDER = ["ok", "error", "tampered", "out of memory", "timeout", "not a notebook", "not a regular file",
                "empty", "unknown exercise"]
MAX_RESULT_BYTES = 5_000_000  # the worker's result.json
MAX_RECORD_FILES, MAX_RECORD_TOTAL = 10_000, 256_000_000  # what is copied of a record folder


def _tail(job_dir: Path, parts: tuple[str, ...], n: int = 4000) -> str:
    """The last ``n`` bytes of a regular file the job wrote, as text ("" when it is not one, or unreadable).

    The job could have replaced the file with a link or a FIFO: see :func:`.files.read_tail`.
    """
    return read_tail(job_dir, parts, n).decode("utf-8", "replace")


def fmt_points(x: float) -> str:
    """Points as the table writes them: at most two decimals, no trailing zeros."""
    return f"{round(x, 2):g}"


def verify(info: ExerciseSet, record_dir: Path) -> dict[str, float]:
    """Rerun the set's tests in this clean process on the recorded answers; points per question.

    ``record_dir`` must be the grader's own: :func:`finish_job` passes a copy of the regular files
    the job recorded (:func:`copy_records`), never the job's folder itself.
    """
    from otter.test_files import ExceptionTestFile

    checks = info.checks
    previous = sys.modules.get(CHECKS_MODULE)
    sys.modules[CHECKS_MODULE] = checks
    scores = {}
    try:
        for q, source in info.tests.items():
            tf = ExceptionTestFile.from_string(source, path=f"tests/{q}.py")
            env = {name: checks.Replay(name, str(record_dir)) for name in info.answer_names}
            tf.run(env)
            scores[q] = float(tf.score)
    finally:
        if previous is None:
            sys.modules.pop(CHECKS_MODULE, None)
        else:
            sys.modules[CHECKS_MODULE] = previous
    return scores


def record_folder_is_private(job: Job) -> bool:
    """Whether only this job could write its record folder (its own user, mode 0700, in a 0711 folder).

    Then every recorded answer, and any ``.conflict`` mark, is the submission's own evidence.
    Without the sandbox (``--trusted``) every job runs as one user, and the instructor has
    vouched for every notebook: its records count as its own.
    """
    if job.uid is None:
        return True
    try:
        rec, parent = (job.dir / "record").stat(), job.dir.stat()
    except OSError:
        return False
    return rec.st_uid == job.uid and rec.st_mode & 0o077 == 0 and parent.st_uid == os.geteuid() \
        and parent.st_mode & 0o022 == 0


def _worker_result(job: Job) -> dict[str, Any]:
    """What the worker wrote in ``work/result.json`` (an untrusted claim), or {} if nothing readable.

    Read only if it is a regular file of at most ``MAX_RESULT_BYTES`` (the job may have replaced
    it with a link, a FIFO or a huge file).
    """
    try:
        loaded = json.loads(read_file(job.dir, ("work", "result.json"), MAX_RESULT_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError, Refused):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def copy_records(info: ExerciseSet, job: Job, dest: Path) -> int:
    """Copy the regular files of the job's record folder into ``dest`` (the grader's); how many were left out.

    Links, FIFOs and other entries the job may have put there are never read, nor are answers
    larger than the checks would load, nor more than ``MAX_RECORD_FILES`` files or
    ``MAX_RECORD_TOTAL`` bytes.
    """
    recording = getattr(info.checks, "recording", None)
    max_file = int(getattr(recording, "MAX_RECORD_BYTES", 8_000_000))
    return copy_regular_files(job.dir / "record", dest, max_file, MAX_RECORD_FILES, MAX_RECORD_TOTAL)


def _out_of_memory(error: dict) -> bool:
    return "MemoryError" in str(error.get("ename")) or "allocate" in str(error.get("evalue"))


def finish_job(job: Job, info: ExerciseSet, limits: Limits) -> None:
    """Score a finished (or killed) job and fill in its row."""
    sub = job.sub
    seconds = time.monotonic() - job.start
    with tempfile.TemporaryDirectory(prefix="records-") as copy:
        left_out = copy_records(info, job, Path(copy))
        verified = verify(info, Path(copy))
    result = _worker_result(job)
    claimed = result.get("claimed") if isinstance(result.get("claimed"), dict) else {}
    errors = [e for e in result.get("errors", []) if isinstance(e, dict)] if isinstance(
        result.get("errors"), list) else []
    fatal = str(result.get("fatal", ""))
    output_tail = _tail(job.dir, ("work", "worker.out"))

    total, possible = sum(verified.values()), sum(info.possible.values())
    try:
        claimed_total = sum(float(claimed.get(q, 0.0)) for q in info.possible)
    except (TypeError, ValueError):
        claimed_total = 0.0
    try:
        kernel_cpu = float(result.get("kernel_cpu", 0.0))
    except (TypeError, ValueError):
        kernel_cpu = 0.0
    cpu_error = next((e for e in errors if e.get("ename") == "TimeoutError"
                      and CPU_LIMIT_MESSAGE in str(e.get("evalue"))), None)
    died = "DeadKernelError" in fatal or "Kernel died" in fatal
    memory_error = (job.oom_kills > 0 or any(_out_of_memory(e) for e in errors) or "MemoryError" in fatal
                    or (not result and "MemoryError" in output_tail))

    details = []
    private = record_folder_is_private(job)
    if job.library_attempts:
        status = "tampered"
        details.append(f"the notebook reached for the reference library ({job.library_attempts[0]}); "
                       f"{len(job.library_attempts)} attempt(s)")
    elif job.idle:
        status = "timeout"
        details.append(f"no computation for {limits.idle_seconds:g} s (the notebook was waiting), stopped; "
                       "answers checked before then count")
    elif job.timed_out:
        status = "timeout"
        details.append(f"still running after {limits.wall_seconds:g} s, stopped; answers checked before "
                       "then count")
    elif cpu_error or (died and kernel_cpu >= limits.cpu_seconds):
        status = "timeout"
        where = f" in the cell starting `{cpu_error.get('line', '')}`" if cpu_error else ""
        rest = "the rest of the notebook ran" if cpu_error and not died else "the kernel was stopped"
        details.append(f"CPU time limit of {limits.cpu_seconds} s reached{where}; {rest}")
    elif memory_error:
        status = "out of memory"
        where = next((e for e in errors if _out_of_memory(e)), None)
        details.append(f"memory limit of {limits.memory_mb} MB reached"
                       + (f" in the cell starting `{where.get('line', '')}`" if where else ""))
    elif claimed and claimed_total > total + 1e-9 and private:
        status = "tampered"
        details.append(f"the notebook's own checks claimed {fmt_points(claimed_total)}/"
                       f"{fmt_points(possible)}, its answers are worth {fmt_points(total)}")
    elif fatal or not result or errors:
        status = "error"
        if fatal:
            details.append("the kernel died (the notebook exited the process or crashed)" if died else fatal)
        elif not result:
            details.append("the grader stopped unexpectedly: " + output_tail.strip().splitlines()[-1][:200]
                           if output_tail.strip() else "the grader stopped unexpectedly")
        if errors:
            e = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            details.append(f"{e.get('ename')}: {str(e.get('evalue'))[:120]} in the cell starting "
                           f"`{e.get('line', '')}`{more}")
    else:
        status = "ok"
    if not private:
        details.append("its record folder was reachable by other jobs, so a mismatch is not counted as its "
                       "own")
    if left_out:
        details.append(f"{left_out} entr{'y' if left_out == 1 else 'ies'} of its record folder were not read "
                       "(not a regular file, or too large)")
    if sub.mentions_library:
        details.append("the code mentions transformer_lib (answers should be the student's own code)")
    sub.row = {
        "submission": sub.name,
        "exercise": info.name,
        "status": status,
        **{q: fmt_points(v) for q, v in verified.items()},
        "total": fmt_points(total),
        "possible": fmt_points(possible),
        "seconds": f"{seconds:.1f}",
        "detail": "; ".join(details),
    }


class ScoreTable:
    """The CSV of grades, written so that nothing a submission does can forge or lose it.

    The path is checked and a journal beside it (``<out>.journal``, one JSON row per line) is
    opened when grading starts, so a bad ``--out`` fails before any notebook runs. Each row goes
    to the journal, flushed to disk, the moment its submission is graded. At the end the CSV is
    written to a temporary file in the same folder and moved into place with ``os.replace`` (a
    reader never sees half a table); if that fails, the table goes to standard output and the
    error says where the journal is. The SHA-256 of the CSV written is kept in ``checksum``:
    ``main`` prints it, so a table changed after the grader exited no longer matches.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(os.path.abspath(out))
        if self.out.is_dir():
            raise SystemExit(f"--out must be a file path, got the folder {self.out}")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.journal_path = self.out.with_name(self.out.name + ".journal")
        try:  # never through a link planted where the journal goes
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
            self.journal = open(fd, "w", encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"--out: cannot write beside {self.out}: {e.strerror or e}") from None
        self.checksum = ""

    def record(self, sub: Submission) -> None:
        """Journal the row of ``sub`` now, flushed to disk."""
        row = sub.row or {"submission": sub.name, "status": sub.status, "detail": sub.detail}
        self.journal.write(json.dumps(row) + "\n")
        self.journal.flush()
        os.fsync(self.journal.fileno())

    def finish(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        """Write the CSV beside the journal and move it into place; then the journal goes."""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        data = buffer.getvalue().encode("utf-8")
        self.checksum = hashlib.sha256(data).hexdigest()
        self.journal.close()
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.out.name}.", dir=self.out.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.out)
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            sys.stdout.write(data.decode("utf-8"))
            raise SystemExit(
                f"could not write {self.out} ({e.strerror or e}): the table is printed above, and every "
                f"row is in {self.journal_path}"
            ) from None
        os.unlink(self.journal_path)

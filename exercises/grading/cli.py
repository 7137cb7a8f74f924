"""The command line and the batch: ``python exercises/grade.py SUBMISSIONS`` (``make grade``).

:func:`grade_folder` checks the output path and opens its journal, reads the release into
memory, inspects every submission, then runs up to ``jobs`` of them at once in their sandboxes,
stopping a job at the wall-clock limit or once it has been idle for ``idle_seconds``, and scores
each as it ends. :func:`main` is the command line; it prints a summary and the table's SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .autograders import load_release, question_key, restore_changes, snapshot
from .discover import discover, inspect
from .files import Refused, SubmittedFolder
from .jobs import Job, job_cpu_seconds, read_library_flags, start_job, stop_job
from .sandbox import JobUsers, Limits, sandbox_kind
from .scores import STATUS_ORDER, ScoreTable, finish_job, fmt_points

DEFAULT_RELEASE = Path(__file__).resolve().parent.parent / "release"  # what `make exercises` builds


def grade_folder(
    submissions: Path,
    out: Path,
    release: Path = DEFAULT_RELEASE,
    jobs: int = 2,
    limits: Limits | None = None,
    keep: bool = False,
    progress: bool = True,
    workdir: Path | None = None,
    table: list | None = None,
    trusted: bool = False,
) -> list[dict[str, Any]]:
    """Grade every file under ``submissions``; write the CSV ``out``; return its rows.

    Each submission runs in the sandbox of :func:`sandbox_kind`; where there is none, grading
    refuses to start unless ``trusted`` says every submission may run as the grader's own user.
    ``table``, when given, receives the :class:`ScoreTable` (its ``checksum`` once written).
    """
    import tqdm as tqdm_module

    tqdm_module.tqdm.monitor_interval = 0  # no monitor thread
    limits = limits or Limits()
    if not submissions.is_dir():
        raise SystemExit(f"{submissions} is not a folder")
    sandboxed = bool(sandbox_kind())
    if not sandboxed and not trusted:
        raise SystemExit(
            "grading untrusted notebooks needs a sandbox: run the grader as root with bubblewrap installed "
            "(each submission then runs as a user of its own), or in a container with otter's Docker-based "
            "`otter grade`; pass --trusted only if you trust every notebook in the folder"
        )
    journal = ScoreTable(out)  # checked and opened before any submission runs
    if table is not None:
        table.append(journal)
    sets = load_release(release)
    if not sets:
        raise SystemExit(f"no autograders under {release}: run `make exercises` first")
    release_before = snapshot(release)
    folder = SubmittedFolder(submissions)  # every submission is read through it: no link is followed
    try:
        return _grade(folder, journal, sets, release, release_before, jobs, limits, keep, progress, workdir,
                      sandboxed)
    finally:
        folder.close()


def _grade(folder: SubmittedFolder, journal: ScoreTable, sets: dict, release: Path, release_before: dict,
           jobs: int, limits: Limits, keep: bool, progress: bool, workdir: Path | None,
           sandboxed: bool) -> list[dict[str, Any]]:
    """The batch of :func:`grade_folder`, once the table, the release and the folder are open."""
    from tqdm import tqdm

    subs = discover(folder, skip={journal.out, journal.journal_path})
    for sub in subs:
        inspect(sub, sets)

    pending = [s for s in subs if not s.status]
    running: list[Job] = []
    base = Path(tempfile.mkdtemp(prefix="exercise-grading-", dir=workdir))
    os.chmod(base, 0o711)  # jobs may enter their own folder, never list the others
    users = JobUsers(max(1, jobs)) if sandboxed else None
    bar = tqdm(total=len(subs), desc="grading", unit="notebook", disable=not progress, file=sys.stderr)
    bar.update(len(subs) - len(pending))
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                sub = pending.pop(0)
                slot = min(set(range(max(1, jobs))) - {j.slot for j in running})
                try:
                    uid = users.uids[slot] if users is not None else None
                    job = start_job(sub, sets[sub.exercise], limits, base, uid)
                    job.slot = slot
                    running.append(job)
                except Exception as e:  # the copy could not be written: report it (its kind only), go on
                    sub.status = "not a notebook"
                    sub.detail = f"cannot be prepared for grading ({type(e).__name__})"
                    bar.update(1)
            time.sleep(0.2)
            for job in list(running):
                read_library_flags(job)
                finished = job.proc.poll() is not None
                now = time.monotonic()
                if not finished and now - job.start > limits.wall_seconds:
                    job.timed_out = True
                if not finished and now - job.last_busy > 5:  # an idle check every 5 s
                    cpu = job_cpu_seconds(job)
                    if cpu > job.last_cpu + 0.05:
                        job.last_cpu, job.last_busy = cpu, now
                    elif now - job.last_busy > limits.idle_seconds:
                        job.idle = True
                if finished or job.timed_out or job.idle:
                    stop_job(job)
                    try:
                        finish_job(job, sets[job.sub.exercise], limits)
                    except Exception as e:  # never lose a row; its message could quote what the job wrote
                        job.sub.row = {}
                        job.sub.status, job.sub.detail = "error", f"the grader failed on it ({type(e).__name__})"
                    running.remove(job)
                    journal.record(job.sub)
                    if not keep:
                        shutil.rmtree(job.dir, ignore_errors=True)
                    bar.set_postfix_str(f"{job.sub.name}: {job.sub.row.get('status', job.sub.status)}",
                                        refresh=False)
                    bar.update(1)
    finally:
        for job in running:  # interrupted: leave nothing behind
            stop_job(job)
        if users is not None:
            users.release()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
        bar.close()

    changed = restore_changes(release, release_before)
    if changed:
        print(f"warning: files of the release changed during grading and were restored: {', '.join(changed)}",
              file=sys.stderr)
    questions = sorted({q for s in sets.values() for q in s.possible}, key=question_key)
    rows = []
    for sub in subs:
        if not sub.row:
            sub.row = {"submission": sub.name, "exercise": sub.exercise, "status": sub.status,
                       "total": "0", "possible": fmt_points(sum(sets[sub.exercise].possible.values()))
                       if sub.exercise in sets else "", "seconds": "0.0", "detail": sub.detail}
        if sub.sha256:
            try:
                changed = hashlib.sha256(sub.read()).hexdigest() != sub.sha256
            except (Refused, OSError):  # replaced by a link, removed, grown: not read again
                changed = True
            if changed:
                sub.row["detail"] = (sub.row["detail"] + "; " if sub.row["detail"] else "") + \
                    "the file changed while the batch ran"
        rows.append(sub.row)
    used = [q for q in questions if any(q in r for r in rows)]
    columns = ["submission", "exercise", "status", *used, "total", "possible", "seconds", "detail"]
    journal.finish(rows, columns)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Grade a folder of submitted exercise notebooks into a CSV.")
    parser.add_argument("submissions", nargs="?", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"),
                        help="CSV to write (default ./grades.csv)")
    parser.add_argument("--release", type=Path, default=DEFAULT_RELEASE,
                        help="folder built by `make exercises`")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="submissions graded at once")
    parser.add_argument("--timeout", type=int, default=120,
                        help="CPU seconds a notebook may compute (default 120)")
    parser.add_argument("--wall", type=float, default=None,
                        help="wall-clock seconds before a notebook is stopped (default 3 x timeout + 60)")
    parser.add_argument("--memory", type=int, default=4096,
                        help="memory limit per submission, MB (default 4096)")
    parser.add_argument("--keep", action="store_true", help="keep each submission's work folder (debugging)")
    parser.add_argument("--trusted", action="store_true",
                        help="grade without a sandbox, as your own user (only for notebooks you trust)")
    args = parser.parse_args(argv)
    if args.submissions is None:
        parser.error("give the folder of submissions")
    limits = Limits(args.timeout, args.wall or 3 * args.timeout + 60, args.memory)
    table: list[ScoreTable] = []
    rows = grade_folder(args.submissions, args.out, args.release, args.jobs, limits, args.keep, table=table,
                        trusted=args.trusted)
    counts: dict[str, int] = {}
    for r in rows:
        status = r["status"].split(":")[0]  # "not a regular file: a symbolic link" counts as "not a regular file"
        counts[status] = counts.get(status, 0) + 1
    order = STATUS_ORDER + sorted(set(counts) - set(STATUS_ORDER))
    summary = ", ".join(f"{counts[s]} {s}" for s in order if s in counts)
    print(f"graded {len(rows)} submission(s) ({summary}) into {args.out}")
    print(f"sha256 of {args.out}: {table[0].checksum}  (check it with: sha256sum {args.out})")


if __name__ == "__main__":
    main()

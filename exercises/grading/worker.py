"""Grade one submission inside its sandbox: run the notebook with otter, write what it claimed.

The grader (:func:`grading.jobs.start_job`) copies this file into the job's folder and starts it
there, inside the job's sandbox (its own user, its own mount and process namespaces, its limits
already set)::

    python worker.py JOB_FOLDER

It runs where the repository is hidden, so it imports nothing of the grading package: only the
standard library and otter. The job folder holds the notebook (in ``work/``), ``autograder.zip``
and ``env.json`` (the environment: where to record answers, the temporary and IPython folders).
The result goes to ``work/result.json``: the scores otter computed inside the kernel (only a
claim: the grader recomputes every point outside the sandbox from the recorded answers), the
first error of each failing cell, and the CPU time the kernel used. Nothing here is trusted by
the grader.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any


def main(job: str) -> None:
    job_dir = Path(job)
    work = job_dir / "work"
    out = os.open(work / "worker.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    env = json.loads((job_dir / "env.json").read_text())
    os.environ.update(env)
    os.chdir(work)
    tempfile.tempdir = env["TMPDIR"]
    sys.modules.setdefault("rfc3987_syntax", None)  # an optional import of jsonschema that costs seconds
    result: dict[str, Any] = {"claimed": {}, "cases": {}, "errors": []}
    try:
        import otter.api

        notebook = next(work.glob("*.ipynb"))
        results = otter.api.grade_submission(str(notebook), str(job_dir / "autograder.zip"), quiet=True)
        for q, tf in results.results.items():
            result["claimed"][str(q)] = float(tf.score)
        executed = results.notebook
        for cell in executed.cells if executed is not None else []:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    first_line = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                    result["errors"].append({
                        "ename": str(output.get("ename", ""))[:200],
                        "evalue": str(output.get("evalue", ""))[:300],
                        "line": first_line[:80],
                    })
    except BaseException as e:  # noqa: BLE001 - report anything, including SystemExit
        result["fatal"] = f"{type(e).__name__}: {str(e)[:500]}"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has exited
    result["kernel_cpu"] = children.ru_utime + children.ru_stime
    (work / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])

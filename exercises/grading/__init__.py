"""Grading a folder of submitted exercise notebooks (``make grade``), one module per job.

Read in this order, each module using only those above it:

- :mod:`.autograders`: the release's autograders read into memory (tests, points, checks);
- :mod:`.files`: submitted files (and what a job wrote) read only if regular files, never through a
  link, with a size limit, and never quoted in a message;
- :mod:`.discover`: the submissions found, read and assigned to their exercise set;
- :mod:`.sandbox`: isolation (bubblewrap, job users, control groups) and limits;
- :mod:`.jobs`: one submission's job folder, its worker started in the sandbox, its processes;
- :mod:`.scores`: the points recomputed outside the sandbox, the rows, the CSV and its journal;
- :mod:`.cli`: the batch and the command line (``exercises/grade.py`` calls :func:`main`);
- ``worker.py``: copied into each job folder and run there, in the sandbox; it imports only
  otter and the standard library.

How one submission is graded:

1. Before any submission runs, the grader reads every autograder zip of the release into
   memory, with the checks package inside it, keeps a copy of the release folder, checks the
   output path and opens the journal beside it (:class:`ScoreTable`).
2. The submission is read (never written; only a regular file inside the folder, never through a
   link: a symbolic link, FIFO, socket, device or outside hard link gets its row and is not
   read), and a copy goes into a fresh job folder with a fresh copy of its autograder and of
   ``worker.py``. The worker is started in the job's sandbox
   (:func:`sandbox_kind`): as root, bubblewrap's namespaces and a user of its own, so the job
   sees only its own folder, no repository (so no reference library) and a read-only system; a
   control group and ``RLIMIT_NPROC`` limit its memory and processes as a whole. Per-process
   limits (memory, CPU time, file size) are set before it starts. Without a sandbox, grading
   refuses to start unless ``--trusted`` is given. ``--jobs`` jobs run at once.
3. The kernel starts with an IPython startup file that imports the checks before any cell runs,
   turns the CPU-time signal into a ``TimeoutError`` in the running cell (so the rest of the
   notebook still runs) and installs an audit hook that reports any attempt to import or open
   the reference library through a FIFO the grader reads. A job still running after ``--wall``
   seconds, or whose processes used no CPU for ``Limits.idle_seconds``, is stopped; when a job
   ends, every process of its user and control group is killed.
4. In the kernel, each test records the answer it checks as plain arrays and stops (see
   ``exercises/exercise_checks``). Back in the grader, where no student code ever runs, the
   autograder's tests are run again by otter's own test runner on the recorded answers, with
   every expected value computed there by transformer_lib and PyTorch. Those are the points.
   Otter's score from inside the kernel is only compared with them: when it claims more, the row
   says ``tampered``.
5. What the job wrote (its result and output; its recorded answers, of which the tests read a
   copy) is read the same way. The row goes to the journal at once; at the end the CSV is moved
   into place with ``os.replace`` and its SHA-256 printed.

So a notebook that rebinds ``np.allclose`` or ``np.testing.assert_allclose``, patches otter or
the checks, overwrites the test files in its folder, reads the hidden tests or forges otter's
results changes what its own kernel claims, not its grade; a notebook that leaves a daemon
behind, writes into other jobs' folders or replaces the output path cannot reach any of them.
"""

from .autograders import ExerciseSet, load_release
from .cli import DEFAULT_RELEASE, grade_folder, main
from .discover import Submission, detect_set
from .sandbox import JOB_UID_BASE, JobUsers, Limits, sandbox_kind
from .scores import STATUS_ORDER, ScoreTable

__all__ = [
    "DEFAULT_RELEASE",
    "JOB_UID_BASE",
    "ExerciseSet",
    "JobUsers",
    "Limits",
    "STATUS_ORDER",
    "ScoreTable",
    "Submission",
    "detect_set",
    "grade_folder",
    "load_release",
    "main",
    "sandbox_kind",
]

"""Grade a folder of submitted exercise notebooks into ``grades.csv`` (``make grade``).

Usage::

    python exercises/grade.py SUBMISSIONS [--out grades.csv] [--release exercises/release]
                              [--jobs 2] [--timeout 120] [--wall SECONDS] [--memory 4096]

Every entry under ``SUBMISSIONS`` (any name, any depth; hidden files skipped) is one submission and
gets one row in ``--out`` (default ``grades.csv`` in the current directory, so the submissions
folder is never written to): the exercise set, a status, the points of each question, the total,
the points possible, the seconds it took and a detail. Statuses: ``ok`` (graded normally),
``error`` (a cell raised or called ``sys.exit``, or the kernel died; what was checked still
counts), ``timeout`` (CPU time used up, or still running at the wall-clock limit), ``out of
memory``, ``tampered`` (the notebook's own checks claimed more than its answers are worth),
``not a notebook``, ``empty``, ``unknown exercise`` and ``not a regular file: <what it is>`` (a
symbolic link, FIFO, socket, device or hard link to a file elsewhere: never followed nor read,
0 points). No detail ever quotes a file. The set is read from the metadata
``otter assign`` writes, else from the ``otter.Notebook("<set>.ipynb")`` line, else from the
names of the functions the notebook defines.

The work is done by the package ``exercises/grading`` (one module per job; its docstring tells
how a submission is graded); this file is the command that runs it.
"""

from grading import main

if __name__ == "__main__":
    main()

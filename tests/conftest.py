"""Shared test set-up: a non-interactive plotting backend and no figure left open."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# The tests use small tensors and run two workers on two cores (pytest -n 2): one thread
# each avoids oversubscription and keeps the timings steady.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test opened, so memory stays flat."""
    yield
    plt.close("all")

"""matplotlib for the experiments' figures, when it is installed.

The torch extra brings matplotlib, and so does the ``plots`` extra for the experiments that need no torch
(E3, the Post comparison). Without it an experiment still writes its tables and results and says which
figure it left out, rather than failing after minutes of work.
"""

from __future__ import annotations

import sys
from pathlib import Path

INSTALL = '.venv/bin/pip install -e ".[plots]"'


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def skipped(path: Path | str) -> None:
    """Say on stderr that a figure was not drawn, and how to get it."""
    print(f"note: {path} was not drawn: matplotlib is not installed ({INSTALL})", file=sys.stderr)

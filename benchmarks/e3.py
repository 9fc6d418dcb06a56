"""Experiment E3 (thesis §4.3.3): every algorithm on the normal, limited and pipelined problems.

    python benchmarks/e3.py                          # the full grid: 20,000 evaluations, 5 seeds
    python benchmarks/e3.py --budget 2000 --seeds 2  # a quick look

Writes docs/e3/results.csv, docs/e3/e3.png and docs/e3.md (also: `placement experiment e3`).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core.cli import main  # noqa: E402

if __name__ == "__main__":  # through the CLI, so a usage mistake is its one error line
    sys.exit(main(["experiment", "e3", *sys.argv[1:]]))

"""A benchmark or calibration worker process: ``python -m placement_core.torch.worker SPEC RANK``.

The parent (:mod:`.benchmark`) writes a JSON spec and starts one worker per
rank (one in all for the in-process runner); the import mode (:mod:`.isolated`)
traces a model, so that model code never runs in the dashboard's server. A
worker pins itself to its cores *before* importing torch, so its OpenMP threads
stay there, rebuilds the model from its source, and reports by appending JSON lines to ``rank{R}.jsonl``:
``ready``, then ``start``/``result`` per placement, or ``fatal``. The parent
can kill it at any time; results written so far survive.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


class Events:
    """Append-only JSON lines, flushed at once so the parent sees them."""

    def __init__(self, path: Path):
        self.f = open(path, "a", encoding="utf-8")

    def write(self, event: dict) -> None:
        self.f.write(json.dumps(event) + "\n")
        self.f.flush()


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    rank = int(argv[1])
    events = Events(Path(spec["out"]) / f"rank{rank}.jsonl")
    cores = (spec.get("affinity") or [None] * (rank + 1))[rank]
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    from ..base.errors import InputError
    try:
        import torch
        threads = (spec.get("threads") or [None] * (rank + 1))[rank]
        if threads:
            torch.set_num_threads(int(threads))
            torch.set_num_interop_threads(1)
        if spec["mode"] == "calibrate":
            from .calibrate_worker import worker_main
        elif spec["mode"] == "import":
            from .isolated import worker_main
        elif spec["mode"] == "pipeline":
            from .pipeline_worker import worker_main
        elif spec["mode"] == "transfers":
            from .transfers import worker_main
        else:
            from .benchmark_worker import worker_main
        worker_main(spec, rank, events)
        return 0
    except InputError as e:
        events.write({"event": "fatal", "kind": "input", "message": e.message})
        return 3
    except SystemExit as e:  # a runner that reported its failure and must not continue
        return int(e.code or 0)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which decides
        text = str(e).strip().splitlines()
        events.write({"event": "fatal", "kind": "error",
                      "message": f"{type(e).__name__}: {text[0]}" if text else type(e).__name__,
                      "traceback": traceback.format_exc()[-4000:]})
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Starting, watching and killing worker processes (one per rank), and giving each its cores.

Workers run in their own process groups so a timeout can kill them and
anything they started; they report through JSON-lines files (see
:mod:`.worker`), which survive a kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import placement_core

from .devspec import LocalDevice


def assign_cores(devices: list[LocalDevice]) -> tuple[list[list[int] | None], list[int | None], bool]:
    """Cores and thread count per rank: GPU ranks one core each, CPU ranks share the rest evenly.

    Returns (cores, threads, shared) where ``shared`` says ranks had to share cores.
    """
    if not hasattr(os, "sched_getaffinity"):
        return [None] * len(devices), [None] * len(devices), False
    cores = sorted(os.sched_getaffinity(0))
    n = len(devices)
    if len(cores) < n:
        picks = [[cores[r % len(cores)]] for r in range(n)]
        return picks, [1] * n, True
    gpus = [r for r, d in enumerate(devices) if d.is_cuda]
    cpus = [r for r, d in enumerate(devices) if not d.is_cuda]
    out: list[list[int] | None] = [None] * n
    free = list(cores)
    for r in gpus:
        out[r] = [free.pop()]
    if cpus:
        share = len(free) // len(cpus)
        for k, r in enumerate(cpus):
            out[r] = free[k * share:(k + 1) * share]
    return out, [len(c) for c in out], False


class WorkerJob:
    """``world`` worker processes running one spec; read their events with :meth:`events`."""

    def __init__(self, spec: dict, world: int, env: list[dict] | None = None):
        self.tmp = tempfile.TemporaryDirectory(prefix="placement-torch-")
        root = Path(self.tmp.name)
        self.spec = dict(spec, out=str(root), store=str(root / "store"))
        self.spec_path = root / "spec.json"
        self.spec_path.write_text(json.dumps(self.spec))
        self.world = world
        self.procs: list[subprocess.Popen] = []
        self.logs = [root / f"rank{r}.log" for r in range(world)]
        self._offsets = [0] * world
        pkg_root = str(Path(placement_core.__file__).resolve().parent.parent)
        for r in range(world):
            e = dict(os.environ)
            e["PYTHONPATH"] = pkg_root + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
            e.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
            e.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            threads = (spec.get("threads") or [None] * world)[r]
            if threads:
                e["OMP_NUM_THREADS"] = e["MKL_NUM_THREADS"] = str(threads)
            if env:
                e.update(env[r])
            with open(self.logs[r], "wb") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "placement_core.torch.worker", str(self.spec_path), str(r)],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def events(self) -> list[tuple[int, dict]]:
        """New events since the last call, as (rank, event)."""
        out = []
        for r in range(self.world):
            path = Path(self.spec["out"]) / f"rank{r}.jsonl"
            if not path.exists():
                continue
            with open(path, encoding="utf-8") as f:
                f.seek(self._offsets[r])
                data = f.read()
            complete = data[:data.rfind("\n") + 1]
            self._offsets[r] += len(complete.encode("utf-8"))
            out.extend((r, json.loads(line)) for line in complete.splitlines() if line.strip())
        return out

    def exit_codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def running(self) -> bool:
        return any(c is None for c in self.exit_codes())

    def log_tail(self, chars: int = 1500) -> str:
        tails = []
        for r, path in enumerate(self.logs):
            text = path.read_text(errors="replace").strip() if path.exists() else ""
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if lines:
                tails.append(f"[rank {r}] " + " | ".join(lines[-4:])[-chars:])
        return " ".join(tails)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
                pass

    def close(self) -> None:
        self.kill()
        self.tmp.cleanup()

    def __enter__(self) -> "WorkerJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

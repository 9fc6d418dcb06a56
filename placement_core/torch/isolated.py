"""Import a PyTorch model in a worker process with a timeout, not in the caller's process.

The dashboard must not run a user's model code inside its server: a model file
can hang, crash the interpreter or leave state behind. This reuses the
benchmark workers (:mod:`.launcher`, :mod:`.worker`, mode ``import``): the
worker builds the model from its source string, traces it and writes the Graph
as ``placement-network/1`` JSON, which the caller reads back as plain data.

A worker runs as the caller's OS user, with its environment and working
directory: a separate process with a timeout is not a sandbox.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..base.errors import InputError
from ..model.graph import Graph

IMPORT_TIMEOUT_S = 300.0  # tracing resnet152 on a laptop CPU takes well under a minute
GRAPH_FILE = "graph.json"
FIELD = "model"


def import_in_subprocess(source: str, input_shape: tuple[int, ...], batch_size: int, *,
                         timeout: float | None = None) -> Graph:
    """The Graph of the model ``source`` names (``torchvision:NAME`` or ``FILE.py:ATTR``), traced on one
    sample of ``input_shape`` (with its batch dimension) and scaled to ``batch_size``, built and traced in a
    worker process that is killed after ``timeout`` seconds (default :data:`IMPORT_TIMEOUT_S`). Every failure
    is an :class:`InputError`."""
    from ..formats.network import network_from_dict
    from .launcher import WorkerJob
    from .sources import parse_source

    timeout = IMPORT_TIMEOUT_S if timeout is None else float(timeout)
    parse_source(source)  # a malformed source fails here, before a process starts
    spec = {"mode": "import", "source": source, "input_shape": [int(s) for s in input_shape],
            "batch_size": int(batch_size)}
    with WorkerJob(spec, 1) as job:
        deadline = time.monotonic() + timeout
        result = fatal = None
        while job.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if job.running():
            job.kill()
            raise InputError(f"importing the model did not finish within {timeout:g} s and was stopped",
                             field=FIELD, fix="Check the model code for loops or waits at import time, or try a "
                                              "smaller input shape")
        for _, ev in job.events():
            if ev.get("event") == "result":
                result = ev
            elif ev.get("event") == "fatal":
                fatal = ev
        if fatal is not None:
            if fatal.get("kind") == "input":
                raise InputError(fatal["message"], field=FIELD)
            raise InputError(f"importing the model failed: {fatal.get('message')}", field=FIELD,
                             fix="Fix the error in the model code or its input shape")
        path = Path(job.spec["out"]) / GRAPH_FILE
        if result is None or not path.is_file():
            code = job.exit_codes()[0]
            tail = job.log_tail(600)
            raise InputError(f"the import process exited (code {code}) without a model"
                             + (f": {tail}" if tail else ""), field=FIELD,
                             fix="Check that the model code does not exit or crash the interpreter")
        data = json.loads(path.read_text(encoding="utf-8"))
    return network_from_dict(data)


def worker_main(spec: dict, rank: int, events) -> None:
    """In the worker: build, trace, write the Graph, report ``result`` (errors are reported by the worker)."""
    from ..formats.network import network_to_dict
    from .model_import import import_module
    from .sources import load_model, parse_source

    src = parse_source(spec["source"])
    model = load_model(src)
    graph = import_module(model, tuple(spec["input_shape"]), name=src.default_name,
                          batch_size=int(spec["batch_size"]))
    out = Path(spec["out"]) / GRAPH_FILE
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(network_to_dict(graph)), encoding="utf-8")
    tmp.replace(out)
    events.write({"event": "result", "ops": len(graph)})

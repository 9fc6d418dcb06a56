"""The PyTorch side: the only part of placement_core that imports torch, and only when used.

    sources        model sources: torchvision:NAME, FILE.py:NAME(args)
    model_import   trace_model / import_module: torch.fx (fx_import), or torch.export (export_import) when fx fails
    apply          run a placement in one process (tensors moved with .to); export as JSON / Python
    executor       training steps: in one process, or as one rank of several (send/recv)
    benchmark      worker processes, timings, memory, timeouts; launcher and worker start them
    isolated       import a model in a worker process with a timeout (the dashboard runs no model code)
    calibrate      per-op times and link latency/bandwidth -> device graph + timing table
    devspec        device specs: cpu:2, cuda:0,cuda:1 (no torch at import)
    e5             the thesis' experiment E5: simulated against measured step times

Importing this package does not import torch. The torch-free halves live beside the
core: ``placement_core.model.coarsen`` (groups), ``placement_core.cost.timings`` (timing tables),
``placement_core.analysis.calibration_fit`` (fitting calibration measurements).
"""

from ..base.errors import InputError


def require_torch() -> None:
    """Fail with what to install when PyTorch is missing (before any worker is started)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("PyTorch is not installed", field="torch",
                         fix='Install it: .venv/bin/pip install -e ".[torch]" (CPU wheels work: --index-url '
                             "https://download.pytorch.org/whl/cpu)") from None

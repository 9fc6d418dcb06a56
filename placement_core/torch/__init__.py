"""The PyTorch side: the only part of placement_core that imports torch, and only when used.

    sources        model sources: torchvision:NAME, FILE.py:NAME(args)
    fx_import      torch.fx trace -> network (FLOPs, bytes); export_import: the torch.export fallback
    coarsen        Merge-and-Colocate groups and the group -> op mapping (no torch)
    apply          run a placement in one process (tensors moved with .to); export as JSON / Python
    executor       training steps: in one process, or as one rank of several (send/recv)
    benchmark      worker processes, timings, memory, timeouts; launcher and worker start them
    isolated       import a model in a worker process with a timeout (the dashboard runs no model code)
    calibrate      per-op times and link latency/bandwidth -> device graph + timing table
    timings        calibrated timing tables (no torch)
    devspec        device specs: cpu:2, cuda:0,cuda:1 (no torch at import)
    e5             the thesis' experiment E5: simulated against measured step times

Importing this package does not import torch.
"""

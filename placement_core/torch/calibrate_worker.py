"""The calibration worker: measures op times, a GEMM rate, a copy bandwidth and link times on its device."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from .devspec import LocalDevice

def worker_main(spec: dict, rank: int, events) -> None:
    import torch
    import torch.distributed as dist

    from .worker_setup import load_traced

    devs, shape, traced = load_traced(spec, state_dict_required=True)
    ranks = spec["runner"] == "ranks" and len(devs) > 1
    if ranks:
        import datetime
        backend = "nccl" if all(d.is_cuda for d in devs) else "gloo"
        if devs[rank].is_cuda:
            torch.cuda.set_device(torch.device(devs[rank].torch))
        dist.init_process_group(backend, store=dist.FileStore(spec["store"], len(devs)), rank=rank,
                                world_size=len(devs),
                                timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 1800))))
    events.write({"event": "ready"})
    mine = [rank] if spec["runner"] == "ranks" else list(range(len(devs)))
    try:
        for rnd in range(int(spec.get("rounds", 1))):
            for r in range(len(devs)):  # one device at a time: the others wait, so nothing interferes
                if r in mine:
                    result = measure_device(traced, devs[r], spec)
                    events.write({"event": "device", "name": devs[r].name, "round": rnd, **result})
                if ranks:
                    dist.barrier()
        for a in range(len(devs)):
            for b in range(a + 1, len(devs)):
                if ranks:
                    # every rank creates every pair's group (a collective), only the pair uses it
                    pair = dist.new_group([a, b]) if len(devs) > 2 else None
                    if rank in (a, b):
                        seconds = ping_pong(spec["sizes"], a, b, rank, torch.device(devs[rank].torch), backend,
                                            pair)
                        if rank == a:
                            events.write({"event": "channel", "src": devs[a].name, "dst": devs[b].name,
                                          "sizes": spec["sizes"], "seconds": seconds})
                    dist.barrier()
                else:
                    seconds = copy_times(spec["sizes"], devs[a].torch, devs[b].torch)
                    events.write({"event": "channel", "src": devs[a].name, "dst": devs[b].name,
                                  "sizes": spec["sizes"], "seconds": seconds})
        # collectives over all ranks, alone and while every rank computes, and how much ranks computing at once
        # slow each other (docs/torch.md): on ranks of one backend only (gloo on CPU ranks, NCCL on GPUs)
        if ranks and spec.get("collective_sizes") and (backend == "nccl" or not any(d.is_cuda for d in devs)):
            from .collective_probe import COLLECTIVES, collective_times, contention
            device = torch.device(devs[rank].torch)
            if not devs[rank].is_cuda:
                work = shard_step(traced, devs[rank], spec, len(devs))
                alone, together = contention(device, rank, len(devs), work)
                events.write({"event": "contention", "device": devs[rank].name, "alone_s": alone,
                              "together_s": together, "work": "the model's step" if work else "products"})
            for op, fn in COLLECTIVES.items():
                try:
                    quiet = collective_times(fn, spec["collective_sizes"], len(devs), device, busy=False)
                    busy = collective_times(fn, spec["collective_sizes"], len(devs), device, busy=True)
                except (RuntimeError, ValueError, NotImplementedError) as err:  # the backend lacks it: on every rank
                    events.write({"event": "collective", "op": op, "device": devs[rank].name, "error": str(err)[:200]})
                    continue
                events.write({"event": "collective", "op": op, "device": devs[rank].name,
                              "devices": [d.name for d in devs], "sizes": [int(x) for x in spec["collective_sizes"]],
                              "seconds": quiet, "busy_seconds": busy})
    finally:
        if ranks:
            dist.destroy_process_group()


def shard_step(traced, dev: LocalDevice, spec: dict, k: int):
    """A training step of the whole model at the batch each of k data-parallel ranks runs (the batch where it
    cannot run another), as the contention probe's work: what ranks computing together actually do."""
    import copy

    import torch

    from .executor import RankStep, dry_run

    device = torch.device(dev.torch)
    shape, seed = tuple(spec["input_shape"]), spec["seed"]
    node_rank = {n.name: 0 for n in traced.gm.graph.nodes}
    for batch in dict.fromkeys((max(1, int(spec["batch_size"]) // k), int(spec["batch_size"]))):
        try:
            gm = copy.deepcopy(traced.gm).to(device)
            step = RankStep(gm, node_rank, 0, device, None, dry_run(traced.gm, shape, batch), shape, batch, seed,
                            barrier=False)
            step.step()  # warm-up, and the check that the traced model runs at this batch
            return step.step
        except Exception:  # noqa: BLE001 (a graph traced with its batch fixed runs no other)
            continue
    return None


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _repeat(fn, prepare, device, min_time: float, min_reps: int, max_reps: int) -> float:
    """Median seconds of ``fn(prepare())`` over repeats (at least ``min_reps``, about ``min_time`` in all)."""
    times = []
    total = 0.0
    while len(times) < min_reps or (total < min_time and len(times) < max_reps):
        arg = prepare()
        _sync(device)
        t0 = time.perf_counter()
        fn(arg)
        _sync(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return statistics.median(times)


def measure_device(traced, dev: LocalDevice, spec: dict) -> dict:
    """Every op's fwd/bwd/update time on ``dev``, a whole step, a GEMM rate and a copy bandwidth."""
    import copy

    import torch

    from .executor import RankStep, dry_run

    device = torch.device(dev.torch)
    gm = copy.deepcopy(traced.gm).to(device)
    shape, batch, seed = tuple(spec["input_shape"]), int(spec["batch_size"]), spec["seed"]
    reps = (spec["min_time"], spec["min_reps"], spec["max_reps"])
    ops = op_times(gm, traced, device, shape, batch, seed, reps)
    half = int(spec.get("half_batch") or 0)
    sizes = [int(b) for b in spec.get("fit_batches") or ([half] if half else [])]
    try:  # the same ops at smaller batches: the part of each time that does not shrink with the batch, and
        # the times at the micro-batches and shards placements use (timings.AT)
        smaller = {b: op_times(gm, traced, device, shape, b, seed, reps) for b in sizes}
    except Exception:  # noqa: BLE001 (a graph traced with its batch fixed runs no other: no fit)
        half, sizes, smaller = 0, [], {}
    for op, t in ops.items():
        for ph in ("fwd", "bwd"):
            if smaller:
                t[f"{ph}_at"] = {str(b): small[op][ph] for b, small in smaller.items()}
            if half in smaller:
                t[f"{ph}_half"] = smaller[half][op][ph]
    update = update_time(gm, device, reps)
    params = {op.name: op.param_bytes for op in traced.graph.ops}
    total_params = sum(params.values()) or 1.0
    for op, t in ops.items():
        t["update"] = update * params.get(op, 0.0) / total_params
    # a whole single-device step, run by the benchmark's own executor (no messages, no barrier)
    node_rank = {n.name: 0 for n in gm.graph.nodes}
    # shapes from the CPU copy: fake tensors cannot mix a CPU example input with CUDA weights
    step = RankStep(gm, node_rank, 0, device, None, dry_run(traced.gm, shape, batch), shape, batch, seed,
                    barrier=False)
    for _ in range(2):
        step.step()
    steps = [step.step().seconds for _ in range(int(spec["steps"]))]
    return {"ops": ops, "half_batch": half if half in smaller else 0, "fit_batches": sizes,
            "step_s": statistics.median(steps), "steps_s": steps,
            "gemm_flops": gemm_rate(device),
            "copy_bandwidth": copy_bandwidth(device), "memory_bytes": memory_bytes(dev, spec),
            "model": device_model(device), "threads": torch.get_num_threads(),
            "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def op_times(gm, traced, device, shape, batch, seed, reps) -> dict[str, dict[str, float]]:
    """Forward and backward time of each op, alone, on inputs captured from a real forward pass."""
    import torch
    from torch.fx.node import map_arg
    from torch.utils._pytree import tree_leaves

    from .apply import mutates_input
    from .executor import make_input

    env: dict[str, object] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, node):
            env[node.name] = value = super().run_node(node)
            return value

    Capture(gm).run(make_input(shape, batch, seed, gm).to(device))
    members: dict[str, list] = {}
    for node in gm.graph.nodes:
        op = traced.node_op.get(node.name)
        if op is not None:
            members.setdefault(op, []).append(node)
    out: dict[str, dict[str, float]] = {}
    for op in traced.graph.ops:
        nodes = members.get(op.name, [])
        if op.kind == "input" or not nodes or all(n.op == "placeholder" for n in nodes):
            out[op.name] = {"fwd": 0.0, "bwd": 0.0}
            continue
        inside = {n.name for n in nodes}
        mutates = any(mutates_input(n, gm) for n in nodes)
        external = {a.name for n in nodes for a in n.all_input_nodes if a.name not in inside}
        results = [n for n in nodes if any(u.name not in inside for u in n.users) or not n.users]
        params = [p for n in nodes if n.op == "call_module" for p in gm.get_submodule(n.target).parameters()]

        def forward(values):
            local = dict(values)
            for n in nodes:
                args = map_arg(n.args, lambda a: local[a.name])
                kwargs = map_arg(n.kwargs, lambda a: local[a.name])
                local[n.name] = _run_node(gm, n, args, kwargs)
            return [t for n in results for t in tree_leaves(local[n.name])
                    if isinstance(t, torch.Tensor) and t.requires_grad]

        fwd = _repeat(forward, lambda: _inputs(env, external, mutates), device, *reps)
        grads_like = forward(_inputs(env, external, mutates))
        if grads_like:
            g = torch.Generator(device="cpu").manual_seed(seed)
            grads = [torch.randn(t.shape, generator=g, dtype=t.dtype).to(device) for t in grads_like]

            def prepare_bwd():
                for p in params:
                    p.grad = None
                return forward(_inputs(env, external, mutates))
            bwd = _repeat(lambda outs: torch.autograd.backward(outs, grads), prepare_bwd, device, *reps)
        else:
            bwd = 0.0
        out[op.name] = {"fwd": fwd, "bwd": bwd}
    for p in gm.parameters():
        p.grad = None
    return out


def _inputs(env, external, mutates: bool) -> dict:
    """The op's inputs as new leaves: gradients stop at the op, as in a cut; copies if it writes in place."""
    import torch
    from torch.utils._pytree import tree_map

    def leaf(t):
        if not isinstance(t, torch.Tensor):
            return t
        grad = t.requires_grad and t.is_floating_point() and not isinstance(t, torch.nn.Parameter)
        if isinstance(t, torch.nn.Parameter):
            return t  # a parameter read through get_attr: gradients go to it as in training
        t = t.detach().requires_grad_(grad)
        return t.clone() if mutates else t  # an in-place op writes into a copy, never into a leaf
    return {name: tree_map(leaf, env[name]) for name in external}


def _run_node(gm, node, args, kwargs):
    if node.op == "get_attr":
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        obj, *rest = args
        return getattr(obj, node.target)(*rest, **kwargs)
    raise RuntimeError(f"cannot time a {node.op} node")


def update_time(gm, device, reps) -> float:
    """One SGD step over all parameters (as in a benchmark step), gradients random."""
    import torch

    from .executor import LR
    params = list(gm.parameters())
    if not params:
        return 0.0
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.SGD(params, lr=LR)
    t = _repeat(lambda _: opt.step(), lambda: None, device, *reps)
    for p in params:
        p.grad = None
    return t


def gemm_rate(device) -> float:
    """FLOP/s of a square float32 matrix product (2 n^3 FLOPs), the best the device reaches."""
    import torch
    n = 4096 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b
    t = _repeat(lambda _: a @ b, lambda: None, device, 0.2, 3, 20)
    return 2.0 * n ** 3 / t


def copy_bandwidth(device) -> float:
    """Bytes/s read + written by a large copy (the memory term of the roofline)."""
    import torch
    n = (256 if device.type == "cuda" else 64) * 2 ** 20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = _repeat(lambda _: dst.copy_(src), lambda: None, device, 0.2, 3, 20)
    return 2.0 * 4 * n / t


def memory_bytes(dev: LocalDevice, spec: dict) -> float:
    """A GPU's memory; for CPU devices, the machine's RAM shared among the CPU devices."""
    import torch
    if dev.is_cuda:
        return float(torch.cuda.get_device_properties(torch.device(dev.torch)).total_memory)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 16e9
    n_cpu = sum(1 for d in spec["devices"] if d["kind"] == "cpu")
    return float(total) / max(n_cpu, 1)


def device_model(device) -> str:
    import torch
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def ping_pong(sizes, a: int, b: int, rank: int, device, backend: str, group=None) -> list[float]:
    """One-way seconds per size between ranks a and b: round trips halved, median of repeats."""
    import torch

    from .transfer_probe import ping_pong_samples
    stage = backend == "gloo" and device.type == "cuda"  # gloo moves CPU tensors only
    device = torch.device("cpu") if stage else device
    return [statistics.median(ping_pong_samples(int(size), max(5, min(40, int(3e8 / max(size, 1)))), rank, device,
                                                peer=b if rank == a else a, group=group)) for size in sizes]


def copy_times(sizes, src: str, dst: str) -> list[float]:
    """One-way seconds per size for ``tensor.to(dst)`` in one process (in-process runner)."""
    import torch
    out = []
    for size in sizes:
        n = max(1, int(size) // 4)
        t = torch.randn(n, device=src)
        reps = max(5, min(40, int(3e8 / max(size, 1))))
        t.to(dst)
        out.append(_repeat(lambda _: t.to(dst), lambda: None, torch.device(dst), 0.0, reps, reps))
    return out

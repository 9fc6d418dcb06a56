"""The benchmark worker: runs training steps of placements in one process, or as one rank of several."""

from __future__ import annotations

from .benchmark import limit_message


def worker_main(spec: dict, rank: int, events) -> None:
    """Run the spec's items in this worker (see :mod:`.worker`)."""
    from .worker_setup import load_traced

    devs, shape, traced = load_traced(spec)
    if spec["runner"] == "ranks":
        _RanksWorker(spec, rank, devs, traced, events).run()
    else:
        _InProcessWorker(spec, devs, traced, events).run()


class _Worker:
    def __init__(self, spec, devs, traced, events):
        self.spec, self.devs, self.traced, self.events = spec, devs, traced, events
        self.shape = tuple(spec["input_shape"])
        self.batch = int(spec["batch_size"])
        self.limit = spec.get("memory_limit")

    def run(self) -> None:
        self.events.write({"event": "ready"})
        for k, rnd in self.spec["items"]:
            self.item_index = k
            self.events.write({"event": "start", "item": [k, rnd]})
            try:
                report = self.item(self.spec["placements"][k])
            except _Abort as abort:  # this process cannot go on (its peers are mid-step): report and exit
                self.events.write({"event": "result", "item": [k, rnd], **abort.report})
                raise SystemExit(4) from None
            self.events.write({"event": "result", "item": [k, rnd], **report})

    def timed(self, step, limit_exceeded) -> dict:
        """Warm-up (memory measured on the first step), the limit check, then the timed steps."""
        warm = []
        for w in range(self.spec["warmup"]):
            warm.append(step(w == 0 and self.spec.get("track_memory", True)))
        peaks = self.peaks()
        if limit_exceeded(peaks):
            # a rank sees only its own peak; the caller names the devices from every rank's (_merge_ranks)
            return {"status": "memory_limit", "peak_memory_bytes": peaks, "limit": self.limit,
                    "message": limit_message(self.limit, peaks)}
        before = self.sent()
        runs = [step(False) for _ in range(self.spec["steps"])]
        after = self.sent()
        n = len(runs)
        report = {"status": "ok", "steps_s": [r.seconds for r in runs], "warmup_s": [r.seconds for r in warm],
                  "losses": [r.loss for r in runs if r.loss is not None], "peak_memory_bytes": peaks,
                  "loss_share": any(r.loss_share for r in runs),
                  "bytes_per_step": (after[0] - before[0]) / n, "messages_per_step": (after[1] - before[1]) / n}
        if self.spec.get("profile"):
            report["profile"] = self.profiled(step)
        return report

    def profiled(self, step) -> str:
        """One more step under torch.profiler, after the timed ones (so it times nothing), as a Chrome trace."""
        from pathlib import Path

        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if any(d.is_cuda for d in self.devs) and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        path = Path(self.spec["profile"]) / f"placement{self.item_index}-rank{self.rank_index}.json"
        with profile(activities=activities, record_shapes=False) as prof:
            step(False)
        prof.export_chrome_trace(str(path))
        return str(path)

    rank_index = 0

    def sent(self) -> tuple[float, float]:
        return 0.0, 0.0


class _InProcessWorker(_Worker):
    def item(self, placement: dict) -> dict:
        import copy

        import torch

        from .apply import place
        from .executor import InProcessStep
        from .fx_import import Traced
        from .memory import CpuTracker, is_oom

        assignment = {op: self.devs[i].torch for op, i in placement.items()}
        torch_devices = sorted({d.torch for d in self.devs})
        try:
            traced = Traced(copy.deepcopy(self.traced.gm), self.traced.graph, self.traced.node_op, "copy")
            placed = place(None, assignment, self.shape, traced=traced)
            input_op = next(op for node, op in traced.node_op.items()
                            if any(n.name == node and n.op == "placeholder" for n in traced.gm.graph.nodes))
            runner = InProcessStep(placed, assignment[input_op], self.shape, self.batch, self.spec["seed"])
            for d in torch_devices:
                if d.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats(d)
                    if self.limit:
                        total = torch.cuda.get_device_properties(d).total_memory
                        torch.cuda.set_per_process_memory_fraction(min(1.0, self.limit / total), d)
            self.tracker = CpuTracker()
            self.runner = runner

            def step(first):
                return runner.step(self.tracker if first else None)
            return self.timed(step, lambda peaks: self.limit is not None and any(
                b is not None and b > self.limit for b in peaks.values()))
        except Exception as e:  # noqa: BLE001 - reported as the placement's result
            from ..base.errors import InputError
            if isinstance(e, InputError):
                return {"status": "error", "message": e.message}
            if is_oom(e):
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                return {"status": "oom", "message": _first_line(e)}
            return {"status": "error", "message": _first_line(e)}
        finally:
            self.runner = None

    def peaks(self) -> dict:
        import torch
        out = {}
        cpu = self.runner.resident_bytes("cpu") + self.tracker.peak
        for d in self.devs:
            out[d.name] = (torch.cuda.max_memory_allocated(d.torch) if d.is_cuda else cpu)
        return out


class _RanksWorker(_Worker):
    def __init__(self, spec, rank, devs, traced, events):
        super().__init__(spec, devs, traced, events)
        import datetime

        import torch
        import torch.distributed as dist

        from .executor import Comm, dry_run

        self.rank = self.rank_index = rank
        self.device = torch.device(devs[rank].torch)
        backend = "nccl" if all(d.is_cuda for d in devs) else "gloo"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        store = dist.FileStore(spec["store"], len(devs))
        dist.init_process_group(backend, store=store, rank=rank, world_size=len(devs),
                                timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 600))))
        self.backend = backend
        self.comm = Comm(self.device, backend)
        self.meta = dry_run(traced.gm, self.shape, self.batch)
        self.initial = {k: v.clone() for k, v in traced.gm.state_dict().items()}
        self.groups: dict = {}  # the replicas' process groups, by rank set, shared by every placement

    def run(self) -> None:
        import torch.distributed as dist
        try:
            super().run()
        finally:
            dist.destroy_process_group()

    def item(self, placement: dict) -> dict:
        import torch
        import torch.distributed as dist

        from ..base.errors import InputError
        from .apply import node_devices, shared_module_conflicts
        from .executor import RankStep
        from .memory import CpuTracker, is_oom, tensor_bytes

        gm = self.traced.gm
        sharded = any(isinstance(v, dict) for v in placement.values())
        first = {op: (v["devices"][0] if isinstance(v, dict) else v) for op, v in placement.items()}
        try:
            node_rank = node_devices(gm, self.traced.node_op, first)
            if not sharded:
                shared_module_conflicts(gm, node_rank)
        except InputError as e:  # every rank sees the same and moves on
            return {"status": "error", "message": e.message}
        gm.load_state_dict(self.initial)
        if self.device.type == "cuda":
            gm.to("cpu")
        meta, replicas, local = self.meta, (), ()
        if sharded:  # split ops become one node per shard, gathers and slices (docs/sharding.md)
            import copy

            from .executor import dry_run
            from .shard_graph import shard_graph
            try:
                gm, node_rank, replicas, local = shard_graph(copy.deepcopy(gm), self.traced.node_op, placement,
                                                             node_rank, self.meta, self.batch)
            except InputError as e:
                return {"status": "error", "message": e.message}
            meta = dry_run(gm, self.shape, self.batch)
        step = RankStep(gm, node_rank, self.rank, self.device, self.comm, meta, self.shape, self.batch,
                        self.spec["seed"], replicas=replicas, local_inputs=local, groups=self.groups)
        if self.device.type == "cuda":
            for t in step.owned_tensors():
                t.data = t.data.to(self.device)
            step.x = step.x.to(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.limit:
                total = torch.cuda.get_device_properties(self.device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, self.limit / total), self.device)
        self.step_runner = step
        self.tracker = CpuTracker()
        self.baseline = tensor_bytes(step.owned_tensors())

        def run_step(first):
            return step.step(self.tracker if first and self.device.type == "cpu" else None)

        def exceeded(peaks):
            mine = peaks[self.devs[self.rank].name]
            flag = torch.tensor([1.0 if (self.limit is not None and mine > self.limit) else 0.0],
                                device=self.device if self.backend == "nccl" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item() > 0)
        try:
            return self.timed(run_step, exceeded)
        except Exception as e:  # noqa: BLE001
            if is_oom(e):
                raise _Abort({"status": "oom", "message": _first_line(e)}) from None
            raise _Abort({"status": "error", "message": f"rank {self.rank}: {_first_line(e)}"}) from None

    def peaks(self) -> dict:
        import torch
        name = self.devs[self.rank].name
        if self.device.type == "cuda":
            return {name: int(torch.cuda.max_memory_allocated(self.device))}
        return {name: int(self.baseline + self.tracker.peak)}

    def sent(self) -> tuple[float, float]:
        return float(self.comm.bytes_sent), float(self.comm.messages)


class _Abort(Exception):
    def __init__(self, report: dict):
        super().__init__(report.get("message", ""))
        self.report = report


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__

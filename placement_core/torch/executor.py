"""Training steps of a placed model: in one process (:class:`InProcessStep`) or as one rank of
several (:class:`RankStep`), with the same data, loss and optimizer so their numbers compare.

A step is ``zero_grad``, forward, loss, backward, ``SGD.step`` on a fixed
random batch (what the simulator models; data loading is not part of it).
The loss is cross-entropy against fixed random labels for ``[N, C]`` outputs
and the mean square otherwise.

Ranks: every rank walks the fx graph in the same order and runs its own
nodes. A tensor another rank needs is sent (``isend``) right after it is
computed and received (``irecv`` posted when the producer's turn comes,
waited for at first use), so every pair of ranks issues its messages in the
same order (which NCCL needs) and no rank waits on one that is itself
blocked. The backward pass is cut at every tensor that crosses ranks and at
every tensor with several consumers on its rank: consumers there use a
detached copy, received tensors are leaves. Walking the cuts from last to
first, a rank sends back the gradients of what it received and runs
``backward`` from each cut once all its consumers' gradients are in, so every
op's backward runs exactly once, after its consumers', as in the simulator.
Layers split by batch over several ranks (:mod:`.shard_graph`) hold a replica of
their weights on each; their gradients are all-reduced (summed) among those
ranks in buckets while the backward runs, as DDP does, and the optimizer steps
once every sum is in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.fx.node import map_arg
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from .apply import mutates_input
from .collectives import GradientBuckets, replica_group
from .loss import Loss, make_input  # noqa: F401  the step's data and loss, here for the runners that import them
from .memory import CpuTracker, tensor_bytes

LR = 0.01


def _sync(devices) -> None:
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


@dataclass
class StepResult:
    seconds: float
    loss: float | None
    loss_share: bool = False  # the loss of this rank's samples only: the ranks' values add up to the step's


class InProcessStep:
    """Training steps of a module placed with :func:`.apply.place` (one process, several devices)."""

    def __init__(self, placed, input_device: str, input_shape, batch_size: int, seed: int):
        self.module = placed
        self.x = make_input(input_shape, batch_size, seed, placed).to(input_device)
        self.loss = Loss(seed)
        self.devices = sorted({p.device for p in placed.parameters()} | {self.x.device}, key=str)
        self.opt = torch.optim.SGD(placed.parameters(), lr=LR)

    def step(self, tracker: CpuTracker | None = None) -> StepResult:
        _sync(self.devices)
        t0 = time.perf_counter()
        if tracker is not None:
            with tracker:
                loss = self._step()
        else:
            loss = self._step()
        _sync(self.devices)
        seconds = time.perf_counter() - t0
        return StepResult(seconds, float(loss))

    def _step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.module(self.x))
        loss.backward()
        self.opt.step()
        return loss.detach()

    def resident_bytes(self, device: str) -> int:
        """Weights and buffers on ``device`` (what the step starts with)."""
        ts = [t for t in list(self.module.parameters()) + list(self.module.buffers()) if str(t.device) == device]
        if str(self.x.device) == device:
            ts.append(self.x)
        return tensor_bytes(ts)


# -- ranks ----------------------------------------------------------------------------------------

@dataclass
class Leaf:
    """What a receiver must know of one leaf of a node's value: a tensor's shape, or a Python value."""

    shape: tuple | None = None
    dtype: torch.dtype | None = None
    requires_grad: bool = False
    value: object = None  # non-tensor leaves (sizes): known from the dry run

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None


def dry_run(gm, input_shape, batch_size: int) -> dict[str, tuple[list[Leaf], object]]:
    """Shapes, dtypes and requires_grad of every node's value, without computing (fake tensors)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    meta: dict[str, tuple[list[Leaf], object]] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            leaves, spec = tree_flatten(value)
            meta[node.name] = ([Leaf(tuple(v.shape), v.dtype, bool(v.requires_grad)) if isinstance(v, torch.Tensor)
                                else Leaf(value=v) for v in leaves], spec)
            return value

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(make_input(input_shape, batch_size, 0, gm))
        Recorder(gm).run(x)
    return meta


class Comm:
    """send/recv between ranks; gloo cannot send CUDA tensors, so they are staged through the CPU."""

    def __init__(self, device: torch.device, backend: str):
        import torch.distributed as dist
        self.dist = dist
        self.device = device
        self.stage = backend == "gloo" and device.type == "cuda"
        self.bytes_sent = 0
        self.messages = 0

    def isend(self, t: torch.Tensor, dst: int, tag: int):
        t = t.detach()
        t = t.cpu() if self.stage else t.contiguous()
        self.bytes_sent += t.numel() * t.element_size()
        self.messages += 1
        return t, self.dist.isend(t, dst, tag=tag)

    def irecv(self, leaf: Leaf, src: int, tag: int):
        buf = torch.empty(leaf.shape, dtype=leaf.dtype, device="cpu" if self.stage else self.device)
        return buf, self.dist.irecv(buf, src, tag=tag)

    def finish(self, buf: torch.Tensor) -> torch.Tensor:
        return buf.to(self.device) if self.stage else buf


class RankStep:
    """One rank's share of a training step (see the module docstring)."""

    def __init__(self, gm, node_rank: dict[str, int], rank: int, device: torch.device, comm: Comm | None,
                 meta, input_shape, batch_size: int, seed: int, barrier: bool = True, replicas=(), local_inputs=(),
                 groups: dict | None = None):
        self.gm, self.rank, self.device, self.comm, self.meta = gm, rank, device, comm, meta
        self.barrier = barrier  # start every step together (off when timing one device alone)
        self.nodes = [n for n in gm.graph.nodes if n.op != "output"]
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.out_node = next(n for n in gm.graph.nodes if n.op == "output")
        out_args = self.out_node.all_input_nodes
        self.node_rank = dict(node_rank)
        # a batch-split last op (shard_graph): each rank takes the loss of the shards it holds
        shards = getattr(gm, "meta", {}).get("loss_shards") or {}
        n = getattr(gm, "meta", {}).get("loss_batch", 0)
        self.split_loss = bool(shards)
        self.loss_rows = [(a, (shards[a.name][0], shards[a.name][1], n)) for a in out_args
                          if a.name in shards and node_rank[a.name] == rank]
        self.out_rank = node_rank[out_args[0].name] if out_args else 0
        self.node_rank[self.out_node.name] = self.out_rank
        # who needs what: consumers' ranks per node; what this rank sends and receives
        self.send_to: dict[str, list[int]] = {}
        self.recv_from: dict[str, int] = {}
        self.local_users: set[str] = set()
        self.cuts: set[str] = set()  # values whose backward starts on its own (sent, or several consumers here)
        self.local_inputs = set(local_inputs)  # inputs every rank holds (a batch-split input): never sent
        for n in self.nodes:
            if n.name in self.local_inputs:
                continue
            users = {self.node_rank[u.name] for u in n.users if not (shards and u is self.out_node)}
            owner = node_rank[n.name]
            if owner == rank:
                remote = sorted(users - {rank})
                if remote:
                    self.send_to[n.name] = remote
                if rank in users:
                    self.local_users.add(n.name)
                if remote or sum(1 for u in n.users if self.node_rank[u.name] == rank) > 1:
                    self.cuts.add(n.name)
            elif rank in users:
                self.recv_from[n.name] = owner
        self.mutating = {n.name for n in self.nodes if n.op != "get_attr" and mutates_input(n, gm)}
        self.x = make_input(input_shape, batch_size, seed, gm).to(device)
        self.loss_fn = Loss(seed)
        self.params = self._owned_parameters()
        self.opt = torch.optim.SGD(self.params, lr=LR) if self.params else None
        # (parameters, process group, ranks) of the replicated layers this rank holds
        self.replicas = []
        groups = {} if groups is None else groups
        for targets, ranks in replicas:
            group = replica_group(groups, ranks)
            if rank in ranks:
                params = [p for t in targets for p in gm.get_submodule(t).parameters()]
                self.replicas.append((params, group, len(ranks)))
        self.buckets = GradientBuckets(self.replicas, comm, self._multi_use()) if self.replicas else None

    def _owned_parameters(self) -> list[torch.nn.Parameter]:
        seen: dict[int, torch.nn.Parameter] = {}
        for n in self.nodes:
            if self.node_rank[n.name] != self.rank:
                continue
            if n.op == "call_module":
                for p in self.gm.get_submodule(n.target).parameters():
                    seen[id(p)] = p
            elif n.op == "get_attr":
                v = self._attr(n.target)
                if isinstance(v, torch.nn.Parameter):
                    seen[id(v)] = v
        return list(seen.values())

    def _multi_use(self) -> set[int]:
        """Ids of the parameters that more than one node on this rank uses (batch shards sharing a rank):
        their gradient may come in over several backward calls (:class:`.collectives.GradientBuckets`)."""
        uses: dict[int, int] = {}
        for n in self.nodes:
            if self.node_rank[n.name] == self.rank and n.op == "call_module":
                for p in self.gm.get_submodule(n.target).parameters():
                    uses[id(p)] = uses.get(id(p), 0) + 1
        return {i for i, c in uses.items() if c > 1}

    def owned_tensors(self) -> list[torch.Tensor]:
        """Parameters and buffers this rank's ops use, and the input batch if it is here."""
        ts: list[torch.Tensor] = list(self.params)
        for n in self.nodes:
            if self.node_rank[n.name] == self.rank:
                if n.op == "call_module":
                    ts.extend(self.gm.get_submodule(n.target).buffers())
                elif n.op == "placeholder":
                    ts.append(self.x)
        return ts

    def _attr(self, target: str):
        obj = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def _tag(self, name: str, leaf: int, backward: bool) -> int:
        return ((self.index.get(name, len(self.nodes)) * 64 + leaf) << 1) | int(backward)

    def step(self, tracker: CpuTracker | None = None) -> StepResult:
        if self.barrier:
            import torch.distributed as dist
            dist.barrier()
        _sync([self.device])
        t0 = time.perf_counter()
        if tracker is not None:
            tracker.ignore(self.owned_tensors())
        loss = self._forward_backward(tracker)
        _sync([self.device])
        return StepResult(time.perf_counter() - t0, loss, self.split_loss)

    def _forward_backward(self, tracker) -> float | None:
        sends: list = []
        env: dict[str, object] = {}
        roots: dict[str, object] = {}  # cut values, where backward calls start
        pending: dict[str, tuple] = {}
        received: dict[str, object] = {}
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)

        def fetch(node, consumer_mutates: bool):
            name = node.name
            if name in pending:
                leaves, spec = pending.pop(name)
                built = []
                for leaf, item in zip(self.meta[name][0], leaves):
                    if leaf.is_tensor:
                        buf, work = item
                        work.wait()
                        v = self.comm.finish(buf)
                        if leaf.requires_grad:
                            v.requires_grad_(True)
                        built.append(v)
                    else:
                        built.append(item)
                env[name] = received[name] = tree_unflatten(built, spec)
            value = env[name]
            if consumer_mutates and (name in received or name in roots):
                # an in-place op must not write into a received leaf or a tensor still being sent
                value = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, value)
            return value

        for node in self.nodes:
            name = node.name
            if name in self.local_inputs:
                env[name] = self.x
                continue
            if self.node_rank[name] == self.rank:
                mut = name in self.mutating
                args = map_arg(node.args, lambda a: fetch(a, mut))
                kwargs = map_arg(node.kwargs, lambda a: fetch(a, mut))
                value = self._run(node, args, kwargs, tracker)
                if name in self.cuts:
                    roots[name] = value
                    leaves = tree_leaves(value)
                    for dst in self.send_to.get(name, ()):
                        for i, v in enumerate(leaves):
                            if isinstance(v, torch.Tensor):
                                sends.append(self.comm.isend(v, dst, self._tag(name, i, False)))
                    if name in self.local_users:
                        value = tree_map(lambda t: t.detach().requires_grad_(t.requires_grad)
                                         if isinstance(t, torch.Tensor) else t, value)
                env[name] = value
            elif name in self.recv_from:
                src = self.recv_from[name]
                leaves_meta, spec = self.meta[name]
                items = [self.comm.irecv(leaf, src, self._tag(name, i, False)) if leaf.is_tensor else leaf.value
                         for i, leaf in enumerate(leaves_meta)]
                if tracker is not None:
                    tracker.track([item[0] for item in items if isinstance(item, tuple)])
                pending[name] = (items, spec)
        loss_value = None
        if self.buckets is not None:
            self.buckets.arm()
        with (tracker if tracker is not None else _null()):
            if self.loss_rows:  # this rank's share of a split loss; the benchmark adds the ranks' shares
                loss = None
                for node, rows in self.loss_rows:
                    term = self.loss_fn(fetch(node, False), rows)
                    loss = term if loss is None else loss + term
                loss.backward()
                loss_value = float(loss.detach())
            elif self.rank == self.out_rank and not self.split_loss:
                out = map_arg(self.out_node.args[0], lambda a: fetch(a, False))
                loss = self.loss_fn(out)
                loss.backward()
                loss_value = float(loss.detach())
            self._backward(env, roots, received, sends)
        for _, work in sends:
            work.wait()
        if self.buckets is not None:
            self.buckets.finish()
        if self.opt is not None:
            with (tracker if tracker is not None else _null()):
                self.opt.step()
        return loss_value

    def _backward(self, env, roots, received, sends) -> None:
        """Cuts from last to first: return received gradients, run backward from each cut value."""
        points = [(self.index[n], "sent", n) for n in roots] + [(self.index[n], "received", n) for n in received]
        for _, what, name in sorted(points, reverse=True):
            leaves_meta = self.meta[name][0]
            if what == "received":
                src = self.recv_from[name]
                for i, (leaf, v) in enumerate(zip(leaves_meta, tree_leaves(received[name]))):
                    if leaf.is_tensor and leaf.requires_grad:
                        g = v.grad if v.grad is not None else torch.zeros_like(v)
                        sends.append(self.comm.isend(g, src, self._tag(name, i, True)))
                continue
            outs, grads = [], []
            local = tree_leaves(env[name]) if name in self.local_users else None
            for i, (leaf, v) in enumerate(zip(leaves_meta, tree_leaves(roots[name]))):
                if not (leaf.is_tensor and leaf.requires_grad):
                    continue
                g = local[i].grad if local is not None else None
                for src in self.send_to.get(name, ()):
                    buf, work = self.comm.irecv(leaf, src, self._tag(name, i, True))
                    work.wait()
                    buf = self.comm.finish(buf)
                    g = buf if g is None else g + buf
                if g is not None and v.requires_grad:
                    outs.append(v)
                    grads.append(g)
            if outs:
                torch.autograd.backward(outs, grads)

    def _run(self, node, args, kwargs, tracker):
        with (tracker if tracker is not None else _null()):
            if node.op == "placeholder":
                return self.x
            if node.op == "get_attr":
                return self._attr(node.target)
            if node.op == "call_module":
                return self.gm.get_submodule(node.target)(*args, **kwargs)
            if node.op == "call_function":
                return node.target(*args, **kwargs)
            if node.op == "call_method":
                obj, *rest = args
                return getattr(obj, node.target)(*rest, **kwargs)
        raise RuntimeError(f"unexpected fx node {node.op}")


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

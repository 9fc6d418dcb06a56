"""What Placeto's policy sees (Placeto §2.1-2.2), computed from a Problem's own cost arrays.

:class:`GraphInfo` holds a problem's static arrays once: each op's time on each
device (forward + backward + update, the simulator's numbers), its resident
memory (weights, their gradients, its activation), the bytes on every edge, the
seconds per byte between every two devices, and the reachability relation that
splits the other nodes into parents (nodes that reach the current one),
children (nodes it reaches) and parallel nodes. Times are in units of τ, the
mean op time on its fastest device, and memory in shares of a device's
capacity, so graphs of different sizes and batch sizes look alike to a policy.

Per MDP step (current node v, placements of B rollouts at once):

- node features (:func:`node_features`), Placeto's five: run time (on the
  node's current device and on its fastest one), output size (as transfer
  time), current device (as "on the same device as v", so the features do not
  depend on the number of devices), visited, current; plus the node's memory
  share;
- device context (:func:`device_context`), one row per candidate device d:
  the work and memory the visited nodes (the decisions made) put on d, with and
  without v, all nodes' work and memory on d as placed now, the memory of the nodes still
  to visit as a share of d, v's speed on d, the transfer time v would pay for its
  inputs and outputs on d, the visited parallel nodes' work on d, and whether d
  is v's current device. The policy scores each device from the graph
  summary and this row with one shared network, so a policy places on any
  number of devices.
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem

# The placement an episode improves: every node on the fastest device (Placeto's trivial start), or the plan of a
# memory-aware list scheduler, HEFT or m-ETF (no simulator evaluation either way).
STARTS = ("fastest", "heft", "m-etf")
NODE_FEATURES = ("time_here", "time_fastest", "output_transfer", "memory_share", "same_device", "visited",
                 "current")
DEVICE_FEATURES = ("work", "work_now", "memory", "memory_with_node", "memory_now", "memory_left", "slowdown",
                   "input_transfer", "output_transfer", "parallel_work", "is_current")
# GDP's static features when it scores devices (any number of them): per node, and per (node, device) pair
GDP_NODE_FEATURES = ("time_fastest", "time_spread", "memory_share", "output_transfer", "depth")
GDP_DEVICE_FEATURES = ("time", "slowdown", "memory_share", "capacity_share", "device_speed", "position")


class GraphInfo:
    """A problem's static arrays for the learned placers (built once per graph, a few milliseconds)."""

    def __init__(self, problem: Problem, start: str = "fastest"):
        g, costs = problem.graph, problem.costs
        if start not in STARTS:
            from ..base.errors import InputError
            raise InputError(f"unknown start placement {start!r}", field="start", fix="Use " + " or ".join(STARTS))
        self.start_kind = start
        self.problem = problem
        self.n, self.d = problem.n_ops, problem.n_devices
        self.time = np.asarray(costs.fwd + costs.bwd + costs.update, dtype=float)  # [n, d] seconds
        self.fastest = self.time.min(axis=1)
        self.tau = max(float(self.fastest.mean()), 1e-12)
        params = np.array([o.param_bytes for o in g.ops], dtype=float)
        out = np.array([o.output_bytes for o in g.ops], dtype=float)
        self.memory = params * costs.weight_copies + out  # [n] bytes resident while the step runs
        self.capacity = np.asarray(problem.capacity, dtype=float)
        route = problem.devices.route
        inv = np.zeros((self.d, self.d))
        for (a, b), c in route.items():
            inv[a, b] = costs.ch_inv_rate[c]
        self.s_per_byte = inv  # [d, d] seconds per byte from a to b (0 on the diagonal)
        typical = float(np.median(inv[inv > 0])) if (inv > 0).any() else 0.0
        self.parents = [np.array(p, dtype=np.int64) for p in g.parents]
        self.children = [np.array(c, dtype=np.int64) for c in g.children]
        self.in_bytes = [np.array([g.edge_bytes(p, i) for p in g.parents[i]], dtype=float) for i in range(self.n)]
        self.out_bytes = [np.array([g.edge_bytes(i, c) for c in g.children[i]], dtype=float) for i in range(self.n)]
        largest_out = np.array([b.max() if len(b) else 0.0 for b in self.out_bytes])
        self.adjacency = np.zeros((self.n, self.n), dtype=np.float32)  # [v, u] = 1: u is a parent of v
        for v, ps in enumerate(g.parents):
            self.adjacency[v, list(ps)] = 1.0
        self.ancestors = reachability(g.parents)  # [v, u]: u reaches v
        eye = np.eye(self.n, dtype=bool)
        self.descendants = self.ancestors.T.copy()
        self.parallel = ~(self.ancestors | self.descendants | eye)
        self.static = np.stack([
            np.log1p(self.fastest / self.tau),
            np.log1p(largest_out * typical / self.tau),
        ], axis=1)
        self._reference: float | None = None
        if start == "fastest":  # Placeto's "trivial placement"
            fastest = int(np.argmax([dev.peak_flops for dev in problem.devices.devices]))
            self.start = np.full(self.n, fastest, dtype=np.int32)
        elif start == "heft":  # a good list-scheduling placement that fits in memory, for the policy to improve
            from ..optimize.heft import heft_schedule
            self.start = np.asarray(heft_schedule(problem, comm=True, memory=True).placement, dtype=np.int32)
        else:
            from ..optimize import make_optimizer
            self.start = np.asarray(make_optimizer(problem, "m-etf").candidates()[0][0], dtype=np.int32)

    @property
    def reference(self) -> float:
        """The graph's best single-device objective (computed when first needed: training, not placing)."""
        if self._reference is None:
            self._reference = reference_objective(self.problem)
        return self._reference

    def start_placement(self, rollouts: int = 1) -> np.ndarray:
        """The placement every episode starts from (Placeto: "assigned to devices arbitrarily")."""
        return np.repeat(self.start[None, :], rollouts, axis=0)


def reachability(parents) -> np.ndarray:
    """[v, u] = True when there is a path u -> ... -> v (parents indexed in topological order)."""
    n = len(parents)
    reach = np.zeros((n, n), dtype=bool)
    for v, ps in enumerate(parents):
        for p in ps:
            reach[v] |= reach[p]
            reach[v, p] = True
    return reach


def reference_objective(problem: Problem) -> float:
    """The best single-device objective: the scale of a graph's rewards (and of the reward curve)."""
    placements = np.repeat(np.arange(problem.n_devices, dtype=np.int32)[:, None], problem.n_ops, axis=1)
    return float(problem.evaluate_many(placements).min())


def node_features(info: GraphInfo, placement: np.ndarray, visited: np.ndarray, v: int) -> np.ndarray:
    """[B, n, len(NODE_FEATURES)] for B rollouts whose current node is ``v``."""
    b, n = placement.shape
    rows = np.arange(n)
    here = info.time[rows[None, :], placement]  # [B, n]
    mem_share = info.memory[None, :] / info.capacity[placement] * (n / info.d)
    same = (placement == placement[:, v:v + 1]).astype(float)
    current = np.zeros((b, n))
    current[:, v] = 1.0
    out = np.empty((b, n, len(NODE_FEATURES)), dtype=np.float32)
    out[:, :, 0] = np.log1p(here / info.tau)
    out[:, :, 1] = info.static[None, :, 0]
    out[:, :, 2] = info.static[None, :, 1]
    out[:, :, 3] = mem_share
    out[:, :, 4] = same
    out[:, :, 5] = visited
    out[:, :, 6] = current
    return out


def device_context(info: GraphInfo, placement: np.ndarray, v: int, visited: np.ndarray) -> np.ndarray:
    """[B, d, len(DEVICE_FEATURES)]: what placing node ``v`` on each device would mean, per rollout."""
    b, n = placement.shape
    d = info.d
    onehot = np.zeros((b, n, d))
    np.put_along_axis(onehot, placement[:, :, None].astype(np.int64), 1.0, axis=2)
    onehot[:, v, :] = 0.0  # the others' work and memory, without v itself
    done = onehot * visited[:, :, None]  # placed by a decision already
    total = float(info.fastest.sum())
    cap = info.capacity[None, :]
    work = np.einsum("bnd,nd->bd", done, info.time) / total * d
    work_now = np.einsum("bnd,nd->bd", onehot, info.time) / total * d
    mem = np.einsum("bnd,n->bd", done, info.memory) / cap
    mem_now = np.einsum("bnd,n->bd", onehot, info.memory) / cap
    left = ((1.0 - visited) @ info.memory - (1.0 - visited[:, v]) * info.memory[v])[:, None] / cap
    slowdown = np.log(info.time[v] / max(info.fastest[v], 1e-30) + 1e-12)
    ps, cs = info.parents[v], info.children[v]
    # seconds per byte from each parent's device to every candidate, and from a candidate to each child's
    tin = (info.s_per_byte[placement[:, ps]] * info.in_bytes[v][None, :, None]).sum(axis=1) if len(ps) else \
        np.zeros((b, d))
    tout = (info.s_per_byte[:, placement[:, cs]].transpose(1, 2, 0) * info.out_bytes[v][None, :, None]).sum(axis=1) \
        if len(cs) else np.zeros((b, d))
    par = info.parallel[v]
    par_work = np.einsum("bnd,nd->bd", done[:, par, :], info.time[par]) / total * d
    ctx = np.empty((b, d, len(DEVICE_FEATURES)), dtype=np.float32)
    ctx[:, :, 0] = work
    ctx[:, :, 1] = work_now
    ctx[:, :, 2] = mem
    ctx[:, :, 3] = mem + info.memory[v] / cap
    ctx[:, :, 4] = mem_now
    ctx[:, :, 5] = left
    ctx[:, :, 6] = slowdown[None, :]
    ctx[:, :, 7] = np.log1p(tin / info.tau)
    ctx[:, :, 8] = np.log1p(tout / info.tau)
    ctx[:, :, 9] = par_work
    ctx[:, :, 10] = (placement[:, v:v + 1] == np.arange(d)[None, :])
    return ctx


def depth_share(info: GraphInfo) -> np.ndarray:
    """[n] each node's depth (longest path from a source) as a share of the deepest node's."""
    depth = np.zeros(info.n)
    for v, ps in enumerate(info.parents):
        if len(ps):
            depth[v] = depth[ps].max() + 1
    return depth / max(depth.max(), 1.0)


def gdp_node_features(info: GraphInfo) -> np.ndarray:
    """[n, len(GDP_NODE_FEATURES)], the same for any number of devices: time on the fastest device (in τ), how much
    slower the mean device is, memory as a share of the mean device's capacity (times n, so a fair share is 1),
    output transfer, depth."""
    mean_time = info.time.mean(axis=1)
    return np.stack([
        info.static[:, 0],
        np.log(mean_time / np.maximum(info.fastest, 1e-30) + 1e-12),
        info.memory * info.n / max(float(info.capacity.sum()), 1e-30),
        info.static[:, 1],
        depth_share(info),
    ], axis=1).astype(np.float32)


def gdp_device_features(info: GraphInfo) -> np.ndarray:
    """[n, d, len(GDP_DEVICE_FEATURES)]: what node v on device d costs (time in τ, slowdown against its fastest
    device, memory share of d times n/d), what device d is (its share of the memory, its speed over the whole
    graph against the fastest device's) and its position i/(d − 1) in the device graph, which lets a policy
    tell identical devices apart (one output unit per device did the same)."""
    n, d = info.n, info.d
    total = info.time.sum(axis=0)
    speed = np.log(total.min() / np.maximum(total, 1e-30))
    cap = info.capacity * d / max(float(info.capacity.sum()), 1e-30)
    out = np.empty((n, d, len(GDP_DEVICE_FEATURES)), dtype=np.float32)
    out[:, :, 0] = np.log1p(info.time / info.tau)
    out[:, :, 1] = np.log(info.time / np.maximum(info.fastest[:, None], 1e-30) + 1e-12)
    out[:, :, 2] = info.memory[:, None] / info.capacity[None, :] * (n / d)
    out[:, :, 3] = cap[None, :]
    out[:, :, 4] = speed[None, :]
    out[:, :, 5] = (np.arange(d) / max(d - 1, 1))[None, :]
    return out

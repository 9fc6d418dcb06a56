"""Optimize's answer when a search ends where it started: say that nothing beat the seed, why (a chain-like
network on a server of identical GPUs: one GPU is optimal), and offer setups where placement matters.

The setups were found by simulating every built-in network on every preset (default settings, all on gpu0 as the
seed, 20,000 evaluations, seed 1, ``placement optimize --init single``; docs/dashboard.md has the table).
"""

from __future__ import annotations

import numpy as np

from . import state

CHAIN_SHARE = 0.85  # at least this share of the compute on one path of dependent ops: chain-like

# (network, devices, why it matters, what MAP-Elites found from all on gpu0 in 20,000 evaluations)
SETUPS = {
    "gpt2": ("gpt2", "malvik-4gpu", "GPT-2 does not fit one 32 GB GPU (all on gpu0 is 4.4 GB over): it must be "
             "split", "MAP-Elites: 6.73 s → 2.35 s per batch (GA: 5.57 s)"),
    "inception": ("inception_v3", "nvlink-8gpu", "Inception-V3 has parallel branches and NVSwitch links are "
                  "fast: branches on other GPUs overlap", "MAP-Elites: 299 ms → 245 ms per batch"),
}


def chain_share(graph) -> float:
    """The share of the network's compute (forward + backward FLOPs) on its heaviest path of dependent ops: 1.0
    for a chain, lower the more work can run side by side."""
    w = np.array([o.fwd_flops + o.bwd_flops for o in graph.ops], dtype=float)
    total = float(w.sum())
    if total <= 0:
        return 1.0
    heaviest = np.zeros(len(w))
    for i in range(len(w)):  # ops are in topological order
        heaviest[i] = w[i] + max((heaviest[j] for j in graph.parents[i]), default=0.0)
    return float(heaviest.max()) / total


def identical_gpus(devices) -> bool:
    gpus = [d for d in devices.devices if d.kind == "gpu"]
    return len(gpus) > 1 and len({(d.peak_flops, d.memory_bytes, d.mem_bandwidth) for d in gpus}) == 1


def seed_kept(run) -> bool:
    """The run ended at the placement it was seeded with (the current placement when it started) or, with
    initial mappings, no better than the best of them."""
    res, spec = run.result, run.spec
    if res is None:
        return False
    if spec.initial is not None and np.array_equal(np.asarray(res.best_placement),
                                                   np.atleast_2d(spec.initial)[0]):
        return True
    seeded = run.seeded or {}
    best_seed = seeded.get("best_objective_s")
    return best_seed is not None and res.best_objective >= best_seed * (1 - 1e-12)


def explanation(run) -> str:
    """Why nothing beat the seed, in a sentence or two (markdown, names escaped by the caller's ``esc``)."""
    spec, res = run.spec, run.result
    share = chain_share(spec.graph)
    single = len({int(v) for v in np.asarray(res.best_placement)}) == 1
    if single and res.best.feasible and share >= CHAIN_SHARE and identical_gpus(spec.devices):
        return (f"This is expected: {share:.0%} of the network's compute lies on one chain of dependent ops, so "
                "ops moved to another GPU would only wait for their inputs and add transfers. On one server of "
                "identical GPUs, one GPU is optimal for a chain-like network that fits in its memory.")
    return ("The seed may be optimal here, or the search needs more evaluations, another algorithm or other "
            "initial mappings (HEFT, memory-aware HEFT) to find something better.")


def load_setup(name: str) -> None:
    """Make one of :data:`SETUPS` the current network and devices (the placement resets to all on gpu0)."""
    net, dev, _, _ = SETUPS[name]
    state.set_network(state.builtin_network(net), f"builtin:{net}", state.NETWORK_TITLES.get(net, net))
    state.set_devices(state.builtin_device_graph(dev), f"preset:{dev}", dev)
    state.set_default_placement()

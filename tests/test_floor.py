"""The floor of benchmarks/simulator.py --floor (benchmarks/floor.c, a minimal list scheduler in C) and the kernel's
objective entry (Problem.evaluate's fast path, Problem.evaluate_valid).

The floor must give the kernel's makespans wherever both apply (one batch, the thesis scheme, no message
overhead, no transfer curves), or its ratio measures nothing: checked on a chain worked out by hand and on
random placements of ResNet-50. The objective entry must return exactly what objective(simulate(...)) returns,
penalties included, and user placements must still be checked."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import devices, op, problem, require_kernel

from placement_core import InputError, load_devices, load_network
from placement_core.model.graph import Graph
from placement_core.problem import PENALTIES, Problem
from placement_core.simulate import SimSettings

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def chain():
    """a -> b -> c; forward 1 s, backward 2 s each; 100-byte outputs and gradients over a 100 B/s bus (1 s a
    message), no weights (no updates)."""
    return problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))


# Worked by hand (seconds):
#   [0, 0, 0]: a, b, c forward 0-3, c, b, a backward 3-9                                         -> 9
#   [0, 1, 1]: a 0-1, a's output to d1 1-2, b 2-3, c 3-4, c' 4-6, b' 6-8, b's input gradient
#              to d0 8-9, a' 9-11                                                                -> 11
#   [0, 1, 0]: a 0-1, send 1-2, b 2-3, send 3-4, c 4-5, c' 5-7, gradient to d1 7-8, b' 8-10,
#              gradient to d0 10-11, a' 11-13                                                    -> 13
CHAIN_CASES = [([0, 0, 0], 9.0), ([0, 1, 1], 11.0), ([0, 1, 0], 13.0)]


@pytest.fixture(scope="module")
def floor():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler (cc or gcc) on this machine: benchmarks/floor.c cannot be built")
    spec = importlib.util.spec_from_file_location("bench_simulator", BENCH / "simulator.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod, mod.floor_library()


def test_floor_on_a_chain_worked_by_hand(floor):
    mod, lib = floor
    p = chain()
    require_kernel(p)
    placements = np.array([c for c, _ in CHAIN_CASES], dtype=np.int32)
    expected = [m for _, m in CHAIN_CASES]
    assert list(mod.floor_makespans(lib, p.compiled, placements)) == expected
    assert [p.simulate(x).result.makespan for x in placements] == expected
    assert [p.evaluate(x) for x in placements] == expected  # one batch, nothing overflows: the makespan


def test_floor_makespans_equal_the_kernels_on_resnet50(floor):
    mod, lib = floor
    p = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    require_kernel(p)
    placements = np.random.default_rng(3).integers(0, p.n_devices, (30, p.n_ops)).astype(np.int32)
    placements[0] = 0  # one device: no message at all
    out = np.empty((len(placements), p.simulator._out_len))
    p.simulator._kernel.run_many(placements, out)
    got = mod.floor_makespans(lib, p.compiled, placements)
    assert np.array_equal(got, out[:, 0])
    assert len(set(got.tolist())) > 20  # different placements, different makespans: not a constant


def test_measure_floor_reports_ratios(floor):
    mod, lib = floor
    r = mod.measure_floor("resnet50", lib, 1, mod.time.process_time, evaluations=5)
    assert r["same_makespans"] == 5 and r["ops"] == 176
    assert r["kernel_ratio"] == r["kernel_s"] / r["floor_s"] and r["floor_s"] > 0


def overflowing(n_dev: int, penalty: str, seed: int = 0) -> Problem:
    """Ops with weights on n_dev devices of 1 kB: most placements overflow on several devices by different
    amounts (so the penalty's sum adds many unequal terms)."""
    rng = np.random.default_rng(seed)
    ops = [op("x0", params=float(rng.integers(100, 5000)))]
    for i in range(1, 4 * n_dev):
        parents = sorted({f"x{int(j)}" for j in rng.integers(0, i, 2)})
        ops.append(op(f"x{i}", parents, fwd=float(rng.integers(1, 5)), out=float(rng.integers(1, 300)),
                      params=float(rng.integers(100, 5000)) * (1 + rng.random())))
    return Problem(Graph("g", ops), devices(n_dev, memory=1000.0), settings=SimSettings(), penalty=penalty,
                   comm_efficiency=1.0, comp_efficiency=1.0)


@pytest.mark.parametrize("penalty", PENALTIES)
@pytest.mark.parametrize("n_dev", [3, 9, 20, 150])
def test_objective_entry_equals_objective_of_the_result(penalty, n_dev):
    p = overflowing(n_dev, penalty, seed=n_dev)
    require_kernel(p)
    rng = np.random.default_rng(1)
    placements = rng.integers(0, n_dev, (12, p.n_ops)).astype(np.int32)
    slow = [p.objective(p.simulator.run(p.check(x))) for x in placements]
    over = [int((p.simulate(x).overflow > 0).sum()) for x in placements]
    assert min(over) >= min(3, n_dev)  # several terms in every penalty sum
    fast = [p.evaluate(x) for x in placements]
    assert fast == slow  # bit for bit
    assert list(p.evaluate_many(placements)) == slow
    assert list(p.evaluate_valid(placements)) == slow
    # the entry really ran (not the checked path): the kernel's own method gives the same
    assert p._objective is not None and [p._objective(x) for x in placements] == slow


def test_objective_without_overflow_is_seconds_per_batch():
    p = chain()
    require_kernel(p)
    x = np.array([0, 1, 1], dtype=np.int32)
    assert p.evaluate(x) == 11.0 and p.evaluate_valid(x[None, :]).tolist() == [11.0]


def test_user_placements_are_still_checked():
    p = chain()
    require_kernel(p)
    with pytest.raises(InputError, match="placement uses device index 2, but there are 2 devices"):
        p.evaluate(np.array([0, 2, 1], dtype=np.int32))
    with pytest.raises(InputError, match="placement uses device index -1"):
        p.evaluate(np.array([0, -1, 1], dtype=np.int32))
    with pytest.raises(InputError, match="placement has 2 entries but the network has 3 ops"):
        p.evaluate(np.array([0, 1], dtype=np.int32))
    with pytest.raises(InputError, match="placement has 6 entries"):
        p.evaluate(np.zeros((2, 3), dtype=np.int32))
    with pytest.raises(InputError, match="must be device indices"):
        p.evaluate(np.array([0.0, 1.0, 1.0]))
    with pytest.raises(InputError, match="out of range"):
        p.evaluate_many(np.array([[0, 1, 1], [0, 5, 1]], dtype=np.int32))
    # other forms of the same placement: the same number
    assert p.evaluate([0, 1, 1]) == p.evaluate(np.array([0, 1, 1], dtype=np.int64)) == 11.0
    strided = np.array([[0, 9], [1, 9], [1, 9]], dtype=np.int32)[:, 0]  # a non-contiguous int32 view
    assert p.evaluate(strided) == 11.0

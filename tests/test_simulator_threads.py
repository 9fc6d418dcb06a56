"""One Problem shared by several threads (the dashboard's cached problems, several sessions) gives every
thread its own placement's numbers: ``Simulator.run`` writes into a fresh output per call."""

from __future__ import annotations

import threading

import numpy as np

from placement_core import Problem, load_devices, load_network
from placement_core.model.placement import random_placement


def test_two_threads_on_one_problem_get_their_own_results():
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    placements = [random_placement(problem.graph, problem.devices, seed) for seed in range(2)]
    serial = [problem.simulate(p).result for p in placements]
    assert serial[0].makespan != serial[1].makespan  # otherwise a mix-up could not show
    wrong: list[str] = []
    start = threading.Barrier(2)

    def work(k: int) -> None:
        start.wait()
        for _ in range(300):
            r = problem.simulate(placements[k]).result
            if (r.makespan != serial[k].makespan or not np.array_equal(r.busy, serial[k].busy)
                    or not np.array_equal(r.channel_bytes, serial[k].channel_bytes)):
                wrong.append(f"thread {k}: makespan {r.makespan} instead of {serial[k].makespan}")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong


def test_results_do_not_change_when_the_problem_runs_again():
    problem = Problem(load_network("alexnet"), load_devices("malvik-4gpu"))
    a = problem.simulate(random_placement(problem.graph, problem.devices, 1)).result
    kept = (a.makespan, a.busy.copy(), a.peak_memory.copy())
    problem.simulate(random_placement(problem.graph, problem.devices, 2))
    assert a.makespan == kept[0] and np.array_equal(a.busy, kept[1]) and np.array_equal(a.peak_memory, kept[2])

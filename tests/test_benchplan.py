"""placement_core.analysis.benchmark_plan: the K best distinct placements, device mappings and the shared-device warning."""

import numpy as np
import pytest

from placement_core import InputError, Problem, load_devices
from placement_core.analysis.benchmark_plan import (RunPlacements, chosen_candidates, default_mapping, distinct_top,
                                                     parse_mapping, shared_local_devices, shared_warning, top_k)
from placement_core.model.graph import Graph, Op


def chain() -> Problem:
    ops = [Op("x", kind="input", output_bytes=4e6)] + [Op(f"l{i}", fwd_flops=1e9 * (i + 1), output_bytes=4e6,
                                                          inputs=(f"l{i - 1}" if i else "x",)) for i in range(3)]
    return Problem(Graph("chain", ops, batch_size=8), load_devices("malvik"))


def test_distinct_top_orders_by_objective_and_drops_repeats():
    p = chain()
    a, b, c = np.zeros(4, int), np.ones(4, int), np.array([0, 1, 1, 2])
    got = distinct_top(p, [("best", b), ("copy of best", b.copy()), ("a", a), ("c", c)], 5)
    assert [r.label for r in got] == [lbl for _, lbl in sorted((p.evaluate(x), lbl) for lbl, x in
                                                               (("best", b), ("a", a), ("c", c)))]
    assert [r.objective for r in got] == sorted(p.evaluate(x) for x in (a, b, c))
    assert len(distinct_top(p, [("a", a), ("b", b), ("c", c)], 2)) == 2
    with pytest.raises(InputError, match="K must be a positive integer"):
        distinct_top(p, [("a", a)], 0)


def two_independent_ops() -> Problem:
    """Ops a (forward 1 s, backward 2 s) and b (2 s, 2 s), neither feeding the other, on two equal devices: all on
    one device takes 1 + 2 + 2 + 2 = 7 s per batch, one op per device max(3, 4) = 4 s (nothing is sent)."""
    from helpers import devices, op, problem
    return problem([op("a", fwd=1, bwd=2), op("b", fwd=2, bwd=2)], devices(2))


def test_top_k_of_a_run_ranks_what_it_keeps_worked_by_hand():
    """A run's best [0, 1] (4 s), its kept placements [0, 1] again, [0, 0] (7 s) and [1, 1] (7 s), its archive's
    elites [1, 0] (4 s, niche 0) and [0, 0] (niche 1): the distinct ones by objective, ties in the listed order
    (best, kept, elites): best (4), elite #1 (4), #2 evaluated (7), #3 evaluated (7)."""
    p = two_independent_ops()
    x = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
    run = RunPlacements("run 7", best=x(0, 1), kept=[x(0, 1), x(0, 0), x(1, 1)],
                        elites=[((0,), x(1, 0)), ((1,), x(0, 0))], store_id=7)
    assert [label for label, _ in run.candidates()] == [
        "best of run 7", "#1 evaluated by run 7", "#2 evaluated by run 7", "#3 evaluated by run 7",
        "elite #1 of run 7 (niche 0)", "elite #2 of run 7 (niche 1)"]
    ranked, note = top_k(p, run, 3)
    assert [r.label for r in ranked] == ["best of run 7", "elite #1 of run 7 (niche 0)", "#2 evaluated by run 7"]
    assert [r.objective for r in ranked] == [4.0, 4.0, 7.0] and [r.batch_time for r in ranked] == [4.0, 4.0, 7.0]
    assert all(r.feasible for r in ranked) and note == ""
    ranked, note = top_k(p, run, 5)  # four distinct placements only
    assert [r.label for r in ranked][-1] == "#3 evaluated by run 7" and len(ranked) == 4
    assert note.startswith("run 7 keeps 4 distinct placement(s) (its best placement, the 3 best distinct "
                           "placement(s) it evaluated, 2 archive elite(s)), fewer than the 5 asked for")
    # a live run's elites carry no niche; a run with nothing to offer says so
    live = RunPlacements("GA #1", best=x(1, 1), elites=[(None, x(0, 1))])
    ranked, _ = top_k(p, live, 1)
    assert [(r.label, r.objective) for r in ranked] == [("elite #1 of GA #1", 4.0)]
    with pytest.raises(InputError, match="GA #2 has no placement yet"):
        top_k(p, RunPlacements("GA #2"), 1)


def test_the_chosen_placements_offered_worked_by_hand():
    """The current placement, then each run's best and its archive's elites #2 to #5 (the first is its best), then
    every op on one device; a stored run's label carries its id."""
    x = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
    me = RunPlacements("MAP-Elites #2", best=x(0, 1), elites=[(None, x(0, 1))] + [(None, x(k % 2, 1)) for k in
                                                                                  range(6)], store_id=12)
    old = RunPlacements("run 3 · GA (stored)", best=x(1, 0), store_id=3)
    options, origin = chosen_candidates(("current: all on d0", x(0, 0)), [me, old], ["d0", "d1"], 2)
    assert list(options) == ["current: all on d0", "best of MAP-Elites #2", "elite #2 of MAP-Elites #2",
                             "elite #3 of MAP-Elites #2", "elite #4 of MAP-Elites #2", "elite #5 of MAP-Elites #2",
                             "best of run 3 · GA (stored)", "all on d0", "all on d1"]
    assert options["elite #3 of MAP-Elites #2"].tolist() == [1, 1] and options["all on d1"].tolist() == [1, 1]
    assert origin == {"best of MAP-Elites #2": 12, "best of run 3 · GA (stored)": 3}


def test_default_mapping_by_name_then_in_turn():
    names = ["cpu0", "gpu0", "gpu1", "gpu2"]
    assert default_mapping(names, [0, 1, 2, 3], ["cpu0", "cpu1"]) == {0: "cpu0", 1: "cpu1", 2: "cpu0", 3: "cpu1"}
    assert default_mapping(names, [1, 3], ["gpu0", "gpu1"]) == {1: "gpu0", 3: "gpu1"}
    # a device named like a local one keeps it; the others take the free ones first
    assert default_mapping(["cpu1", "gpu0"], [0, 1], ["cpu0", "cpu1"]) == {0: "cpu1", 1: "cpu0"}
    assert default_mapping(["a", "b", "c"], [0, 1, 2], ["cpu0"]) == {0: "cpu0", 1: "cpu0", 2: "cpu0"}


def test_parse_mapping_names_what_is_wrong():
    names, local = ["cpu0", "gpu0"], ["cpu0", "cpu1"]
    assert parse_mapping(" gpu0=cpu1 , cpu0=cpu0", names, local) == {"gpu0": "cpu1", "cpu0": "cpu0"}
    for text, msg in (("gpu0", "is not DEVICE=LOCAL"), ("gpu9=cpu0", "'gpu9' is not a device of the run"),
                      ("gpu0=cuda:0", "'cuda:0' is not one of the local devices")):
        with pytest.raises(InputError, match=msg):
            parse_mapping(text, names, local)


def test_the_warning_names_the_devices_that_share_a_local_device():
    torch_of = {"cpu0": "cpu", "cpu1": "cpu"}
    assert shared_warning({"gpu0": "cpu0", "gpu1": "cpu1"}, torch_of) == ""
    w = shared_warning({"gpu0": "cpu0", "gpu1": "cpu0", "cpu0": "cpu1"}, torch_of)
    assert w.startswith("gpu0 and gpu1 both run on cpu0 (cpu): the measured times then serialise work that the "
                        "simulator runs in parallel")
    w = shared_warning({"gpu2": "cpu0", "gpu0": "cpu0", "gpu1": "cpu0"}, torch_of)
    assert w.startswith("gpu0, gpu1 and gpu2 all run on cpu0 (cpu)")
    # one process drives every device of the in-process runner: cpu0 and cpu1 are the same CPU there
    assert shared_local_devices({"gpu0": "cpu0", "gpu1": "cpu1"}, torch_of, "inprocess") == \
        [("cpu (in one process)", ["gpu0", "gpu1"])]
    assert shared_local_devices({"gpu0": "cuda0", "gpu1": "cuda1"}, {"cuda0": "cuda:0", "cuda1": "cuda:1"},
                                "inprocess") == []

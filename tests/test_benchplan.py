"""placement_core.analysis.benchmark_plan: the K best distinct placements, device mappings and the shared-device warning."""

import numpy as np
import pytest

from placement_core import InputError, Problem, load_devices
from placement_core.analysis.benchmark_plan import (default_mapping, distinct_top, parse_mapping, shared_local_devices, shared_warning)
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

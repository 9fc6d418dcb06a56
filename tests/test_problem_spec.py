"""ProblemSpec, the one recipe of what is simulated: it builds the same problems the hand-made
settings give, round-trips through JSON, reads runs stored before it existed, and refuses bad fields."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core import InputError, Problem, load_devices, load_network
from placement_core.model.placement import random_placement
from placement_core.problem import ProblemSpec
from placement_core.simulate import SimSettings
from placement_core.simulate.model import ADMIT_EAGER, ADMIT_THESIS
from helpers import examples

NET = load_network("alexnet")
DEV = load_devices("malvik-4gpu")


def _hand_made(schedule: str, m: int, batches: int, in_flight: int, **kw) -> Problem:
    """The problem written out by hand: settings, micro-batch graph and profile, no spec involved."""
    if schedule == "thesis":
        return Problem(NET, DEV, settings=SimSettings(units=batches, units_in_flight=in_flight, admission=ADMIT_THESIS),
                       **kw)
    n = len(NET)
    prio = np.zeros((m, 3, n))
    units = np.arange(m, dtype=float)[:, None]
    first, second = (0, 1) if schedule == "gpipe" else (1, 0)
    prio[:, first, :] = units
    prio[:, second, :] = m + units
    prio[:, 2, :] = 2 * m
    s = SimSettings(units=m, units_in_flight=m, admission=ADMIT_EAGER, update_per_step=True, priority=prio,
                    stage_caps=schedule == "1f1b", micro_batches=m, schedule=schedule)
    return Problem(NET.with_batch_size(NET.batch_size // m), DEV, settings=s, **kw)


@pytest.mark.parametrize("schedule,m,batches,in_flight,kw", [
    ("thesis", 1, 1, 1, {}),
    ("thesis", 1, 6, 3, {"penalty": "placeto", "comm_efficiency": 0.5}),
    ("gpipe", 4, 1, 1, {"profile": "exprimo-2020"}),
    ("1f1b", 8, 1, 1, {"penalty": "infeasible", "comp_efficiency": 0.7}),
])
def test_spec_builds_the_hand_made_problem(schedule, m, batches, in_flight, kw):
    spec = ProblemSpec(schedule=schedule, micro_batches=m, batches=batches, in_flight=in_flight, **kw)
    built, hand = spec.build(NET, DEV), _hand_made(schedule, m, batches, in_flight, **kw)
    assert len(built.graph) == len(hand.graph) and built.graph.batch_size == NET.batch_size // m
    for seed in range(5):
        pl = random_placement(built.graph, DEV, seed)
        a, b = built.simulate(pl).result, hand.simulate(pl).result
        assert a.makespan == b.makespan and a.batch_time == b.batch_time  # bit-identical, not approximately
        assert np.array_equal(a.peak_memory, b.peak_memory) and built.evaluate(pl) == hand.evaluate(pl)
    assert built.spec == spec.resolved()


def test_the_spec_of_a_built_problem_builds_it_again():
    p = ProblemSpec(schedule="1f1b", micro_batches=4, penalty="placeto").build(NET, DEV)
    again = p.spec.build(p.graph, DEV, whole_batch=False)  # the problem's graph is already one micro-batch
    pl = random_placement(p.graph, DEV, 3)
    assert again.evaluate(pl) == p.evaluate(pl) and again.graph.batch_size == p.graph.batch_size


specs = st.builds(
    ProblemSpec,
    schedule=st.sampled_from(["thesis", "gpipe", "1f1b"]), micro_batches=st.integers(1, 64),
    batches=st.integers(1, 100), in_flight=st.integers(1, 8), forward_only=st.booleans(),
    profile=st.sampled_from(["default", "exprimo-2020"]),
    comp_efficiency=st.floats(0.05, 1.0), comm_efficiency=st.floats(0.05, 1.0),
    timings=st.one_of(st.none(), st.just({"conv1": {"gpu": {"fwd": 1e-3, "bwd": 2e-3}}})),
    timings_batch=st.integers(1, 512), penalty=st.sampled_from(["thesis", "placeto", "infeasible"]))


@settings(max_examples=examples(200), deadline=None)
@given(specs)
def test_json_round_trip(spec):
    text = json.dumps(spec.to_dict())
    back = ProblemSpec.from_dict(json.loads(text))
    assert back == spec.resolved() and back.to_dict() == spec.to_dict()


def test_defaults_resolve_to_the_profile_values():
    d = ProblemSpec().to_dict()
    assert (d["comp_efficiency"], d["comm_efficiency"]) == (0.9, 0.25)  # thesis' η_comp and η_comm
    assert ProblemSpec() != ProblemSpec(comp_efficiency=0.9)  # as written ...
    assert ProblemSpec().resolved() == ProblemSpec(comp_efficiency=0.9).resolved()  # ... and what they mean


def test_runs_stored_before_timings_batch_existed_load():
    old = {"profile": "default", "comp_efficiency": 0.9, "comm_efficiency": 0.25, "timings": None,
           "penalty": "thesis", "schedule": "thesis", "micro_batches": 1, "batches": 1, "in_flight": 1,
           "forward_only": False}
    assert ProblemSpec.from_dict(old) == ProblemSpec().resolved()


@pytest.mark.parametrize("change,field", [
    ({"warp": 9}, "warp"),
    ({"batches": "4"}, "batches"),
    ({"batches": True}, "batches"),
    ({"forward_only": 1}, "forward_only"),
    ({"timings": [1, 2]}, "timings"),
    ({"timings_batch": 1.5}, "timings_batch"),
])
def test_bad_fields_are_named(change, field):
    data = {**ProblemSpec().to_dict(), **change}
    with pytest.raises(InputError) as e:
        ProblemSpec.from_dict(data, source="run 7")
    assert e.value.field == field and "run 7" in str(e.value)


def test_a_missing_field_is_named():
    data = ProblemSpec().to_dict()
    del data["schedule"]
    with pytest.raises(InputError) as e:
        ProblemSpec.from_dict(data)
    assert e.value.field == "schedule"


@pytest.mark.parametrize("spec,field", [
    (ProblemSpec(penalty="cheap"), "penalty"),
    (ProblemSpec(schedule="zigzag"), "schedule"),
    (ProblemSpec(schedule="thesis", micro_batches=4), "micro_batches"),
    (ProblemSpec(schedule="gpipe", micro_batches=4, batches=3), "batches"),
    (ProblemSpec(schedule="gpipe", micro_batches=5), "micro_batches"),  # 128 does not split in 5
])
def test_impossible_recipes_fail_at_build_with_the_field(spec, field):
    with pytest.raises(InputError) as e:
        spec.build(NET, DEV)
    assert e.value.field == field

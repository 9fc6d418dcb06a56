"""dashboard.settings.SimChoices: the dashboard's simulator settings as one value, the one translation to a
ProblemSpec and back from a stored run's."""

import pytest

from dashboard.settings import SimChoices
from placement_core import load_devices
from placement_core.problem import ProblemSpec


def test_the_spec_of_the_thesis_scheme_and_of_a_pipeline_schedule():
    assert SimChoices().spec() == ProblemSpec()
    thesis = SimChoices(batches=10, in_flight=4, micro_batches=8, penalty="placeto")
    assert thesis.spec() == ProblemSpec(batches=10, in_flight=4, penalty="placeto")  # micro-batches only offered
    gpipe = thesis.with_(schedule="gpipe")
    assert gpipe.spec() == ProblemSpec(schedule="gpipe", micro_batches=8, penalty="placeto")  # one batch, flushed
    assert gpipe.summary() == "GPipe schedule, 8 micro-batches per batch"
    assert thesis.summary() == "thesis scheme, 10 batch(es), 4 in flight"
    # a calibration's table is the spec's only when one was resolved for the network
    assert SimChoices(timings="local").spec().timings is None
    assert SimChoices(timings="local").spec(timings={"a": {}}, timings_batch=32).timings_batch == 32


def test_split_ops_make_the_spec_s_split_table():
    d = load_devices("malvik-4gpu")
    sharded = SimChoices(sharding="batch", max_shards=2)
    table = sharded.spec(d).splits
    assert table and all(s.dim == "batch" and len(s.devices) == 2 for s in table)
    assert SimChoices().spec(d).splits == ()
    assert sharded.summary().endswith(", ops split by batch")


def test_adopting_a_stored_run_s_spec_keeps_what_the_spec_does_not_say():
    mine = SimChoices(timings="local", micro_batches=16, sharding="channel", batches=3)
    adopted = mine.adopt(ProblemSpec(schedule="1f1b", micro_batches=4, penalty="infeasible", profile="exprimo-2020"))
    assert adopted == SimChoices(schedule="1f1b", micro_batches=4, batches=1, in_flight=1, penalty="infeasible",
                                 profile="exprimo-2020", timings="local")
    back = adopted.adopt(ProblemSpec(batches=5, in_flight=2))
    assert (back.schedule, back.batches, back.in_flight, back.micro_batches) == ("thesis", 5, 2, 4)
    # the round trip of a spec the settings can express
    spec = ProblemSpec(schedule="gpipe", micro_batches=8, penalty="placeto")
    assert SimChoices().adopt(spec).spec() == spec


def test_settings_are_frozen_hashable_and_load_from_a_dict():
    s = SimChoices.from_dict({"batches": "2", "in_flight": 2, "unknown": 1, "splits_extra": []})
    assert s == SimChoices(batches=2, in_flight=2) and hash(s) == hash(SimChoices(batches=2, in_flight=2))
    with pytest.raises(AttributeError):
        s.batches = 3
    assert dict(s.key())["batches"] == 2 and list(dict(s.key())) == sorted(SimChoices.names())

"""What-if multipliers and each link's sensitivity, on a network whose makespans are worked out by hand.

a -> b -> c, 1 s forward and 2 s backward each, 100-byte tensors; a on d0, b and c on d1; one 100 B/s
channel, no latency, efficiency 1. Forward a 0-1, send 1-2, b 2-3, c 3-4; backward c 4-6, b 6-8, the
gradient back 8-9, a 9-11: 11 s. Twice the bandwidth: each transfer 0.5 s, 10 s. d1 twice as fast: b, c
take 0.5 + 0.5 forward and 1 + 1 backward, 1 + 1 + 1 + 1 + 1 + 2 = 8 s. Makespan = 9 + 200/B, so
∂makespan/∂B = -200/B² = -0.02 s per byte/s at B = 100.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core.analysis.sensitivity import bandwidth_sensitivity, what_if, what_if_problem
from placement_core.base.errors import InputError

OPS = [op("a", out=100), op("b", ["a"], out=100), op("c", ["b"], out=100)]
PLACEMENT = np.array([0, 1, 1], dtype=np.int32)


@pytest.fixture
def prob():
    return problem(OPS, devices(2, bandwidth=100.0))


def test_hand_computed_makespans(prob):
    assert prob.simulate(PLACEMENT).result.makespan == pytest.approx(11.0)
    r = what_if(prob, PLACEMENT, bandwidth={"bus": 2.0})
    assert (r["makespan_s"], r["what_if_makespan_s"], r["delta_s"]) == pytest.approx((11.0, 10.0, -1.0))
    assert what_if(prob, PLACEMENT, speed={"d1": 2.0})["what_if_makespan_s"] == pytest.approx(8.0)
    both = what_if(prob, PLACEMENT, speed={"d1": 2.0}, bandwidth={"bus": 2.0})
    assert both["what_if_makespan_s"] == pytest.approx(7.0)


def test_the_sensitivity_is_the_derivative(prob):
    [row] = bandwidth_sensitivity(prob, PLACEMENT, step=0.01)
    assert row["channel"] == "bus" and row["bytes"] == pytest.approx(200.0)
    # forward difference of 9 + 200/B: -200 / (B² (1 + h))
    assert row["d_makespan_d_bandwidth"] == pytest.approx(-200 / (100 ** 2 * 1.01), rel=1e-9)
    assert row["makespan_2x_s"] == pytest.approx(10.0) and row["saved_2x_s"] == pytest.approx(1.0)


def test_an_idle_channel_has_no_sensitivity(prob):
    [row] = bandwidth_sensitivity(prob, np.zeros(3, dtype=np.int32))
    assert row["bytes"] == 0 and row["d_makespan_d_bandwidth"] == 0 and row["saved_2x_s"] == 0


def test_the_what_if_leaves_the_problem_as_it_was(prob):
    what_if_problem(prob, bandwidth={"bus": 3.0}).simulate(PLACEMENT)
    assert prob.simulate(PLACEMENT).result.makespan == pytest.approx(11.0)


@pytest.mark.parametrize("kw,field", [({"bandwidth": {"nvlink": 2.0}}, "channel"), ({"speed": {"d9": 2.0}}, "device"),
                                      ({"speed": {"d0": 0}}, "device"), ({"bandwidth": {"bus": -1}}, "channel")])
def test_bad_multipliers_name_what_is_wrong(prob, kw, field):
    with pytest.raises(InputError) as e:
        what_if(prob, PLACEMENT, **kw)
    assert e.value.field == field

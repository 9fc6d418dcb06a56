"""Where a pipeline's bubble comes from, worked out by hand on two unequal stages; the closed forms; the idle
intervals the lecture's animation shades."""

import numpy as np
import pytest
from helpers import devices, op

from placement_core.analysis.bubble import bubble_breakdown, frame_times, idle_intervals, stage_times, until
from placement_core.analysis.closed_forms import bubble_fraction, bubble_time, holds, step_time
from placement_core.analysis.pipeline import Block
from placement_core.model.graph import Graph

M = 2


def two_stages(out=0.0):
    """Stage 0: t_f 1, t_b 2; stage 1: t_f 2, t_b 4 (seconds per micro-batch); ``out`` bytes per micro-batch
    between them."""
    ops = [op("s0", fwd=1 * M, bwd=2 * M, out=out * M), op("s1", ["s0"], fwd=2 * M, bwd=4 * M, out=0.0)]
    return Graph("two", ops, batch_size=M)


def test_unequal_stages_without_transfers():
    """GPipe, m = 2: S0 F [0,1] [1,2]; S1 F [1,3] [3,5], B [5,9] [9,13]; S0 B [9,11] [13,15]. Idle 9 + 3 = 12 s:
    the closed form of two equal stages of the mean times (t_f 1.5, t_b 3) is 4.5 s each, 9 s; 3 s imbalance."""
    parts = bubble_breakdown(two_stages(), devices(2, bandwidth=100.0, shared=False), np.array([0, 1]), "gpipe", M,
                             comm_efficiency=1.0)
    assert parts["idle_s"] == pytest.approx(12)
    assert (parts["t_f"], parts["t_b"], parts["t_w"]) == pytest.approx((1.5, 3.0, 0.0))
    assert parts["closed_form_s"] == pytest.approx(4.5) and parts["schedule_s"] == pytest.approx(9)
    assert parts["imbalance_s"] == pytest.approx(3) and parts["imbalance_share"] == pytest.approx(0.25)
    assert parts["transfers_s"] == pytest.approx(0) and parts["updates_s"] == pytest.approx(0)


def test_transfers_widen_the_bubble_by_what_waits_for_them():
    """Half a second per hop each way: S1 starts at 1.5 and its forwards end at 5.5, its backwards at 9.5 and 13.5;
    the gradients reach S0 at 10 and 14: S0 B [10,12] [14,16]. Idle (16 − 6) + (16 − 12) = 14 s, 2 s more than
    without the transfers."""
    parts = bubble_breakdown(two_stages(out=50.0), devices(2, bandwidth=100.0, shared=False), np.array([0, 1]),
                             "gpipe", M, comm_efficiency=1.0)
    assert parts["idle_s"] == pytest.approx(14)
    assert parts["transfers_s"] == pytest.approx(2) and parts["transfers_share"] == pytest.approx(2 / 14)
    assert parts["schedule_s"] + parts["imbalance_s"] + parts["updates_s"] + parts["transfers_s"] == \
        pytest.approx(parts["idle_s"])


def test_stage_times_split_the_backward_by_the_weight_gradient_share():
    g = Graph("g", [op("a", fwd=2, bwd=4, params=8, bwd_flops=3.0, bwd_weight_flops=1.0), op("b", ["a"], fwd=2, bwd=4)],
              batch_size=2)
    t = stage_times(g, devices(2), np.array([0, 1]), [0, 1], schedule="zb-h1", micro_batches=2)
    assert (t["t_f"], t["t_b"]) == pytest.approx((1.0, 2.0))
    assert t["t_w"] == pytest.approx((2 / 3 + 0) / 2)  # a: a third of its 2 s; b: no weights, no W


def test_closed_forms():
    assert bubble_time("gpipe", 4, 1, 2) == bubble_time("1f1b", 4, 1, 2) == 9
    assert bubble_time("interleaved-1f1b", 4, 1, 2, v=3) == 3
    assert bubble_time("zb-h1", 4, 1, 2, t_w=1) == 3  # (p − 1)(t_f + t_B − t_W), t_B = t_W = 1
    assert step_time("gpipe", 4, 8, 1, 2, t_u=0.5) == 11 * 3 + 0.5
    assert step_time("thesis", 4, 8, 1, 2) == 4 * 3  # one whole batch: m = 1
    assert bubble_fraction("1f1b", 4, 8, 5, 7) == pytest.approx(3 / 11)  # (p − 1)/(m + p − 1), whatever the times
    assert bubble_fraction("interleaved-1f1b", 4, 8, 1, 2, v=2) == pytest.approx(1.5 / 9.5)
    assert holds("interleaved-1f1b", 4, 6, 1, 2) and not holds("interleaved-1f1b", 4, 8, 1, 2)
    assert holds("zb-h1", 4, 8, 1, 3, t_w=2) and not holds("zb-h1", 4, 8, 1, 2, t_w=1)


def test_idle_intervals_are_the_gaps_on_each_stage():
    blocks = [Block(0, "op", 0, "fwd", 0.0, 1.0, 1, 1.0), Block(0, "op", 0, "bwd", 3.0, 5.0, 1, 2.0),
              Block(1, "op", 0, "fwd", 1.0, 3.0, 1, 2.0), Block(2, "transfer", 0, "fwd", 1.0, 1.5, 1, 0.5)]
    assert idle_intervals(blocks, 2, 6.0) == [(0, 1.0, 3.0), (0, 5.0, 6.0), (1, 0.0, 1.0), (1, 3.0, 6.0)]
    at2 = until(blocks, 2.0)
    assert [(b.row, b.start, b.end) for b in at2] == [(0, 0.0, 1.0), (1, 1.0, 2.0), (2, 1.0, 1.5)]
    assert idle_intervals(at2, 2, 2.0) == [(0, 1.0, 2.0), (1, 0.0, 1.0)]
    assert frame_times(10.0, 4) == [2.5, 5.0, 7.5, 10.0]

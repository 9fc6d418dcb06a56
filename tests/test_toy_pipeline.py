"""The lecture's toy pipeline: p equal stages simulated by the real simulator reproduce the closed forms."""

from __future__ import annotations

import pytest

from placement_core.analysis.toy_pipeline import (Toy, bubble_breakdown, closed_form_bubble, closed_form_step,
                                                  run_toy)
from placement_core.base.errors import InputError


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 4), (4, 4), (4, 8), (3, 16), (8, 2)])
def test_step_and_bubble_are_the_closed_forms(schedule, p, m):
    toy = Toy(p, m, t_f=1.0, t_b=2.0, t_u=0.5)
    run = run_toy(toy, schedule)
    assert run.step_time == (m + p - 1) * 3.0 + 0.5 == closed_form_step(p, m, 1.0, 2.0, 0.5)  # exact, not approx
    work = run.step_time - 0.5  # the forward-backward part: every stage updates in parallel at the end
    r = run.evaluation.result
    for d in run.stage_devices:
        assert (work - (r.busy[d] - 0.5)) / work == pytest.approx(closed_form_bubble(p, m), abs=1e-12)


def test_free_transfers_leave_only_the_textbook_bubble():
    toy = Toy(4, 8, 1.0, 2.0)
    b = bubble_breakdown(toy, run_toy(toy))
    assert b["idle_s"] == pytest.approx(4 * 3 * 3.0) and b["transfers_s"] == pytest.approx(0.0)


def test_a_transfer_per_hop_widens_the_bubble_by_the_hops_on_the_critical_path():
    """GPipe, p = 2, m = 1, c = 0.25 s per hop: F0 (1) -> send (0.25) -> F1, B1 (1 + 2) -> send back (0.25)
    -> B0 (2): step 6.5 s, each stage idle 6.5 - 3 = 3.5 s, of which the textbook's (p - 1)(t_f + t_b) = 3."""
    toy = Toy(2, 1, 1.0, 2.0, transfer=0.25)
    run = run_toy(toy)
    assert run.step_time == pytest.approx(6.5)
    b = bubble_breakdown(toy, run)
    assert b["idle_s"] == pytest.approx(7.0) and b["textbook_s"] == pytest.approx(6.0)
    assert b["transfers_s"] == pytest.approx(1.0) and b["transfer_share"] == pytest.approx(1 / 7)


@pytest.mark.parametrize("toy,field", [(Toy(0, 4, 1, 2), "p"), (Toy(2, 100, 1, 2), "m"), (Toy(2, 2, -1, 2), "t_f"),
                                       (Toy(2, 2, 0, 0), "t_f"), (Toy(2, 2, 1, 2, transfer=1e9), "transfer")])
def test_bad_toys_name_the_field(toy, field):
    with pytest.raises(InputError) as e:
        run_toy(toy)
    assert e.value.field == field


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (3, 6, 3), (4, 4, 4)])
def test_interleaved_toy_is_its_closed_form(p, m, v):
    """m (t_f + t_b) + (p - 1)(t_f + t_b) / V + t_u, the chunks round-robin."""
    toy = Toy(p, m, 0.001, 0.002, t_u=0.0005, v=v)
    run = run_toy(toy, "interleaved-1f1b")
    assert run.step_time == pytest.approx(m * 0.003 + (p - 1) * 0.003 / v + 0.0005, rel=1e-12)
    assert run.step_time == pytest.approx(closed_form_step(p, m, 0.001, 0.002, 0.0005, schedule="interleaved-1f1b",
                                                           v=v), rel=1e-12)
    assert bubble_breakdown(toy, run)["transfers_s"] == 0.0
    assert len({e.op for e in run.evaluation.result.trace}) == p * v  # p V chunks


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (3, 3), (5, 10)])
def test_zb_h1_toy_is_its_closed_form(p, m):
    """t_b = 2 ms of which t_W = 1 ms: m (t_f + t_b) + (p - 1)(t_f + t_B - t_W), a third of 1F1B's bubble."""
    toy = Toy(p, m, 0.001, 0.002, t_w=0.001)
    run = run_toy(toy, "zb-h1")
    assert run.step_time == pytest.approx(m * 0.003 + (p - 1) * 0.001, rel=1e-12)
    ofob = run_toy(toy, "1f1b")
    idle_zb, idle_1f1b = bubble_breakdown(toy, run)["idle_s"], bubble_breakdown(toy, ofob)["idle_s"]
    assert idle_zb == pytest.approx(idle_1f1b / 3)
    assert {e.phase for e in run.evaluation.result.trace} == {"fwd", "bwd", "wgrad"}
    assert closed_form_bubble(p, m, schedule="zb-h1", t_f=1, t_b=2, t_w=1) == pytest.approx((p - 1) / (3 * m + p - 1))


def test_toy_refuses_a_weight_gradient_longer_than_the_backward():
    with pytest.raises(InputError, match="is part of the backward"):
        Toy(2, 2, 1.0, 1.0, t_w=2.0).check()

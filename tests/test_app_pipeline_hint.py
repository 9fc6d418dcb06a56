"""Pipeline page (AppTest): with Ideal off, when transfers are most of the stages' idle time, one line says so
beside the switch that turns them off; the shares it names are the bubble's parts computed here."""

import pytest
from apptest_util import assert_clean, goto, start
from test_app_pipeline_schedules import upload

from dashboard.pipelineview import transfers_note
from placement_core import load_devices, load_network
from placement_core.analysis.bubble import bubble_breakdown
from placement_core.analysis.pipeline import even_stages


def warnings(at) -> list[str]:
    return [str(w.value) for w in at.warning if "Transfers dominate" in str(w.value)]


@pytest.mark.slow
def test_transfers_that_dominate_are_named_with_the_switch_beside_them():
    at = start()
    goto(at, "pipeline")
    at.multiselect(key="pipe_schedules").set_value(["gpipe", "1f1b"]).run()
    assert_clean(at)
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = even_stages(g, d, 4)
    shares = {s: bubble_breakdown(g, d, placement, s, 4)["transfers_share"] for s in ("gpipe", "1f1b")}
    assert min(shares.values()) >= 0.5  # PCIe links under ResNet-50's activations: most of the idle time
    [line] = warnings(at)
    assert f"GPipe {shares['gpipe']:.0%}, 1F1B {shares['1f1b']:.0%}" in line
    at.button(key="pipe_free_transfers").click().run()
    assert_clean(at)
    assert at.toggle(key="pipe_ideal").value is True
    assert warnings(at) == [] and not [b for b in at.button if b.key == "pipe_free_transfers"]


@pytest.mark.slow
def test_no_line_where_transfers_are_cheap():
    at = upload(start(), bandwidth=1e15)  # equal chunks on 4 devices, links all but free
    assert_clean(at)
    assert warnings(at) == []


def test_the_line_names_only_the_schedules_where_transfers_are_half_the_idle_time_or_more():
    views = [{"run": type("R", (), {"schedule": s})()} for s in ("gpipe", "1f1b", "zb-h1")]
    parts = [{"transfers_share": x} for x in (0.5, 0.499, 0.9)]
    assert "(GPipe 50%, ZB-H1 90%)" in transfers_note(views, parts)
    assert transfers_note(views, [{"transfers_share": 0.2}] * 3) is None

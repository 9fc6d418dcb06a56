"""Issue 29 (5): a simulated time with an interval from the calibration's spread, and rankings that say when two
placements cannot be told apart. The network is the hand-written one of test_timings_cli (one device runs
every phase in turn, so a step is a sum), so every interval has a closed form: a lognormal's quantiles."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from placement_core import Problem
from placement_core.analysis import uncertainty
from placement_core.base.errors import InputError
from placement_core.cost.timings import check_timings, timing_table
from placement_core.formats.network import network_from_dict as parse_network
from placement_core.model.devices import devices_from_dict as parse_devices

from test_timings_cli import DEVICES, NETWORK, TIMINGS, times
from test_timings_cli import files  # noqa: F401 (a fixture)


def problem(spread_a: float = 0.0, spread_b: float = 0.0, table=None) -> Problem:
    ops = {op: {d: dict(v) for d, v in per.items()} for op, per in (table or TIMINGS["ops"]).items()}
    for d in ops["a"]:
        ops["a"][d]["fwd_spread"] = spread_a
        ops["b"][d]["bwd_spread"] = spread_b
    return Problem(parse_network(NETWORK), parse_devices(DEVICES), timings=ops)


ON_CPU0 = [0, 0, 0]
ON_CPU1 = [1, 1, 1]


def lognormal_quantile(mean: float, s: float, q: float) -> float:
    """The q quantile of a lognormal with this mean and relative spread (sd / mean)."""
    sigma = math.sqrt(math.log1p(s * s))
    return mean * math.exp(-sigma * sigma / 2 + sigma * NormalDist().inv_cdf(q))


def test_no_spread_no_interval():
    p = problem()
    assert not uncertainty.has_spread(p)
    assert uncertainty.intervals(p, [ON_CPU0]) is None and uncertainty.ranking(p, [ON_CPU0]) is None
    with pytest.raises(InputError, match="no spread") as e:
        uncertainty.draws(p, [ON_CPU0])
    assert "calibrate" in e.value.fix


def test_one_op_with_a_spread_gives_a_lognormal_step():
    """The step is 1 + 3 + 4 + 2 + 0.5 + 0.25 = 10.75 s (test_timings_cli); only a's forward (1 s) moves, by
    20 %: the step is 9.75 s plus a lognormal of mean 1 s, whose 5 % and 95 % quantiles are closed forms."""
    p = problem(spread_a=0.2)
    assert uncertainty.has_spread(p)
    d = uncertainty.draws(p, [ON_CPU0], samples=4000, seed=1)[:, 0]
    assert d.mean() == pytest.approx(10.75, abs=3 * 0.2 / math.sqrt(4000))  # mean 1: the point stays the centre
    assert d.std() == pytest.approx(0.2, rel=0.08)
    [iv] = uncertainty.intervals(p, [ON_CPU0], samples=4000, seed=1)
    assert iv.point == pytest.approx(10.75)
    assert iv.low == pytest.approx(9.75 + lognormal_quantile(1.0, 0.2, 0.05), abs=0.01)
    assert iv.high == pytest.approx(9.75 + lognormal_quantile(1.0, 0.2, 0.95), abs=0.015)
    assert iv.level == 0.9 and iv.samples == 4000


def test_independent_ops_add_their_variances():
    """a's forward (1 s, 30 %) and b's backward (4 s, 10 %) drawn independently: the step's sd is
    sqrt(0.3² + 0.4²) = 0.5 s."""
    d = uncertainty.draws(problem(spread_a=0.3, spread_b=0.1), [ON_CPU0], samples=4000, seed=2)[:, 0]
    assert d.std() == pytest.approx(0.5, rel=0.06)


def test_the_same_draws_for_every_placement_and_seed():
    p = problem(spread_a=0.2, spread_b=0.2)
    one = uncertainty.draws(p, [ON_CPU0, ON_CPU0], samples=16, seed=3)
    assert np.array_equal(one[:, 0], one[:, 1])  # paired: the same op times for both
    assert np.array_equal(one, uncertainty.draws(p, [ON_CPU0, ON_CPU0], samples=16, seed=3))
    assert not np.array_equal(one, uncertainty.draws(p, [ON_CPU0, ON_CPU0], samples=16, seed=4))


def test_a_ranking_says_which_placements_cannot_be_told_apart():
    """cpu1 measured 1 % slower in a's forward than cpu0 (1.01 s against 1 s) with a spread of 20 %: the two
    single-device placements are indistinguishable. With cpu1 3 s slower, they are not."""
    close = {op: {d: dict(v) for d, v in per.items()} for op, per in TIMINGS["ops"].items()}
    close["a"]["cpu1"]["fwd"] = 1.01
    rows = uncertainty.ranking(problem(spread_a=0.2, table=close), [ON_CPU1, ON_CPU0], labels=["cpu1", "cpu0"])
    assert [r["placement"] for r in rows] == ["cpu0", "cpu1"]
    assert rows[0]["tied_with_above"] is False and rows[1]["tied_with_above"] is True
    assert rows[1]["simulated_s"] == pytest.approx(10.76) and rows[1]["low_s"] < 10.75 < rows[1]["high_s"]
    far = {op: {d: dict(v) for d, v in per.items()} for op, per in TIMINGS["ops"].items()}
    far["a"]["cpu1"]["fwd"] = 4.0
    rows = uncertainty.ranking(problem(spread_a=0.2, table=far), [ON_CPU1, ON_CPU0], labels=["cpu1", "cpu0"])
    assert rows[1]["placement"] == "cpu1" and rows[1]["tied_with_above"] is False
    assert rows[1]["faster_share"] == 0.0  # cpu1 never beats cpu0 in any draw


def test_indistinguishable_from_draws_by_hand():
    # placement 1 is 1 s slower than 0 in every draw; placement 2 is -1, 1, 0, 0.5 against 0's zeros
    d = np.array([[0.0, 1.0, -1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.5]])
    same = uncertainty.indistinguishable(d, level=0.9)
    # 2 - 0 sorted: -1, 0, 0.5, 1; its 5 % and 95 % quantiles (linear, positions 0.15 and 2.85) are -0.85 and
    # 0.925: zero inside. 2 - 1 sorted: -2, -1, -0.5, 0: -1.85 and -0.075: zero outside. 1 - 0 is always 1.
    assert same.tolist() == [[True, False, True], [False, True, False], [True, False, True]]


def test_an_interval_always_holds_its_point(monkeypatch):
    """Side-by-side branches make a step a maximum, and mean-1 draws push a maximum up: the draws' central range
    can lie wholly above the point (E5 on two CPU ranks met it, and its scatter failed on an error bar of
    negative length). Draws 11-14 s against the point 10.75 s: the interval is [10.75, the 95 % quantile];
    draws 8-9 s: [the 5 % quantile, 10.75]."""
    p = problem(spread_a=0.2)
    above = np.array([[11.0], [12.0], [13.0], [14.0]])  # linear quantiles: 11.15 and 13.85
    monkeypatch.setattr(uncertainty, "draws", lambda *a, **k: above)
    sp = uncertainty.spread(p, [ON_CPU0])
    assert sp.point[0] == pytest.approx(10.75)
    assert sp.low[0] == pytest.approx(10.75) and sp.high[0] == pytest.approx(13.85)
    monkeypatch.setattr(uncertainty, "draws", lambda *a, **k: above - 5.0)  # 6-9 s: 6.15 and 8.85
    sp = uncertainty.spread(p, [ON_CPU0])
    assert sp.low[0] == pytest.approx(6.15) and sp.high[0] == pytest.approx(10.75)


def test_spreads_are_checked_and_groups_add_them_in_quadrature():
    doc = {**TIMINGS, "ops": {**TIMINGS["ops"], "a": {d: {**v, "fwd_spread": -0.1} for d, v in times(1, 2, 0.5).items()}}}
    with pytest.raises(InputError, match="fwd_spread"):
        check_timings(doc)
    doc["ops"]["a"] = {d: {**v, "fwd_spread": 11.0} for d, v in times(1, 2, 0.5).items()}
    with pytest.raises(InputError, match="fwd_spread"):
        check_timings(doc)
    # a (1 s, 10 %) and b (3 s, 20 %) as one group: sd sqrt(0.1² + 0.6²) over 4 s
    doc["ops"]["a"] = {d: {**v, "fwd_spread": 0.1} for d, v in times(1, 2, 0.5).items()}
    doc["ops"]["b"] = {d: {**v, "fwd_spread": 0.2} for d, v in times(3, 4, 0.25).items()}
    check_timings(doc)
    graph = parse_network({**NETWORK, "ops": NETWORK["ops"][:2]})
    graph = type(graph)(graph.name, graph.ops, graph.batch_size)
    table = timing_table(doc, graph, groups={"x": ["x"], "a": ["a", "b"]})
    assert table["a"]["cpu0"]["fwd"] == pytest.approx(4.0)
    assert table["a"]["cpu0"]["fwd_spread"] == pytest.approx(math.sqrt(0.1 ** 2 + 0.6 ** 2) / 4.0)
    assert "bwd_spread" not in table["a"]["cpu0"]


def test_bad_arguments_say_what_to_give():
    p = problem(spread_a=0.2)
    with pytest.raises(InputError, match="samples"):
        uncertainty.draws(p, [ON_CPU0], samples=1)
    with pytest.raises(InputError, match="level"):
        uncertainty.intervals(p, [ON_CPU0], level=1.5)
    with pytest.raises(InputError, match="device index"):
        uncertainty.intervals(p, [[0, 0, 7]])


def test_simulate_prints_the_interval(tmp_path, capsys, files):
    """`placement simulate --interval`: the 10.75 s step of test_timings_cli with a's forward (1 s) at 20 %."""
    import json

    from placement_core.cli import main
    doc = json.loads(files["timings"].read_text())
    for d in doc["ops"]["a"].values():
        d["fwd_spread"] = 0.2
    spread = tmp_path / "spread.json"
    spread.write_text(json.dumps(doc))
    base = ["simulate", "--network", str(files["net"]), "--devices", str(files["devices"]), "--placement",
            "single:cpu0"]
    assert main([*base, "--timings", str(spread), "--interval", "--samples", "400", "--json"]) == 0
    iv = json.loads(capsys.readouterr().out)["interval"]
    assert iv["point_s"] == pytest.approx(10.75) and iv["samples"] == 400
    assert iv["low_s"] == pytest.approx(9.75 + lognormal_quantile(1.0, 0.2, 0.05), abs=0.03)
    assert iv["high_s"] == pytest.approx(9.75 + lognormal_quantile(1.0, 0.2, 0.95), abs=0.05)
    assert main([*base, "--timings", str(spread), "--interval"]) == 0
    out = capsys.readouterr().out  # closed form: 9.75 + 0.72 and 9.75 + 1.35 s
    assert "90% interval of the time per batch from the calibration's spread: 10.5 s to 11.1 s (64 draws" in out
    assert main([*base, "--timings", str(files["timings"]), "--interval"]) == 2  # no spread recorded
    err = capsys.readouterr().err
    assert "--interval needs measured op times" in err and "Traceback" not in err
    assert main([*base, "--timings", str(spread), "--interval", "--samples", "1"]) == 2
    assert "samples" in capsys.readouterr().err


def test_calibration_records_each_ops_spread_between_rounds():
    """Two rounds of one device: a's forward 10 and 12 s (mean 11, sample sd sqrt(2)), its backward 20 and 20 s
    (no spread); the table keeps the least time (10 s) and the spread sqrt(2) / 11 beside it. One round records
    no spread."""
    from placement_core.analysis.calibration_fit import CalibrationSettings, build_calibration, fastest
    from placement_core.model.graph import Graph, Op
    from placement_core.torch.devspec import parse_devices

    graph = Graph("tiny", [Op("x", "input", shape=(8, 4)), Op("a", "linear", inputs=("x",), shape=(8, 4))], 8)

    def measured(fwd):
        return {"ops": {"x": {"fwd": 0.0, "bwd": 0.0, "update": 0.0}, "a": {"fwd": fwd, "bwd": 20.0, "update": 0.0}},
                "step_s": 30.0, "steps_s": [30.0], "gemm_flops": 1e9, "copy_bandwidth": 1e9, "memory_bytes": 1e9,
                "model": "cpu", "threads": 1, "cores": [0]}
    devs = parse_devices("cpu:1")
    cal = build_calibration(graph, "test", (1, 4), devs, {"cpu0": fastest([measured(10.0), measured(12.0)])}, {},
                            CalibrationSettings(reconcile="none"))
    entry = cal.timings["ops"]["a"]["cpu0"]
    assert entry["fwd"] == 10.0 and entry["fwd_spread"] == pytest.approx(math.sqrt(2) / 11)
    assert "bwd_spread" not in entry and "fwd_spread" not in cal.timings["ops"]["x"]["cpu0"]
    one = build_calibration(graph, "test", (1, 4), devs, {"cpu0": fastest([measured(10.0)])}, {},
                            CalibrationSettings(reconcile="none"))
    assert "fwd_spread" not in one.timings["ops"]["a"]["cpu0"]


def test_the_benchmark_script_ranks_e5s_kinds_of_placement():
    """benchmarks/e5_intervals.py on the hand-written network: cpu1 1 % slower in a's forward, 20 % spread; one
    device per rank and two stages, ranked with their intervals (no batch split here: no data parallel row)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "e5_intervals.py"
    spec = importlib.util.spec_from_file_location("e5_intervals", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    close = {op: {d: dict(v) for d, v in per.items()} for op, per in TIMINGS["ops"].items()}
    close["a"]["cpu1"]["fwd"] = 1.01
    p = problem(spread_a=0.2, table=close)
    rows = module.table(p, samples=32)
    by = {r["placement"]: r for r in rows}
    assert set(by) == {"single:cpu0", "single:cpu1", "two stages"}  # no batch split here: no data parallel row
    assert [r["simulated_s"] for r in rows] == sorted(r["simulated_s"] for r in rows)
    assert by["single:cpu0"]["simulated_s"] == pytest.approx(10.75)
    assert by["single:cpu1"]["simulated_s"] == pytest.approx(10.76)
    assert by["single:cpu1"]["rank"] == by["single:cpu0"]["rank"] + 1 and by["single:cpu1"]["tied_with_above"]

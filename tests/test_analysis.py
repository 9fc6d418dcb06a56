"""placement_core.analysis against schedules and statistics worked out by hand."""

import math

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core import InputError, load_devices
from placement_core.analysis import (archive_heatmap, channel_stats, compare_placements, correlation_stats,
                                     critical_path, device_stats, edge_buckets, fmt_bytes, fmt_flops, fmt_seconds,
                                     gantt_rows, gantt_segments, kendall_tau, largest_transfers, layered_layout,
                                     linear_fit, memory_series, network_summary, op_table, pearson_r,
                                     placement_summary, scale_sizes, top_elites)
from placement_core.analysis.device_tables import (devices_from_tables, devices_to_tables, format_routes,
                                                   parse_routes)
from placement_core.analysis.layout import _pack, edge_path
from placement_core.model.devices import devices_to_dict
from placement_core.model.graph import Graph, Op
from placement_core.optimize.archive import THESIS_DESCRIPTORS, Archive, make_descriptors


def chain_split():
    # a -> b on d0, c on d1; fwd 1 s, bwd 2 s; 100 B at 100 B/s = 1 s per transfer (see test_simulator_schedules).
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    return p, p.simulate([0, 0, 1], trace=True)


def branches():
    # s -> {x on d0 (2 s), y on d1 (3 s)} -> j on d0, forward only:
    # s [0,1] d0; x [1,3] d0; s->d1 [1,2]; y [2,5] d1; y->d0 [5,6]; j [6,7] d0.
    ops = [op("s"), op("x", ["s"], fwd=2), op("y", ["s"], fwd=3), op("j", ["x", "y"])]
    p = problem(ops, devices(2), forward_only=True)
    return p, p.simulate([0, 0, 1, 0], trace=True)


def names(trace, path):
    return [(trace[i].kind, trace[i].op, trace[i].phase) for i in path]


# -- critical path ----------------------------------------------------------------------------------

def test_critical_path_skips_the_short_branch():
    p, ev = branches()
    t = ev.result.trace
    path = critical_path(t, p.graph)
    assert names(t, path) == [("op", "s", "fwd"), ("transfer", "s", "fwd"), ("op", "y", "fwd"),
                              ("transfer", "y", "fwd"), ("op", "j", "fwd")]
    # the path covers the makespan without gaps: 1 + 1 + 3 + 1 + 1 = 7
    assert sum(t[i].end - t[i].start for i in path) == ev.result.makespan == 7


def test_critical_path_of_a_training_step_includes_gradient_transfers():
    p, ev = chain_split()
    t = ev.result.trace
    path = critical_path(t, p.graph)
    assert names(t, path) == [("op", "a", "fwd"), ("op", "b", "fwd"), ("transfer", "b", "fwd"), ("op", "c", "fwd"),
                              ("op", "c", "bwd"), ("transfer", "c", "bwd"), ("op", "b", "bwd"), ("op", "a", "bwd")]
    assert sum(t[i].end - t[i].start for i in path) == 11


def test_critical_path_follows_a_device_that_was_busy():
    # a and b are independent inputs of j, all on d0: b waits for the device, not for data.
    p = problem([op("a"), op("b", fwd=2), op("j", ["a", "b"])], devices(1), forward_only=True)
    ev = p.simulate([0, 0, 0], trace=True)
    t = ev.result.trace
    assert names(t, critical_path(t, p.graph)) == [("op", "a", "fwd"), ("op", "b", "fwd"), ("op", "j", "fwd")]


def test_critical_path_of_an_empty_trace():
    p, _ = branches()
    assert critical_path([], p.graph) == []


# -- Gantt rows, segments, memory -------------------------------------------------------------------

def test_gantt_has_one_row_per_device_and_channel_and_groups_by_batch_and_phase():
    p, ev = chain_split()
    rows = gantt_rows(p.devices.names, [c.name for c in p.devices.channels])
    assert rows == ["d0", "d1", "bus"]
    segs = gantt_segments(ev.result.trace, rows)
    keys = [(s.kind, s.batch, s.phase) for s in segs]
    assert keys == [("op", 0, "fwd"), ("op", 0, "bwd"), ("transfer", 0, "fwd"), ("transfer", 0, "bwd")]
    fwd = segs[0]
    assert fwd.row.tolist() == [0, 0, 1] and fwd.start.tolist() == [0, 1, 3] and fwd.end.tolist() == [1, 2, 4]
    assert segs[2].row.tolist() == [2] and "d0 → d1 on bus" in segs[2].hover[0] and "100 B" in segs[2].hover[0]
    assert sum(len(s) for s in segs) == len(ev.result.trace)


def test_memory_series_is_a_step_function_per_device():
    p, ev = branches()
    (t0, b0), (t1, b1) = memory_series(ev.result, 2)
    # d0 holds s's output from 1 until it has been sent and x has consumed it, then x's and y's (received) outputs
    assert t0.tolist() == [0, 1, 2, 3, 6, 7, 7] and b0.tolist() == [0, 100, 100, 100, 200, 0, 0]
    assert t1.tolist() == [0, 2, 5, 6, 7] and b1.tolist() == [0, 100, 100, 0, 0]
    assert b0.max() == ev.result.peak_memory[0] and b1.max() == ev.result.peak_memory[1]


# -- bottleneck statistics --------------------------------------------------------------------------

def test_device_and_channel_stats_of_the_chain():
    p, ev = chain_split()
    r, t = ev.result, ev.result.trace
    d0, d1 = device_stats(r, p.devices.names, p.capacity, t)
    assert (d0["busy_s"], d0["idle_s"], d1["busy_s"], d1["idle_s"]) == (6, 5, 3, 8)
    assert d0["utilisation"] == pytest.approx(6 / 11)
    assert d0["longest_idle_s"] == 5  # b's forward ends at 2, its backward starts at 7
    assert d1["longest_idle_s"] == 5  # c's backward ends at 6, the step at 11
    assert d0["peak_memory"] == 200 and d0["overflow"] == 0
    [bus] = channel_stats(r, ["bus"], t)
    assert bus == {"channel": "bus", "bytes": 200, "busy_s": 2, "utilisation": pytest.approx(2 / 11),
                   "throughput": 100, "transfers": 2}


def test_largest_transfers_are_sorted_by_size():
    ops = [op("s", out=300), op("x", ["s"], out=100), op("y", ["s"]), op("j", ["x", "y"])]
    p = problem(ops, devices(2), forward_only=True)
    t = p.simulate([0, 1, 0, 0], trace=True).result.trace
    rows = largest_transfers(t, 5)
    assert [(r["tensor"], r["bytes"], r["src"], r["dst"]) for r in rows] == [("s", 300, "d0", "d1"),
                                                                           ("x", 100, "d1", "d0")]
    assert rows[0]["duration_s"] == 3 and rows[0]["kind"] == "activation"
    assert largest_transfers(t, 1) == rows[:1]


def test_placement_summary_and_comparison():
    p, _ = chain_split()
    s = placement_summary(p, [0, 0, 1])
    assert s["transfers"] == 2 and s["bytes_moved"] == 200 and s["cross_device_edges"] == 1
    assert s["ops_per_device"] == {"d0": 2, "d1": 1} and s["devices_used"] == 2
    assert s["batch_time_s"] == 11 and s["feasible"]
    rows, diff = compare_placements(p, [0, 0, 0], [0, 0, 1])
    by = {r["metric"]: r for r in rows}
    assert by["transfers"]["a"] == 0 and by["transfers"]["b"] == 2 and by["transfers"]["difference"] == 2
    assert by["time per batch"]["a"] == 9  # 3 forwards + 3 backwards on one device
    assert by["ops on d1"]["b"] == 1
    assert diff == {"ops_moved": 1, "ops": 3, "moved_names": ["c"]}


# -- correlation ------------------------------------------------------------------------------------

def test_correlation_statistics_by_hand():
    assert pearson_r([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1)
    assert kendall_tau([1, 2, 3, 4], [2, 4, 6, 8]) == 1
    assert linear_fit([1, 2, 3, 4], [3, 5, 7, 9]) == pytest.approx((2, 1))
    # x = 1,2,3, y = 3,1,2: dx = -1,0,1, dy = 1,-1,0 -> r = -1 / sqrt(2 * 2); one concordant, two discordant pairs
    assert pearson_r([1, 2, 3], [3, 1, 2]) == pytest.approx(-0.5)
    assert kendall_tau([1, 2, 3], [3, 1, 2]) == pytest.approx(-1 / 3)
    # tau-b with a tie in x: C = 2, D = 0, one pair tied in x only -> 2 / sqrt(3 * 2)
    assert kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(pearson_r([1], [1])) and math.isnan(kendall_tau([1], [2]))
    assert math.isnan(pearson_r([1, 1], [1, 2])) and all(math.isnan(v) for v in linear_fit([2, 2], [1, 3]))
    s = correlation_stats([1, 2, 3], [3, 1, 2])
    assert s["n"] == 3 and s["slope"] == pytest.approx(-0.5) and s["intercept"] == pytest.approx(3)


# -- layout -----------------------------------------------------------------------------------------

def test_layered_layout_of_a_diamond():
    g = Graph("d", [op("a"), op("b", ["a"]), op("c", ["a"]), op("d", ["b", "c"])])
    lay = layered_layout(g)
    assert lay.x.tolist() == [0, 1, 1, 2]
    assert lay.y.tolist() == [0, -0.5, 0.5, 0]
    assert lay.depth == 3 and lay.width == 2


def test_layered_layout_keeps_a_chain_on_its_line_past_a_branch():
    # a -> b -> c -> e and a -> d -> e (a residual block with a projection)
    g = Graph("r", [op("a"), op("b", ["a"]), op("c", ["b"]), op("d", ["a"]), op("e", ["c", "d"])])
    lay = layered_layout(g)
    x = dict(zip([o.name for o in g.ops], lay.x))
    y = dict(zip([o.name for o in g.ops], lay.y))
    assert (x["a"], x["b"], x["d"], x["c"], x["e"]) == (0, 1, 1, 2, 3)
    assert y["b"] == y["c"] == -0.5 and y["d"] == 0.5 and y["e"] == 0 and y["a"] == 0


def test_pack_keeps_order_and_spacing_with_least_displacement():
    assert _pack([0, 0, 0]) == [-1, 0, 1]
    assert _pack([0, 5]) == [0, 5]
    assert _pack([2, 0]) == [0.5, 1.5]


def test_edge_paths_buckets_and_sizes():
    assert edge_path(0, 0, 1, 1) == ([0, 1], [0, 1])
    xs, ys = edge_path(0, 0, 4, 0)
    assert len(xs) == 9 and xs[0] == 0 and xs[-1] == 4 and max(ys) > 0.3 and ys[0] == ys[-1] == 0
    buckets = edge_buckets([(0, 1, 1.0), (1, 2, 10.0), (2, 3, 100.0), (3, 4, 1000.0)], buckets=3)
    assert [[e[2] for e in b["edges"]] for b in buckets] == [[1], [10], [100, 1000]]
    assert buckets[0]["low"] == pytest.approx(1) and buckets[-1]["high"] == pytest.approx(1000)
    sizes = scale_sizes([0, 1, 4], 5, 25)
    assert sizes.tolist() == [5, 15, 25]  # area (not radius) proportional to the value


def test_network_summary_and_op_table():
    g = Graph("n", [Op("x", "input", output_bytes=40), Op("fc", "linear", ("x",), fwd_flops=2e9, bwd_flops=4e9,
                                                            output_bytes=8e6, param_bytes=4e6, shape=(2, 10))])
    s = network_summary(g)
    assert (s["ops"], s["edges"], s["fwd_flops"], s["bwd_flops"], s["params"]) == (2, 1, 2e9, 4e9, 1e6)
    rows = op_table(g, np.array([0, 1]), ["cpu", "gpu"])
    assert rows[1] == {"#": 1, "op": "fc", "kind": "linear", "inputs": 1, "forward GFLOP": 2, "backward GFLOP": 4,
                       "output MB": 8, "parameters MB": 4, "shape": "2 × 10", "device": "gpu"}


# -- archive views ----------------------------------------------------------------------------------

def small_archive():
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    archive = Archive(p, make_descriptors(p, THESIS_DESCRIPTORS))
    # niches (most-used device, devices used - 1, cross-edge bin of 40 over 2 edges):
    # [0,0,0] -> (0,0,0); [0,0,1] -> (0,1,20); [1,1,0] -> (1,1,20); [0,1,0] -> (0,1,39)
    archive.add(np.array([[0, 0, 0], [0, 0, 1], [1, 1, 0], [0, 1, 0]], dtype=np.int32),
                np.array([1.0, 2.0, 3.0, 0.5]))
    return archive


def test_heatmap_over_two_dimensions_keeps_the_best_over_the_third():
    archive = small_archive()
    assert sorted(archive.elites) == [(0, 0, 0), (0, 1, 20), (0, 1, 39), (1, 1, 20)]
    h = archive_heatmap(archive, 2, 0)  # columns: cross-device edges, rows: most-used device
    assert h.z.shape == (2, 40) and h.filled == len(archive) == 4
    assert (h.z[0, 0], h.z[0, 20], h.z[1, 20], h.z[0, 39]) == (1.0, 2.0, 3.0, 0.5)
    assert h.y_labels == ["d0", "d1"] and h.x_title == "cross-device edges"
    h = archive_heatmap(archive, 0, 1)  # columns: most-used device, rows: devices used
    assert h.filled == 3  # (0,1,20) and (0,1,39) share a cell
    assert h.z[1, 0] == 0.5 and h.niche[1][0] == (0, 1, 39) and h.count[1, 0] == 2
    assert "2 elite(s)" in h.hover[1][0] and "mostly d0" in h.hover[1][0]
    with pytest.raises(ValueError):
        archive_heatmap(archive, 1, 1)


def test_top_elites_are_ranked():
    rows = top_elites(small_archive(), 3)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert [r["objective_s"] for r in rows] == [0.5, 1.0, 2.0]
    assert rows[0]["label"] == "mostly d0 · 2 devices used · 2 cross-device edges"
    assert rows[0]["most-used device"] == "d0" and rows[0]["devices used"] == 2


# -- device tables ----------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["malvik", "malvik-4gpu", "nvlink-8gpu", "luke01", "dgx-h100:nodes=2"])
def test_device_tables_round_trip(preset):
    g = load_devices(preset)
    back = devices_from_tables(g.name, *devices_to_tables(g))
    assert devices_to_dict(back) == devices_to_dict(g)


def test_device_tables_show_everyday_units():
    dev, chan = devices_to_tables(load_devices("malvik-4gpu"))
    assert dev[1] == {"name": "gpu0", "kind": "gpu", "model": "NVIDIA Tesla V100", "peak TFLOP/s": 14,
                      "memory GB": 32, "memory bandwidth GB/s": 900, "clock MHz": 1312, "µs per message": 0,
                      "SMs": None, "bf16 peak TFLOP/s": None, "fp16 peak TFLOP/s": None,
                      "fp32 measured TFLOP/s": None, "bf16 measured TFLOP/s": None, "fp16 measured TFLOP/s": None}
    assert chan[0]["bandwidth GB/s"] == 16 and chan[0]["latency µs"] == 10 and chan[0]["measured GB/s"] is None
    assert chan[0]["routes"].startswith("cpu0→gpu0, gpu0→cpu0")


def test_device_tables_message_overhead_in_microseconds():
    g = load_devices("malvik")
    dev, chan = devices_to_tables(g)
    dev[0]["µs per message"] = 250
    dev[1]["µs per message"] = float("nan")  # an emptied cell: none
    back = devices_from_tables(g.name, dev, chan)
    assert [d.message_overhead for d in back.devices] == [2.5e-4, 0.0, 0.0]
    assert devices_to_tables(back)[0][0]["µs per message"] == 250
    dev[2]["µs per message"] = -1
    with pytest.raises(InputError) as e:
        devices_from_tables("x", dev, chan)
    assert str(e.value) == "Devices table, row 3 (gpu1): column 'µs per message': must not be negative"


def test_zero_bandwidth_names_the_table_row_and_column():
    dev, chan = devices_to_tables(load_devices("malvik-4gpu"))
    chan[1]["bandwidth GB/s"] = 0
    with pytest.raises(InputError) as e:
        devices_from_tables("x", dev, chan)
    assert str(e.value) == "Channels table, row 2 (pcie1): column 'bandwidth GB/s': must be greater than zero"


def test_table_errors_for_devices_and_routes():
    dev, chan = devices_to_tables(load_devices("malvik"))
    bad = [dict(r) for r in dev]
    bad[0]["memory GB"] = float("nan")  # an emptied cell
    with pytest.raises(InputError, match=r"Devices table, row 1 \(cpu0\): column 'memory GB'"):
        devices_from_tables("x", bad, chan)
    bad = [dict(r) for r in chan]
    bad[0]["routes"] = "cpu0=gpu0"
    with pytest.raises(InputError, match="cannot read route 'cpu0=gpu0'.*SRC→DST"):
        devices_from_tables("x", dev, bad)
    bad[0]["routes"] = ""
    with pytest.raises(InputError, match="Channels table: column 'routes': no route for"):
        devices_from_tables("x", dev, bad)


def test_route_text():
    assert parse_routes("a→b, c->d; e > f\n") == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert parse_routes(None) == [] and parse_routes(float("nan")) == []
    assert format_routes([("a", "b"), ("b", "a")]) == "a→b, b→a"


def test_units():
    assert fmt_bytes(2.5e9) == "2.5 GB" and fmt_bytes(512) == "512 B" and fmt_bytes(1.05e6) == "1.05 MB"
    assert fmt_flops(4.1e9) == "4.1 GFLOP" and fmt_flops(2.07e12) == "2.07 TFLOP"
    assert fmt_seconds(0.0123) == "12.3 ms" and fmt_seconds(2e-6) == "2 µs" and fmt_seconds(3.5) == "3.5 s"
    assert fmt_seconds(0) == "0 s" and fmt_seconds(float("inf")) == "∞"

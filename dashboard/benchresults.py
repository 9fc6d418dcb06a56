"""The Benchmark page's measurements: the table of measured against simulated times with its statistics and
chart, the rankings of measured top-K runs, earlier measurements from the run store, and the CSV download."""

from __future__ import annotations

import numpy as np
import streamlit as st

from placement_core import InputError
from placement_core.analysis import correlation_stats, fmt_seconds

from . import state, stored, ui
from .charts import agreement

AXES = {"independent": "independent axes", "log-log": "log-log", "equal": "equal axes (y = x diagonal)"}


def draw_ranking(r: dict) -> None:
    st.markdown(f"##### {ui.esc(r['title'])}: simulated and measured ranking")
    st.dataframe(r["rows"], hide_index=True,
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("simulated objective (ms)", "measured median (ms)")})
    tau = r["tau"]
    st.caption(f"Kendall τ of the simulated and the measured ranking over {r['n']} measured placement(s): "
               + ("– (fewer than two measured, or all tied)" if np.isnan(tau) else f"**{tau:.3f}**")
               + f" (1: the same order; 0: unrelated). Measured on {ui.esc(r['devices'])} with the {r['runner']} "
               f"runner at batch {r['batch']}; stored with the run.")


def earlier_points(exclude: set[int]) -> list[dict]:
    """Stored measurements of the current network (same content, at any batch size) not in ``exclude``."""
    from placement_core.formats.network import network_hash

    g = state.graph()
    try:
        with stored.open_store() as store:
            rows = [b for b in store.benchmarks(network_name=g.name) if b["id"] not in exclude]
    except InputError:
        return []
    hashes = {}
    out = []
    for b in rows:
        batch = b.get("batch_size")
        if batch is None or b.get("network_hash") is None:
            continue
        if batch not in hashes:
            hashes[batch] = network_hash(g.with_batch_size(int(batch)))
        if hashes[batch] != b["network_hash"]:
            continue
        r = b["result"]
        out.append({"placement": f"{b['label'] or 'placement'} (stored #{b['id']})", "status": r.get("status", "ok"),
                    "simulated_s": b["simulated_s"], "measured_s": b["measured_median_s"],
                    "iqr_s": r.get("iqr_s"), "devices": b["devices_spec"], "runner": b["runner"],
                    "batch": batch, "message": r.get("message") or "", "stored_id": b["id"]})
    return out


def points_csv(points: list[dict]) -> bytes:
    """The benchmarked placements the page shows, as CSV (times in seconds, as the run store keeps them)."""
    from placement_core.analysis.exports import rows_to_csv

    return rows_to_csv([{"placement": p["placement"], "status": p["status"], "simulated_s": p["simulated_s"],
                         "simulated_low_s": (p.get("sim_interval_s") or [None, None])[0],
                         "simulated_high_s": (p.get("sim_interval_s") or [None, None])[1],
                         "measured_median_s": p["measured_s"], "iqr_s": p["iqr_s"], "devices": p["devices"],
                         "runner": p["runner"], "batch_size": p["batch"], "stored_benchmark": p.get("stored_id"),
                         "note": p["message"]} for p in points]).encode()


def draw_results(points: list[dict]) -> None:
    s = state.session()
    st.markdown("##### Measured against simulated")
    st.dataframe([{"placement": p["placement"], "status": p["status"],
                   "simulated (ms)": None if p["simulated_s"] is None else p["simulated_s"] * 1e3,
                   "simulated, 90 % (ms)": _interval_text(p.get("sim_interval_s")),
                   "measured median (ms)": None if p["measured_s"] is None else p["measured_s"] * 1e3,
                   "spread, IQR (ms)": None if p["iqr_s"] is None else p["iqr_s"] * 1e3,
                   "devices": p["devices"], "batch": p["batch"], "note": p["message"]} for p in points],
                 hide_index=True, key="bench_table",
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("simulated (ms)", "measured median (ms)", "spread, IQR (ms)")})
    st.download_button("Download as CSV", points_csv(points), file_name=f"benchmarks-{state.graph().name}.csv",
                       mime="text/csv", key="bench_csv", icon=":material/download:", on_click="ignore",
                       help="The placements above with their simulated and measured times, in seconds.")
    ok = [p for p in points if p["status"] == "ok" and p["measured_s"] is not None and p["simulated_s"] is not None]
    if not ok:
        st.caption("No successful measurement yet.")
        return
    sim = [p["simulated_s"] for p in ok]
    mea = [p["measured_s"] for p in ok]
    stats = correlation_stats(sim, mea)
    from placement_core.analysis.stats import mape  # the E5 experiment's statistic
    m = st.columns(5)
    m[0].metric("Placements measured", stats["n"])
    m[1].metric("Pearson r", "–" if np.isnan(stats["pearson_r"]) else f"{stats['pearson_r']:.3f}",
                help="Linear agreement of simulated and measured time (thesis E5: 0.67–0.94).")
    m[2].metric("Kendall τ", "–" if np.isnan(stats["kendall_tau"]) else f"{stats['kendall_tau']:.3f}",
                help="Agreement of the rankings: what matters when the simulator picks the best placement.")
    m[3].metric("MAPE", f"{mape(sim, mea):.3g} %",
                help="Mean absolute percentage error of simulated against measured time: mean of |sim − measured| "
                     "/ measured. Large unless the device graph is calibrated for this machine.")
    m[4].metric("Measured / simulated", f"{np.median(np.array(mea) / np.array(sim)):.3g}×",
                help="The median ratio of measured to simulated time. Above 1: the machine is slower than the "
                     "device graph says (calibrate it).")
    fit = None if np.isnan(stats["slope"]) else (stats["slope"], stats["intercept"])
    axes = st.radio("Axes", list(AXES), format_func=AXES.get, horizontal=True, key=ui.persist("bench_axes", AXES),
                    help="Independent: each axis spans its own values, so the points spread out even when the "
                         "simulator is off by a large factor (the ranking shows). Log-log: both logarithmic, for "
                         "times that span orders of magnitude. Equal: the same range on both axes, y = x the "
                         "diagonal (points bunch against one axis when the scales differ).")
    intervals = [p.get("sim_interval_s") for p in ok]
    st.plotly_chart(agreement.agreement_figure(sim, mea, [p["placement"] for p in ok], fit, axes=axes,
                                               intervals=intervals),
                    key="bench_scatter", config={"displaylogo": False})
    if any(iv is not None for iv in intervals):
        st.caption("The horizontal bars: each simulated time's 90 % interval, from how much the calibration's op "
                   "times moved between its rounds (drawn again 64 times, the step simulated again).")
    pairs = s.get("bench_indistinct") or []
    if pairs:
        shown = ", ".join(f"{ui.esc(a)} and {ui.esc(b)}" for a, b in pairs[:6])
        st.info(f"The simulator cannot tell apart {shown}{f' and {len(pairs) - 6} more pair(s)' if len(pairs) > 6 else ''}"
                ": under the calibration's spread their simulated times swap order too often (the 90 % interval of "
                "their difference contains zero). A ranking between them is the measurement's call.",
                icon=":material/balance:")
    st.caption("Simulated with the current device graph. For absolute agreement, simulate with a device graph "
               "calibrated on this machine (below); the ranking (Kendall τ) is what optimization relies on. "
               f"Fastest measured: {ui.esc(min(ok, key=lambda p: p['measured_s'])['placement'])} "
               f"({fmt_seconds(min(mea))}).")
    if st.button("Clear the measurements", key="bench_clear"):
        s.bench_points = []
        s.bench_rankings = []
        s.pop("bench_error", None)
        st.rerun()


def _interval_text(iv) -> str:
    """A simulated time's interval as "low – high" in ms; empty without one."""
    return "" if not iv else f"{iv[0] * 1e3:.4g} – {iv[1] * 1e3:.4g}"

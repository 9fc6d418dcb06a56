"""The Trace page's cached computation and its placement picker."""

from __future__ import annotations

import numpy as np
import streamlit as st

from placement_core import InputError, placement_from_dict, random_placement, single_device
from placement_core.analysis import (channel_stats, critical_path, device_stats, gantt_rows, gantt_segments,
                                     largest_transfers, memory_series)
from placement_core.base.jsonio import parse_json

from . import state, ui
from .settings import SimChoices


@st.cache_resource(max_entries=6, show_spinner="Simulating with a full trace…")
def _view(problem_key: tuple, placement_key: bytes, _problem, _placement) -> dict:
    p = _problem
    ev = state.simulate(p, _placement, trace=True)
    res = ev.result
    names = p.devices.names
    chans = [c.name for c in p.devices.channels]
    rows = gantt_rows(names, chans)
    return {"evaluation": ev, "rows": rows, "segments": gantt_segments(res.trace, rows),
            "critical": critical_path(res.trace, p.graph), "memory": memory_series(res, len(names)),
            "channels": channel_stats(res, chans, res.trace), "largest": largest_transfers(res.trace, 15),
            "devices": device_stats(res, names, p.capacity, res.trace)}


@st.cache_resource(max_entries=6, show_spinner="Nudging every link…")
def _sensitivity(problem_key: tuple, placement_key: bytes, _problem, _placement) -> list[dict]:
    from placement_core.analysis.sensitivity import bandwidth_sensitivity
    return bandwidth_sensitivity(_problem, _placement)


def sensitivity(problem, placement, sim: SimChoices | None = None) -> list[dict]:
    """Per channel, ∂makespan/∂bandwidth and the time saved were it twice as wide (cached like the trace)."""
    return _sensitivity((state.graph_key(), state.devices_key(),
                         state.sim_tuple() if sim is None else sim.key()),
                        np.asarray(placement).tobytes(), problem, placement)


def sensitivity_figure(rows: list[dict]):
    """Seconds saved per channel were it twice as wide: the links that matter stand out."""
    import plotly.graph_objects as go
    rows = sorted(rows, key=lambda r: -r["saved_2x_s"])
    fig = go.Figure(go.Bar(x=[r["channel"] for r in rows], y=[r["saved_2x_s"] * 1e3 for r in rows],
                           customdata=[[r["d_makespan_d_bandwidth"] * 1e9 * 1e3, r["bytes"] / 1e6] for r in rows],
                           hovertemplate="%{x}<br>twice as wide: %{y:.4g} ms shorter<br>"
                                         "∂makespan/∂bandwidth: %{customdata[0]:.3g} ms per GB/s<br>"
                                         "carries %{customdata[1]:.4g} MB<extra></extra>"))
    fig.update_layout(title="Makespan saved if the link were twice as wide", height=280,
                      margin=dict(l=10, r=10, t=40, b=10), yaxis_title="saved (ms)", xaxis_title="channel")
    return fig


def critical_order(result, path: list[int]) -> list[int]:
    """The critical path's events in time order: the rows of :func:`critical_rows`."""
    return sorted(path, key=lambda k: (result.trace[k].start, result.trace[k].end))


def critical_rows(result, path: list[int]) -> list[dict]:
    """The critical path as a table, in time order: what ran where, when, and its share of the makespan."""
    rows = []
    for i in critical_order(result, path):
        e = result.trace[i]
        what = {"op": e.op, "transfer": f"{e.op} ({e.src} → {e.dst})", "send": f"send {e.op} to {e.dst}",
                "recv": f"receive {e.op} from {e.src}"}.get(e.kind, e.op)
        rows.append({"event": what, "kind": e.kind, "phase": e.phase, "batch": e.batch + 1,
                     "device or channel": e.resource, "start (ms)": e.start * 1e3,
                     "duration (ms)": (e.end - e.start) * 1e3,
                     "share of the makespan (%)": (e.end - e.start) / result.makespan * 100
                     if result.makespan > 0 else 0.0})
    return rows


def trace_view(problem, placement, sim: SimChoices | None = None) -> dict:
    """The traced simulation of ``placement`` and what the page draws from it; ``sim`` names the settings
    ``problem`` was built with when they are not the shared ones (the Trace page's what-if)."""
    key = (state.graph_key(), state.devices_key(),
           state.sim_tuple() if sim is None else sim.key())
    return _view(key, np.asarray(placement, dtype=np.int32).tobytes(), problem, placement)


def placement_picker() -> None:
    """Quick ways to try another placement: one device, random, or a placement file."""
    s = state.session()
    g, d = state.graph(), state.devices()
    c0, c1, c2, c3 = st.columns(4)
    n_gpus = sum(1 for dv in d.devices if dv.kind == "gpu") or len(d)
    top = max(1, min(n_gpus, len(g)))
    stages = c0.number_input("Pipeline: contiguous stages", 1, top, min(n_gpus, 4, top),
                             key=ui.persist("trace_stages", bounds=(1, top)),
                             help="The network cut into this many consecutive stages of "
                             "equal compute, one per GPU: the classic pipeline split. Then raise batches in flight.")
    if c0.button("Use", key="trace_use_stages"):
        from placement_core.analysis.pipeline import even_stages
        state.set_placement(even_stages(g, d, int(stages), **state.cost_kw(g, s.sim)),
                            f"{stages} pipeline stages")
        st.rerun()
    dev = c1.selectbox("Everything on one device", d.names, index=state.default_device(d),
                       key=ui.persist("trace_single", d.names))
    if c1.button("Use", key="trace_use_single"):
        state.set_placement(single_device(g, d, dev), f"all on {dev}")
        st.rerun()
    seed = c2.number_input("Random placement, seed", 0, 2**31 - 1, 0, key=ui.persist("trace_seed"))
    if c2.button("Use", key="trace_use_random"):
        state.set_placement(random_placement(g, d, int(seed)), f"random (seed {seed})")
        st.rerun()
    up = c3.file_uploader("Placement file", type=["json"], key="trace_upload",
                          help="placement/1 JSON ({op: device name}, or an op split over devices) or an Exprimo "
                               "{layer: device index or list} file.")
    if up is not None and s.get("trace_upload_id") != up.file_id:
        s.trace_upload_id = up.file_id
        ignored: list[str] = []
        table = list(s.sim.split_table(d))
        try:
            p = placement_from_dict(parse_json(up.getvalue(), up.name), g, d, source=up.name, ignored=ignored,
                                    splits=table)
        except InputError as e:
            s.trace_upload_error = str(e)
        else:
            s.pop("trace_upload_error", None)
            extra = tuple(table[len(s.sim.split_table(d)):])
            if extra:  # the file splits ops over device sets the table lacks: they join it
                state.set_sim(s.sim.with_(splits_extra=s.sim.splits_extra + extra))
            state.set_placement(p, up.name)
            if ignored:
                from placement_core.model.placement import describe_ignored
                s.placement_note = describe_ignored(ignored)
            st.rerun()
    if up is not None and s.get("trace_upload_error"):
        c3.error(s.trace_upload_error, icon=":material/error:")
    stored_run_picker()


def stored_run_picker() -> None:
    """The best placement of any stored run (with its network, devices and settings if they differ)."""
    from . import stored

    with stored.open_store() as store:
        records = [r for r in store.runs(limit=200) if r.best_placement is not None]
        if not records:
            st.caption("Stored runs (Runs page) appear here once an optimization has recorded a placement.")
            return
        by_id = {r.id: r for r in records}
        c1, c2 = st.columns([4, 1])
        run_id = c1.selectbox("Best placement of a stored run", list(by_id), key="trace_stored",
                              format_func=lambda i: stored.describe(by_id[i]),
                              help="Runs from every session and the command line. A run made for another "
                                   "network or device graph brings them along.")
        c2.markdown("<div style='height: 1.75rem'></div>", unsafe_allow_html=True)
        if c2.button("Use", key="trace_use_stored"):
            rec = by_id[run_id]
            note = stored.adopt(store, rec, rec.best_placement, f"best of {stored.run_name(rec)}").note
            if note:
                st.session_state.placement_note = note
            st.rerun()


def batch_critical(view: dict, graph, batch: int) -> tuple[list[int], list[int]]:
    """The critical path of one batch: the chain of events that fixes when ``batch`` (from 0) is done, and
    the part of it on that batch's own events (what the page draws). Cached in the view (a few ms per batch)."""
    from placement_core.analysis import critical_path

    memo = view.setdefault("critical_by_batch", {})
    if batch not in memo:
        trace = view["evaluation"].result.trace
        chain = critical_path(trace, graph, batch=batch)
        memo[batch] = ([i for i in chain if trace[i].batch == batch], chain)
    return memo[batch]


# Perfetto's keys on the Gantt chart (charts/trace_keys.html), with Plotly's own mouse: scroll zooms, drag pans
CHART_CONFIG = {"scrollZoom": True, "displaylogo": False, "doubleClick": "reset"}
KEYS_HINT = ("Keys as in Perfetto: **W**/**S** zoom in/out, **A**/**D** pan left/right; scroll to zoom, drag to "
             "pan, double-click to see the whole step.")


def chart_keys() -> None:
    """The W/A/S/D keys for the Gantt chart: a script in an invisible same-origin frame (ours, no user text)."""
    from pathlib import Path

    st.iframe(Path(__file__).parent / "charts" / "trace_keys.html", height=1,
              alt="Keyboard zoom and pan for the Gantt chart")


# -- what the Gantt chart and the critical-path table chose (read before they are drawn again) -----------

FOLLOW, FIND, WINDOW, CHART, TABLE = "trace_follow", "trace_find", "trace_window", "trace_gantt", "trace_critical_table"


def _selection(key: str) -> dict:
    value = state.session().get(key)
    try:
        return dict(value.get("selection") or {}) if value is not None else {}
    except AttributeError:
        return {}


def apply_chart_choice(trace, makespan: float) -> None:
    """A click on a bar follows its op; a box dragged across the chart becomes the time window. Applied once
    per new choice, before the widgets they set are drawn (Streamlit hands back a chart's selection on the
    run after it, and keeps it until the next one)."""
    from .charts.trace_overlay import box_window, clicked_event

    s = state.session()
    sel = _selection(CHART)
    seen = repr((sel.get("points"), sel.get("box")))
    if s.get("_trace_chart_seen") == seen:
        return
    s._trace_chart_seen = seen
    boxes = sel.get("box") or []
    for box in boxes:
        window = box_window(box, makespan)
        if window is not None:
            s[WINDOW] = (round(window[0] * 1e3, 6), round(window[1] * 1e3, 6))
            break
    if boxes:
        return  # a box also selects the bars inside it: that is a window, not an op to follow
    for point in sel.get("points") or []:
        k = clicked_event(point, len(trace))
        if k is not None:
            s[FOLLOW] = trace[k].op
            break


def picked_critical(result, path: list[int]) -> int | None:
    """The trace position of the critical-path row selected in the table, if any."""
    rows = _selection(TABLE).get("rows") or []
    order = critical_order(result, path)
    if rows and isinstance(rows[0], int) and 0 <= rows[0] < len(order):
        return order[rows[0]]
    return None


def flow_rows(trace, flows: list[dict]) -> list[dict]:
    """The followed op's flows as a table: each tensor, its batch, the link, when it was produced, arrived and
    was consumed."""
    rows = []
    for f in flows:
        src, dst = trace[f["src"]], trace[f["dst"]]
        hop = trace[f["hop"]] if f["hop"] is not None else None
        rows.append({"producer": f["producer"], "consumer": f["consumer"], "batch": f["batch"] + 1,
                     "route": f"{src.resource} → {dst.resource}", "channel": hop.resource if hop else "",
                     "size (MB)": (hop.bytes if hop else 0.0) / 1e6, "produced (ms)": src.end * 1e3,
                     "arrived (ms)": (hop.end if hop else src.end) * 1e3, "consumed (ms)": dst.start * 1e3})
    return rows


def window_ms(makespan: float) -> tuple[float, float]:
    """The time window (ms) the slider shows: the one chosen for this step (same makespan), else all of it."""
    s, top = state.session(), round(makespan * 1e3, 6)
    kept = s.get(WINDOW)
    ok = (isinstance(kept, (tuple, list)) and len(kept) == 2 and all(isinstance(v, (int, float)) for v in kept)
          and 0 <= kept[0] < kept[1] <= top)
    if not ok or s.get("_trace_window_top") != top:  # a window belongs to one step: another starts whole
        s._trace_window_top = top
        s[WINDOW] = (0.0, top)
    return tuple(s[WINDOW])

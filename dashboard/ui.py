"""Small Streamlit helpers shared by the pages: error guard, header, sidebar, common controls."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import streamlit as st

from placement_core import InputError
from placement_core.analysis import fmt_seconds

from . import state

log = logging.getLogger("placement.dashboard")


@contextmanager
def guarded(what: str = "this page"):
    """Show what to fix instead of a traceback: InputError as its message, anything else summarised."""
    try:
        yield
    except InputError as e:
        st.error(str(e), icon=":material/error:")
    except Exception as e:  # script-control exceptions (rerun, stop) are BaseExceptions and pass through
        log.exception("error while drawing %s", what)
        st.error(f"Something went wrong while drawing {what}: {type(e).__name__}: {e}. "
                 "Check the inputs above (network, devices, settings); if it persists, reload the page "
                 "and report the steps that led here.", icon=":material/error:")


def header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)


def sidebar() -> None:
    """Current network, device graph, placement and runs: visible on every page."""
    s = state.ss()
    g, d = state.graph(), state.devices()
    with st.sidebar:
        st.markdown("#### Current setup")
        st.markdown(f"**Network** · {s.network_label}  \n"
                    f"<small>{len(g)} ops · batch {g.batch_size}</small>", unsafe_allow_html=True)
        st.markdown(f"**Devices** · {s.devices_label}  \n"
                    f"<small>{len(d)} devices · {len(d.channels)} channels</small>", unsafe_allow_html=True)
        try:
            ev = state.simulate(state.problem(), state.current_placement())
            fits = "fits in memory" if ev.feasible else "**exceeds memory**"
            detail = f"{fmt_seconds(ev.result.batch_time)} per batch · {fits}"
        except InputError as e:
            detail = f"cannot simulate: {e}"
        st.markdown(f"**Placement** · {s.placement_label}  \n<small>{detail}</small>", unsafe_allow_html=True)
        sim = s.sim
        st.markdown(f"<small>Simulator: {sim['batches']} batch(es), {sim['in_flight']} in flight, "
                    f"{sim['profile']} costs, {sim['penalty']} penalty</small>", unsafe_allow_html=True)
        from .runs import REGISTRY
        active = [r for r in REGISTRY.runs(s.session_key) if r.active]
        if active:
            st.info(f"{len(active)} optimization run(s) in progress", icon=":material/sync:")
            st.page_link("app_pages/optimize.py", label="Watch them", icon=":material/monitoring:")


def sim_controls(prefix: str, compact: bool = False) -> None:
    """Simulator settings, stored in ``session_state.sim`` (the same on every page)."""
    sim = state.ss().sim
    cols = st.columns(4 if not compact else 2)
    batches = cols[0].number_input(
        "Batches", 1, 1000, int(sim["batches"]), key=f"{prefix}_batches",
        help="Batches in the simulated run. With more than one, the reported time is the makespan divided by "
             "the number of batches: set batches 10 and 4 in flight to see pipelining (thesis E3).")
    in_flight = cols[1].number_input(
        "In flight", 1, 1000, int(sim["in_flight"]), key=f"{prefix}_in_flight",
        help="At most this many batches are processed at once; a new one starts when every device holding an "
             "input op is idle (the thesis' scheme).")
    if compact:
        penalty, profile = sim["penalty"], sim["profile"]
    else:
        penalty = cols[2].selectbox(
            "Memory penalty", list(state.PENALTIES), index=list(state.PENALTIES).index(sim["penalty"]),
            format_func=lambda k: state.PENALTIES[k], key=f"{prefix}_penalty",
            help="How a placement that needs more memory than a device has is scored.")
        profile = cols[3].selectbox(
            "Cost profile", list(state.PROFILES), index=list(state.PROFILES).index(sim["profile"]),
            format_func=lambda k: state.PROFILES[k], key=f"{prefix}_profile",
            help="Roofline: max(compute, memory traffic) per op, transfers at 25 % of the link's bandwidth. "
                 "exprimo-2020 reproduces the thesis' published simulator exactly.")
    if in_flight > batches:
        st.caption(f"{in_flight} in flight with {batches} batch(es) behaves like {batches} in flight.")
    new = {"batches": int(batches), "in_flight": int(in_flight), "penalty": penalty, "profile": profile}
    if new != sim:
        state.set_sim(new, keep=prefix)


def param_inputs(cls, key_prefix: str) -> dict:
    """Inputs for an algorithm's parameters, defaults from its PARAMS, help from Param.help."""
    values = {}
    items = list(cls.PARAMS.items())
    if not items:
        st.caption("No parameters.")
        return values
    cols = st.columns(3)
    for i, (name, p) in enumerate(items):
        col = cols[i % 3]
        label = name.replace("_", " ")
        key = f"{key_prefix}_{name}"
        if p.type is bool:
            values[name] = col.checkbox(label, value=bool(p.default), help=p.help, key=key)
        elif p.choices:
            values[name] = col.selectbox(label, list(p.choices), index=list(p.choices).index(p.default),
                                         help=p.help, key=key)
        elif p.type is int:
            values[name] = col.number_input(
                label, value=int(p.default), step=1, help=p.help, key=key,
                min_value=int(p.low) if p.low is not None else None,
                max_value=int(p.high) if p.high is not None else None)
        elif p.type is float:
            values[name] = col.number_input(
                label, value=float(p.default), help=p.help, key=key, format="%g",
                min_value=float(p.low) if p.low is not None else None,
                max_value=float(p.high) if p.high is not None else None,
                step=_float_step(p.default))
        else:
            values[name] = col.text_input(label, value=str(p.default), help=p.help, key=key)
    return values


def _float_step(default: float) -> float:
    d = abs(float(default))
    if d == 0:
        return 0.01
    import math
    return 10 ** math.floor(math.log10(d)) / 10 if d < 1 else 0.1

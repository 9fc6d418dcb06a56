"""Small Streamlit helpers shared by the pages: error guard, header, sidebar, common controls."""

from __future__ import annotations

import html
import logging
import re
from contextlib import contextmanager

import streamlit as st

from placement_core import InputError
from placement_core.analysis import fmt_seconds

from . import settings, state
from .settings import SimChoices

log = logging.getLogger("placement.dashboard")


@contextmanager
def guarded(what: str = "this page"):
    """Show what to fix instead of a traceback: InputError as its message, anything else summarised."""
    try:
        yield
    except InputError as e:
        st.error(esc(e), icon=":material/error:")  # its message names the user's files, ops and devices
    except Exception as e:  # script-control exceptions (rerun, stop) are BaseExceptions and pass through
        log.exception("error while drawing %s", what)
        st.error(f"Something went wrong while drawing {what}: {type(e).__name__}: {esc(e)}. "
                 "Check the inputs above (network, devices, settings); if it persists, reload the page "
                 "and report the steps that led here.", icon=":material/error:")


# What can start markup inside a line: emphasis, code, links and images ([), Streamlit's :color[...] and
# :material/...: directives (need [ or a name between colons: [ is enough to break the first), math ($), ~~.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]$~])")


def esc(text) -> str:
    """A user's string (a network, device or run name from an uploaded file) as literal text in Streamlit
    markdown: HTML escaped (the sidebar allows HTML) and markdown punctuation backslashed, so a name can
    neither inject markup nor fetch an image; newlines become spaces."""
    text = html.escape(" ".join(str(text).split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def persist(key: str, options=None, bounds: tuple | None = None) -> str:
    """Register a widget key whose value must outlive its page: Streamlit forgets the state of every widget
    that a run does not draw, so leaving a page would reset what the user typed. ``app.py`` re-stores these
    keys at the start of every run (:func:`state.keep_widget_values`). Not for buttons, file uploaders or
    data editors, whose values cannot be set. For a selectbox or multiselect pass its ``options``: a kept
    choice that is no longer offered (the devices changed) is dropped, so the widget falls back to its
    default instead of failing; likewise a number outside ``bounds`` (lo, hi) of a number input whose limits
    moved. Returns ``key``."""
    state.PERSISTENT.add(key)
    s = state.session()
    kept_values = s.get("_kept_values", {})
    if options is not None and key in s:
        offered, value = list(options), s[key]
        if isinstance(value, list):
            kept = [v for v in value if v in offered]
            if kept != value:
                s[key] = kept_values[key] = kept
        elif value is not None and value not in offered:
            del s[key]
            kept_values.pop(key, None)
    if bounds is not None and key in s and s[key] is not None and not bounds[0] <= s[key] <= bounds[1]:
        del s[key]
        kept_values.pop(key, None)
    return key


def header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)


# Presentation mode (the Pipeline page's lecture on a projector, 1024 × 768 or 1280 × 720 with the sidebar open):
# larger type, and the page's side padding narrowed so that the type fits. A constant style sheet: nothing from
# the user lands in it.
PRESENTATION_CSS = """<style>
.stMainBlockContainer {font-size: 1.3rem; padding-left: 1.5rem; padding-right: 1.5rem; max-width: none;}
[data-testid='stMetricValue'] {font-size: 2.6rem;}
[data-testid='stMetricLabel'] p, [data-testid='stWidgetLabel'] p {font-size: 1.15rem;}
</style>"""


def presentation_style() -> None:
    st.markdown(PRESENTATION_CSS, unsafe_allow_html=True)


def chart_config(big: bool = False) -> dict:
    """Plotly's options for a chart: no logo; in presentation mode no toolbar either (over a chart's title on
    a projector; zoom by dragging, double-click to reset)."""
    return {"displaylogo": False, "displayModeBar": False} if big else {"displaylogo": False}


def sidebar() -> None:
    """Current network, device graph, placement and runs: visible on every page."""
    s = state.session()
    g, d = state.graph(), state.devices()
    with st.sidebar:
        st.markdown("#### Current setup")
        # Small type by Streamlit's :small[] directive, not <small> with unsafe_allow_html: raw HTML makes every
        # new session's browser load and run an HTML parser for the sidebar before the page is complete (the
        # first load, docs/dashboard.md "Speed"); tests/test_app_network.py keeps the landing page free of it.
        st.markdown(f"**Network** · {esc(s.network_label)}  \n:small[{len(g)} ops · batch {g.batch_size}]")
        st.markdown(f"**Devices** · {esc(s.devices_label)}  \n:small[{len(d)} devices · {len(d.channels)} channels]")
        try:
            ev = state.simulate(state.problem(), state.current_placement())
            fits = "fits in memory" if ev.feasible else "**exceeds memory**"
            detail = f"{fmt_seconds(ev.result.batch_time)} per batch · {fits}"
        except InputError as e:
            detail = f"cannot simulate: {esc(e)}"
        st.markdown(f"**Placement** · {esc(s.placement_label)}  \n:small[{detail}]")
        if s.get("placement_note"):  # why the placement is what it is (a reset, what an upload left out)
            st.caption(s.placement_note)
        sim = s.sim
        costs = (f"measured op times ('{esc(sim.timings)}')" if "timings" in state.cost_kw(g, sim)
                 else f"{sim.profile} costs")
        st.markdown(f":small[Simulator: {sim.summary()}, {costs}, {sim.penalty} penalty]")
        from . import server_runs
        active = [r for r in server_runs.runs() if r.active]
        _runs_in_progress(poll=bool(active))


def _runs_in_progress(poll: bool) -> None:
    """The count of the runs this session sees that are still working (with shared runs, every run this server
    computes: :mod:`.server_runs`), redrawn every second while any is (a run stopped or finished while the
    user reads another page leaves the count at once)."""

    @st.fragment(run_every=1.0 if poll else None)
    def indicator():
        from . import server_runs
        runs = server_runs.runs()
        active = [r for r in runs if r.active and not r.stop_event.is_set()]
        stopping = [r for r in runs if r.active and r.stop_event.is_set()]
        if active:
            st.info(f"{len(active)} optimization run(s) in progress", icon=":material/sync:")
        if stopping:
            st.caption(f"{len(stopping)} run(s) stopping…")
        if active or stopping:
            st.page_link("app_pages/optimize.py", label="Watch them", icon=":material/monitoring:")

    indicator()


def local_sim(prefix: str) -> SimChoices:
    """The settings a page with local what-if controls simulates with: its own, else the shared ones."""
    s = state.session()
    return s.get(f"{prefix}_what_if") or s.sim


def _store_sim(prefix: str, local: bool, new: SimChoices) -> None:
    s = state.session()
    if not local:
        state.set_sim(new, keep=prefix)
    else:  # equal to the shared settings: follow them again
        s[f"{prefix}_what_if"] = None if new == s.sim else new


def sim_controls(prefix: str, compact: bool = False, local: bool = False) -> None:
    """Simulator settings, stored in ``session_state.sim`` (the same on every page), or with ``local`` in
    ``session_state[prefix + "_what_if"]``: a what-if for one page that leaves the other pages and the
    optimizer alone until the user applies it everywhere."""
    sim = local_sim(prefix) if local else state.session().sim
    batch_size = state.graph().batch_size
    cols = st.columns(4)
    schedule = cols[0].selectbox(
        "Schedule", list(settings.SCHEDULES), index=list(settings.SCHEDULES).index(sim.schedule),
        format_func=lambda k: settings.SCHEDULES[k], key=f"{prefix}_schedule", on_change=_sim_changed,
        args=(prefix, local),
        help="How training steps are run. thesis: whole batches, a new one admitted when the input devices are "
             "idle, up to *in flight* at once. GPipe: the batch is split into micro-batches; every device runs "
             "all their forwards, then all backwards, then one weight update. 1F1B (PipeDream-flush): the same "
             "micro-batches, but after a short warm-up each stage alternates one forward and one backward, so "
             "the first stage holds at most as many micro-batches' activations as there are stages. Interleaved "
             "1F1B: every run of a device's ops is a chunk (virtual stage), in Megatron-LM's order. ZB-H1: each "
             "backward is split into the input gradient (B) and the weight gradient (W), which fills the "
             "bubble. The Pipeline page compares them side by side.")
    pipelined = schedule != "thesis"
    m_in = cols[1].number_input(
        "Micro-batches", 1, 4096, sim.micro_batches, key=f"{prefix}_micro_batches", disabled=not pipelined,
        on_change=_sim_changed, args=(prefix, local),
        help=f"GPipe and 1F1B: the batch of {batch_size} is split into this many equal micro-batches "
             "(a divisor of the batch size). The time per batch is the whole step, flush included. Not used "
             "by the thesis scheme.")
    micro_batches = sim.micro_batches
    if batch_size % int(m_in) == 0:
        micro_batches = int(m_in)
    elif pipelined:  # keep the last valid count; say which ones work
        from placement_core.analysis.pipeline import divisors
        ok = divisors(batch_size)
        still = f"; still simulating with {micro_batches}" if batch_size % micro_batches == 0 else ""
        st.error(f"{int(m_in)} micro-batches do not split the batch of {batch_size} evenly{still}. "
                 f"Use a divisor of the batch size: {', '.join(map(str, ok))}.", icon=":material/error:")
    flush = ("GPipe and 1F1B end every step with a flush, so batches do not overlap: they simulate one batch "
             "(its micro-batches); batches and in flight apply to the thesis scheme only.")
    batches = cols[2].number_input(
        "Batches", 1, 1000, sim.batches, key=f"{prefix}_batches", disabled=pipelined,
        on_change=_sim_changed, args=(prefix, local),
        help=flush if pipelined else
        "Batches in the simulated run. With more than one, the reported time is the makespan divided by "
        "the number of batches: set batches 10 and 4 in flight to see pipelining (thesis E3).")
    in_flight = cols[3].number_input(
        "In flight", 1, 1000, sim.in_flight, key=f"{prefix}_in_flight", disabled=pipelined,
        on_change=_sim_changed, args=(prefix, local),
        help=flush if pipelined else
        "At most this many batches are processed at once; a new one starts when every device holding an "
        "input op is idle (the thesis' scheme).")
    timings = sim.timings
    sharding, max_shards = sim.sharding, sim.max_shards
    if compact:
        penalty, profile = sim.penalty, sim.profile
    else:
        cols = st.columns(2)
        sharding = cols[0].selectbox(
            "Split ops", list(settings.SHARDING), index=list(settings.SHARDING).index(sharding if sharding in
                                                                                   settings.SHARDING else ""),
            format_func=lambda k: settings.SHARDING[k], key=f"{prefix}_sharding", on_change=_sim_changed,
            args=(prefix, local),
            help="Let the optimizers split an op over several devices (docs/sharding.md): by batch (each device "
                 "a slice of the samples, weights replicated and their gradients all-reduced) or by output "
                 "channel (each device a slice of the weights, consumers gather the slices), over windows of "
                 "consecutive devices of one kind.")
        max_shards = int(cols[1].number_input(
            "Max devices per split op", 0, 64, max_shards, key=f"{prefix}_max_shards", disabled=not sharding,
            on_change=_sim_changed, args=(prefix, local),
            help="The largest window of devices one op is split over; 0: every device of its kind."))
        cols = st.columns(3)
        penalty = cols[0].selectbox(
            "Memory penalty", list(settings.PENALTIES), index=list(settings.PENALTIES).index(sim.penalty),
            format_func=lambda k: settings.PENALTIES[k], key=f"{prefix}_penalty", on_change=_sim_changed,
            args=(prefix, local),
            help="How a placement that needs more memory than a device has is scored.")
        profile = cols[1].selectbox(
            "Cost profile", list(settings.PROFILES), index=list(settings.PROFILES).index(sim.profile),
            format_func=lambda k: settings.PROFILES[k], key=f"{prefix}_profile", on_change=_sim_changed,
            args=(prefix, local),
            help="Roofline: max(compute, memory traffic) per op, transfers at 25 % of the link's bandwidth. "
                 "exprimo-2020 reproduces the thesis' published simulator exactly.")
        saved = list(state.calibrations(state.graph()))
        options = [""] + saved + ([timings] if timings and timings not in saved else [])
        timings = cols[2].selectbox(
            "Op times", options, index=options.index(timings), key=f"{prefix}_timings",
            format_func=lambda k: f"measured: calibration '{k}'" if k else "from the cost profile",
            on_change=_sim_changed, args=(prefix, local), disabled=len(options) == 1,
            help="Measured op times from `placement calibrate` replace the profile's formulas for the devices "
                 "that were calibrated (use them with the calibrated device preset, e.g. 'local'). Offered when "
                 "a calibration of this network at this batch size exists; under GPipe and 1F1B they are "
                 "scaled to the micro-batch.")
        note = state.timings_note(state.graph(), sim.with_(timings=timings))
        if note:
            st.warning(note, icon=":material/warning:")
    if pipelined:
        st.caption(f"{settings.SCHEDULE_NAMES[schedule]}: one batch of {batch_size} as {micro_batches} micro-batches "
                   f"of {batch_size // micro_batches if batch_size % micro_batches == 0 else '?'}; "
                   "batches and in flight apply to the thesis scheme only.")
    elif in_flight > batches:
        st.caption(f"{in_flight} in flight with {batches} batch(es) behaves like {batches} in flight.")
    new = sim.with_(batches=int(batches), in_flight=int(in_flight), penalty=penalty, profile=profile,
                    schedule=schedule, micro_batches=micro_batches, timings=timings, sharding=sharding,
                    max_shards=int(max_shards))
    if new != sim:
        _store_sim(prefix, local, new)


def _sim_changed(prefix: str, local: bool = False) -> None:
    """on_change of the settings widgets: store the new settings before the script reruns, so what is drawn
    above the controls (an expander's label) already shows them. A micro-batch count that does not divide
    the batch is not stored (sim_controls says why)."""
    s = state.session()
    sim = local_sim(prefix) if local else s.sim
    new = SimChoices(**{name: s.get(f"{prefix}_{name}", getattr(sim, name)) for name in SimChoices.names()})
    if state.graph().batch_size % new.micro_batches:
        new = new.with_(micro_batches=sim.micro_batches)
    if new != sim:
        _store_sim(prefix, local, new)


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
        key = persist(f"{key_prefix}_{name}")
        if p.items is not None:
            chosen = col.multiselect(label, list(p.items), default=str(p.default).split(","), help=p.help,
                                     key=persist(key, p.items),
                                     format_func=lambda n: n.replace("_", " "))
            values[name] = ",".join(chosen)
        elif p.type is bool:
            values[name] = col.checkbox(label, value=bool(p.default), help=p.help, key=key)
        elif p.choices or p.options:
            options = list(p.choices or p.options)
            values[name] = col.selectbox(label, options, index=options.index(p.default), help=p.help, key=key)
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

"""Session state: the current network, device graph, simulator settings and placement.

Everything lives in ``st.session_state`` under the keys below, initialised by
:func:`init` on every script run. Loaded networks and problems are cached
across sessions (they are immutable), keyed by a string that names their
source, so a rerun never reloads or recompiles anything.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

import numpy as np
import streamlit as st

from placement_core import (InputError, Problem, builtin_devices, builtin_networks, load_devices,
                            load_network, single_device)
from placement_core.formats.catalog import devices_from_upload, network_from_upload
from placement_core.model.devices import DeviceGraph, devices_to_dict
from placement_core.model.graph import Graph
from placement_core.problem import ProblemSpec

from .settings import SimChoices

DEFAULT_NETWORK = "resnet50"
DEFAULT_DEVICES = "malvik-4gpu"
NETWORK_TITLES = {"alexnet": "AlexNet", "vgg16": "VGG-16", "resnet50": "ResNet-50", "inception_v3": "Inception-V3"}

# Widget keys whose values outlive their page (dashboard.ui.persist registers them; process-wide, keys only).
PERSISTENT: set[str] = set()


def session():
    """This browser session's state (``st.session_state``): the keys this module documents."""
    return st.session_state


# -- caches -----------------------------------------------------------------------------------------

@st.cache_resource(max_entries=16, show_spinner=False)
def builtin_network(name: str) -> Graph:
    return load_network(name)


@st.cache_resource(max_entries=16, show_spinner=False)
def builtin_device_graph(name: str) -> DeviceGraph:
    return load_devices(name)


@st.cache_resource(max_entries=32, show_spinner=False)
def _network_at_batch(key: str, batch_size: int, _graph: Graph) -> Graph:
    return _graph.with_batch_size(batch_size)


@st.cache_resource(max_entries=16, show_spinner="Compiling the problem…")
def _problem(graph_key: str, devices_key: str, sim_key: tuple, timings_key: str, _sim: SimChoices, _graph: Graph,
             _devices: DeviceGraph) -> Problem:
    return spec_for(_graph, _sim, _devices).build(_graph, _devices)


@st.cache_resource(max_entries=16, show_spinner=False)
def _timing_table(path: str, mtime: float, graph_key: str, _graph: Graph) -> dict:
    from placement_core.cost.timings import read_timings, timing_table
    return timing_table(read_timings(path), _graph)


def calibrations(graph: Graph) -> dict:
    """Saved calibrations (name -> file) measured for this network at its batch size."""
    from placement_core.cost.timings import saved_calibrations
    return saved_calibrations(graph)


def _calibration_file(graph: Graph, sim: SimChoices):
    """The file of the calibration the settings name, if it was measured for ``graph``; no disk access when
    the settings name none (the usual case, on every rerun)."""
    return calibrations(graph).get(sim.timings) if sim.timings else None


def cost_kw(graph: Graph, sim: SimChoices) -> dict:
    """The cost part of a Problem's arguments: the profile, and the measured op times when the settings name
    a calibration that exists for ``graph`` (otherwise the formulas: ``timings_note`` says why)."""
    kw = {"profile": sim.profile}
    path = _calibration_file(graph, sim)
    if path is not None:
        ops_key = digest("\n".join(op.name for op in graph.ops).encode())
        kw["timings"] = _timing_table(str(path), path.stat().st_mtime, f"{graph.name}@{graph.batch_size}:{ops_key}",
                                      graph)
        kw["timings_batch"] = graph.batch_size
    return kw


def timings_note(graph: Graph, sim: SimChoices) -> str | None:
    """Why the named calibration is not used (it was measured for another network or batch), or None."""
    name = sim.timings
    if name and name not in calibrations(graph):
        return (f"The calibration '{name}' was not measured for {graph.name} at batch {graph.batch_size}: "
                "the cost formulas apply. Calibrate this model at this batch (placement calibrate).")
    return None


def spec_for(graph: Graph, sim: SimChoices, devices: DeviceGraph | None = None) -> ProblemSpec:
    """:meth:`SimChoices.spec` with the measured op times its calibration names, when it was measured for
    ``graph`` (loaded through this module's cache; scaled to the micro-batch under GPipe and 1F1B)."""
    kw = cost_kw(graph, sim)
    return sim.spec(devices, timings=kw.get("timings"), timings_batch=kw.get("timings_batch", 0))


def digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]


# -- the session ------------------------------------------------------------------------------------

def init() -> None:
    """Defaults for a new session: ResNet-50 on the 4-GPU Malvik server, all ops on gpu0."""
    s = session()
    if "session_key" not in s:
        s.session_key = uuid.uuid4().hex
    if "base_graph" not in s:
        set_network(builtin_network(DEFAULT_NETWORK), f"builtin:{DEFAULT_NETWORK}",
                    NETWORK_TITLES.get(DEFAULT_NETWORK, DEFAULT_NETWORK))
    if "devices" not in s:
        set_devices(builtin_device_graph(DEFAULT_DEVICES), f"preset:{DEFAULT_DEVICES}", DEFAULT_DEVICES)
    if not isinstance(s.get("sim"), SimChoices):  # a new session, or one that kept its settings as a dict
        s.sim = SimChoices.from_dict(s.get("sim") or {})
    if "placement" not in s or not placement_fits():
        set_default_placement()


def keep_widget_values() -> None:
    """Re-store the registered widget values at the start of a run, so a form is as the user left it.

    A value set through the Session State API is kept while its widget is not drawn (on another page), but
    not always: with a fragment rerunning on a timer (a live optimization), Streamlit may still drop it. So the
    latest value of every registered key is also copied into a plain dict (``_kept_values``, which no widget
    owns and Streamlit never cleans up) and restored from there when Streamlit has forgotten it."""
    s = session()
    kept = s.setdefault("_kept_values", {})
    for key in list(PERSISTENT):
        if key in s:
            kept[key] = s[key]
            s[key] = s[key]
        elif key in kept:
            s[key] = kept[key]


def graph() -> Graph:
    return session().graph


def devices() -> DeviceGraph:
    return session().devices


def graph_key() -> str:
    return f"{session().base_graph_key}@{session().graph.batch_size}"


def devices_key() -> str:
    return session().devices_key


def sim_tuple() -> tuple:
    return session().sim.key()


def problem() -> Problem:
    """The current problem (network + devices + simulator settings), cached."""
    return problem_for(session().sim)


def problem_for(sim: SimChoices) -> Problem:
    """The current network and devices under other simulator settings (the Trace page's what-if), cached."""
    return _problem(graph_key(), devices_key(), sim.key(), _timings_key(sim), sim, graph(), devices())


def cost_key() -> str:
    """Names the current cost settings (profile and calibration file) for caches."""
    return f"{session().sim.profile}|{_timings_key()}"


def _timings_key(sim: SimChoices | None = None) -> str:
    """Which calibration file (and version of it) the current problem uses: a re-calibration recompiles."""
    path = _calibration_file(graph(), session().sim if sim is None else sim)
    return f"{path}@{path.stat().st_mtime}" if path is not None else ""


def set_network(base: Graph, key: str, label: str, batch_size: int | None = None) -> None:
    """Make ``base`` the current network (optionally at another batch size)."""
    s = session()
    s.base_graph, s.base_graph_key, s.network_label = base, key, label
    s.graph = base if batch_size in (None, base.batch_size) else _network_at_batch(key, int(batch_size), base)
    s.pop("network_error", None)
    s.pop("network_source", None)  # the PyTorch model it came from, when known (set by the importer)
    s.net_widgets_stale = True  # the Network page's chooser and batch box show the new network on its next run
    if "placement" in s and not placement_fits():
        set_default_placement(note="the network changed")


def set_batch_size(batch_size: int) -> None:
    s = session()
    base = s.base_graph
    s.graph = base if batch_size == base.batch_size else _network_at_batch(s.base_graph_key, int(batch_size), base)


def set_devices(g: DeviceGraph, key: str, label: str) -> None:
    s = session()
    old_names = list(s.devices.names) if "devices" in s else None
    s.devices, s.devices_key, s.devices_label = g, key, label
    if isinstance(s.get("sim"), SimChoices) and s.sim.splits_extra and old_names != list(g.names):
        s.sim = s.sim.with_(splits_extra=())  # splits name devices by index: they belong to the old graph
    if "placement" in s and (old_names != list(g.names) or not placement_fits()):
        set_default_placement(note="the devices changed")


def edited_devices_key(g: DeviceGraph) -> str:
    import json
    return "edited:" + digest(json.dumps(devices_to_dict(g), sort_keys=True).encode())


def default_device(g: DeviceGraph) -> int:
    """The first GPU, else device 0: what "everything on one device" means by default."""
    return next((i for i, d in enumerate(g.devices) if d.kind == "gpu"), 0)


def set_default_placement(note: str | None = None) -> None:
    d = default_device(devices())
    set_placement(single_device(graph(), devices(), d), f"all on {devices().names[d]}")
    if note:
        session().placement_note = f"The current placement was reset to “all on {devices().names[d]}” because {note}."


def set_placement(placement, label: str) -> None:
    s = session()
    s.placement = np.asarray(placement, dtype=np.int32).copy()
    s.placement_label = label
    s.placement_for = (graph_key(), len(devices()))
    s.pop("placement_note", None)


def placement_fits() -> bool:
    s = session()
    p = s.get("placement")
    if p is None or len(p) != len(s.graph):
        return False
    if len(p) == 0 or int(p.max()) < len(s.devices):
        return True
    sim = s.get("sim") if isinstance(s.get("sim"), SimChoices) else SimChoices()
    return int(p.max()) < len(s.devices) + len(sim.split_table(s.devices))


def current_placement() -> np.ndarray:
    return session().placement


def simulate(problem_: Problem, placement, trace: bool = False):
    """Simulate on a shared (cached) problem: safe from several sessions at once (each call has its own
    output)."""
    return problem_.simulate(placement, trace=trace)


# -- loading from uploads and PyTorch ---------------------------------------------------------------

@dataclass
class LoadOutcome:
    ok: bool
    message: str


def load_uploaded_network(content: bytes, filename: str) -> LoadOutcome:
    """Parse an uploaded network file (ours or Exprimo's); on error keep the current network."""
    try:
        g = network_from_upload(content, filename)
    except InputError as e:
        return LoadOutcome(False, str(e))
    set_network(g, f"upload:{filename}:{digest(content)}", g.name or filename)
    return LoadOutcome(True, f"Loaded {filename}: {len(g)} ops at batch size {g.batch_size}.")


def load_uploaded_devices(content: bytes, filename: str) -> LoadOutcome:
    try:
        g = devices_from_upload(content, filename)
    except InputError as e:
        return LoadOutcome(False, str(e))
    set_devices(g, f"upload:{filename}:{digest(content)}", g.name or filename)
    return LoadOutcome(True, f"Loaded {filename}: {len(g)} devices, {len(g.channels)} channels.")


def builtin_choices() -> tuple[list[str], list[str]]:
    return builtin_networks(), builtin_devices()


@st.cache_resource(max_entries=16, show_spinner=False)
def _layout(key: str, _graph: Graph):
    from placement_core.analysis import layered_layout
    return layered_layout(_graph)


def layout():
    """The current network's layered drawing positions (depend on the structure only, not the batch)."""
    return _layout(session().base_graph_key, graph())


@st.cache_resource(max_entries=12, show_spinner=False)
def _picture(key: tuple, _graph, _layout, colour_by: str, _placement, _names) -> str | None:
    from .charts.picture import network_svg
    return network_svg(_graph, _layout, colour_by, _placement, _names)


def network_picture(colour_by: str) -> str | None:
    """The current network as a still picture under the current placement (cached per network, batch-free
    structure, placement and colouring; None when the network is too large to picture)."""
    placement = current_placement()
    key = (graph_key(), devices_key(), np.asarray(placement).tobytes(), colour_by)
    return _picture(key, graph(), layout(), colour_by, placement, devices().names)


def adopt_run(run, placement, label: str) -> None:
    """Make a run's placement current, with the network, devices and settings it was optimized for."""
    spec = run.spec
    s = session()
    if spec.graph_key != graph_key():
        base_key = spec.graph_key.rsplit("@", 1)[0]
        set_network(spec.graph, base_key, spec.network_label)
        s.pop("net_batch", None)
    if spec.devices_key != devices_key():
        set_devices(spec.devices, spec.devices_key, spec.devices_label)
        s.pop("dev_tables", None)
    set_sim(spec.sim)
    set_placement(placement, label)


SIM_WIDGET_PREFIXES = ("opt", "trace")


def set_sim(new: SimChoices, keep: str | None = None) -> None:
    """Change the simulator settings; the settings widgets of other pages re-read them."""
    s = session()
    s.sim = new
    s.pop("trace_what_if", None)  # new shared settings (applied, adopted with a run, chosen): the Trace shows them
    for prefix in SIM_WIDGET_PREFIXES:
        if prefix == keep:
            continue
        for name in SimChoices.names():
            s.pop(f"{prefix}_{name}", None)

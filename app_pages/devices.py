"""Devices: start from a preset or a file, edit devices and channels in tables, see the topology, download."""

import itertools
import json

import pandas as pd
import streamlit as st

from dashboard import nodelink, state, ui
from dashboard.charts import topology
from placement_core import InputError
from placement_core.analysis.device_tables import (CHANNEL_COLUMNS, DEVICE_COLUMNS, add_device, devices_from_tables,
                                                   devices_to_tables)
from placement_core.analysis.sharing_tables import SHARED_COLUMNS, carry_sharing, collective_rows, shared_to_rows
from placement_core.model.devices import devices_to_dict

ui.header("Devices", "The machines a placement can use: each device's compute, memory and memory bandwidth, "
          "and the channels (links) tensors cross between them. A transfer from A to B queues on the channel "
          "that carries the route A→B; routes on one channel contend, as on a shared PCIe switch.")
s = state.session()
_, presets = state.builtin_choices()


def _reset_editors():
    s.dev_editor_version = s.get("dev_editor_version", 0) + 1
    s.dev_tables = (*devices_to_tables(state.devices()), shared_to_rows(state.devices()))
    s.dev_tables_key = state.devices_key()
    s.dev_draft = None
    s.pop("dev_outcome", None)


with ui.guarded("the device chooser"):
    c1, c2 = st.columns(2)

    def _choose():
        name = s.dev_preset
        state.set_devices(state.builtin_device_graph(name), f"preset:{name}", name)
        _reset_editors()

    current = s.devices_key.split(":", 1)[1] if s.devices_key.startswith("preset:") else None
    c1.selectbox("Start from a preset", presets, index=presets.index(current) if current in presets else None,
                 key="dev_preset", on_change=_choose, placeholder="choose a preset",
                 help="malvik: the thesis' server (CPU + 2 V100, Table 4.1); luke01: CPU + 2 P100 (Table 4.2); "
                      "malvik-4gpu-limited-*: the E3 memory caps; nvlink-8gpu: 8 A100 on NVSwitch.")
    up = c2.file_uploader("…or upload a device file", type=["json"], key="dev_upload",
                          help="placement-devices/1 JSON, or an Exprimo device file from the thesis.")
    if up is not None and s.get("dev_upload_id") != up.file_id:
        s.dev_upload_id = up.file_id
        outcome = state.load_uploaded_devices(up.getvalue(), up.name)
        if outcome.ok:
            _reset_editors()
        s.dev_upload_outcome = outcome
    outcome = s.get("dev_upload_outcome")
    if up is not None and outcome is not None:
        if outcome.ok:
            c2.success(ui.esc(outcome.message), icon=":material/check_circle:")
        else:
            c2.error(f"{ui.esc(outcome.message)}  \nThe previous devices ({ui.esc(s.devices_label)}) are still loaded.",
                     icon=":material/error:")

def _frame(rows, columns, text) -> pd.DataFrame:
    """A table with numeric columns typed as numbers (a column with no value at all, e.g. no clock given, would
    otherwise be a text column); the editors show missing values as empty cells, not "None"."""
    df = pd.DataFrame(rows, columns=list(columns))
    return df.astype({c: "float64" for c in columns if c not in text})


def _tables_follow_devices():
    """The tables show the current device graph: rebuilt when it was changed elsewhere (a preset, an adopted
    run, a calibration); when the user comes back to this page, the editors have forgotten their unsaved edits
    (Streamlit drops the state of widgets that were not drawn), so the last edited rows become the tables."""
    if "dev_tables" not in s or s.get("dev_tables_key") != state.devices_key():
        _reset_editors()
    elif (all(f"{e}_editor_{s.get('dev_editor_version', 0)}" not in s for e in ("dev", "chan", "shared"))
          and s.get("dev_draft") is not None):
        s.dev_tables = s.dev_draft


with ui.guarded("the device tables"):
    _tables_follow_devices()
    dev_rows, chan_rows, shared_rows = s.dev_tables
    v = s.get("dev_editor_version", 0)
    st.markdown(f"##### {ui.esc(s.devices_label)}: devices")
    st.caption("Edit cells, add rows at the bottom or delete selected rows; changes apply as soon as they are valid "
               "and stay when you visit other pages.")
    dev_df = st.data_editor(
        _frame(dev_rows, DEVICE_COLUMNS, ("name", "kind", "model")), key=f"dev_editor_{v}", num_rows="dynamic",
        hide_index=True, placeholder="",
        column_config={
            "name": st.column_config.TextColumn("name", required=True),
            "kind": st.column_config.SelectboxColumn("kind", options=["gpu", "cpu"], required=True),
            "model": st.column_config.TextColumn("model"),
            "peak TFLOP/s": st.column_config.NumberColumn("peak TFLOP/s", format="%.4g",
                                                          help="peak compute rate (10¹² FLOP per second)"),
            "memory GB": st.column_config.NumberColumn("memory GB", format="%.4g", help="10⁹ bytes"),
            "memory bandwidth GB/s": st.column_config.NumberColumn("memory bandwidth GB/s", format="%.4g"),
            "clock MHz": st.column_config.NumberColumn("clock MHz", format="%.6g",
                                                       help="optional; only the exprimo-2020 profile uses it"),
            "µs per message": st.column_config.NumberColumn(
                "µs per message", format="%.4g",
                help="device time per message sent and per message received (LogP's o: serialisation, the "
                     "transport thread, waking up), which the device cannot spend computing; empty or 0 for "
                     "none. placement calibrate fits it for CPU ranks"),
            "SMs": st.column_config.NumberColumn("SMs", format="%d", min_value=0, step=1,
                                                 help="a GPU's streaming multiprocessors: matmuls then pay for "
                                                      "whole tiles and waves; empty for none"),
            **{c: st.column_config.NumberColumn(c, format="%.4g", help=f"tensor-core peak when the network trains "
                                                                        f"in {c.split()[0]}; empty: the peak column")
               for c in DEVICE_COLUMNS if c.endswith("peak TFLOP/s") and c != "peak TFLOP/s"},
            **{c: st.column_config.NumberColumn(c, format="%.4g", help=f"the best {c.split()[0]} matmul rate a "
                                                                        "microbenchmark measured: it replaces the "
                                                                        "peak times the compute efficiency")
               for c in DEVICE_COLUMNS if c.endswith("measured TFLOP/s")},
        })
    st.markdown("##### Channels")
    st.caption("Routes: `SRC→DST` pairs separated by commas (`->` works too). Every ordered pair of devices "
               "needs exactly one route. An empty latency is 0.")
    chan_df = st.data_editor(
        _frame(chan_rows, CHANNEL_COLUMNS, ("name", "routes", "transfer curve")), key=f"chan_editor_{v}",
        num_rows="dynamic",
        hide_index=True, placeholder="",
        column_config={
            "name": st.column_config.TextColumn("name", required=True),
            "bandwidth GB/s": st.column_config.NumberColumn(
                "bandwidth GB/s", format="%.4g",
                help="theoretical; the roofline profile uses 25 % of it unless a measured bandwidth is given"),
            "latency µs": st.column_config.NumberColumn("latency µs", format="%.4g", help="empty = 0"),
            "measured GB/s": st.column_config.NumberColumn(
                "measured GB/s", format="%.4g",
                help="what large transfers reach on this link (NCCL's bus bandwidth, say): it replaces the "
                     "bandwidth times the communication efficiency; empty for none"),
            "routes": st.column_config.TextColumn("routes", width="large"),
            "transfer curve": st.column_config.TextColumn(
                "transfer curve", help="optional: measured BYTES: SECONDS points (placement calibrate, placement "
                                       "experiment e1) that replace latency and bandwidth for this channel"),
        })
    current = state.devices()
    with st.expander(f"Shared resources ({len(shared_rows)}) and measured collectives ({len(current.collectives)})",
                     icon=":material/memory:", expanded=bool(shared_rows or current.collectives)):
        st.caption("What devices share (the cores of one CPU, a PCIe switch): tasks on several of them at once run "
                   "slower by their demands over the capacity; a collective demand is what a measured all-reduce "
                   "over a device adds (gloo sums on the CPU ranks' own cores). `placement calibrate` writes "
                   "both; docs/formats.md, \"shared\".")
        shared_df = st.data_editor(
            _frame(shared_rows, SHARED_COLUMNS, ("name", "devices", "demands")), key=f"shared_editor_{v}",
            num_rows="dynamic", hide_index=True, placeholder="",
            column_config={
                "name": st.column_config.TextColumn("name", required=True),
                "devices": st.column_config.TextColumn("devices", help="two or more device names, comma-separated"),
                "capacity": st.column_config.NumberColumn("capacity", format="%.4g",
                                                          help="demand served at full speed at once; empty = 1"),
                "demands": st.column_config.TextColumn("demands", help="one per device, comma-separated; empty: 1 each"),
                "collective demand": st.column_config.NumberColumn(
                    "collective demand", format="%.4g",
                    help="what a measured all-reduce running over a device adds to its demand; empty or 0: none"),
            })
        if current.collectives:
            st.caption("Measured collectives (from calibration; the simulator uses an all-reduce curve for a "
                       "data-parallel split over exactly its devices). They stay when you edit the tables above.")
            st.dataframe(collective_rows(current), hide_index=True, key="dev_collectives",
                         column_config={c: st.column_config.NumberColumn(c, format="%.4g")
                                        for c in ("largest MB", "alone ms", "while computing ms")})
    draft = (dev_df.to_dict("records"), chan_df.to_dict("records"), shared_df.to_dict("records"))
    s.dev_draft = draft
    try:
        edited, notes = carry_sharing(current, devices_from_tables(s.devices_label, *draft[:2]), draft[2])
    except InputError as e:
        st.error(f"{ui.esc(e)}  \nThe last valid device graph is still in use.", icon=":material/error:")
    else:
        if devices_to_dict(edited) != devices_to_dict(current):
            label = s.devices_label if s.devices_label.endswith("(edited)") else f"{s.devices_label} (edited)"
            state.set_devices(edited, state.edited_devices_key(edited), label)
            s.dev_tables_key = state.devices_key()
            st.success("Changes applied." + "".join(f"  \n{ui.esc(n[0].upper() + n[1:])}." for n in notes),
                       icon=":material/check_circle:")

with ui.guarded("adding a device"):
    with st.expander("Add a device, connected to every other device", icon=":material/add_circle:",
                     key="dev_add_box"):
        d = state.devices()
        suggested = next(f"gpu{k}" for k in itertools.count(sum(x.kind == "gpu" for x in d.devices))
                         if f"gpu{k}" not in d.names)
        if s.get("dev_add_name") in (None, s.get("dev_add_suggested")):  # not the user's own: follow the devices
            s.dev_add_name = suggested
        s.dev_add_suggested = suggested
        with st.form("dev_add", border=False):
            c = st.columns(6)
            new = {"name": c[0].text_input("Name", suggested, key=ui.persist("dev_add_name")),
                   "kind": c[1].selectbox("Kind", ["gpu", "cpu"], key=ui.persist("dev_add_kind")),
                   "model": c[2].text_input("Model", "", key=ui.persist("dev_add_model")),
                   "peak TFLOP/s": c[3].number_input("Peak TFLOP/s", 0.0, 1e6, 15.7, format="%g",
                                                     key=ui.persist("dev_add_flops")),
                   "memory GB": c[4].number_input("Memory GB", 0.0, 1e6, 16.0, format="%g",
                                                  key=ui.persist("dev_add_memory")),
                   "memory bandwidth GB/s": c[5].number_input("Memory bandwidth GB/s", 0.0, 1e6, 900.0,
                                                              format="%g", key=ui.persist("dev_add_membw"))}
            channels = [ch.name for ch in d.channels]
            c = st.columns([2, 2, 1, 1])
            via = c[0].selectbox("Connect it over", channels + ["a new channel"], key=ui.persist("dev_add_via"),
                                 help="Routes to and from every existing device go over this channel (they "
                                      "contend with its other routes, as on a shared PCIe switch).")
            chan = {"name": c[1].text_input("New channel's name", f"link{len(channels)}",
                                            key=ui.persist("dev_add_chan_name")),
                    "bandwidth GB/s": c[2].number_input("Its GB/s", 0.0, 1e6, 16.0, format="%g",
                                                        key=ui.persist("dev_add_chan_bw")),
                    "latency µs": c[3].number_input("Its latency µs", 0.0, 1e9, 0.0, format="%g",
                                                    key=ui.persist("dev_add_chan_lat"))}
            st.caption(f"Adds {2 * len(d)} routes ({new['name'] or 'the new device'} to and from each of the "
                       f"{len(d)} devices). The new channel's fields apply only with “a new channel”.")
            add = st.form_submit_button("Add the device", icon=":material/add:")
        if add:
            try:
                grown = add_device(d, new, channel=None if via == "a new channel" else via,
                                   new_channel=chan if via == "a new channel" else None)
            except InputError as e:
                st.error(ui.esc(e), icon=":material/error:")
            else:
                label = s.devices_label if s.devices_label.endswith("(edited)") else f"{s.devices_label} (edited)"
                state.set_devices(grown, state.edited_devices_key(grown), label)
                _reset_editors()
                s.dev_added = f"Added {new['name'].strip()} with {2 * len(d)} routes."
                st.rerun()
        if s.get("dev_added"):
            st.success(s.pop("dev_added"), icon=":material/check_circle:")

with ui.guarded("the topology"):
    d = state.devices()
    st.markdown("##### Topology")
    shown = st.segmented_control("View", ["explorable graph", "charts"], default="explorable graph",
                                 key=ui.persist("dev_view"),
                                 help="Explorable graph: devices and the channels their routes pass through, with "
                                      "what each channel carries under the current placement; click one for its "
                                      "card. Charts: the links and the route matrix.")
    if shown == "charts":
        c1, c2 = st.columns([3, 2])
        c1.plotly_chart(topology.links_figure(d), key="dev_links", config={"displaylogo": False})
        c2.plotly_chart(topology.route_matrix_figure(d), key="dev_routes", config={"displaylogo": False})
    else:
        st.iframe(nodelink.current_devices_html(), height=nodelink.HEIGHT,
                  alt=f"The device graph as an explorable graph ({len(d)} devices, {len(d.channels)} channels)")
        st.caption(f"Devices (dark boxes) and channels (rounded boxes in the channel's colour: a channel is a hub "
                   f"its routes pass through; routes on one channel contend). Arrows: device → channel for a route's source, channel → device for its "
                   f"destination; edge width ∝ bandwidth. Each channel says how much it carries under the current "
                   f"placement ({ui.esc(s.placement_label)}, one simulated step). Click a device or a channel for "
                   f"its card; scroll to zoom.")
    st.download_button("Download as JSON", json.dumps(devices_to_dict(d), indent=2),
                       file_name=f"{d.name}.json", mime="application/json", icon=":material/download:",
                       on_click="ignore")

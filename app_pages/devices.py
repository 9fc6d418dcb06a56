"""Devices: start from a preset or a file, edit devices and channels in tables, see the topology, download."""

import json

import pandas as pd
import streamlit as st

from dashboard import charts, state, ui
from placement_core import InputError
from placement_core.analysis.device_tables import devices_from_tables, devices_to_tables
from placement_core.devices import devices_to_dict

ui.header("Devices", "The machines a placement can use: each device's compute, memory and memory bandwidth, "
          "and the channels (links) tensors cross between them. A transfer from A to B queues on the channel "
          "that carries the route A→B; routes on one channel contend, as on a shared PCIe switch.")
s = state.ss()
_, presets = state.builtin_choices()


def _reset_editors():
    s.dev_editor_version = s.get("dev_editor_version", 0) + 1
    s.dev_tables = devices_to_tables(state.devices())
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
            c2.success(outcome.message, icon=":material/check_circle:")
        else:
            c2.error(f"{outcome.message}  \nThe previous devices ({s.devices_label}) are still loaded.",
                     icon=":material/error:")

with ui.guarded("the device tables"):
    if "dev_tables" not in s:
        _reset_editors()
    dev_rows, chan_rows = s.dev_tables
    v = s.get("dev_editor_version", 0)
    st.markdown(f"##### {s.devices_label}: devices")
    st.caption("Edit cells, add rows at the bottom or delete selected rows; changes apply as soon as they are valid.")
    dev_df = st.data_editor(
        pd.DataFrame(dev_rows), key=f"dev_editor_{v}", num_rows="dynamic", hide_index=True,
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
                     "transport thread, waking up), which the device cannot spend computing; 0 for none. "
                     "placement calibrate fits it for CPU ranks"),
        })
    st.markdown("##### Channels")
    st.caption("Routes: `SRC→DST` pairs separated by commas (`->` works too). Every ordered pair of devices "
               "needs exactly one route.")
    chan_df = st.data_editor(
        pd.DataFrame(chan_rows), key=f"chan_editor_{v}", num_rows="dynamic", hide_index=True,
        column_config={
            "name": st.column_config.TextColumn("name", required=True),
            "bandwidth GB/s": st.column_config.NumberColumn("bandwidth GB/s", format="%.4g",
                                                            help="theoretical; the roofline profile uses 25 % of it"),
            "latency µs": st.column_config.NumberColumn("latency µs", format="%.4g"),
            "routes": st.column_config.TextColumn("routes", width="large"),
        })
    try:
        edited = devices_from_tables(s.devices_label, dev_df.to_dict("records"), chan_df.to_dict("records"))
    except InputError as e:
        st.error(f"{e}  \nThe last valid device graph is still in use.", icon=":material/error:")
    else:
        if devices_to_dict(edited) != devices_to_dict(state.devices()):
            label = s.devices_label if s.devices_label.endswith("(edited)") else f"{s.devices_label} (edited)"
            state.set_devices(edited, state.edited_devices_key(edited), label)
            st.success("Changes applied.", icon=":material/check_circle:")

with ui.guarded("the topology"):
    d = state.devices()
    st.markdown("##### Topology")
    c1, c2 = st.columns([3, 2])
    c1.plotly_chart(charts.links_figure(d), key="dev_links", config={"displaylogo": False})
    c2.plotly_chart(charts.route_matrix_figure(d), key="dev_routes", config={"displaylogo": False})
    st.download_button("Download as JSON", json.dumps(devices_to_dict(d), indent=2),
                       file_name=f"{d.name}.json", mime="application/json", icon=":material/download:",
                       on_click="ignore")

"""Device Placement Lab dashboard (minimal until the dashboard issue lands)."""

import streamlit as st

from placement_core import Problem, builtin_devices, builtin_networks, load_devices, load_network, single_device

st.set_page_config(page_title="Device Placement Lab", layout="wide")
st.title("Device Placement Lab")
net_name = st.selectbox("Network", builtin_networks(), index=builtin_networks().index("resnet50"))
dev_name = st.selectbox("Devices", builtin_devices(), index=builtin_devices().index("malvik"))
graph, devices = load_network(net_name), load_devices(dev_name)
problem = Problem(graph, devices)
rows = []
for i, d in enumerate(devices.devices):
    ev = problem.simulate(single_device(graph, devices, i))
    rows.append({"device": d.name, "batch time (s)": ev.result.batch_time, "fits": ev.feasible})
st.write(f"{graph.name}: {len(graph)} ops at batch {graph.batch_size}; simulated time of one training step "
         "with every op on one device:")
st.dataframe(rows)

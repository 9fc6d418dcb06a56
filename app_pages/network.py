"""Network: choose, upload or import the network; its summary, ops and graph."""

import streamlit as st

from dashboard import nodelink, state, ui
from dashboard.gptview import gpt_form
from dashboard.charts import picture, topology
from dashboard.netview import torch_import_form
from placement_core.analysis import fmt_bytes, fmt_flops, network_summary, op_table
from placement_core.analysis.graphview import COLLAPSE_ABOVE

ui.header("Network", "The computation graph of one training step: its ops, what they cost and how tensors "
          "flow between them. Choose a built-in network, upload a file, or import a PyTorch model; the "
          "other pages work on the network chosen here.")
s = state.session()
networks, _ = state.builtin_choices()
if s.pop("net_widgets_stale", False):  # the network changed (here or elsewhere): the widgets follow it
    s.net_builtin = s.base_graph_key.split(":", 1)[1] if s.base_graph_key.startswith("builtin:") else None
    s.net_batch = int(state.graph().batch_size)

with ui.guarded("the network chooser"):
    # Lazy tabs: the two forms are drawn only while their tab is open (the first load of every session draws
    # this page: two dozen widgets nobody sees cost it); what was typed in them is kept (ui.persist).
    labels = ["Built-in networks", "A GPT by its shape", "Upload a file", "Import a PyTorch model"]
    builtin, gpt_tab, upload, torch_tab = st.tabs(labels, key=ui.persist("net_tab", labels), on_change="rerun")
    with builtin:
        def _choose():
            name = s.net_builtin
            state.set_network(state.builtin_network(name), f"builtin:{name}", state.NETWORK_TITLES.get(name, name))
        current = s.base_graph_key.split(":", 1)[1] if s.base_graph_key.startswith("builtin:") else None
        st.selectbox("Network", networks, index=networks.index(current) if current in networks else None,
                     format_func=lambda n: f"{state.NETWORK_TITLES.get(n, n)}  ({n})", key="net_builtin",
                     on_change=_choose, placeholder="choose a built-in network",
                     help="Generated from torchvision at batch size 128, as in the thesis' experiments.")
    if gpt_tab.open:
        with gpt_tab:
            gpt_form()
    with upload:
        st.caption("A `placement-network/1` JSON file, or an Exprimo network file from the thesis "
                   "(`{\"name\", \"layers\": …}`); the format is detected automatically.")
        up = st.file_uploader("Network file", type=["json"], key="net_upload")
        if up is not None and s.get("net_upload_id") != up.file_id:
            s.net_upload_id = up.file_id
            s.net_upload_outcome = state.load_uploaded_network(up.getvalue(), up.name)
            if s.net_upload_outcome.ok:
                st.rerun()  # redraw the chooser and the batch box for the new network
        outcome = s.get("net_upload_outcome")
        if up is not None and outcome is not None:
            if outcome.ok:
                st.success(ui.esc(outcome.message), icon=":material/check_circle:")
            else:
                st.error(f"{ui.esc(outcome.message)}  \nThe previous network ({ui.esc(s.network_label)}) is still loaded.",
                         icon=":material/error:")
    if torch_tab.open or s.get("torch_file") is not None:  # a file chosen, not yet imported, stays chosen
        with torch_tab:
            torch_import_form()

with ui.guarded("the network summary"):
    g = state.graph()
    c1, c2 = st.columns([3, 1])
    c1.subheader(ui.esc(s.network_label))
    batch = c2.number_input("Batch size", 1, 65536, int(g.batch_size), key="net_batch",
                            help="FLOPs and activation sizes scale with the batch; parameters do not.")
    if batch != g.batch_size:
        state.set_batch_size(int(batch))
        g = state.graph()
    summary = network_summary(g)
    cols = st.columns(5)
    cols[0].metric("Ops", f"{summary['ops']:,}", help=f"{summary['edges']:,} edges (tensors between ops)")
    cols[1].metric("Forward compute", fmt_flops(summary["fwd_flops"]), help="per batch")
    cols[2].metric("Backward compute", fmt_flops(summary["bwd_flops"]),
                   help="per batch: gradients for inputs and weights")
    cols[3].metric("Parameters", fmt_bytes(summary["param_bytes"]),
                   help=f"{summary['params']:,.0f} weights in {summary['precision']}")
    cols[4].metric("Activations", fmt_bytes(summary["activation_bytes"]),
                   help=f"all op outputs of one forward pass at batch size {g.batch_size}")

with ui.guarded("the graph"):
    st.markdown("##### Graph")
    placement = state.current_placement()
    c1, c2 = st.columns([1, 1])
    views = ["picture", "explorable graph", "layered chart"]
    shown = c1.segmented_control("View", views, default="picture", key=ui.persist("net_view", views),
                                 help="Picture: the whole network at a glance, drawn at once. Explorable graph: click "
                                      "an op for its producers, consumers and card, search it by name, zoom in for "
                                      "labels; networks over 1,000 ops open as modules. Layered chart: every op at "
                                      "its exact depth, hover for numbers.")
    color_by = c2.segmented_control("Colour by", ["op kind", "device"], default="op kind", key=ui.persist("net_color"),
                                    help="By device: the current placement (see the sidebar).")
    by = "device" if color_by == "device" else "kind"
    layout = state.layout()
    if shown == "layered chart":
        fig = topology.network_figure(g, layout, by, placement, state.devices().names)
        st.plotly_chart(fig, key="net_graph", config={"scrollZoom": True, "displaylogo": False})
        st.caption(f"{layout.depth} layers, at most {layout.width} ops side by side. Drag to pan, scroll to zoom, "
                   "hover an op for its numbers; edge width grows with the tensor size.")
    elif shown == "explorable graph":
        st.iframe(nodelink.current_network_html(by),
                  height=nodelink.HEIGHT, alt=f"The network as an explorable graph ({len(g)} ops)")
        st.caption(f"{layout.depth} layers from left to right, arrows in the direction data flows; node area grows "
                   "with compute (forward + backward FLOPs), edge width with the tensor; red dashes: tensors between "
                   "devices under the current placement. Scroll to zoom (labels appear), drag to pan, click an op for "
                   "its card, its producers (blue) and consumers (orange). A network too long to read whole opens at "
                   "its input end with the names shown; *Fit* shows all of it."
                   + (" Hexagons are modules (groups of ops found by coarsening): click one to expand it."
                      if len(g) > COLLAPSE_ABOVE else ""))
    else:
        svg = state.network_picture(by)
        if svg is None:
            st.info(f"{len(g):,} ops are too many for a picture: choose *explorable graph*, which opens the network "
                    "as modules.")
        else:
            st.image(svg, caption=f"The network as a picture ({len(g)} ops)")
            rows = picture.snake(layout).rows
            st.caption(f"{layout.depth} layers from the input"
                       + (f", folded into {rows} rows that snake (left to right, then right to left)" if rows > 1
                          else ", left to right")
                       + "; node area grows with compute, edge width with the tensor; red dashes: tensors between "
                         "devices under the current placement. To click ops, search and zoom, choose *explorable "
                         "graph*.")

with ui.guarded("the op table"):
    st.markdown("##### Ops")
    st.caption("In topological order; click a column header to sort.")
    st.dataframe(op_table(g, placement, state.devices().names, state.problem().splits), hide_index=True,
                 key="net_ops",
                 column_config={
                     "#": st.column_config.NumberColumn(width="small"),
                     "forward GFLOP": st.column_config.NumberColumn(format="%.3f"),
                     "backward GFLOP": st.column_config.NumberColumn(format="%.3f"),
                     "output MB": st.column_config.NumberColumn(format="%.2f"),
                     "parameters MB": st.column_config.NumberColumn(format="%.2f"),
                 })

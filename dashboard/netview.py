"""The Network page's PyTorch import form (torch is imported only when the user imports)."""

from __future__ import annotations

import streamlit as st

from placement_core import InputError

from . import state, ui


def torch_import_form() -> None:
    from .torch_import import import_model, model_source, torch_available

    s = state.ss()
    if not torch_available():
        st.info('PyTorch is not installed here. Install it with `.venv/bin/pip install -e ".[torch]"` to import models.',
                icon=":material/info:")
        return
    st.caption("Traced with torch.fx at leaf-module granularity; FLOPs from torch's counter, sizes from a "
               "run on a random input.")
    with st.form("torch_import", border=False):
        source = st.radio("Model", ["torchvision model", "Python file"], horizontal=True, key="torch_source")
        c1, c2 = st.columns(2)
        name = c1.text_input("torchvision name", "resnet18", key="torch_name",
                             help="Any name from torchvision.models.list_models(), e.g. resnet18, vgg16, "
                                  "mobilenet_v3_small.")
        code = c2.file_uploader("Python file", type=["py"], key="torch_file",
                                help="A file that defines a function or nn.Module class building the model.")
        c3, c4, c5 = st.columns(3)
        attr = c3.text_input("Model in the file", "build_model", key="torch_attr",
                             help="An nn.Module class, a function returning one (keyword arguments allowed: "
                                  "build(width=256)), or a module instance defined in the file.")
        shape = c4.text_input("Input shape of one sample", "3, 224, 224", key="torch_shape",
                              help="Without the batch dimension, e.g. 3, 224, 224 for an image model.")
        batch = c5.number_input("Batch size", 1, 65536, 32, key="torch_batch")
        submitted = st.form_submit_button("Import", type="primary")
    if submitted:
        try:
            src = model_source("torchvision" if source == "torchvision model" else "file", name=name,
                               code=code.getvalue() if code is not None else None,
                               filename=code.name if code is not None else "", attr=attr)
            with st.spinner("Tracing the model…"):
                g = import_model(src, shape, int(batch))
        except InputError as e:
            s.torch_outcome = state.LoadOutcome(False, str(e))
        else:
            key = f"torch:{src}:{shape}:{state.digest(repr([o.name for o in g.ops]).encode())}"
            state.set_network(g, key, g.name)
            s.network_source = (src, shape)
            s.torch_outcome = state.LoadOutcome(True, f"Imported {g.name}: {len(g)} ops at batch size "
                                                      f"{g.batch_size}.")
            st.rerun()  # redraw the chooser and the batch box for the new network
    outcome = s.get("torch_outcome")
    if outcome is not None:
        (st.success if outcome.ok else st.error)(ui.esc(outcome.message))

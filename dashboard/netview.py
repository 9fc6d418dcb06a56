"""The Network page's PyTorch import form (torch is imported only when the user imports).

Model code never runs in the server: every import runs in a worker process with
a timeout. An uploaded Python file first gets a confirmation that shows the file
(name, size, SHA-256, its code), the call, and the OS user, working directory
and environment it will run with; only the confirmed bytes run.
"""

from __future__ import annotations

import streamlit as st

from placement_core import InputError
from placement_core.torch.isolated import IMPORT_TIMEOUT_S

from . import state, ui

TORCHVISION, FILE = "torchvision model", "Python file"


def torch_import_form() -> None:
    from .torch_import import ALLOW_ENV, code_upload_allowed, import_model, review_upload, torch_available, \
        torchvision_source

    s = state.session()
    if not torch_available():
        st.info('PyTorch is not installed here. Install it with `.venv/bin/pip install -e ".[torch]"` to import '
                'models.', icon=":material/info:")
        return
    allowed = code_upload_allowed()
    st.caption("Traced with torch.fx at leaf-module granularity, in a separate process; FLOPs from torch's "
               "counter, sizes from a run on a random input.")
    with st.form("torch_import", border=False):
        sources = [TORCHVISION, FILE] if allowed else [TORCHVISION]
        source = st.radio("Model", sources, horizontal=True, key=ui.persist("torch_source", sources))
        c1, c2 = st.columns(2)
        name = c1.text_input("torchvision name", "resnet18", key=ui.persist("torch_name"),
                             help="Any name from torchvision.models.list_models(), e.g. resnet18, vgg16, "
                                  "mobilenet_v3_small.")
        code = attr = None
        if allowed:
            code = c2.file_uploader("Python file", type=["py"], key="torch_file",
                                    help="A file that defines a function or nn.Module class building the model. "
                                         "It runs only after you have read it and confirmed.")
        else:
            c2.info(f"Importing a model from a Python file is turned off on this server ({ALLOW_ENV}=0): "
                    "the file's code would run as the server's user. A torchvision name still imports.",
                    icon=":material/block:")
        c3, c4, c5 = st.columns(3)
        if allowed:
            attr = c3.text_input("Model in the file", "build_model", key=ui.persist("torch_attr"),
                                 help="An nn.Module class, a function returning one (keyword arguments allowed: "
                                      "build(width=256)), or a module instance defined in the file.")
        shape = c4.text_input("Input shape of one sample", "3, 224, 224", key=ui.persist("torch_shape"),
                              help="Without the batch dimension, e.g. 3, 224, 224 for an image model.")
        batch = c5.number_input("Batch size", 1, 65536, 32, key=ui.persist("torch_batch"))
        submitted = st.form_submit_button("Import", type="primary")
    if submitted:
        s.pop("torch_review", None)
        s.pop("torch_confirm_ok", None)  # a confirmation is for one file: the next one starts unticked
        try:
            if source == FILE and allowed:
                s.torch_review = review_upload(code.getvalue() if code is not None else None,
                                               code.name if code is not None else "", attr or "", shape, int(batch))
                s.torch_outcome = None
            else:
                src = torchvision_source(name)
                with st.spinner("Tracing the model in a separate process…"):
                    g = import_model(src, shape, int(batch))
                _imported(g, src, shape, None)
        except InputError as e:
            s.torch_outcome = state.LoadOutcome(False, str(e))
    if s.get("torch_review") is not None:
        if allowed:
            _confirmation(s.torch_review)
        else:
            s.pop("torch_review")
    outcome = s.get("torch_outcome")
    if outcome is not None:
        (st.success if outcome.ok else st.error)(ui.esc(outcome.message))


def _confirmation(review) -> None:
    """Say what will run and as whom; run it only when the user ticks the box and presses Run."""
    from .torch_import import import_reviewed, remove_upload, runs_as

    s = state.session()
    who = runs_as()
    shown, hidden = review.shown()
    with st.container(border=True, key="torch_review_box"):
        st.warning("**Importing this file runs it as Python code on the server.** Read it before you run it.",
                   icon=":material/warning:")
        st.markdown(f"**File** {ui.esc(review.filename)}, {len(review.code):,} bytes, SHA-256 "
                    f"{review.sha256}  \n**Runs** {ui.esc(review.attr)} from that file, traced on one sample of "
                    f"shape {ui.esc(review.shape_text)}, scaled to batch {review.batch_size}")
        st.code(shown, language="python", line_numbers=True, wrap_lines=True, height=420 if shown.count("\n") > 20
                else "content")
        if review.hidden_characters():
            st.error(f"The file has {review.hidden_characters():,} invisible or direction-changing characters: what "
                     "you read above may not be what runs.", icon=":material/visibility_off:")
        if hidden:
            st.caption(f"… and {hidden:,} more lines, not shown here.")
        st.markdown(
            f"**As whom**: OS user **{ui.esc(who['user'])}** (uid {who['uid']}), working directory "
            f"{ui.esc(who['cwd'])}, with the server's full environment ({who['env_vars']} variables, secrets "
            f"included) and every file that user can read or write. It runs in a separate process, stopped "
            f"after {IMPORT_TIMEOUT_S:g} s; that is not a sandbox. It runs again, in worker processes, when "
            f"you benchmark or calibrate this network. The file is kept under {ui.esc(who['uploads'])} while "
            f"this session uses it and removed if the import fails.")
        if who["uid"] == "0":
            st.error("The server runs as **root**: this file can change anything on this machine.",
                     icon=":material/gpp_bad:")
        ok = st.checkbox(f"I have read this file and want to run it as {ui.esc(who['user'])}",
                         key="torch_confirm_ok")
        c1, c2, _ = st.columns([2, 1, 4])
        run = c1.button("Run it and import", type="primary", disabled=not ok, key="torch_confirm_run")
        cancel = c2.button("Cancel", key="torch_confirm_cancel")
    if cancel:
        s.pop("torch_review", None)
        st.rerun()
    if run and ok:
        s.pop("torch_review", None)
        try:
            with st.spinner("Running the file in a separate process…"):
                g, src, path = import_reviewed(review)
        except InputError as e:
            s.torch_outcome = state.LoadOutcome(False, str(e))
            st.rerun()
        else:
            remove_upload(s.get("torch_upload"))  # the model this session imported before no longer needs its file
            s.torch_upload = str(path)
            _imported(g, src, review.shape_text, path)


def _imported(g, src: str, shape: str, path) -> None:
    s = state.session()
    if path is None:
        from .torch_import import remove_upload
        remove_upload(s.pop("torch_upload", None))
    key = f"torch:{src}:{shape}:{state.digest(repr([o.name for o in g.ops]).encode())}"
    state.set_network(g, key, g.name)
    s.network_source = (src, shape)
    s.torch_outcome = state.LoadOutcome(True, f"Imported {g.name}: {len(g)} ops at batch size {g.batch_size}.")
    st.rerun()  # redraw the chooser and the batch box for the new network

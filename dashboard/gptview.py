"""The Network page's GPT form: a decoder-only transformer by its shape (placement_core.families.gpt)."""

from __future__ import annotations

import streamlit as st

from placement_core import InputError
from placement_core.families.gpt import PRECISIONS, parse

from . import state, ui


def spec_of(layers: int, hidden: int, heads: int, seq: int, vocab: int, batch: int, precision: str,
            tied: bool) -> str:
    return (f"gpt:layers={layers},hidden={hidden},heads={heads},seq={seq},vocab={vocab},batch={batch},"
            f"precision={precision}" + ("" if tied else ",tied=0"))


def label_of(spec: str) -> str:
    c = parse(spec)
    n = c.parameters()
    size = next(f"{n / scale:.3g} {unit}" for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k"), (1, ""))
                if n >= scale or scale == 1)
    return f"GPT, {size} parameters ({c.layers} layers, hidden {c.hidden}, {c.precision})"


def gpt_form() -> None:
    s = state.session()
    st.caption("Megatron-LM's layer, op by op, with FLOPs and bytes from the shapes (docs/clusters.md). "
               "GPT-2 small is 12 layers, hidden 768, 12 heads, sequences of 1,024; a 1.3 B model 24 layers, "
               "hidden 2,048, 16 heads.")
    with st.form("net_gpt", border=False):
        c = st.columns(4)
        layers = c[0].number_input("Layers", 1, 2048, 24, key=ui.persist("gpt_layers"))
        hidden = c[1].number_input("Hidden size", 1, 1 << 17, 2048, step=256, key=ui.persist("gpt_hidden"))
        heads = c[2].number_input("Attention heads", 1, 1024, 16, key=ui.persist("gpt_heads"),
                                  help="Must divide the hidden size.")
        seq = c[3].number_input("Sequence length", 1, 1 << 20, 2048, step=256, key=ui.persist("gpt_seq"))
        c = st.columns(4)
        vocab = c[0].number_input("Vocabulary", 1, 1 << 24, 50257, key=ui.persist("gpt_vocab"))
        batch = c[1].number_input("Sequences per batch", 1, 1 << 20, 8, key=ui.persist("gpt_batch"))
        precision = c[2].selectbox("Precision", list(PRECISIONS), key=ui.persist("gpt_precision"),
                                   help="bf16 and fp16: 2-byte tensors and weights, matmuls at the tensor-core "
                                        "peak of devices that list one (the DGX presets); fp32: 4 bytes.")
        tied = c[3].checkbox("Tied output layer", True, key=ui.persist("gpt_tied"),
                             help="The logit layer reads the token embedding's weights, as GPT-2 and "
                                  "Megatron-LM do.")
        built = st.form_submit_button("Build this GPT", type="primary")
    if built:
        spec = spec_of(int(layers), int(hidden), int(heads), int(seq), int(vocab), int(batch), precision, tied)
        try:
            graph = state.builtin_network(spec)
            label = label_of(spec)
        except InputError as e:
            s.gpt_outcome = (False, str(e))
        else:
            state.set_network(graph, spec, label)
            s.gpt_outcome = (True, f"Built {label}: {len(graph):,} ops at {graph.batch_size} sequences per batch.")
            st.rerun()
    outcome = s.get("gpt_outcome")
    if outcome is not None:
        ok, message = outcome
        if ok:
            st.success(ui.esc(message), icon=":material/check_circle:")
        else:
            st.error(f"{ui.esc(message)}  \nThe previous network ({ui.esc(s.network_label)}) is still loaded.",
                     icon=":material/error:")

"""A parametric GPT (a decoder-only transformer), op by op, costed from its shapes.

``gpt:layers=L,hidden=H,heads=A[,seq=S][,vocab=V][,batch=B][,precision=bf16|fp16|fp32][,tied=1|0]`` names
one; ``gpt:layers=12,hidden=768,heads=12`` is GPT-2 small (124,439,808 parameters with the output layer
tied to the token embedding, as GPT-2 and Megatron-LM do by default: :meth:`GPTConfig.parameters`).

Each layer is Megatron-LM's: layer norm, the fused QKV projection, the attention scores Q·Kᵀ (a batched matmul
per head), softmax, the context softmax·V, the output projection, a residual add, layer norm, the MLP's two
linear layers (4H wide) around GeLU, a residual add. Then the final layer norm, the logit layer and the
loss. A tied logit layer holds its own copy of the token embedding's weights (without a bias), as Megatron-LM
keeps one on the last pipeline stage: wherever it runs its weights are resident, and no weights travel with
each micro-batch (the one all-reduce of the two copies' gradients per step is not simulated); the graph's
parameter bytes therefore count them twice, :meth:`GPTConfig.parameters` once. A
matmul of m×k by k×n costs 2mkn FLOPs forward and twice that backward (both input gradients, or the input
and the weight gradient), so the matmuls of a step add up to Narayanan et al.'s (SC'21, Eq. 3 without
recomputation) 72·B·s·l·h²·(1 + s/6h + V/12lh); attention's s² terms are the scores and the context. Norms,
softmax, GeLU, adds, the embedding lookup and the loss are memory-bound (one FLOP per output element; their
bytes decide their time). Tensors and weights are ``precision``'s size (2 bytes for bf16 and fp16, 4 for
fp32); the optimizer's state is the problem's, not the network's (``--optimizer adam``:
:mod:`placement_core.cost.training_state`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import InputError
from ..model.graph import Graph
from .layers import NetBuilder

PREFIX = "gpt:"
PRECISIONS = {"bf16": 2, "fp16": 2, "fp32": 4}
# name: (default, least, most); None: required
# 12 ops a layer: at most 24,582 ops
FIELDS = {"layers": (None, 1, 2048), "hidden": (None, 1, 1 << 17), "heads": (None, 1, 1024),
          "seq": (1024, 1, 1 << 20), "vocab": (50257, 1, 1 << 24), "batch": (8, 1, 1 << 20), "tied": (1, 0, 1)}
FIX = "Write gpt:layers=L,hidden=H,heads=A (optional seq, vocab, batch, precision=bf16|fp16|fp32, tied=1|0)"


@dataclass(frozen=True)
class GPTConfig:
    layers: int
    hidden: int
    heads: int
    seq: int = 1024
    vocab: int = 50257
    batch: int = 8
    precision: str = "bf16"
    tied: int = 1

    @property
    def name(self) -> str:
        tail = "" if self.tied else ",tied=0"  # the precision is the graph's own (it can change: --precision)
        return (f"gpt(layers={self.layers},hidden={self.hidden},heads={self.heads},seq={self.seq},"
                f"vocab={self.vocab}{tail})")

    def parameters(self) -> int:
        """The parameter count in closed form (checked against the built graph's)."""
        L, H, V, S = self.layers, self.hidden, self.vocab, self.seq
        return L * (12 * H * H + 13 * H) + V * H * (1 if self.tied else 2) + S * H + 2 * H + (0 if self.tied else V)

    def matmul_flops(self) -> float:
        """One step's matmul FLOPs (forward and backward), Narayanan et al.'s closed form."""
        B, s, L, h, V = self.batch, self.seq, self.layers, self.hidden, self.vocab
        return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))

    def recomputed_flops(self, recompute: str) -> float:
        """The matmul FLOPs a step's backward runs again: every layer's forward under full recomputation (so
        72 becomes Narayanan et al.'s 96 on the layers; the logits are not recomputed), the attention's two
        s x s matmuls (4·B·s²·h a layer) under selective recomputation (Korthikanti et al.), else none. Model
        FLOPs leave them out (MFU); hardware FLOPs count them (what Megatron-LM's throughputs report)."""
        B, s, L, h = self.batch, self.seq, self.layers, self.hidden
        if recompute == "full":
            return 24.0 * B * s * L * h * h * (1 + s / (6 * h))
        if recompute == "selective":
            return 4.0 * B * s * s * h * L
        return 0.0


def is_gpt(spec: str) -> bool:
    return isinstance(spec, str) and spec.strip().lower().startswith(PREFIX)


def parse(spec: str, batch_size: int | None = None) -> GPTConfig:
    """``gpt:k=v,...`` as a configuration, every value checked with its bounds."""
    body = spec.strip()[len(PREFIX):]
    values: dict[str, object] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, eq, raw = part.partition("=")
        key, raw = key.strip().lower(), raw.strip()
        if not eq or not raw:
            raise InputError(f"{part[:40]!r} in the GPT spec is not key=value", field="network", fix=FIX)
        if key in values:
            raise InputError(f"{key} is given twice in the GPT spec", field="network", fix=FIX)
        if key == "precision":
            if raw.lower() not in PRECISIONS:
                raise InputError(f"precision {raw[:20]!r} is not one of {', '.join(PRECISIONS)}", field="network",
                                 fix=FIX)
            values[key] = raw.lower()
            continue
        if key not in FIELDS:
            raise InputError(f"the GPT spec has no field {key[:30]!r}", field="network",
                             fix=f"Fields: {', '.join([*FIELDS, 'precision'])}")
        _, lo, hi = FIELDS[key]
        try:
            number = int(raw.replace("_", ""))
        except ValueError:
            raise InputError(f"{key}={raw[:30]!r} in the GPT spec is not a whole number", field="network",
                             fix=FIX) from None
        if not lo <= number <= hi:
            raise InputError(f"{key}={number} in the GPT spec is outside {lo}..{hi:,}", field="network", fix=FIX)
        values[key] = number
    if batch_size is not None:
        values["batch"] = int(batch_size)
    missing = [k for k, (default, _, _) in FIELDS.items() if default is None and k not in values]
    if missing:
        raise InputError(f"the GPT spec lacks {', '.join(missing)}", field="network", fix=FIX)
    config = GPTConfig(**values)
    if config.hidden % config.heads:
        raise InputError(f"hidden={config.hidden} is not a multiple of heads={config.heads}", field="network",
                         fix="Give a number of heads that divides the hidden size")
    return config


def gpt_network(config: GPTConfig) -> Graph:
    """The graph of one training step's ops (see the module docstring)."""
    B, S, H, A, V = config.batch, config.seq, config.hidden, config.heads, config.vocab
    rows = B * S
    b = NetBuilder(config.name, B, elem_bytes=PRECISIONS[config.precision], precision=config.precision)
    tokens = b.input("tokens", (B, S))
    x = _embedding(b, tokens, config)
    for layer in range(config.layers):
        x = _layer(b, f"l{layer}.", x, B, S, H, A)
    x = _norm(b, "ln_f", x, rows, H)
    # tied: a copy of the token embedding's weights (no bias); untied: its own H·V + V
    logits = b._add("logits", "linear", (x,), fwd=2.0 * H * V * rows, bwd=4.0 * H * V * rows, out_elems=rows * V,
                    params=H * V + (0 if config.tied else V), shape=(B, S, V))
    elems = rows * V
    b._add("loss", "loss", (logits,), fwd=elems, bwd=elems, out_elems=rows, shape=(B, S))
    return b.graph()


def _embedding(b: NetBuilder, tokens: str, c: GPTConfig) -> str:
    """Token and position embeddings summed."""
    rows, elems = c.batch * c.seq, c.batch * c.seq * c.hidden
    eb = b.elem_bytes
    return b._add("embed", "embedding", (tokens,), fwd=elems, bwd=2 * elems, out_elems=elems,
                  params=(c.vocab + c.seq) * c.hidden, read_bytes=rows * eb + elems * eb,
                  shape=(c.batch, c.seq, c.hidden))


def _norm(b: NetBuilder, name: str, x: str, rows: int, H: int) -> str:
    """Layer norm: per token, so it splits by batch like the rest (its shape starts with the batch)."""
    elems = rows * H
    return b._add(name, "norm", (x,), fwd=elems, bwd=2 * elems, out_elems=elems, params=2 * H,
                  shape=(b.batch, rows // b.batch, H))


def _layer(b: NetBuilder, p: str, x: str, B: int, S: int, H: int, A: int) -> str:
    rows = B * S
    h = _norm(b, p + "ln1", x, rows, H)
    qkv = b.linear(p + "qkv", (h,), H, 3 * H, rows, (B, S, 3 * H))
    score_elems = B * A * S * S
    attn_flops = 2.0 * B * S * S * H  # per head 2·S·S·(H/A), A heads
    scores = b._add(p + "scores", "matmul", (qkv,), fwd=attn_flops, bwd=2 * attn_flops, out_elems=score_elems,
                    shape=(B, A, S, S))
    probs = b.elementwise(p + "softmax", (scores,), score_elems, (B, A, S, S), kind="softmax")
    context = b._add(p + "context", "matmul", (probs, qkv), fwd=attn_flops, bwd=2 * attn_flops,
                     out_elems=rows * H, shape=(B, S, H))
    proj = b.linear(p + "proj", (context,), H, H, rows, (B, S, H))
    x = b.elementwise(p + "add1", (proj, x), rows * H, (B, S, H), kind="add")
    h = _norm(b, p + "ln2", x, rows, H)
    up = b.linear(p + "fc1", (h,), H, 4 * H, rows, (B, S, 4 * H))
    act = b.elementwise(p + "gelu", (up,), rows * 4 * H, (B, S, 4 * H), kind="activation")
    down = b.linear(p + "fc2", (act,), 4 * H, H, rows, (B, S, H))
    return b.elementwise(p + "add2", (down, x), rows * H, (B, S, H), kind="add")


def load(spec: str, batch_size: int | None = None) -> Graph:
    return gpt_network(parse(spec, batch_size))

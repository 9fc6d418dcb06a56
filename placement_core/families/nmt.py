"""``nmt``: a 2-layer encoder-decoder LSTM with attention, unrolled L steps (Placeto App. A.3, after Wu et al.).

Per step: an LSTM cell per layer (one matmul of [input; h] by the layer's shared
weights to the four gates, then the gate arithmetic), Luong attention over the
encoder's top-layer outputs with input feeding, the output projection to the
vocabulary and the softmax cross-entropy. L and the batch are sampled per graph;
the vocabulary's logits make memory grow with both.
"""

from __future__ import annotations

import random

from .layers import NetBuilder

HIDDEN = 1024
EMBED = 1024
VOCAB = 32_000
STEPS = (16, 32)      # L, sampled uniformly (Placeto: 16-32)
BATCH = (2048, 4096)  # sampled uniformly, in multiples of 8 (Placeto: 64-128 on 11 GB GPUs; scaled for 32 GB)


def build(rng: random.Random, name: str):
    steps = rng.randint(*STEPS)
    batch = 8 * rng.randint(BATCH[0] // 8, BATCH[1] // 8)
    return nmt_graph(name, steps, batch), {"steps": steps, "batch_size": batch}


def nmt_graph(name: str, steps: int, batch: int, hidden: int = HIDDEN, embed: int = EMBED, vocab: int = VOCAB):
    b = NetBuilder(name, batch)
    n, h, L = batch, hidden, steps
    src = b.input("src_tokens", (n, L))
    tgt = b.input("tgt_tokens", (n, L))
    src_emb = b.embedding("encoder/embedding", src, vocab, embed, n * L, (n, L, embed))
    tgt_emb = b.embedding("decoder/embedding", tgt, vocab, embed, n * L, (n, L, embed))
    step_emb = n * embed * 4.0  # one step's slice of the embedded sequence
    state = n * 2 * h * 4.0     # (h, c) handed to the next step
    out = n * h * 4.0           # h handed to the layer above / attention

    def cell(prefix: str, t: int, x: str, x_dim: int, x_bytes: float, prev: str | None, weights: str) -> str:
        edges = {x: x_bytes}
        inputs = [x]
        if prev is not None:
            inputs.append(prev)
            edges[prev] = state
        # kept for the backward pass: gates (4h), c, tanh(c) and h (the matmul output is the gates)
        return b.linear(f"{prefix}/step{t:02d}", inputs, x_dim + h, 4 * h, n, (n, h), weights=weights,
                        edges=edges, kind="matmul", extra_elems=3 * n * h)

    enc_w = [b.weights("encoder/lstm0/weights", (embed + h) * 4 * h + 4 * h),
             b.weights("encoder/lstm1/weights", 2 * h * 4 * h + 4 * h)]
    enc_top = []
    prev = [None, None]
    for t in range(L):
        c0 = cell("encoder/lstm0", t, src_emb, embed, step_emb, prev[0], enc_w[0])
        c1 = cell("encoder/lstm1", t, c0, h, out, prev[1], enc_w[1])
        prev = [c0, c1]
        enc_top.append(c1)
    memory = b.elementwise("attention/memory", enc_top, n * L * h, (n, L, h), kind="concat",
                           edges={c: out for c in enc_top})
    keys = b.linear("attention/keys", [memory], h, h, n * L, (n, L, h), kind="matmul")
    dec_w = [b.weights("decoder/lstm0/weights", (embed + 2 * h) * 4 * h + 4 * h),
             b.weights("decoder/lstm1/weights", 2 * h * 4 * h + 4 * h)]
    attn_w = b.weights("attention/combine/weights", 2 * h * h)
    proj_w = b.weights("decoder/projection/weights", h * vocab + vocab)
    dprev = list(prev)  # the encoder's final states start the decoder
    feed = None
    losses = []
    for t in range(L):
        x_inputs = [tgt_emb] + ([feed] if feed is not None else [])
        edges = {tgt_emb: step_emb, dprev[0]: state}
        if feed is not None:
            edges[feed] = out
        d0 = b.linear(f"decoder/lstm0/step{t:02d}", x_inputs + [dprev[0]], embed + 2 * h, 4 * h, n, (n, h),
                      weights=dec_w[0], edges=edges, kind="matmul", extra_elems=3 * n * h)
        d1 = cell("decoder/lstm1", t, d0, h, out, dprev[1], dec_w[1])
        dprev = [d0, d1]
        # scores against every source position, softmax, context, then tanh(W [context; h])
        attn_flops = 2.0 * n * L * h * 2 + 2.0 * n * 2 * h * h
        a = b._add(f"attention/step{t:02d}", "attention", (d1, keys, memory, attn_w), fwd=attn_flops,
                   bwd=2 * attn_flops, out_elems=n * h + n * L + n * h,
                   edges={d1: out, keys: n * L * h * 4.0, memory: n * L * h * 4.0, attn_w: b.out_bytes(attn_w)},
                   shape=(n, h))
        feed = a
        logits = b.linear(f"decoder/projection/step{t:02d}", [a], h, vocab, n, (n, vocab), weights=proj_w,
                          edges={a: out}, kind="matmul")
        losses.append(b._add(f"decoder/loss/step{t:02d}", "softmax", (logits, tgt), fwd=3.0 * n * vocab,
                             bwd=2.0 * n * vocab, out_elems=n * vocab, edges={tgt: n * 4.0}, shape=(n,)))
    b._add("loss", "elementwise", tuple(losses), fwd=n * L, bwd=n * L, out_elems=1,
           edges={x: n * 4.0 for x in losses}, shape=())
    return b.graph()

"""``ptb``: a language model whose recurrent cell has an ENAS-like random structure (Pham et al. 2018).

A cell is sampled once per graph: node 0 reads the step's input and the previous
hidden state; node j > 0 reads one earlier node chosen at random and applies an
activation chosen from tanh, ReLU, sigmoid and identity, behind ENAS' highway
gate (c = σ(W_c h_i), h_j = c·f(W h_i) + (1 − c)·h_i). The cell's output is the
mean of the nodes no other node reads. The cell is unrolled L steps (sampled, as
Placeto App. A.3), each followed by the projection to the vocabulary and the
softmax cross-entropy.
"""

from __future__ import annotations

import random

from .layers import NetBuilder

HIDDEN = 1536
VOCAB = 10_000
NODES = 8
STEPS = (25, 40)        # Placeto: 25-40
BATCH = (2560, 4608)    # Placeto: 1536-3072; scaled so that memory straddles one 32 GB GPU
ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")


def build(rng: random.Random, name: str):
    steps = rng.randint(*STEPS)
    batch = 64 * rng.randint(BATCH[0] // 64, BATCH[1] // 64)
    cell = sample_cell(rng)
    meta = {"steps": steps, "batch_size": batch, "cell": [[i, f] for i, f in cell]}
    return ptb_graph(name, steps, batch, cell), meta


def sample_cell(rng: random.Random, nodes: int = NODES) -> list[tuple[int, str]]:
    """(input node, activation) per node; node 0's input (-1) is the step input and previous state."""
    return [(-1 if j == 0 else rng.randrange(j), rng.choice(ACTIVATIONS)) for j in range(nodes)]


def ptb_graph(name: str, steps: int, batch: int, cell, hidden: int = HIDDEN, vocab: int = VOCAB):
    b = NetBuilder(name, batch)
    n, h = batch, hidden
    tokens = b.input("tokens", (n, steps))
    emb = b.embedding("embedding", tokens, vocab, h, n * steps, (n, steps, h))
    state = n * h * 4.0
    weights = [b.weights(f"cell/node{j}/weights", (2 * h if i < 0 else h) * 2 * h) for j, (i, _) in enumerate(cell)]
    proj_w = b.weights("projection/weights", h * vocab + vocab)
    read = {i for i, _ in cell if i >= 0}
    loose = [j for j in range(len(cell)) if j not in read]
    prev = None
    losses = []
    for t in range(steps):
        nodes: list[str] = []
        for j, (i, act) in enumerate(cell):
            if i < 0:
                inputs = [emb] + ([prev] if prev is not None else [])
                edges = {emb: state, **({prev: state} if prev is not None else {})}
                n_in = 2 * h
            else:
                inputs, edges, n_in = [nodes[i]], {nodes[i]: state}, h
            # W [c; candidate] then the gate: keeps the pre-activations (2h), c·f(.) and the output
            nodes.append(b.linear(f"cell/step{t:02d}/node{j}_{act}", inputs, n_in, 2 * h, n, (n, h),
                                  weights=weights[j], edges=edges, kind="matmul", extra_elems=2 * n * h))
        out = b.elementwise(f"cell/step{t:02d}/output", [nodes[j] for j in loose], n * h, (n, h),
                            edges={nodes[j]: state for j in loose})
        prev = out
        logits = b.linear(f"projection/step{t:02d}", [out], h, vocab, n, (n, vocab), weights=proj_w,
                          edges={out: state}, kind="matmul")
        losses.append(b._add(f"loss/step{t:02d}", "softmax", (logits, tokens), fwd=3.0 * n * vocab,
                             bwd=2.0 * n * vocab, out_elems=n * vocab, edges={tokens: n * 4.0}, shape=(n,)))
    b._add("loss", "elementwise", tuple(losses), fwd=n * steps, bwd=n * steps, out_elems=1,
           edges={x: n * 4.0 for x in losses}, shape=())
    return b.graph()

"""Placeto's policy network (Placeto §2.2, Fig. 3; App. A.7): graph embedding, pooling, a device scorer.

1. Per-node attributes (``features.NODE_FEATURES``) are embedded to ``hidden``
   units: h⁰ = ReLU(W x + b).
2. Local neighbourhood summarisation, two directions with their own weights,
   ``rounds`` times: top-down h ← h⁰ + g↓(Σ_{u ∈ parents} f↓(h_u)), bottom-up the
   same over children (f, g: single-layer ReLU networks, shared by every node).
   h⁰ is added back so a node keeps its own attributes (the paper's update
   x ← g(Σ f(x_u)) alone would give a source node nothing); with ``rounds`` at
   least the graph's depth this equals one sweep in topological order.
3. Pooling summaries: for the current node v, over the nodes that reach v, that
   v reaches, and the parallel rest: h_i((1/n) Σ_{u ∈ S_i(v)} l_i(e_u)); the 1/n
   keeps the scale of a sum across graph sizes.

The node's own embedding and the three summaries are concatenated, and a two-layer
ReLU network with softmax output scores each device from them and that device's
context (``features.DEVICE_FEATURES``). Scoring devices with one shared network
(instead of one output unit per device) makes the policy independent of the
number and order of devices. A learned bonus on the node's current device
(initially 2) makes an untrained policy explore around the placement it
improves rather than scramble it.
"""

from __future__ import annotations

import torch
from torch import nn

from ...policies.features import DEVICE_FEATURES, NODE_FEATURES, STARTS

DEFAULT_CONFIG = {"hidden": 32, "rounds": 4, "head": 64}


class PlacetoNet(nn.Module):
    def __init__(self, hidden: int = 32, rounds: int = 4, head: int = 64, start: str = "fastest"):
        super().__init__()
        if start not in STARTS:
            raise ValueError(f"unknown start placement {start!r}")
        # ``start``: the placement its episodes begin from, part of the policy (it was trained to improve it)
        self.config = {"hidden": int(hidden), "rounds": int(rounds), "head": int(head), "start": start}
        h = int(hidden)
        self.rounds = int(rounds)
        self.embed = nn.Linear(len(NODE_FEATURES), h)
        self.f_down, self.g_down = nn.Linear(h, h), nn.Linear(h, h)
        self.f_up, self.g_up = nn.Linear(h, h), nn.Linear(h, h)
        self.pool_l = nn.ModuleList([nn.Linear(2 * h, h) for _ in range(3)])
        self.pool_h = nn.ModuleList([nn.Linear(h, h) for _ in range(3)])
        self.head = nn.Sequential(nn.Linear(5 * h + len(DEVICE_FEATURES), int(head)), nn.ReLU(),
                                  nn.Linear(int(head), int(head)), nn.ReLU(), nn.Linear(int(head), 1))
        # a learned bonus on the node's current device: an untrained policy mostly keeps the start placement and
        # explores around it (e^2 ≈ 7.4 times as likely as any other device), instead of scrambling it
        self.keep = nn.Parameter(torch.tensor(2.0))

    def embed_nodes(self, x: torch.Tensor, down_adj: torch.Tensor, up_adj: torch.Tensor) -> torch.Tensor:
        """[B, n, F] features -> [n, B, 2·hidden] embeddings (node-major: the sums over neighbours are
        sparse products of the [n, n] adjacency, [v, u] = 1 when u is a parent of v, and its transpose)."""
        h0 = torch.relu(self.embed(x.transpose(0, 1)))  # [n, B, h]
        down, up = h0, h0
        for _ in range(self.rounds):
            down = h0 + torch.relu(self.g_down(_neighbour_sum(down_adj, torch.relu(self.f_down(down)))))
            up = h0 + torch.relu(self.g_up(_neighbour_sum(up_adj, torch.relu(self.f_up(up)))))
        return torch.cat([down, up], dim=-1)

    def summaries(self, e: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """[n, B, 2h] embeddings, [B, 3, n] group masks (parents, children, parallel) -> [B, 3h]."""
        n = e.shape[0]
        out = [torch.relu(self.pool_h[i](torch.einsum("bn,nbh->bh", groups[:, i, :], torch.relu(self.pool_l[i](e)))
                                         / n)) for i in range(3)]
        return torch.cat(out, dim=-1)

    def forward(self, x: torch.Tensor, adjacency: tuple[torch.Tensor, torch.Tensor], groups: torch.Tensor,
                current: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Device logits [B, d] for B states: features [B, n, F], (top-down, bottom-up) sparse adjacency,
        groups [B, 3, n], current [B] node indices, context [B, d, Fd]."""
        e = self.embed_nodes(x, *adjacency)
        own = e[current, torch.arange(e.shape[1])]
        z = torch.cat([own, self.summaries(e, groups)], dim=-1)  # [B, 5h]
        d = context.shape[1]
        scores = self.head(torch.cat([z[:, None, :].expand(-1, d, -1), context], dim=-1)).squeeze(-1)
        return scores + self.keep * context[:, :, DEVICE_FEATURES.index("is_current")]



def _neighbour_sum(adjacency: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """out[v] = Σ_{u: adjacency[v, u] = 1} h[u] for node-major h [n, B, h]."""
    n, b, k = h.shape
    return torch.sparse.mm(adjacency, h.reshape(n, b * k)).reshape(n, b, k)


def sparse_adjacency(parents, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(top-down, bottom-up) adjacency as sparse [n, n] matrices: [v, u] = 1 when u is a parent of v, and
    its transpose."""
    rows = [v for v, ps in enumerate(parents) for _ in ps]
    cols = [int(u) for ps in parents for u in ps]
    idx = torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
    ones = torch.ones(idx.shape[1])
    down = torch.sparse_coo_tensor(idx, ones, (n, n), check_invariants=True).coalesce()
    up = torch.sparse_coo_tensor(idx.flip(0), ones, (n, n), check_invariants=True).coalesce()
    return down, up

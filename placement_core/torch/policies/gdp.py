"""GDP-style one-shot placement (Zhou et al. 2019, as reviewed in the lecture slides): GraphSAGE + attention.

- Node features (static: GDP places the whole graph at once, so nothing about a
  current placement): each op's time on each device and its resident memory as a
  share of each device, in the units of :mod:`...learned.features`, its output's
  transfer time, and its depth in the graph as a fraction of the longest path.
- Graph embedding: ``layers`` GraphSAGE layers with max-pooling aggregation over
  parents and children, h_N(v) = max_u ReLU(W h_u + b), h_v ← ReLU(W' [h_v; h_N(v)]).
- Feature conditioning (GDP's parameter superposition): the embeddings are
  multiplied by σ(c(x̄)), x̄ the mean of the graph's input features, so one
  network can treat different families differently.
- Placement network: a Transformer encoder over all nodes without positional
  encoding (the embedding carries the structure), then one softmax over devices
  per node. GDP's segment-level recurrence is for graphs of 50,000 nodes; the
  families here have 128-160, so every node attends to every other directly.

Training samples ``rollouts`` whole placements of a graph, rewards each with
−objective / (best single device), uses the mean of the batch as the baseline,
and takes ``epochs`` steps of PPO's clipped objective (ε = 0.2) on them. The
number of devices is fixed per policy: the output layer has one unit per device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ...policies.features import GraphInfo
from .updates import apply_gradient

CLIP = 0.2
EPOCHS = 4


def static_features(info: GraphInfo) -> np.ndarray:
    """[n, 2d + 2]: log time on each device, memory share of each device, output transfer, depth."""
    n, d = info.n, info.d
    depth = np.zeros(n)
    for v, ps in enumerate(info.parents):
        if len(ps):
            depth[v] = depth[ps].max() + 1
    return np.concatenate([
        np.log1p(info.time / info.tau),
        info.memory[:, None] / info.capacity[None, :] * (n / d),
        info.static[:, 1:2],
        (depth / max(depth.max(), 1.0))[:, None],
    ], axis=1).astype(np.float32)


class GdpNet(nn.Module):
    def __init__(self, devices: int, hidden: int = 32, layers: int = 3, heads: int = 2, attention_layers: int = 2):
        super().__init__()
        self.config = {"devices": int(devices), "hidden": int(hidden), "layers": int(layers), "heads": int(heads),
                       "attention_layers": int(attention_layers)}
        h, d = int(hidden), int(devices)
        self.embed = nn.Linear(2 * d + 2, h)
        self.neigh = nn.ModuleList([nn.Linear(h, h) for _ in range(int(layers))])
        self.combine = nn.ModuleList([nn.Linear(2 * h, h) for _ in range(int(layers))])
        self.condition = nn.Linear(2 * d + 2, h)
        layer = nn.TransformerEncoderLayer(h, int(heads), dim_feedforward=2 * h, dropout=0.0, batch_first=True)
        self.attention = nn.TransformerEncoder(layer, int(attention_layers), enable_nested_tensor=False)
        self.out = nn.Linear(h, d)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        """[n, F] static features, [2, E] edges (both directions) -> [n, devices] logits."""
        h = torch.relu(self.embed(x))
        src, dst = edges[0], edges[1]
        for neigh, combine in zip(self.neigh, self.combine):
            msg = torch.relu(neigh(h))[src]
            pooled = torch.zeros_like(h).scatter_reduce(0, dst[:, None].expand(-1, h.shape[1]), msg, "amax",
                                                        include_self=True)
            h = torch.relu(combine(torch.cat([h, pooled], dim=-1)))
        h = h * torch.sigmoid(self.condition(x.mean(dim=0, keepdim=True)))
        return self.out(self.attention(h[None])[0])


class GdpGraph:
    def __init__(self, info: GraphInfo):
        self.info = info
        self.x = torch.from_numpy(static_features(info))
        pairs = [(u, v) for v, ps in enumerate(info.parents) for u in ps]
        both = pairs + [(v, u) for u, v in pairs]
        self.edges = torch.tensor(both, dtype=torch.long).reshape(-1, 2).T.contiguous()


def sample(logits: torch.Tensor, k: int, rng: np.random.Generator) -> np.ndarray:
    """k placements from the per-node softmax (numpy's generator, so a seed fixes them)."""
    p = torch.softmax(logits.double(), dim=1).numpy()
    cum = np.cumsum(p, axis=1)
    cum[:, -1] = 1.0
    return (rng.random((k, p.shape[0], 1)) > cum[None]).sum(axis=2).astype(np.int32)


def log_likelihood(logits: torch.Tensor, placements: np.ndarray) -> torch.Tensor:
    """[K] log probability of each whole placement (a sum over nodes)."""
    lp = torch.log_softmax(logits, dim=1)
    idx = torch.from_numpy(placements.astype(np.int64))
    return lp.gather(1, idx.T).sum(dim=0)


def ppo_clip_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor,
                  beta: float, clip: float = CLIP) -> torch.Tensor:
    ratio = torch.exp(new_logp - old_logp)
    surrogate = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    return -surrogate.mean() - beta * entropy


class GdpLearner:
    """GDP's side of the training loop: PPO on a batch of whole placements of one graph."""

    def __init__(self, infos: list[GraphInfo], settings, *, orders=None, net: GdpNet | None = None):
        self.settings = settings
        d = infos[0].d
        self.net = net or GdpNet(d, hidden=settings.hidden, layers=settings.rounds)
        self.graphs = [GdpGraph(info) for info in infos]

    def step(self, k: int, rng: np.random.Generator, opt, beta: float):
        g = self.graphs[k]
        info = g.info
        with torch.no_grad():
            logits = self.net(g.x, g.edges)
            placements = sample(logits, self.settings.rollouts, rng)
            old = log_likelihood(logits, placements)
        finals = info.problem.evaluate_many(placements)
        rewards = -finals / info.reference
        adv = torch.from_numpy(((rewards - rewards.mean()) / (rewards.std() + 1e-8)).astype(np.float32))
        for _ in range(EPOCHS):
            logits = self.net(g.x, g.edges)
            lp = torch.log_softmax(logits, dim=1)
            entropy = -(lp.exp() * lp).sum(dim=1).mean()
            loss = ppo_clip_loss(log_likelihood(logits, placements), old, adv, entropy, beta)
            apply_gradient(self.net, opt, loss)
        return finals, placements, len(placements)

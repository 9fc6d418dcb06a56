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
- Devices are scored, as Placeto's policy scores them: a two-layer network
  takes a node's embedding and one device's features
  (``features.GDP_DEVICE_FEATURES``: the node's time, slowdown and memory share
  on that device, the device's memory share, speed and position) and gives that
  device's logit, so one policy places on device graphs with any number of
  devices. The node features (``features.GDP_NODE_FEATURES``) do not depend on
  the device count either. A policy file whose config names ``devices`` holds
  the first version, one output unit per device (per-device input features too):
  it still loads and places, on that many devices only.

Training samples ``rollouts`` whole placements of a graph, rewards each with
−objective / (best single device), uses the mean of the batch as the baseline,
and takes ``epochs`` steps of PPO's clipped objective (ε = 0.2) on them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ...policies.features import GDP_DEVICE_FEATURES, GDP_NODE_FEATURES, GraphInfo, gdp_device_features, \
    gdp_node_features
from .updates import apply_gradient

CLIP = 0.2
EPOCHS = 4


def static_features(info: GraphInfo) -> np.ndarray:
    """[n, 2d + 2] (the first version's, one output per device): log time on each device, memory share of each
    device, output transfer, depth."""
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
    """``devices`` given: the first version (one output unit per device); None: devices scored by ``head``."""

    def __init__(self, devices: int | None = None, hidden: int = 32, layers: int = 3, heads: int = 2,
                 attention_layers: int = 2, head: int = 64):
        super().__init__()
        self.legacy = devices is not None
        self.config = ({"devices": int(devices)} if self.legacy else {}) | {
            "hidden": int(hidden), "layers": int(layers), "heads": int(heads), "attention_layers": int(attention_layers)}
        if not self.legacy:
            self.config["head"] = int(head)
        h = int(hidden)
        features = 2 * int(devices) + 2 if self.legacy else len(GDP_NODE_FEATURES)
        self.embed = nn.Linear(features, h)
        self.neigh = nn.ModuleList([nn.Linear(h, h) for _ in range(int(layers))])
        self.combine = nn.ModuleList([nn.Linear(2 * h, h) for _ in range(int(layers))])
        self.condition = nn.Linear(features, h)
        layer = nn.TransformerEncoderLayer(h, int(heads), dim_feedforward=2 * h, dropout=0.0, batch_first=True)
        self.attention = nn.TransformerEncoder(layer, int(attention_layers), enable_nested_tensor=False)
        if self.legacy:
            self.out = nn.Linear(h, int(devices))
        else:
            self.head = nn.Sequential(nn.Linear(h + len(GDP_DEVICE_FEATURES), int(head)), nn.ReLU(),
                                      nn.Linear(int(head), 1))

    def logits(self, g: "GdpGraph") -> torch.Tensor:
        """[n, devices] logits of a graph's nodes."""
        return self(g.x, g.edges) if self.legacy else self(g.node_x, g.edges, g.device_x)

    def forward(self, x: torch.Tensor, edges: torch.Tensor, devices: torch.Tensor | None = None) -> torch.Tensor:
        """[n, F] static features, [2, E] edges (both directions), [n, d, Fd] device features (not for the first
        version) -> [n, d] logits."""
        h = torch.relu(self.embed(x))
        src, dst = edges[0], edges[1]
        for neigh, combine in zip(self.neigh, self.combine):
            msg = torch.relu(neigh(h))[src]
            pooled = torch.zeros_like(h).scatter_reduce(0, dst[:, None].expand(-1, h.shape[1]), msg, "amax",
                                                        include_self=True)
            h = torch.relu(combine(torch.cat([h, pooled], dim=-1)))
        h = h * torch.sigmoid(self.condition(x.mean(dim=0, keepdim=True)))
        h = self.attention(h[None])[0]
        if self.legacy:
            return self.out(h)
        d = devices.shape[1]
        return self.head(torch.cat([h[:, None, :].expand(-1, d, -1), devices], dim=-1)).squeeze(-1)


class GdpGraph:
    def __init__(self, info: GraphInfo):
        self.info = info
        self.x = torch.from_numpy(static_features(info))  # the first version's
        self.node_x = torch.from_numpy(gdp_node_features(info))
        self.device_x = torch.from_numpy(gdp_device_features(info))
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
        self.net = net or GdpNet(hidden=settings.hidden, layers=settings.rounds)
        self.graphs = [GdpGraph(info) for info in infos]

    def step(self, k: int, rng: np.random.Generator, opt, beta: float):
        g = self.graphs[k]
        info = g.info
        with torch.no_grad():
            logits = self.net.logits(g)
            placements = sample(logits, self.settings.rollouts, rng)
            old = log_likelihood(logits, placements)
        finals = info.problem.evaluate_many(placements)
        rewards = -finals / info.reference
        adv = torch.from_numpy(((rewards - rewards.mean()) / (rewards.std() + 1e-8)).astype(np.float32))
        for _ in range(EPOCHS):
            logits = self.net.logits(g)
            lp = torch.log_softmax(logits, dim=1)
            entropy = -(lp.exp() * lp).sum(dim=1).mean()
            loss = ppo_clip_loss(log_likelihood(logits, placements), old, adv, entropy, beta)
            apply_gradient(self.net, opt, loss)
        return finals, placements, len(placements)

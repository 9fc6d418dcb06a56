"""Placeto's MDP rollouts and REINFORCE (Placeto §2.1, §2.3, App. A.1, A.4, A.7) on the simulator.

An episode visits every node once in a traversal order (topological by default)
and lets the policy move the current node to a device; it starts from every node
on the fastest device. B rollouts of one graph run side by side (the policy sees
B states per step). The rollout itself needs no rewards, so it runs without
gradients; its placements are then scored in one ``evaluate_many`` call (after
every step for intermediate rewards, or the final one only), and the log
probabilities of the actions taken are recomputed with gradients over all steps
at once, in chunks (a few large matrix products instead of thousands of small
ones: the same numbers, several times faster).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...policies.features import DEVICE_FEATURES, NODE_FEATURES, GraphInfo, device_context, node_features
from ...policies.reinforce import advantages, step_returns, terminal_returns
from .placeto_net import PlacetoNet, sparse_adjacency
from .updates import apply_gradient

CHUNK = 96  # states per chunk when recomputing log probabilities


class GraphTensors:
    """A graph's static tensors for the network (built once per graph)."""

    def __init__(self, info: GraphInfo):
        self.info = info
        self.adjacency = sparse_adjacency(info.parents, info.n)
        groups = np.stack([info.ancestors, info.descendants, info.parallel], axis=1)  # [v, 3, n]
        self.groups = torch.from_numpy(groups.astype(np.float32))


@dataclass
class Episode:
    """B rollouts of one graph: what the policy saw, what it did, and the placements after every step."""

    order: np.ndarray        # [T] node visited at each step
    features: np.ndarray     # [T, B, n, F]
    context: np.ndarray      # [T, B, d, Fd]
    actions: np.ndarray      # [T, B]
    placements: np.ndarray   # [T + 1, B, n] (0: the start)

    @property
    def final(self) -> np.ndarray:
        return self.placements[-1]


def rollout(net: PlacetoNet, gt: GraphTensors, rollouts: int, rng: np.random.Generator | None, *,
            order=None, start: np.ndarray | None = None, greedy: bool = False, keep: bool = True) -> Episode:
    """Run B episodes side by side; ``greedy`` takes the most likely device (zero-shot placement)."""
    info = gt.info
    order = np.arange(info.n) if order is None else np.asarray(order, dtype=np.int64)
    placement = info.start_placement(rollouts) if start is None else np.array(start, dtype=np.int32).reshape(
        rollouts, info.n)
    visited = np.zeros((rollouts, info.n), dtype=np.float32)
    t_steps = len(order)
    feats = np.empty((t_steps, rollouts, info.n, len(NODE_FEATURES)), dtype=np.float32) if keep else None
    ctxs = np.empty((t_steps, rollouts, info.d, len(DEVICE_FEATURES)), dtype=np.float32) if keep else None
    actions = np.empty((t_steps, rollouts), dtype=np.int64)
    placements = np.empty((t_steps + 1, rollouts, info.n), dtype=np.int32)
    placements[0] = placement
    with torch.no_grad():
        for t, v in enumerate(order):
            x = node_features(info, placement, visited, int(v))
            ctx = device_context(info, placement, int(v), visited)
            logits = net(torch.from_numpy(x), gt.adjacency, gt.groups[int(v)].expand(rollouts, -1, -1),
                         torch.full((rollouts,), int(v), dtype=torch.long), torch.from_numpy(ctx))
            if greedy:
                a = logits.argmax(dim=1).numpy()
            else:
                p = torch.softmax(logits.double(), dim=1).numpy()
                cum = np.cumsum(p, axis=1)
                cum[:, -1] = 1.0
                a = (rng.random((rollouts, 1)) > cum).sum(axis=1)
            if keep:
                feats[t], ctxs[t] = x, ctx
            actions[t] = a
            placement = placement.copy()
            placement[:, v] = a
            visited[:, v] = 1.0
            placements[t + 1] = placement
    return Episode(order, feats, ctxs, actions, placements)


def log_probs(net: PlacetoNet, gt: GraphTensors, ep: Episode, chunk: int = CHUNK):
    """Log probability and entropy of every action taken, [T, B] each, with gradients."""
    t_steps, b = ep.actions.shape
    feats = torch.from_numpy(ep.features.reshape(t_steps * b, *ep.features.shape[2:]))
    ctx = torch.from_numpy(ep.context.reshape(t_steps * b, *ep.context.shape[2:]))
    current = torch.from_numpy(np.repeat(ep.order, b))
    actions = torch.from_numpy(ep.actions.reshape(-1))
    logps, ents = [], []
    for s in range(0, t_steps * b, chunk):
        sl = slice(s, s + chunk)
        cur = current[sl]
        logits = net(feats[sl], gt.adjacency, gt.groups[cur], cur, ctx[sl])
        lp = torch.log_softmax(logits, dim=1)
        logps.append(lp.gather(1, actions[sl, None]).squeeze(1))
        ents.append(-(lp.exp() * lp).sum(dim=1))
    return torch.cat(logps).reshape(t_steps, b), torch.cat(ents).reshape(t_steps, b)


def episode_returns(ep: Episode, problem, reference: float, rewards: str, start_objective: float | None = None,
                    discount: float = 1.0):
    """(returns [B, T], final objectives [B], evaluations used) for intermediate or terminal rewards."""
    t_steps, b = ep.actions.shape
    if rewards == "step":
        later = problem.evaluate_many(ep.placements[1:].reshape(t_steps * b, -1)).reshape(t_steps, b).T
        first = np.full((b, 1), problem.evaluate(ep.placements[0, 0]) if start_objective is None else start_objective)
        objectives = np.concatenate([first, later], axis=1)
        return step_returns(objectives, reference, discount), objectives[:, -1], t_steps * b
    final = problem.evaluate_many(ep.final)
    return terminal_returns(final, t_steps, reference), final, b


def reinforce_loss(logp: torch.Tensor, entropy: torch.Tensor, returns: np.ndarray, beta: float,
                   normalize: bool = False) -> torch.Tensor:
    """Placeto's Eq. (1) as a loss: −Σ_t log π(a_t|s_t)(G_t − b_t), averaged over rollouts, minus β·entropy."""
    adv = torch.from_numpy(advantages(returns, normalize).T.astype(np.float32))  # [T, B]
    b = logp.shape[1]
    return -(logp * adv).sum() / b - beta * entropy.sum() / b


def subsampled_loss(net: PlacetoNet, gt: GraphTensors, ep: Episode, returns: np.ndarray, beta: float,
                    fraction: float, rng: np.random.Generator, normalize: bool = False) -> torch.Tensor:
    """The REINFORCE loss over a random ``fraction`` of the episode's steps, scaled back to the whole episode
    (an unbiased estimate of the full sum, so the step size does not depend on the fraction)."""
    steps = np.arange(len(ep.order))
    if fraction < 1:
        keep = max(1, int(round(fraction * len(steps))))
        steps = np.sort(rng.choice(len(steps), keep, replace=False))
    part = Episode(ep.order[steps], ep.features[steps], ep.context[steps], ep.actions[steps], ep.placements)
    logp, ent = log_probs(net, gt, part)
    adv_scale = 1.0
    if normalize:  # normalise over the whole episode, before subsampling
        from ...policies.reinforce import advantages
        adv_scale = float(advantages(returns).std()) + 1e-8
    return reinforce_loss(logp, ent, returns[:, steps] / adv_scale, beta) * (len(ep.order) / len(steps))


class PlacetoLearner:
    """Placeto's side of the training loop: one REINFORCE step on one graph."""

    def __init__(self, infos: list[GraphInfo], settings, *, orders=None, net: PlacetoNet | None = None):
        self.settings = settings
        self.net = net or PlacetoNet(**settings.config(), start=settings.start)
        self.graphs = [GraphTensors(info) for info in infos]
        self.orders = orders  # per graph: a list of traversal orders to draw from (None: topological)
        self.start_objective = [info.problem.evaluate(info.start_placement(1)[0]) for info in infos]

    def step(self, k: int, rng: np.random.Generator, opt, beta: float):
        """One REINFORCE update from ``rollouts`` episodes of graph k; (final objectives, placements, evaluations)."""
        gt = self.graphs[k]
        info = gt.info
        order = None
        if self.orders is not None and self.orders[k]:
            choices = self.orders[k]
            order = choices[int(rng.integers(len(choices)))]
        ep = rollout(self.net, gt, self.settings.rollouts, rng, order=order)
        returns, finals, used = episode_returns(ep, info.problem, info.reference, self.settings.rewards,
                                                self.start_objective[k], self.settings.discount)
        loss = subsampled_loss(self.net, gt, ep, returns, beta, self.settings.step_fraction, rng,
                               self.settings.normalize)
        apply_gradient(self.net, opt, loss)
        return finals, ep.final, used

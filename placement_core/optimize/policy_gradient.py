"""Learning per-op softmax distributions: the policy gradient, PPO, and Post (PPO joined with CEM).

Post (NeurIPS 2018, §3) places op m on device j with probability
softmax(u_m)_j, independently per op (Eq. 2-3), all logits 0 at the start. Its
gradients have closed forms, so no autodiff is needed: for a sampled device k,
∂ log p_k / ∂ u_j = 1[j = k] − p_j. Every algorithm here samples ``samples``
placements per update (Post: 12, one per worker) and rewards a placement with
A = (b − T) / b, where T is its objective and b the moving average of the
objectives sampled so far (Post's b − T, divided by b so that one learning
rate fits problems of any time scale).

- ``pg`` (Mirhoseini et al.'s REINFORCE, the baseline both papers beat): one
  gradient-ascent step u ← u + η · (1/K) Σ_k A_k (onehot(d_k) − p) per batch,
  η = 10 (PPO below takes 10 steps of Post's rate 1 per batch).
- ``ppo`` (Spotlight): ``epochs`` steps of gradient ascent on Post's Eq. 11,
  J(u) = (1/K) Σ_k Σ_m r_km(u) A_k − β Σ_m KL(p_m^old ‖ p_m(u)), with the
  ratio r_km = p_m(d_km; u) / p_m(d_km; u_old), whose gradient is
  r_km (onehot(d_km) − p_m(u)) · A_k / K − β (p_m(u) − p_m^old); after each
  update β doubles when the mean KL per op exceeded 1.5 × the target and halves
  below target / 1.5 (Schulman et al.'s adaptive penalty; Post: β = 1, target 0.03).
- ``post`` (Algorithm 1): PPO updates, except that every ``ce_every``
  samples the cross-entropy method's closed-form update (:mod:`.cem`, Eq. 10:
  each op's distribution becomes its device frequencies among the elite samples
  of the last ``ce_every``) replaces the PPO step, mixed with ε times the
  distribution the search started from (ε/|D| from Post's uniform start; ε from
  0.1 to 0 over the budget); the logits continue from the log of those frequencies.

Post's settings (§4): learning rate 1 (PPO and Post), 10 PPO steps, 12 samples per update,
60 per cross-entropy update with 6 elites, β = 1 adapted to a KL target of 0.03.

The search space (:mod:`.search_space`): the distributions are over *units*, Merge-and-Colocate groups of ops
(``groups``, Placeto's 128 by default), on the devices ``devices`` allows (``auto``: the GPUs when they hold the
network, as in Post's experiments), and start concentrated on memory-aware HEFT's placement (``start``): each unit
on its start device with probability 1 − ε, plus ε/|D|, the distribution Post's cross-entropy update gives when
its elites all are that placement (ε = Post's 0.1); the cross-entropy update mixes with that distribution where
Post mixes with its uniform start. (Mixed with the uniform distribution instead, every sample moves about
ε·(|D| − 1)/|D| of the units at random, the six elites of 60 carry several such moves each, and their
frequencies drift away from the start within a few updates: Post then ends at 1.09-1.41 times the single GPU on
ResNet-50 and Inception-V3, worse than PG.) ``groups=0 devices=all start=uniform feasible=false`` is
Post's own space, one uniform softmax per op over every device (what these optimizers searched before, and what
runs stored then resume with). With ``feasible`` (the default) a sample that overflows memory falls back to the
start move by move (:class:`.feasible.MemoryGuard`), so no placement they propose or return overflows when the
start fits.

When ops may be split (``--sharding``), each op's distribution is over its genes (the devices, then the
splits it can take; docs/sharding.md) and starts at the searches' own draw (half the mass on keeping the
op whole, as :class:`.genes.Genes` draws), not uniform; a split an op cannot take has logit ``MASKED``,
so its probability and its gradient are exactly 0 throughout.
"""

from __future__ import annotations

import numpy as np

from .base import Optimizer, Param, register
from .cem import draw_batch, elite_frequencies
from .search_space import POSTS_OWN, draw, setup, space_params

LOG_FLOOR = 1e-12  # log of a probability the cross-entropy update set to 0 (ε reached 0)
MASKED = -1e30  # the logit of a gene its op cannot take: exp underflows to exactly 0 (and JSON keeps it)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def one_hot(placements: np.ndarray, d: int) -> np.ndarray:
    """[K, ops, devices] indicators of the sampled devices."""
    out = np.zeros(placements.shape + (d,))
    np.put_along_axis(out, placements[..., None].astype(np.int64), 1.0, axis=-1)
    return out


def reinforce_gradient(probs: np.ndarray, placements: np.ndarray, advantages: np.ndarray) -> np.ndarray:
    """(1/K) Σ_k A_k ∇_u log p(d_k; u) = (1/K) Σ_k A_k (onehot(d_k) − p), shape [ops, devices]."""
    a = np.asarray(advantages, dtype=float)[:, None, None]
    return (a * (one_hot(placements, probs.shape[1]) - probs[None])).mean(axis=0)


def ppo_gradient(logits: np.ndarray, old_probs: np.ndarray, placements: np.ndarray, advantages: np.ndarray,
                 beta: float) -> np.ndarray:
    """∇_u of Post's Eq. 11 at ``logits``: ratio term minus β times the KL term, shape [ops, devices]."""
    p = softmax(logits)
    k = len(placements)
    rows = np.arange(p.shape[0])[None, :]
    ratio = p[rows, placements] / old_probs[rows, placements]  # [K, ops]
    a = np.asarray(advantages, dtype=float)[:, None]
    weight = (ratio * a)[:, :, None]  # [K, ops, 1]
    surrogate = (weight * (one_hot(placements, p.shape[1]) - p[None])).sum(axis=0) / k
    return surrogate - beta * (p - old_probs)


def kl_per_op(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """KL(old ‖ new) of each op's distribution (terms with old = 0 contribute 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(old > 0, old * (np.log(old) - np.log(np.maximum(new, LOG_FLOOR))), 0.0)
    return terms.sum(axis=1)


class SoftmaxPolicy(Optimizer):
    """Shared by pg, ppo and post: logits per op, batches of samples, the moving-average baseline."""

    PARAMS = {
        "samples": Param(12, "placements sampled per update (Post: 12, one per worker)", int, low=2, high=100_000),
        "lr": Param(1.0, "learning rate of gradient ascent on the logits (Post: 1)", float, low=1e-6, high=1e3),
        "baseline_decay": Param(0.9, "weight of the old value in the moving-average baseline b, per batch",
                                float, low=0, high=0.999),
        **space_params(),
    }
    # runs stored before the search space had these parameters searched Post's own space
    STORED_DEFAULTS = POSTS_OWN

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.search = self.guard = None
        if self.sharded:  # the gene space's own draw: log of its probabilities, MASKED where an op cannot
            self.base = self.space.base_probabilities()
            self.allowed = self.base > 0
            self.logits = np.where(self.allowed, np.log(np.where(self.allowed, self.base, 1.0)), MASKED)
        else:  # the units' start distribution (uniform: every logit 0, Post's u(0) = 0)
            self.search, self.base, self.guard = setup(self)
            self.allowed = None
            logp = np.log(np.maximum(self.base, LOG_FLOOR))
            self.logits = logp - logp.max(axis=1, keepdims=True)
        self.width = self.logits.shape[1]
        self.baseline: float | None = None
        self.used = 0
        self.updates = 0

    @property
    def probs(self) -> np.ndarray:
        return softmax(self.logits)

    def ask(self, limit: int) -> np.ndarray:
        return draw_batch(self, limit) if self.search is None else draw(self, self.probs, limit)

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self.used += len(placements)
        if not len(placements):
            return
        if self.search is not None:  # each unit's device, as an index into the allowed devices
            placements = self.search.contract(placements)
        objectives = np.asarray(objectives, dtype=float)
        self.current = float(objectives.min())
        mean = float(objectives.mean())
        decay = self.params["baseline_decay"]
        self.baseline = mean if self.baseline is None else decay * self.baseline + (1 - decay) * mean
        advantages = (self.baseline - objectives) / self.baseline
        self.update(placements, objectives, advantages)
        self.updates += 1

    def update(self, placements, objectives, advantages) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict:
        p = self.probs
        snap = {"updates": self.updates, "entropy": float(-(p * np.log(np.maximum(p, LOG_FLOOR))).sum(axis=1).mean())}
        if self.search is not None:
            snap["units"] = self.search.units
        return {**snap, **(self.guard.report() if self.guard is not None else {})}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "logits": self.logits.tolist(), "baseline": self.baseline, "used": self.used,
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.logits = np.array(state["logits"], dtype=float).reshape(self.logits.shape)
        self.baseline, self.used, self.updates = state["baseline"], state["used"], state["updates"]


@register
class PolicyGradient(SoftmaxPolicy):
    name = "pg"
    title = "Policy gradient (REINFORCE)"
    # PPO takes ``epochs`` (10) steps of learning rate 1 per batch, REINFORCE one: 10 gives it the same total step
    PARAMS = {**SoftmaxPolicy.PARAMS,
              "lr": Param(10.0, "learning rate of the one gradient-ascent step per batch (10: PPO's 10 steps of "
                                "Post's rate 1)", float, low=1e-6, high=1e3)}

    def update(self, placements, objectives, advantages) -> None:
        self.logits = self.logits + self.params["lr"] * reinforce_gradient(self.probs, placements, advantages)


@register
class ProximalPolicy(SoftmaxPolicy):
    name = "ppo"
    title = "Proximal policy optimization"
    PARAMS = {
        **SoftmaxPolicy.PARAMS,
        "epochs": Param(10, "gradient-ascent steps on the PPO objective per batch (Post: 10)", int, low=1, high=1000),
        "beta": Param(1.0, "initial weight of the KL penalty (Post: 1, then adapted)", float, low=0, high=1e6),
        "kl_target": Param(0.03, "mean KL per op the adaptive penalty aims at (Post: 0.03)", float, low=1e-6, high=10),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.beta = self.params["beta"]

    def update(self, placements, objectives, advantages) -> None:
        self.ppo_step(placements, advantages)

    def ppo_step(self, placements, advantages) -> None:
        old = self.probs
        u = self.logits
        for _ in range(self.params["epochs"]):
            u = u + self.params["lr"] * ppo_gradient(u, old, placements, advantages, self.beta)
        self.logits = u
        kl = float(kl_per_op(old, softmax(u)).mean())
        target = self.params["kl_target"]
        if kl > 1.5 * target:
            self.beta *= 2.0
        elif kl < target / 1.5:
            self.beta /= 2.0

    def snapshot(self) -> dict:
        return {**super().snapshot(), "beta": self.beta}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "beta": self.beta}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.beta = state["beta"]


@register
class Post(ProximalPolicy):
    name = "post"
    title = "Post (cross-entropy + PPO)"
    PARAMS = {
        **ProximalPolicy.PARAMS,
        "ce_every": Param(60, "samples per cross-entropy update, which replaces that batch's PPO step (Post: 60)",
                          int, low=2, high=1_000_000),
        "elite_fraction": Param(0.1, "share of those samples kept as elites (Post: 0.1, 6 of 60)", float,
                                low=0.001, high=1),
        "epsilon": Param(0.1, "initial weight of the start distribution (uniform in Post) mixed in after each "
                              "cross-entropy update (Post: 0.1, decaying linearly to 0)", float, low=0, high=1),
        "steps": Param(20000, "evaluations over which epsilon decays to 0 (the budget, usually)", int, low=1),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.pool_x: list[np.ndarray] = []
        self.pool_f: list[np.ndarray] = []
        self.ce_updates = 0

    def epsilon(self) -> float:
        return self.params["epsilon"] * max(0.0, 1.0 - self.used / self.params["steps"])

    def update(self, placements, objectives, advantages) -> None:
        self.pool_x.append(np.asarray(placements, dtype=np.int32))
        self.pool_f.append(np.asarray(objectives, dtype=float))
        if sum(len(x) for x in self.pool_x) < self.params["ce_every"]:
            self.ppo_step(placements, advantages)
            return
        xs, fs = np.concatenate(self.pool_x), np.concatenate(self.pool_f)
        self.pool_x, self.pool_f = [], []
        freq = elite_frequencies(xs, fs, self.params["elite_fraction"], self.width)
        eps = self.epsilon()
        # mixed with the distribution the search started from: uniform in Post (ε/|D|), the gene space's draw
        # with splits, the start distribution with a start placement
        uniform = not self.sharded and self.search.start is None
        probs = (1 - eps) * freq + (eps / self.width if uniform else eps * self.base)
        self.logits = np.log(np.maximum(probs, LOG_FLOOR))
        if self.allowed is not None:
            self.logits = np.where(self.allowed, self.logits, MASKED)
        self.ce_updates += 1

    def snapshot(self) -> dict:
        return {**super().snapshot(), "ce_updates": self.ce_updates, "epsilon": self.epsilon()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ce_updates": self.ce_updates,
                "pool_x": [x.tolist() for x in self.pool_x], "pool_f": [f.tolist() for f in self.pool_f]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.ce_updates = state["ce_updates"]
        self.pool_x = [np.array(x, dtype=np.int32).reshape(-1, self.logits.shape[0]) for x in state["pool_x"]]
        self.pool_f = [np.array(f, dtype=float) for f in state["pool_f"]]

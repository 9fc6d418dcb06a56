"""``placeto`` and ``gdp`` as optimizers: a trained policy's placement, then fine-tuning within the budget.

The first placement asked for is the policy's greedy one (zero-shot: the most
likely device at every step, no training), so a budget of one evaluation is
exactly the zero-shot placement. Every further batch fine-tunes the policy on
this graph: ``rollouts`` sampled episodes (Placeto) or placements (GDP) and one
update; the last batch the budget allows adds the greedy placement of the
fine-tuned policy. Placeto fine-tunes with the terminal reward: intermediate
rewards cost one evaluation per step, so 2,000 evaluations would buy fewer than
two updates of 8 episodes on a 160-node graph.

Memory is a constraint (:mod:`...optimize.feasible`): no placement they propose or return overflows when the
policy's start placement fits. Placeto's greedy pass masks a move after which the placement would overflow (the
next most likely device is taken); a sampled episode's final placement, and GDP's one-shot placements, fall back
toward the start move by move (Placeto's start is the policy's own; GDP, which has none, falls back toward
memory-aware HEFT's placement). The calls of a shared module with weights go where its first call goes
(``Problem.tie``), as a real run needs.
"""

from __future__ import annotations

import numpy as np
import torch

from ...base.errors import InputError
from ...policies.features import GraphInfo
from ...optimize.base import Optimizer, Param, register
from ...optimize.feasible import MemoryGuard, fits, overflowing
from .policy_io import LoadedPolicy, load_policy
from .updates import apply_gradient, one_thread

_CACHE: dict[str, tuple[float, int, LoadedPolicy]] = {}


def cached_policy(path: str) -> LoadedPolicy:
    """A policy file read once per change (checked by modification time and size)."""
    import copy
    import os
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"cannot read the policy ({e.strerror})", source=str(path), field="--policy",
                         fix="Give a policy file written by `placement train-policy` (or one in assets/policies/)"
                         ) from None
    hit = _CACHE.get(path)
    if hit is None or hit[:2] != (st.st_mtime, st.st_size):
        hit = (st.st_mtime, st.st_size, load_policy(path))
        _CACHE[path] = hit
    return copy.deepcopy(hit[2])  # fine-tuning changes the weights: each optimizer gets its own copy


class LearnedOptimizer(Optimizer):
    method = ""
    PARAMS = {
        "policy": Param("", "the policy file (placement-policy/1) to apply and fine-tune", str),
        "rollouts": Param(32, "episodes per fine-tuning update", int, low=2, high=1024),
        "lr": Param(1e-3, "Adam's learning rate while fine-tuning", float, low=1e-7, high=1.0),
        "entropy": Param(0.0, "weight of the entropy bonus while fine-tuning", float, low=0, high=10),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        path = self.params["policy"]
        if not path:
            raise InputError(f"{self.name} needs a trained policy", field="--policy",
                             fix="Give --policy FILE (see assets/policies/, or train one with `placement "
                                 "train-policy`)")
        self.policy = cached_policy(path)
        if self.policy.method != self.method:
            raise InputError(f"{path} is a {self.policy.method} policy, not a {self.method} one", field="--policy",
                             fix=f"Use --algorithm {self.policy.method}")
        self.policy.check_devices(self.d)
        self.net = self.policy.net
        torch.manual_seed(self.seed)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.params["lr"])
        self.info = GraphInfo(problem, start=self.net.config.get("start", "fastest"))
        self.sampled = None  # the batch asked for and not yet told (not Optimizer.pending, the driver's count)
        self.greedy_done = False
        # rewards while fine-tuning are relative to the zero-shot placement's objective (the first one told), so
        # no evaluation outside the budget is needed for a scale
        self.reference: float | None = None
        self._guard: MemoryGuard | None = None

    # -- memory and shared modules: what is proposed fits when the start does ---------------------------------
    def fallback_start(self) -> np.ndarray:
        """The placement an overflowing one falls back toward (the policy's start)."""
        return self.info.start

    @property
    def guard(self) -> MemoryGuard:
        if self._guard is None:
            self._guard = MemoryGuard(self.problem, self.problem.tie(self.fallback_start()))
        return self._guard

    def finish(self, placements: np.ndarray, order=None) -> np.ndarray:
        """Placements with the tied calls joined, each one that overflows fallen back move by move."""
        tied = self.problem.tie(np.atleast_2d(placements))
        return tied if not overflowing(self.problem, tied).any() else self.guard(tied, order)

    def ask(self, limit: int) -> np.ndarray:
        with one_thread():
            if not self.greedy_done:
                self.greedy_done = True
                self.sampled = None
                return self.greedy()[None, :]
            rollouts = self.params["rollouts"]
            last = limit <= rollouts + 2  # no room for another update after this one: add the greedy placement
            k = min(rollouts, limit - 1) if last else rollouts
            if k < 2:
                self.sampled = None
                return self.greedy()[None, :][:limit]
            self.sampled = self.sample(k)
            if not last:
                return self.pending_placements()
            return np.concatenate([self.pending_placements(), self.greedy()[None, :]])

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        if len(objectives):
            self.current = float(np.min(objectives))
            if self.reference is None:
                self.reference = max(float(objectives[0]), 1e-12)
        pending, self.sampled = self.sampled, None
        k = 0 if pending is None else len(self.pending_placements(pending))
        if pending is None or len(objectives) < k:
            return
        with one_thread():
            self.update(pending, np.asarray(objectives[:k], dtype=float))

    def state_dict(self) -> dict:
        weights = {k: v.detach().numpy().tolist() for k, v in self.net.state_dict().items()}
        return {**super().state_dict(), "weights": weights, "greedy_done": self.greedy_done,
                "reference": self.reference, "adam": _jsonable(self.opt.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.net.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in state["weights"].items()})
        self.greedy_done = state["greedy_done"]
        self.reference = state.get("reference")
        if state.get("adam") is not None:
            self.opt.load_state_dict(_tensors(state["adam"]))

    # -- what each method does -----------------------------------------------------------------
    def greedy(self) -> np.ndarray:
        raise NotImplementedError

    def sample(self, k: int):
        raise NotImplementedError

    def pending_placements(self, pending=None) -> np.ndarray:
        raise NotImplementedError

    def update(self, pending, objectives: np.ndarray) -> None:
        raise NotImplementedError


@register
class PlacetoOptimizer(LearnedOptimizer):
    name = "placeto"
    title = "Placeto (trained policy)"
    method = "placeto"
    PARAMS = {**LearnedOptimizer.PARAMS,
              "step_fraction": Param(0.125, "share of each episode's steps in the gradient (an unbiased sample)",
                                     float, low=0.01, high=1.0)}

    def __init__(self, problem, **kw):
        from .placeto import GraphTensors
        super().__init__(problem, **kw)
        self.graph = GraphTensors(self.info)

    def greedy(self) -> np.ndarray:
        check = (lambda x: fits(self.problem, x)) if self.guard.active else None
        return self.finish(fast_greedy(self.net, self.info, fits=check))[0]

    def sample(self, k: int):
        from .placeto import rollout
        ep = rollout(self.net, self.graph, k, self.rng)
        final = self.finish(ep.final, ep.order)
        if not np.array_equal(final, ep.final):  # the moves that fell back (or were tied) are the actions taken
            ep.placements[-1] = final
            ep.actions = final[:, ep.order].T.astype(ep.actions.dtype)
        return ep

    def pending_placements(self, pending=None) -> np.ndarray:
        return (pending or self.sampled).final

    def update(self, episode, objectives: np.ndarray) -> None:
        from .placeto import subsampled_loss
        from ...policies.reinforce import terminal_returns
        returns = terminal_returns(objectives, len(episode.order), self.reference)
        loss = subsampled_loss(self.net, self.graph, episode, returns, self.params["entropy"],
                               self.params["step_fraction"], self.rng)
        apply_gradient(self.net, self.opt, loss)


@register
class GdpOptimizer(LearnedOptimizer):
    name = "gdp"
    title = "GDP (trained policy)"
    method = "gdp"

    def __init__(self, problem, **kw):
        from .gdp import GdpGraph
        super().__init__(problem, **kw)
        self.graph = GdpGraph(self.info)

    def fallback_start(self) -> np.ndarray:
        return memory_aware_heft(self.problem)

    def greedy(self) -> np.ndarray:
        with torch.no_grad():
            return self.finish(self.net.logits(self.graph).argmax(dim=1).numpy().astype(np.int32))[0]

    def sample(self, k: int):
        from .gdp import log_likelihood, sample
        with torch.no_grad():
            logits = self.net.logits(self.graph)
            placements = self.finish(sample(logits, k, self.rng))
            return placements, log_likelihood(logits, placements)

    def pending_placements(self, pending=None) -> np.ndarray:
        return (pending or self.sampled)[0]

    def update(self, pending, objectives: np.ndarray) -> None:
        from .gdp import EPOCHS, log_likelihood, ppo_clip_loss
        placements, old = pending
        rewards = -objectives / self.reference
        adv = torch.from_numpy(((rewards - rewards.mean()) / (rewards.std() + 1e-8)).astype(np.float32))
        for _ in range(EPOCHS):
            logits = self.net.logits(self.graph)
            lp = torch.log_softmax(logits, dim=1)
            entropy = -(lp.exp() * lp).sum(dim=1).mean()
            apply_gradient(self.net, self.opt, ppo_clip_loss(log_likelihood(logits, placements), old, adv, entropy,
                                                             self.params["entropy"]))


def _jsonable(obj):
    """Adam's state (tensors in dicts and lists) as JSON, for checkpoints."""
    if isinstance(obj, torch.Tensor):
        return {"__tensor__": obj.detach().cpu().tolist(), "dtype": str(obj.dtype).replace("torch.", "")}
    if isinstance(obj, dict):
        return {"__keys__": [[_jsonable(k), _jsonable(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _tensors(obj):
    if isinstance(obj, dict) and "__tensor__" in obj:
        return torch.tensor(obj["__tensor__"], dtype=getattr(torch, obj["dtype"]))
    if isinstance(obj, dict) and "__keys__" in obj:
        return {_tensors(k): _tensors(v) for k, v in obj["__keys__"]}
    if isinstance(obj, list):
        return [_tensors(v) for v in obj]
    return obj


def fast_greedy(net, info: GraphInfo, order=None, fits=None) -> np.ndarray:
    """A Placeto network's greedy pass, run in numpy (``learned.fast_placeto``: the same numbers, faster);
    ``fits(placement)`` masks the moves after which it would not."""
    from ...policies.fast_placeto import FastPlaceto
    weights = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    return FastPlaceto(weights, net.config).greedy(info, order, fits)


def memory_aware_heft(problem) -> np.ndarray:
    from ...optimize.heft import heft_schedule
    return np.asarray(heft_schedule(problem, comm=True, memory=True).placement, dtype=np.int32)


def place(policy: LoadedPolicy, problem, order=None) -> np.ndarray:
    """The policy's zero-shot placement of ``problem`` (greedy, no training); Placeto visits the nodes in
    ``order`` (default: topological). Like the optimizers', it never overflows memory when the policy's start
    (GDP: memory-aware HEFT's placement) fits, and keeps a shared module's calls on one device."""
    from ...optimize.feasible import guarded
    from .gdp import GdpGraph
    policy.check_devices(problem.n_devices)
    info = GraphInfo(problem, start=policy.net.config.get("start", "fastest"))
    if policy.method == "placeto":
        check = (lambda x: fits(problem, x)) if fits(problem, problem.tie(info.start)) else None
        x = fast_greedy(policy.net, info, order, check)
        start = info.start
    else:
        with one_thread():
            g = GdpGraph(info)
            with torch.no_grad():
                x = policy.net.logits(g).argmax(dim=1).numpy().astype(np.int32)
        start = None
    tied = problem.tie(x[None, :])
    if not overflowing(problem, tied)[0]:
        return tied[0]
    return guarded(problem, tied, memory_aware_heft(problem) if start is None else start, order)[0]

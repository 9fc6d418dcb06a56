"""Training a placement policy over many graphs: Placeto's REINFORCE or GDP's batch PPO, one loop.

Each iteration takes the next training graph (a fixed shuffled cycle, so every
graph is seen equally often), runs ``rollouts`` episodes of it, scores them on
the simulator and takes one Adam step. The learning rate decays linearly to
zero and the entropy bonus from ``entropy`` to zero (Placeto App. A.7). The
reward curve has one row per iteration: simulator evaluations so far, the best
of the curve so far, and the mean objective of the last round of graphs (one
iteration per graph), each objective divided by its graph's best single device
(lower is better; the reward is its negative).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ...base.errors import InputError
from ...policies.features import STARTS, GraphInfo
from ...problem import Problem
from .gdp import GdpLearner
from .placeto import PlacetoLearner
from .updates import one_thread

METHODS = ("placeto", "gdp")
REWARDS = ("step", "final")


@dataclass(frozen=True)
class TrainSettings:
    method: str = "placeto"
    episodes: int = 2000
    rollouts: int = 8
    lr: float = 2e-3
    entropy: float = 0.005
    rewards: str = "step"
    hidden: int = 16
    rounds: int = 3
    seed: int = 0
    # Placeto's policy: the share of an episode's steps whose log probabilities enter the gradient
    # (drawn anew each iteration; an unbiased estimate of the full sum at a fraction of the cost)
    step_fraction: float = 0.5
    start: str = "heft"  # the placement Placeto's episodes improve (learned.features.STARTS)
    discount: float = 1.0  # γ of the returns (Placeto: 1)
    normalize: bool = True  # divide each update's advantages by their standard deviation

    def check(self) -> "TrainSettings":
        if self.method not in METHODS:
            raise InputError(f"unknown method {self.method!r}", field="--method", fix="Use placeto or gdp")
        if self.rewards not in REWARDS:
            raise InputError(f"unknown rewards {self.rewards!r}", field="--rewards", fix="Use step or final")
        for name, low in (("episodes", 1), ("rollouts", 2), ("hidden", 2), ("rounds", 1)):
            if int(getattr(self, name)) < low:
                raise InputError(f"--{name} must be at least {low}", field=f"--{name}")
        if not 0 < self.discount <= 1:
            raise InputError("the discount must be in (0, 1]", field="discount")
        if not 0 < self.step_fraction <= 1:
            raise InputError("the step fraction must be in (0, 1]", field="step_fraction")
        if not 0 < self.lr <= 10:
            raise InputError(f"the learning rate must be positive and at most 10, got {self.lr!r}", field="--lr",
                             fix="e.g. --lr 0.001")
        if self.method == "gdp" and int(self.hidden) % 2:
            raise InputError(f"--hidden {self.hidden} is odd: GDP's two attention heads share the hidden units",
                             field="--hidden", fix=f"Use an even number, e.g. --hidden {int(self.hidden) + 1}")
        if self.start not in STARTS:
            raise InputError(f"unknown start {self.start!r}", field="--start", fix="Use " + " or ".join(STARTS))
        if not 0 <= self.entropy <= 100:
            raise InputError(f"the entropy weight must be from 0 to 100, got {self.entropy!r}", field="--entropy")
        return self

    def config(self) -> dict:
        return {"hidden": int(self.hidden), "rounds": int(self.rounds)}


@dataclass
class TrainResult:
    net: torch.nn.Module
    curve: np.ndarray            # rows: evaluations, best mean ratio so far, mean ratio of the last round
    evaluations: int
    episodes: int
    wall_s: float
    stopped: bool
    best: dict = field(default_factory=dict)  # graph index -> (objective, placement) best seen in training


@dataclass(frozen=True)
class TrainProgress:
    episodes: int
    total: int
    evaluations: int
    ratio: float          # mean objective / best single device over the last round of graphs
    best_ratio: float
    elapsed_s: float
    curve: tuple = ()     # (evaluations, ratio) points so far, for live charts
    done: bool = False

    @property
    def fraction(self) -> float:
        return min(1.0, self.episodes / max(self.total, 1))


def train(problems: list[Problem], settings: TrainSettings, *, progress: Callable[[TrainProgress], None] | None = None,
          stop=None, orders: list | None = None, infos: list[GraphInfo] | None = None,
          net: torch.nn.Module | None = None) -> TrainResult:
    """Train a policy on ``problems`` (one Problem per training graph, all on the same devices); ``net``
    continues training a given network instead of a new one."""
    settings.check()
    if not problems:
        raise InputError("no training graphs", field="--networks", fix="Give a family or network files")
    counts = {p.n_devices for p in problems}
    if len(counts) != 1:
        raise InputError("the training graphs are on device graphs of different sizes", field="--devices")
    with one_thread():  # deterministic for a seed, and fair on a shared machine
        return _train(problems, settings, progress, _stop_test(stop), orders, infos, net)


def _train(problems, s: TrainSettings, progress, stopped, orders, infos, net) -> TrainResult:
    torch.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    infos = infos or [GraphInfo(p, start=s.start if s.method == "placeto" else "fastest") for p in problems]
    learner = learner_class(s.method)(infos, s, orders=orders, net=net)
    opt = torch.optim.Adam(learner.net.parameters(), lr=s.lr)
    iterations = max(1, math.ceil(s.episodes / s.rollouts))
    cycle = rng.permutation(len(problems))
    window: list[float] = []
    curve: list[tuple[float, float, float]] = []
    best: dict = {}
    best_full = math.inf
    used = episodes = 0
    start = time.perf_counter()
    last_report = -1.0
    was_stopped = False
    for it in range(iterations):
        if stopped():
            was_stopped = True
            break
        frac = it / iterations
        for group in opt.param_groups:
            group["lr"] = s.lr * (1.0 - frac)
        k = int(cycle[it % len(cycle)])
        if it and it % len(cycle) == 0:
            cycle = rng.permutation(len(problems))
            k = int(cycle[0])
        finals, placements, evals = learner.step(k, rng, opt, beta=s.entropy * (1.0 - frac))
        used += evals
        episodes += s.rollouts
        i = int(np.argmin(finals))
        if k not in best or finals[i] < best[k][0]:
            best[k] = (float(finals[i]), placements[i].copy())
        window.append(float(np.mean(finals)) / infos[k].reference)
        window = window[-len(problems):]
        ratio = float(np.mean(window))
        best_full = best_ratio = min(best_full, ratio)
        curve.append((float(used), best_ratio, ratio))
        now = time.perf_counter() - start
        if progress is not None and (now - last_report >= 0.5 or it == iterations - 1):
            last_report = now
            progress(TrainProgress(episodes, s.episodes, used, ratio, best_ratio, now,
                                   tuple((c[0], c[2]) for c in curve)))
    wall = time.perf_counter() - start
    if progress is not None and curve:
        c = curve[-1]
        progress(TrainProgress(episodes, s.episodes, used, c[2], c[1], wall, tuple((r[0], r[2]) for r in curve),
                               done=True))
    return TrainResult(learner.net, np.array(curve, dtype=float).reshape(-1, 3), used, episodes, wall, was_stopped,
                       best)


def learner_class(method: str):
    return PlacetoLearner if method == "placeto" else GdpLearner


def _stop_test(stop) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if hasattr(stop, "is_set"):
        return stop.is_set
    return stop

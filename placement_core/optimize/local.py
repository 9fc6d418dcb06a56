"""Local search (thesis §2.1.5): random hill climbing, simulated annealing, and random search.

A neighbour moves one random op to a random other device. Both local
searches start from the best initial placement if given, else a random one.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Optimizer, Param, register


class _LocalSearch(Optimizer):
    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.x: np.ndarray | None = None
        self.f = float("inf")
        self.steps = 0

    def ask(self, limit: int) -> np.ndarray:
        if self.x is None:
            start = self.initial if len(self.initial) else self.random_placements(1)
            return start[:limit]
        y = self.x.copy()
        if self.sharded:  # ops may be split: another gene the op can take
            i = int(self.rng.integers(0, self.n))
            y[i] = self.space.other(self.rng, i, int(y[i]))
        elif self.d > 1:
            i = int(self.rng.integers(0, self.n))
            # a different device: shift by 1..d-1
            y[i] = (y[i] + int(self.rng.integers(1, self.d))) % self.d
        return y[None, :]

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        if self.x is None:
            i = int(np.argmin(objectives))
            self.x, self.f = placements[i].copy(), float(objectives[i])
        elif len(placements):
            if self.accept(float(objectives[0])):
                self.x, self.f = placements[0].copy(), float(objectives[0])
            self.steps += 1
        self.current = self.f

    def accept(self, f_new: float) -> bool:
        return f_new < self.f

    def snapshot(self) -> dict:
        return {"steps": self.steps, "current": self.f}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "x": None if self.x is None else self.x.tolist(), "f": self.f,
                "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.x = None if state["x"] is None else np.array(state["x"], dtype=np.int32)
        self.f, self.steps = state["f"], state["steps"]


@register
class HillClimbing(_LocalSearch):
    """Thesis Algorithm 1: accept a random neighbour when it is better."""

    name = "hill-climbing"
    title = "Random hill climbing"
    PARAMS: dict = {}


@register
class SimulatedAnnealing(_LocalSearch):
    """Thesis Algorithm 2: also accept a worse neighbour with probability 1 / (1 + exp(dE / T)).

    The temperature cools geometrically from ``t_start`` x the first objective (scaled to the
    problem, so the same setting works for AlexNet and Inception) to ``t_end`` x that at ``steps``.
    """

    name = "annealing"
    title = "Simulated annealing"
    PARAMS = {
        "t_start": Param(0.1, "initial temperature, as a fraction of the first placement's objective", float,
                         low=0),
        "t_end": Param(1e-4, "final temperature, as a fraction of the first placement's objective", float, low=0),
        "steps": Param(20000, "steps over which the temperature cools (the budget, usually)", int, low=1),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.t0 = None

    def temperature(self) -> float:
        p = self.params
        frac = min(self.steps / max(p["steps"], 1), 1.0)
        return self.t0 * (p["t_end"] / p["t_start"]) ** frac if p["t_start"] > 0 else 0.0

    def tell(self, placements, objectives):
        if self.x is None and len(objectives):
            first = float(np.min(objectives))
            # an infeasible start (penalised objective) would make the temperature absurd; cap it
            self.t0 = self.params["t_start"] * (first if math.isfinite(first) else 1.0)
        super().tell(placements, objectives)

    def accept(self, f_new: float) -> bool:
        if f_new < self.f:
            return True
        t = self.temperature()
        if t <= 0:
            return False
        z = (f_new - self.f) / t
        p = 0.0 if z > 700 else 1.0 / (1.0 + math.exp(z))
        return self.rng.random() < p

    def snapshot(self) -> dict:
        return {**super().snapshot(), "temperature": self.temperature() if self.t0 is not None else None}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "t0": self.t0}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.t0 = state["t0"]


@register
class RandomSearch(Optimizer):
    name = "random"
    title = "Random search"
    PARAMS = {"batch": Param(50, "placements proposed together", int, low=1, high=100_000)}

    def ask(self, limit: int) -> np.ndarray:
        if not getattr(self, "_seeded", False) and len(self.initial):
            self._seeded = True
            return self.initial[:limit]
        self._seeded = True
        return self.random_placements(min(self.params["batch"], limit))

    def tell(self, placements, objectives) -> None:
        if len(objectives):
            self.current = float(objectives.min())

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seeded": getattr(self, "_seeded", False)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._seeded = state["seeded"]

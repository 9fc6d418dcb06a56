"""REINFORCE's returns and Placeto's time-step baseline (Placeto §2.1, App. A.1 and A.7), in numpy.

Objectives are normalised by a graph's reference objective (its best single
device), so rewards of graphs with step times of 0.1 s and 4 s weigh alike.

- Intermediate rewards: the move at step t (1-based) takes the placement's
  objective from R_{t-1} to R_t, and earns r_t = (R_{t-1} - R_t) / ref, the
  improvement. Undiscounted, the return from step t is G_t = (R_{t-1} - R_T) / ref.
- Terminal reward: r_T = -R_T / ref and nothing before, so G_t = -R_T / ref.

The baseline at step t is the mean return at t of the *other* rollouts of the
same graph from the same start (leave-one-out, so it does not depend on the
rollout it is subtracted from and the gradient stays unbiased).
"""

from __future__ import annotations

import numpy as np


def step_returns(objectives: np.ndarray, reference: float, discount: float = 1.0) -> np.ndarray:
    """[B, T] returns from [B, T + 1] objectives (column 0: the start placement, column t: after step t);
    with ``discount`` γ < 1, G_t = Σ_{k ≥ t} γ^(k − t) r_k."""
    obj = np.asarray(objectives, dtype=float)
    if discount == 1.0:
        return (obj[:, :-1] - obj[:, -1:]) / reference
    rewards = (obj[:, :-1] - obj[:, 1:]) / reference
    out = np.empty_like(rewards)
    acc = np.zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        acc = rewards[:, t] + discount * acc
        out[:, t] = acc
    return out


def terminal_returns(final: np.ndarray, steps: int, reference: float) -> np.ndarray:
    """[B, T] returns when only the final placement is scored."""
    final = np.asarray(final, dtype=float)
    return np.repeat((-final / reference)[:, None], steps, axis=1)


def time_step_baseline(returns: np.ndarray) -> np.ndarray:
    """[B, T] leave-one-out mean of the returns at each step; with one rollout, 0 (no baseline)."""
    g = np.asarray(returns, dtype=float)
    b = g.shape[0]
    if b < 2:
        return np.zeros_like(g)
    return (g.sum(axis=0, keepdims=True) - g) / (b - 1)


def advantages(returns: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Returns minus the time-step baseline; ``normalize`` divides by their standard deviation, so graphs whose
    rewards differ in scale (a memory penalty, say) move the policy by comparable steps."""
    adv = np.asarray(returns, dtype=float) - time_step_baseline(returns)
    if normalize:
        adv = adv / (adv.std() + 1e-8)
    return adv

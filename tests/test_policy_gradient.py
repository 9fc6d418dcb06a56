"""pg, ppo and post (optimize/policy_gradient.py): closed-form gradients against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placement_core.optimize import make_optimizer, run
from placement_core.optimize.policy_gradient import (kl_per_op, ppo_gradient, reinforce_gradient, softmax)
from placement_core.optimize.search_space import POSTS_OWN
from tests.helpers import devices, op, problem

# Two ops on two devices. Op 0 prefers device 1 (p = 1/4, 3/4), op 1 device 0 (p = 2/3, 1/3).
LOGITS = np.array([[0.0, math.log(3.0)], [math.log(2.0), 0.0]])
SAMPLES = np.array([[0, 0], [1, 0]], dtype=np.int32)
ADV = np.array([1.0, -0.5])


def two_ops():
    return problem([op("a", fwd=1.0, bwd=1.0), op("b", ["a"], fwd=2.0, bwd=2.0)], devices(2))


def test_the_probabilities_are_the_softmax_of_the_logits():
    assert np.allclose(softmax(LOGITS), [[0.25, 0.75], [2 / 3, 1 / 3]])


def test_reinforce_gradient_by_hand():
    # (1/K) Σ_k A_k (onehot(d_k) - p), worked out per op:
    # op 0: 1·((1, 0) - (1/4, 3/4)) and -0.5·((0, 1) - (1/4, 3/4)) -> mean (7/16, -7/16)
    # op 1: 1·((1, 0) - (2/3, 1/3)) and -0.5·((1, 0) - (2/3, 1/3)) -> mean (1/12, -1/12)
    g = reinforce_gradient(softmax(LOGITS), SAMPLES, ADV)
    assert np.allclose(g, [[7 / 16, -7 / 16], [1 / 12, -1 / 12]])


def _numeric(f, u, h=1e-6):
    g = np.zeros_like(u)
    for idx in np.ndindex(u.shape):
        e = np.zeros_like(u)
        e[idx] = h
        g[idx] = (f(u + e) - f(u - e)) / (2 * h)
    return g


def test_reinforce_gradient_is_the_gradient_of_the_mean_weighted_log_likelihood():
    def j(u):
        p = softmax(u)
        return np.mean([a * np.log(p[[0, 1], d]).sum() for a, d in zip(ADV, SAMPLES)])
    assert np.allclose(reinforce_gradient(softmax(LOGITS), SAMPLES, ADV), _numeric(j, LOGITS), atol=1e-8)


def test_ppo_gradient_by_hand():
    # old policy uniform, new logits make op 0 (3/4, 1/4); one sample, device 0 for both ops, advantage 1, beta 1:
    # op 0: ratio (3/4)/(1/2) = 1.5, surrogate 1.5·((1, 0) - (3/4, 1/4)) = (3/8, -3/8), KL term (1/4, -1/4)
    # op 1: unchanged (ratio 1), surrogate (1, 0) - (1/2, 1/2) = (1/2, -1/2), KL term 0
    old = np.full((2, 2), 0.5)
    u = np.array([[math.log(3.0), 0.0], [0.0, 0.0]])
    g = ppo_gradient(u, old, np.array([[0, 0]]), np.array([1.0]), beta=1.0)
    assert np.allclose(g, [[3 / 8 - 1 / 4, -(3 / 8 - 1 / 4)], [0.5, -0.5]])


def test_ppo_gradient_is_the_gradient_of_posts_objective():
    old = softmax(LOGITS)
    u = LOGITS + np.array([[0.3, -0.2], [0.1, 0.4]])
    beta = 0.7

    def j(v):
        p = softmax(v)
        ratio = p[[0, 1], SAMPLES] / old[[0, 1], SAMPLES]
        return (ratio * ADV[:, None]).sum() / len(SAMPLES) - beta * kl_per_op(old, p).sum()
    assert np.allclose(ppo_gradient(u, old, SAMPLES, ADV, beta), _numeric(j, u), atol=1e-7)
    # at the old policy the ratios are 1 and the KL's gradient 0: PPO's first step is REINFORCE's
    assert np.allclose(ppo_gradient(LOGITS, old, SAMPLES, ADV, beta), reinforce_gradient(old, SAMPLES, ADV))


def test_a_pg_update_uses_the_moving_average_baseline():
    opt = make_optimizer(two_ops(), "pg", seed=0, params={"samples": 2, "lr": 0.5})
    opt.logits = LOGITS.copy()
    # the first batch sets b to its mean, 2: advantages (2 - 1)/2 = 0.5 and (2 - 3)/2 = -0.5
    opt.tell(SAMPLES, np.array([1.0, 3.0]))
    assert opt.baseline == 2.0
    expected = LOGITS + 0.5 * reinforce_gradient(softmax(LOGITS), SAMPLES, np.array([0.5, -0.5]))
    assert np.allclose(opt.logits, expected)
    # the next batch moves b by a tenth of the way: 0.9·2 + 0.1·4 = 2.2
    opt.tell(SAMPLES, np.array([4.0, 4.0]))
    assert opt.baseline == pytest.approx(2.2)


def test_ppo_adapts_its_penalty_to_the_kl_target():
    opt = make_optimizer(two_ops(), "ppo", seed=0, params={"samples": 2, "epochs": 1, "lr": 50.0,
                                                             "kl_target": 0.001})
    opt.tell(SAMPLES, np.array([1.0, 3.0]))  # a huge step: KL far above 1.5 x target
    assert opt.beta == 2.0
    opt2 = make_optimizer(two_ops(), "ppo", seed=0, params={"samples": 2, "epochs": 1, "lr": 1e-4})
    opt2.tell(SAMPLES, np.array([1.0, 3.0]))  # a tiny step: KL below target / 1.5
    assert opt2.beta == 0.5


def test_post_replaces_every_fifth_ppo_step_by_the_cross_entropy_update():
    # 4 samples per batch, a cross-entropy update every 8 samples: batch 1 is PPO, batch 2 is cross-entropy.
    # in Post's own space (a uniform start): the cross-entropy update mixes with ε/|D|
    opt = make_optimizer(two_ops(), "post", seed=0, params={"samples": 4, "ce_every": 8, "elite_fraction": 0.25,
                                                              "epsilon": 0.2, "steps": 16, **POSTS_OWN})
    x1 = np.array([[0, 0], [1, 1], [0, 1], [1, 0]], dtype=np.int32)
    opt.tell(x1, np.array([5.0, 6.0, 7.0, 8.0]))
    assert opt.ce_updates == 0 and not np.allclose(opt.logits, 0.0)
    x2 = np.array([[1, 1], [1, 1], [0, 0], [0, 1]], dtype=np.int32)
    opt.tell(x2, np.array([9.0, 1.0, 2.0, 9.0]))
    # elites: the best 2 of all 8 samples are (1, 1) at 1.0 and (0, 0) at 2.0, so each op's frequencies are
    # (1/2, 1/2); used = 8 of 16, so epsilon = 0.2 · (1 - 8/16) = 0.1 and p = 0.9 · 1/2 + 0.1 / 2 = 1/2
    assert opt.ce_updates == 1
    assert np.allclose(opt.probs, 0.5)
    x3 = np.array([[0, 0]] * 4, dtype=np.int32)
    opt.tell(x3, np.array([1.0, 1.0, 1.0, 1.0]))
    opt.tell(x3, np.array([1.0, 1.0, 1.0, 1.0]))
    # now every elite is (0, 0): p = (1 - 0.2·(1 - 16/16)) · (1, 0) + 0 = (1, 0) up to the logarithm's floor
    assert opt.ce_updates == 2 and np.allclose(opt.probs[:, 0], 1.0)


@pytest.mark.parametrize("algorithm", ["pg", "ppo", "post"])
def test_checkpoint_resume_gives_the_same_run(algorithm):
    from placement_core.optimize.driver import drive
    p = two_ops()
    states = []
    whole = drive(make_optimizer(p, algorithm, seed=3, evaluations=300), evaluations=300,
                  checkpoint=states.append, checkpoint_every=100)
    state = next(s for s in states if s["evaluations"] >= 100)
    resumed = drive(make_optimizer(p, algorithm, seed=3, evaluations=300), evaluations=300, state=state)
    assert np.array_equal(whole.history, resumed.history)


@pytest.mark.parametrize("algorithm", ["pg", "ppo", "post"])
def test_they_find_the_two_op_optimum(algorithm):
    # both ops on one device (no transfer) is the best of the 4 placements
    p = two_ops()
    best = min(p.evaluate(np.array(x, dtype=np.int32)) for x in ([0, 0], [0, 1], [1, 0], [1, 1]))
    assert run(p, algorithm, evaluations=200, seed=0).best_objective == best

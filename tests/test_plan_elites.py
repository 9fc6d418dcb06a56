"""MAP-Elites over cluster plans (issue 28, item 6): the genome space, its mutation, and an archive whose elite per
niche is the brute-force best plan of that niche."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from placement_core import InputError, load_devices, load_network
from placement_core.families import gpt
from placement_core.model.devices import devices_from_dict, devices_to_dict
from placement_core.optimize.plan_elites import PlanArchive, search_plans
from placement_core.optimize.plan_space import DIMS, plan_space
from placement_core.optimize.plans import PlanRequest, candidates, plan

TINY = "gpt:layers=4,hidden=64,heads=4,seq=32,vocab=100"


def small_node(memory=7e5):
    """One DGX A100 node whose GPUs hold 700 kB: some plans of TINY fit, some do not (tp 1 × pp 1 none)."""
    d = devices_to_dict(load_devices("dgx-a100:nodes=1"))
    for dev in d["devices"]:
        dev["memory_bytes"] = memory
    return devices_from_dict(d)


def brute_force(graph, devices, req, config, recomputes):
    """(pp, tp) -> the best plan of the exhaustive search over every recomputation: the fastest that fits, else
    the one with the least peak memory."""
    best = {}
    for rc in recomputes:
        for p in plan(graph, devices, replace(req, recompute=rc), config):
            key = (not p.fits, p.step_time_s if p.fits else p.peak_memory_bytes, p.step_time_s)
            if (p.pp, p.tp) not in best or key < best[p.pp, p.tp][0]:
                best[p.pp, p.tp] = (key, p)
    return {k: v[1] for k, v in best.items()}


def test_the_space_is_the_exhaustive_searchs_plans():
    graph, devices, config = load_network(TINY), load_devices("dgx-a100:nodes=1"), gpt.parse(TINY)
    req = PlanRequest(global_batch=8)
    space = plan_space(graph, devices, req, config)
    got = sorted((g["tp"], g["pp"], g["dp"], g["micro_batch"]) for g in map(space.plan_of, range(len(space))))
    want = sorted((t, pp, dp, b) for t in (1, 2, 4) for pp, dp, b in candidates(8 // t, len(graph), req))
    assert got == want and len(got) == 26
    assert all(g["tp"] * g["pp"] * g["dp"] == 8 for g in map(space.plan_of, range(len(space))))
    assert space.searched() == ["tp", "pp", "dp", "micro_batch"]
    # searched recomputation triples it; searched ZeRO leaves a single replica at stage 0 (nothing to partition)
    assert len(plan_space(graph, devices, req, config, ("recompute",))) == 78
    zeros = plan_space(graph, devices, req, config, ("zero",))
    assert all(g["zero"] == 0 for g in map(zeros.plan_of, range(len(zeros))) if g["dp"] == 1)
    # interleaved 1F1B and ZB-H1 run whole devices: an unfolded plan of them has dp 1
    both = plan_space(graph, devices, req, config, ("schedule",))
    plans = [both.plan_of(i) for i in range(len(both))]
    assert {p["schedule"] for p in plans} == {"1f1b", "gpipe", "zb-h1", "interleaved-1f1b"}
    assert all(p["dp"] == 1 for p in plans if p["schedule"] in ("zb-h1", "interleaved-1f1b"))
    assert all(p["virtual_stages"] in (2, 4) and 4 % (p["pp"] * p["virtual_stages"]) == 0
               for p in plans if p["schedule"] == "interleaved-1f1b")


def test_a_mutation_moves_one_dimension_to_a_valid_neighbour():
    """From tp 1 × pp 2 × dp 4, micro-batch 1, raising the tensor degree to 2 keeps t·p·d = 8 by halving dp or pp,
    the nearest valid plans; no child leaves the space."""
    graph, devices, config = load_network(TINY), load_devices("dgx-a100:nodes=1"), gpt.parse(TINY)
    space = plan_space(graph, devices, PlanRequest(global_batch=8), config)
    rows = {tuple(space.plan_of(i)[d] for d in ("tp", "pp", "dp", "micro_batch")): i for i in range(len(space))}
    parent = rows[1, 2, 4, 1]
    rng = np.random.default_rng(0)
    children = [space.mutate(rng, parent, jump=0.0) for _ in range(400)]
    seen = {tuple(space.plan_of(c)[d] for d in ("tp", "pp", "dp", "micro_batch")) for c in children}
    assert {s for s in seen if s[0] == 2} == {(2, 2, 2, 1), (2, 1, 4, 1)}
    assert {s for s in seen if s[0] == 1} == {(1, 1, 8, 1), (1, 4, 2, 1), (1, 2, 4, 2)}  # pp, dp or b one step
    assert all(t * p * d == 8 for t, p, d, _ in seen)


def test_the_archive_holds_the_brute_force_best_of_every_niche():
    """Every plan simulated (a budget of the space's 78 plans): each (pp, tp) niche's elite is the exhaustive
    search's best of that niche, the fastest that fits, and where nothing fits the plan nearest to fitting."""
    graph, devices, config = load_network(TINY), small_node(), gpt.parse(TINY)
    req = PlanRequest(global_batch=8)
    archive = search_plans(graph, devices, req, config, vary=("recompute",), budget=500, seed=3)
    assert archive.evaluations == len(archive.space) == 78
    best = brute_force(graph, devices, req, config, ("none", "selective", "full"))
    pp_axis, tp_axis = archive.descriptors[0].axis, archive.descriptors[1].axis
    got = {(pp_axis[n[0]], tp_axis[n[1]]): e.plan for n, e in archive.elites.items()}
    assert set(got) == set(best) and len(got) == 9 and archive.coverage == 1.0
    for niche, p in best.items():
        e = got[niche]
        assert (e.tp, e.pp, e.dp, e.micro_batch, e.recompute) == (p.tp, p.pp, p.dp, p.micro_batch, p.recompute)
        assert e.step_time_s == p.step_time_s and e.fits == p.fits
    over = [k for k, p in best.items() if not p.fits]
    assert (1, 1) in over and len(over) < len(best)  # one replica's whole model does not fit in 700 kB
    assert archive.best().fits and archive.best().plan.step_time_s == min(p.step_time_s for p in best.values()
                                                                            if p.fits)


def test_mapelites_finds_more_niches_best_than_random_draws():
    """With 50 of the 78 plans, over 10 seeds, MAP-Elites' mutations find more niches' best plans than as many
    random draws (immigrants=1); the figures in docs/clusters.md are 20 seeds of the same."""
    graph, devices, config = load_network(TINY), small_node(), gpt.parse(TINY)
    req = PlanRequest(global_batch=8)
    best = brute_force(graph, devices, req, config, ("none", "selective", "full"))

    def exact(immigrants):
        found = 0
        for seed in range(10):
            a = search_plans(graph, devices, req, config, vary=("recompute",), budget=50, seed=seed,
                             immigrants=immigrants)
            axes = [d.axis for d in a.descriptors]
            found += sum(e.plan.step_time_s == best[axes[0][n[0]], axes[1][n[1]]].step_time_s
                         for n, e in a.elites.items())
        return found / 10

    assert exact(0.1) > exact(1.0) + 1


def test_what_cannot_be_searched_says_why():
    graph, devices, config = load_network(TINY), load_devices("dgx-a100:nodes=1"), gpt.parse(TINY)
    req = PlanRequest(global_batch=8)
    with pytest.raises(InputError, match="two or more different plan dimensions"):
        search_plans(graph, devices, req, config, niches=("pp",))
    with pytest.raises(InputError, match="two or more different plan dimensions"):
        search_plans(graph, devices, req, config, niches=("pp", "depth"))
    with pytest.raises(InputError, match="positive number of plans"):
        search_plans(graph, devices, req, config, budget=0)
    with pytest.raises(InputError, match="cannot search 'optimizer'"):
        plan_space(graph, devices, req, config, ("optimizer",))
    with pytest.raises(InputError, match="does not divide the 8 GPUs"):
        plan_space(graph, devices, replace(req, pp=3), config)
    with pytest.raises(InputError, match="no plan of 8 GPUs"):
        plan_space(graph, devices, replace(req, global_batch=3, dp=8), config)
    assert set(DIMS) >= {"tp", "pp"}


def test_the_cli_prints_the_archive(capsys):
    from placement_core.cli import main

    base = ["plan", "--network", TINY, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--search",
            "map-elites", "--recompute", "none", "--zero", "0", "--schedule", "1f1b", "--budget", "100"]
    assert main(base + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["search"]["evaluations"] == out["search"]["plans_in_space"] == 26 == len(out["candidates"])
    exhaustive = plan(load_network(TINY), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8),
                      gpt.parse(TINY))
    assert out["best"]["step_time_s"] == exhaustive[0].step_time_s
    assert [c["step_time_s"] for c in out["candidates"]] == [p.step_time_s for p in exhaustive]
    elites = out["archive"]["elites"]
    assert [d["name"] for d in out["archive"]["dimensions"]] == ["pp", "tp"] and len(elites) == 9
    for e in elites:
        assert (e["plan"]["pp"], e["plan"]["tp"]) == (e["niche"]["pp"], e["niche"]["tp"])
        assert e["plan"]["step_time_s"] == min(p.step_time_s for p in exhaustive
                                               if (p.pp, p.tp) == (e["niche"]["pp"], e["niche"]["tp"]))
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "26 of 26 plans simulated" in text and "9 of 9 niches filled" in text
    assert "pipeline stages \\ tensor parallel" in text
    assert main(base + ["--niches", "pp,width"]) == 2
    assert "give two or more different plan dimensions" in capsys.readouterr().err


def test_an_archive_without_enough_niches_is_refused():
    graph, devices, config = load_network(TINY), load_devices("dgx-a100:nodes=1"), gpt.parse(TINY)
    space = plan_space(graph, devices, PlanRequest(global_batch=8), config)
    with pytest.raises(InputError, match="two or more"):
        PlanArchive(space, ("pp", "pp"))

"""MAP-Elites over the plans of a folded cluster (issue 28, items 5 and 6): above 32 nodes `placement plan --search
map-elites` folds the data-parallel replicas as the exhaustive `placement plan` does, so with a budget over the
space every niche's elite is the exhaustive search's best plan of that niche; the archive is stored as its
``dgx-…:nodes=N`` spec and reopens as the same folded cluster, its elites re-simulating to the same step."""

from __future__ import annotations

import json

from placement_core.cli import main
from placement_core.formats.clusters import Cluster
from placement_core.store import RunStore
from placement_core.store.plan_runs import load_plan_archive

TINY = "gpt:layers=4,hidden=64,heads=4,seq=32,vocab=100"
BASE = ["plan", "--network", TINY, "--devices", "dgx-a100:nodes=64", "--global-batch", "128", "--schedule", "1f1b",
        "--zero", "0", "--json"]
RECOMPUTE = ("none", "selective", "full")


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _brute_force(capsys) -> dict:
    """(pp, tp) -> the exhaustive CLI's best plan there over the three recomputations (every plan of this GPT fits
    an A100: the fastest)."""
    best = {}
    for rc in RECOMPUTE:
        out = _json(capsys, BASE + ["--recompute", rc])
        assert len(out["candidates"]) == 46  # tp 1, 2, 4 x pp x dp | 128 x micro-batch | dp's share, on 512 GPUs
        for p in out["candidates"]:
            assert p["tp"] * p["pp"] * p["dp"] == 512 and p["fits"]
            if (p["pp"], p["tp"]) not in best or p["step_time_s"] < best[p["pp"], p["tp"]]["step_time_s"]:
                best[p["pp"], p["tp"]] = p
    return best


def test_map_elites_on_64_nodes_holds_the_exhaustive_best_of_every_niche(capsys):
    best = _brute_force(capsys)
    assert len(best) == 15
    # recomputation searched (the schedule and ZeRO fixed): 3 x 46 plans, all simulated within the budget
    out = _json(capsys, BASE + ["--search", "map-elites", "--budget", "500", "--seed", "2"])
    assert out["search"]["evaluations"] == out["search"]["plans_in_space"] == 138
    elites = out["archive"]["elites"]
    assert len(elites) == out["archive"]["niches_reachable"] == len(best)
    for e in elites:
        niche = e["niche"]["pp"], e["niche"]["tp"]
        p, want = e["plan"], best[niche]
        assert (p["pp"], p["tp"]) == niche and p["tp"] * p["pp"] * p["dp"] == 512
        assert p["step_time_s"] == want["step_time_s"]
        assert (p["dp"], p["micro_batch"], p["recompute"]) == (want["dp"], want["micro_batch"], want["recompute"])
    assert out["best"]["step_time_s"] == min(p["step_time_s"] for p in best.values())

    # stored as run 1 under its spec, reopened as the same 64-node folded cluster
    run_id = out["run_id"]
    with RunStore() as store:
        archive, search, devices = load_plan_archive(store, run_id)
    assert search.devices_spec == "dgx-a100:nodes=64"
    assert isinstance(devices, Cluster) and (devices.kind, devices.nodes) == ("dgx-a100", 64)
    assert archive.evaluations == 138 and len(archive) == 15
    ranked = archive.ranked()
    assert [e.plan.step_time_s for e in ranked] == [e["plan"]["step_time_s"] for e in elites]
    top = ranked[0]
    plan, problem = archive.simulate(top)
    assert plan.step_time_s == top.plan.step_time_s == out["best"]["step_time_s"]
    assert problem.n_devices == top.plan.pp  # one replica: the first GPU of each stage's tensor-parallel group
    assert main(["runs", "show", str(run_id)]) == 0
    shown = capsys.readouterr().out
    assert "plan-archive" in shown and "dgx-a100:nodes=64" in shown and "archive: 15 plans, one per niche" in shown


def test_map_elites_above_32_nodes_with_a_small_budget_keeps_what_it_simulated(capsys):
    """128 H100 nodes, a budget of 10: ten distinct plans of 1,024 GPUs simulated (the JSON's candidates), each
    niche's elite the fastest of those simulated in it."""
    argv = ["plan", "--network", TINY, "--devices", "dgx-h100:nodes=128", "--global-batch", "256", "--search",
            "map-elites", "--budget", "10", "--no-store", "--json"]
    out = _json(capsys, argv)
    assert out["search"]["evaluations"] == 10 and out["run_id"] is None
    simulated = out["candidates"]
    assert len(simulated) == 10
    assert len({(p["tp"], p["pp"], p["dp"], p["micro_batch"], p["schedule"], p["virtual_stages"], p["recompute"],
                 p["zero"]) for p in simulated}) == 10
    assert all(p["tp"] * p["pp"] * p["dp"] == 1024 and 256 % p["dp"] == 0 and p["fits"] for p in simulated)
    elites = out["archive"]["elites"]
    assert {(e["niche"]["pp"], e["niche"]["tp"]) for e in elites} == {(p["pp"], p["tp"]) for p in simulated}
    for e in elites:
        niche = e["niche"]["pp"], e["niche"]["tp"]
        assert e["plan"]["step_time_s"] == min(p["step_time_s"] for p in simulated if (p["pp"], p["tp"]) == niche)
    assert out["best"]["step_time_s"] == min(p["step_time_s"] for p in simulated)

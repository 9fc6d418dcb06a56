"""A plan archive above 32 nodes in the dashboard (AppTest): the Cluster plan page's *Search with MAP-Elites* on
128 DGX A100 nodes folds the data-parallel replicas as its Plan button does (it loaded the whole device graph,
refused above 32 nodes), each niche's elite the exhaustive search's best there; the Archive page browses it
(one replica's memory and trace), and a fresh session reopens the stored run as the same folded cluster."""

from __future__ import annotations

from apptest_util import assert_clean, figures, goto, metrics, start, text
from test_app_plan_archive import NET, _gpt

from placement_core.analysis import fmt_seconds
from placement_core.families import gpt
from placement_core.formats.catalog import load_network
from placement_core.formats.clusters import Cluster, load_plan_cluster
from placement_core.optimize.plans import PlanRequest, plan

SPEC = "dgx-a100:nodes=128"


def _best_per_niche() -> dict:
    """(pp, tp) -> the exhaustive search's fastest plan there: 19 plans of 1,024 GPUs (1F1B, no recomputation,
    ZeRO 0), all of which fit an A100."""
    plans = plan(load_network(NET), load_plan_cluster(SPEC), PlanRequest(global_batch=128), gpt.parse(NET))
    assert len(plans) == 19 and all(p.fits and p.tp * p.pp * p.dp == 1024 for p in plans)
    best = {}
    for p in plans:
        if (p.pp, p.tp) not in best or p.step_time_s < best[p.pp, p.tp].step_time_s:
            best[p.pp, p.tp] = p
    return best


def test_search_the_plans_of_128_nodes_then_browse_and_reopen_the_archive():
    best = _best_per_niche()
    fastest = min(p.step_time_s for p in best.values())
    at = start()
    _gpt(at)
    goto(at, "cluster", timeout=120)
    at.number_input(key="cluster_nodes").set_value(128)
    at.number_input(key="cluster_batch").set_value(128)
    at.selectbox(key="cluster_tp").set_value(0)
    at.number_input(key="cluster_me_budget").set_value(100)
    at.multiselect(key="cluster_me_vary").set_value([])  # the exhaustive search's 19 plans, all simulated
    at.button(key="FormSubmitter:cluster_form-Search with MAP-Elites").click().run(timeout=180)
    assert_clean(at)
    assert "19 of 19 plans simulated, 9 of 9 niches (pipeline stages × tensor parallel) filled" in text(at)
    [run] = at.session_state["plan_archives"]
    archive = run.archive
    assert run.devices_spec == SPEC and run.capacity == 80e9 and run.store_id == 1
    assert isinstance(archive.setup[1], Cluster) and archive.setup[1].nodes == 128
    axes = [d.axis for d in archive.descriptors]
    got = {(axes[0][n[0]], axes[1][n[1]]): e.plan for n, e in archive.elites.items()}
    assert set(got) == set(best)
    for niche, p in best.items():
        e = got[niche]
        assert e.step_time_s == p.step_time_s and (e.dp, e.micro_batch) == (p.dp, p.micro_batch)

    goto(at, "archive", timeout=120)
    assert_clean(at)
    assert at.selectbox(key="arch_run").value == f"plan:{run.id}"
    m = metrics(at)
    assert (m["Elites"], m["Niches filled"], m["Plans simulated"]) == ("9", "100%", "19")
    assert m["Best step"] == fmt_seconds(fastest)
    heat = figures(at)[0]["layout"]
    assert heat["xaxis"]["ticktext"] == ["2", "4", "8", "16"] and heat["yaxis"]["ticktext"] == ["1", "2", "4"]
    _pick_and_trace(at, f"arch_pick_plan:{run.id}", archive, best[4, 2])

    at = start()  # a fresh session: the stored run reopens as the same 128-node cluster
    goto(at, "archive", timeout=120)
    assert_clean(at)
    assert at.selectbox(key="arch_run").value == "stored:1"
    m = metrics(at)
    assert (m["Elites"], m["Plans simulated"], m["Best step"]) == ("9", "19", fmt_seconds(fastest))
    _pick_and_trace(at, "arch_pick_stored:1", archive, best[4, 2])


def _pick_and_trace(at, pick: str, archive, target) -> None:
    """The niche pp 4 × tp 2: its plan, one replica's memory per GPU (4 simulated GPUs, one per stage) and its
    trace."""
    niche = next(n for n, e in archive.elites.items() if (e.plan.pp, e.plan.tp) == (4, 2))
    at.selectbox(key=pick).set_value(niche).run(timeout=120)
    assert_clean(at)
    m = metrics(at)
    assert m["Step"] == fmt_seconds(target.step_time_s) and m["Fits in memory"] == "yes"
    row = at.dataframe[0].value
    assert (row["pipeline stages"][0], row["tensor-parallel"][0], row["data-parallel"][0]) == (4, 2, target.dp)
    assert target.dp == 128  # 1,024 GPUs / (4 stages × 2)
    memory = next(f for f in figures(at) if f["layout"].get("yaxis", {}).get("title", {}).get("text") == "GB")
    assert len(memory["data"][0]["x"]) == 4
    assert "One data-parallel replica is shown: its 4 simulated GPU(s)" in text(at)
    assert "the other 127 are folded into it" in text(at)
    at.toggle(key="plan_arch_trace").set_value(True).run(timeout=120)
    assert_clean(at)
    assert "The step, GPU by GPU" in text(at) and len(at.get("download_button")) == 1

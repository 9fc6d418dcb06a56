"""Plan archive in the dashboard (AppTest): MAP-Elites over the plans of a small GPT on the Cluster plan page, then
the Archive page browses it niche by niche (map, the niche's plan, its time, memory and trace); stored as a run,
a fresh session lists it on the Runs page and browses it the same way."""

from __future__ import annotations

from apptest_util import assert_clean, figures, goto, metrics, show_tab, start, text

from placement_core.analysis import fmt_seconds
from placement_core.families import gpt
from placement_core.formats.catalog import load_devices, load_network
from placement_core.optimize.plans import PlanRequest, plan

NET = "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100,batch=8"


def _gpt(at):
    show_tab(at, "net_tab", "A GPT by its shape")  # the form is drawn while its tab is open
    for key, value in (("layers", 2), ("hidden", 64), ("heads", 4), ("seq", 32), ("vocab", 100), ("batch", 8)):
        at.number_input(key=f"gpt_{key}").set_value(value)
    at.button(key="FormSubmitter:net_gpt-Build this GPT").click().run()


def _exhaustive():
    """The exhaustive search's plans of the same GPT on one node (tp, pp, dp, micro-batch; 1F1B, no recomputation)."""
    return plan(load_network(NET), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8), gpt.parse(NET))


def test_search_the_plans_then_browse_the_archive():
    at = start()
    _gpt(at)
    goto(at, "cluster", timeout=120)
    at.number_input(key="cluster_nodes").set_value(1)
    at.number_input(key="cluster_batch").set_value(8)
    at.selectbox(key="cluster_tp").set_value(0)
    at.number_input(key="cluster_me_budget").set_value(100)
    at.multiselect(key="cluster_me_vary").set_value([])  # the exhaustive search's 26 plans: all of them simulated
    at.button(key="FormSubmitter:cluster_form-Search with MAP-Elites").click().run(timeout=180)
    assert_clean(at)
    assert "26 of 26 plans simulated, 9 of 9 niches (pipeline stages × tensor parallel) filled" in text(at)
    [archive_run] = at.session_state["plan_archives"]
    archive = archive_run.archive
    exhaustive = _exhaustive()
    for niche, e in archive.elites.items():  # each niche's elite is the exhaustive search's best of that niche
        pp, tp = archive.descriptors[0].axis[niche[0]], archive.descriptors[1].axis[niche[1]]
        assert e.plan.step_time_s == min(p.step_time_s for p in exhaustive if (p.pp, p.tp) == (pp, tp))

    goto(at, "archive", timeout=120)
    assert_clean(at)
    assert at.selectbox(key="arch_run").value == f"plan:{archive_run.id}"
    m = metrics(at)
    assert m["Elites"] == "9" and m["Niches filled"] == "100%" and m["Plans simulated"] == "26"
    assert m["Best step"] == fmt_seconds(exhaustive[0].step_time_s)
    heat = figures(at)[0]
    assert heat["data"][0]["type"] == "heatmap"
    axes = heat["layout"]["xaxis"], heat["layout"]["yaxis"]
    assert (axes[0]["title"]["text"], axes[0]["ticktext"]) == ("pipeline stages", ["1", "2", "4", "8"])
    assert (axes[1]["title"]["text"], axes[1]["ticktext"]) == ("tensor parallel", ["1", "2", "4"])
    # pick the niche pp 2 × tp 2: its plan, time and memory
    ranked = archive.ranked()
    target = next(e for e in ranked if (archive.descriptors[0].axis[e.niche[0]],
                                        archive.descriptors[1].axis[e.niche[1]]) == (2, 2))
    pick = next(k for k in at.session_state if str(k).startswith("arch_pick_plan:"))
    at.selectbox(key=pick).set_value(target.niche).run(timeout=120)
    assert_clean(at)
    m = metrics(at)
    assert m["Step"] == fmt_seconds(target.plan.step_time_s) and m["Fits in memory"] == "yes"
    row = at.dataframe[0].value  # the elite's plan
    assert (row["pipeline stages"][0], row["tensor-parallel"][0]) == (2, 2)
    kinds = [f["layout"].get("yaxis", {}).get("title", {}).get("text") for f in figures(at)]
    assert "GB" in kinds  # memory per GPU
    at.toggle(key="plan_arch_trace").set_value(True).run(timeout=120)
    assert_clean(at)
    assert "The step, GPU by GPU" in text(at)
    assert len(at.get("download_button")) == 1
    top = at.dataframe[1].value  # the best plan of every niche
    assert len(top) == 9 and list(top["step (ms)"]) == sorted(top["step (ms)"])
    # stored as it finished (run 1) and listed once in this session, as the session's own
    [listed] = at.selectbox(key="arch_run").options
    assert archive_run.store_id == 1 and listed.startswith(f"plan archive {archive_run.id} (run 1) · ")
    fresh_session_reopens_it(archive, exhaustive, target)


def fresh_session_reopens_it(archive, exhaustive, target):
    """A new session (a reload, another tab, a restarted server): the Runs page lists the stored plan archive, the
    Archive page browses it as it browsed the fresh one."""
    at = start()
    goto(at, "runs", timeout=120)
    assert_clean(at)
    [row] = at.dataframe[0].value.to_dict("records")
    assert (row["run"], row["kind"], row["evaluations"], row["elites"]) == (1, "plan archive", 26, 9)
    assert row["best objective (ms)"] == exhaustive[0].step_time_s * 1e3 and row["wall time (s)"] > 0
    assert metrics(at)["Best step"] == fmt_seconds(exhaustive[0].step_time_s)
    at.button(key="runs_archive").click().run(timeout=120)  # Open its archive
    goto(at, "archive", timeout=120)
    assert_clean(at)
    assert at.selectbox(key="arch_run").value == "stored:1"
    m = metrics(at)
    assert m["Elites"] == "9" and m["Plans simulated"] == "26" and m["Best step"] == fmt_seconds(exhaustive[0].step_time_s)
    assert figures(at)[0]["data"][0]["type"] == "heatmap"
    at.selectbox(key="arch_pick_stored:1").set_value(target.niche).run(timeout=120)
    assert_clean(at)
    m = metrics(at)
    assert m["Step"] == fmt_seconds(target.plan.step_time_s) and m["Fits in memory"] == "yes"
    row = at.dataframe[0].value
    assert (row["pipeline stages"][0], row["tensor-parallel"][0], row["data-parallel"][0]) == \
        (2, 2, target.plan.dp)
    assert "GB" in [f["layout"].get("yaxis", {}).get("title", {}).get("text") for f in figures(at)]
    at.toggle(key="plan_arch_trace").set_value(True).run(timeout=120)
    assert_clean(at)
    assert "The step, GPU by GPU" in text(at) and len(at.get("download_button")) == 1
    assert len(at.dataframe[1].value) == len(archive) == 9


def test_a_bad_niche_choice_says_why():
    at = start()
    _gpt(at)
    goto(at, "cluster", timeout=120)
    at.number_input(key="cluster_nodes").set_value(1)
    at.number_input(key="cluster_batch").set_value(8)
    at.multiselect(key="cluster_me_niches").set_value(["pp"])
    at.button(key="FormSubmitter:cluster_form-Search with MAP-Elites").click().run(timeout=120)
    assert not at.exception
    assert any("two or more different plan dimensions" in e.value for e in at.error)


def test_a_stored_plan_archive_from_another_version_is_named_not_a_traceback():
    import json
    import sqlite3

    from placement_core.cli import main
    from placement_core.store import RunStore

    base = ["plan", "--network", NET, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--search",
            "map-elites", "--budget", "6", "--json"]
    assert main(base) == 0 and main(base + ["--seed", "1"]) == 0  # runs 1 and 2
    with RunStore() as store:
        path = store.path
    with sqlite3.connect(path) as c:
        extras = json.loads(c.execute("SELECT extras FROM runs WHERE id=1").fetchone()[0])
        extras["plan_archive"]["format"] = 7
        c.execute("UPDATE runs SET extras=? WHERE id=1", (json.dumps(extras),))
    at = start()
    goto(at, "archive", timeout=120)
    assert not at.exception
    assert [w.value for w in at.warning] == [
        "Run 1 (a plan archive) cannot be reopened: run: run 1's plan archive was stored by another version of "
        "placement (format 7, this version reads 1). Run the search again (Cluster plan page, or \\`placement plan "
        "--search map-elites\\`)"]
    assert at.selectbox(key="arch_run").value == "stored:2"  # the readable one is listed and browsed
    assert metrics(at)["Plans simulated"] == "6"
    goto(at, "runs", timeout=60)
    assert not at.exception and sorted(at.dataframe[0].value["kind"]) == ["plan archive", "plan archive"]

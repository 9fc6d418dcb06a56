"""Issue 31, item 7 (AppTest): answers before the user asks. Optimize says when nothing beat the seed and why,
and loads a setup where placement matters; the chain-likeness and the setups are checked against numbers worked
out here from the networks and the simulator."""

import numpy as np
import pytest
from apptest_util import assert_clean, dashboard_run, decode, goto, start, text, wait_for_runs

from dashboard import seed_answer
from dashboard.background_runs import REGISTRY
from placement_core import Problem, load_devices, load_network
from placement_core.model.placement import single_device


def test_chain_share_by_hand():
    # ResNet-50: the residual shortcuts carry almost no compute, so nearly all of it is on one path;
    # Inception-V3's branches run side by side: a third of its compute lies off the heaviest path
    assert seed_answer.chain_share(load_network("resnet50")) == pytest.approx(0.911, abs=0.005)
    assert seed_answer.chain_share(load_network("inception_v3")) == pytest.approx(0.662, abs=0.005)
    g = load_network("resnet50")
    w = np.array([o.fwd_flops + o.bwd_flops for o in g.ops])
    # a brute-force bound: the heaviest path is at least the heaviest op and at most everything
    assert w.max() / w.sum() <= seed_answer.chain_share(g) <= 1.0
    assert seed_answer.identical_gpus(load_devices("malvik-4gpu"))


@pytest.mark.parametrize("name", list(seed_answer.SETUPS))
def test_each_offered_setup_is_one_where_placement_matters(name):
    """All on gpu0 is not the best there: over memory (GPT-2) or slower than splitting (Inception-V3)."""
    from placement_core.optimize.seeding import initial_placements
    from placement_core.problem import ProblemSpec

    net, dev, _, _ = seed_answer.SETUPS[name]
    g, d = load_network(net), load_devices(dev)
    p = ProblemSpec().build(g, d)
    seed = p.simulate(single_device(g, d, "gpu0"))
    seeds = initial_placements(p, "heft,heft-memory")
    assert min(seeds.objectives) < 0.8 * seed.objective  # a placer that splits the network does far better


@pytest.mark.slow
def test_nothing_beat_the_seed_says_so_and_offers_a_setup_where_placement_matters():
    at = start()
    run = dashboard_run(at, "ga", 300)
    assert_clean(at)
    assert len(REGISTRY.runs(at.session_state["session_key"])) == 1
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    seed = Problem(g, d).evaluate(single_device(g, d, "gpu0"))
    assert run.result.best_objective == pytest.approx(seed, rel=1e-12)  # ResNet-50 on one server: gpu0 stays
    page = text(at)
    assert "Nothing beat the seed" in page and "after 300 evaluations" in page
    assert "91% of the network's compute lies on one chain of dependent ops" in page
    assert "one GPU is optimal" in page
    at.button(key=f"matters_gpt2_{run.id}").click().run()
    assert_clean(at)
    assert at.session_state["base_graph_key"] == "builtin:gpt2"
    assert at.session_state["devices_key"] == "preset:malvik-4gpu"
    assert at.session_state["placement_label"] == "all on gpu0"
    at.multiselect(key="opt_algorithms").set_value(["map-elites"]).run()
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    assert_clean(at)
    later = max(REGISTRY.runs(at.session_state["session_key"]), key=lambda r: r.id)
    assert later.spec.network_label == "gpt2" and later.result.best_objective < 6.72  # gpu0: 6.73 s, over memory
    assert text(at).count("Nothing beat the seed") == 1  # the ResNet-50 run's note only


# -- Runs: the columns a W&B user expects ----------------------------------------------------------------

def _stored_runs():
    from placement_core.store import RunStore
    from placement_core.store.recording import start_run

    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    ids = {}
    with RunStore() as store:
        for algorithm, seed in (("ga", 1), ("ga", 2), ("map-elites", 1)):
            ids[(algorithm, seed)], _ = start_run(store, problem, algorithm, evaluations=200, seed=seed)
        records = {r.id: r for r in store.runs()}
        sizes = store.archive_sizes()
    return ids, records, sizes


@pytest.mark.slow
def test_runs_show_evaluations_per_second_wall_time_best_and_group_by_configuration():
    ids, records, sizes = _stored_runs()
    at = start()
    goto(at, "runs")
    assert_clean(at)
    table = at.dataframe[0].value.set_index("run")
    for (algorithm, seed), i in ids.items():
        rec = records[i]
        assert table.loc[i, "wall time (s)"] == pytest.approx(rec.wall_s)
        assert table.loc[i, "evaluations/s"] == pytest.approx(200 / rec.wall_s)
        assert table.loc[i, "best objective (ms)"] == pytest.approx(rec.best_objective * 1e3)
        assert table.loc[i, "seed"] == seed
    assert sizes[ids[("map-elites", 1)]] == table.loc[ids[("map-elites", 1)], "elites"] > 0
    ga = [ids[("ga", 1)], ids[("ga", 2)]]
    assert table.loc[ga, "elites"].isna().all()  # no archive: an empty cell (placeholder ""), never "None"
    assert at.dataframe[0].proto.placeholder == ""  # what an empty cell shows (the browser test reads it)
    at.toggle(key="runs_grouped").set_value(True).run()
    assert_clean(at)
    groups = at.dataframe[0].value
    assert len(groups) == 2  # GA with seeds 1 and 2 is one configuration, MAP-Elites another
    row = groups[groups["runs"] == 2].iloc[0]
    bests = [records[i].best_objective * 1e3 for i in ga]
    assert row["seeds"] == "1, 2" and row["evaluations"] == 400
    assert row["best objective (ms)"] == pytest.approx(min(bests))
    assert row["mean best (ms)"] == pytest.approx(sum(bests) / 2)
    assert row["worst best (ms)"] == pytest.approx(max(bests))
    conf = row["configuration"]
    assert conf.startswith("Genetic algorithm (") and "population 50" in conf and "seed" not in conf
    assert " · alexnet on malvik · 1 batch(es), 1 in flight, default costs, thesis penalty · 200 evaluations" in conf


# -- Archive: over memory marked apart, fewer quantile bins ----------------------------------------------

def test_quantile_groups_by_hand():
    from dashboard.archive_bins import quantile_groups

    # 20 elites over 14 bins, 4 groups: cuts where the elites before a bin reach 5, 10, 15 (running counts
    # before each filled bin: 0, 5, 6, 7, 9, 12 -> groups 0, 1, 1, 1, 1, 2); empty bins join the group before
    w = np.array([0, 5, 0, 0, 1, 1, 0, 2, 0, 0, 0, 3, 0, 8])
    assert quantile_groups(w, 4).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]
    assert quantile_groups(np.array([3, 0, 0]), 8).tolist() == [0, 1, 2]  # fewer bins than groups: as they are
    g = quantile_groups(np.arange(40) % 3, 8)
    assert g.max() + 1 <= 8 and (np.diff(g) >= 0).all() and (np.diff(g) <= 1).all()  # adjacent, in order


@pytest.mark.slow
def test_the_archive_map_groups_40_bins_into_quantiles_and_crosses_elites_over_memory():
    at = start()
    goto(at, "devices")
    at.selectbox(key="dev_preset").set_value("malvik-4gpu-limited-resnet50").run()  # GPUs too small for all
    assert at.session_state["devices_label"] == "malvik-4gpu-limited-resnet50"
    goto(at, "optimize")
    at.number_input(key="opt_evaluations").set_value(1500)
    at.multiselect(key="opt_algorithms").set_value(["map-elites"])
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    [run] = REGISTRY.runs(at.session_state["session_key"])
    goto(at, "archive")
    assert_clean(at)
    assert at.radio(key="arch_bins").value == "quantile"
    archive = run.result.archive
    fig = next(f for f in figures_of(at) if f["data"][0]["type"] == "heatmap")
    z = np.array(decode(fig["data"][0]["z"]), dtype=float)
    assert z.shape[1] <= 8 < 40
    # every merged cell holds the best objective of its bins (brute force over the elites), in ms
    best_row = {}
    for e in archive.elites.values():
        best_row[e.niche[0]] = min(best_row.get(e.niche[0], np.inf), e.objective)
    clipped = fig["data"][0]["zmax"]
    for row, best in best_row.items():
        assert np.nanmin(z[row]) == pytest.approx(min(best * 1e3, clipped))
    problem = archive.problem
    over = {(e.niche[0]) for e in archive.elites.values() if not problem.simulate(e.placement).feasible}
    assert over  # e.g. all on gpu0, the seed: 17 s with the penalty
    [cross] = [t for t in fig["data"] if str(t.get("name", "")).startswith("✕ over memory")]
    assert set(cross["y"]) <= over and cross["marker"]["symbol"] == "x-thin-open"
    text_marks = np.array(fig["data"][0]["text"])
    assert all(text_marks[y, x] != "▲" for x, y in zip(cross["x"], cross["y"]))  # never also merely slow
    # coverage and QD-score over time, ending at the final archive (worked out from its elites)
    quality = next(f for f in figures_of(at) if any(t.get("name") == "QD-score" for t in f["data"]))
    cov = next(t for t in quality["data"] if t["name"] == "coverage")
    qd = next(t for t in quality["data"] if t["name"] == "QD-score")
    xs, cs, qs = decode(cov["x"]), decode(cov["y"]), decode(qd["y"])
    fs = [e.objective for e in archive.elites.values()]
    assert xs[-1] == 1500 and len(xs) >= 2
    assert cs[-1] == pytest.approx(100 * len(fs) / np.prod(archive.shape))
    shown = float(quality["layout"]["yaxis2"]["title"]["text"].split("(")[1].split(" s")[0])  # 3 digits
    ref = (qs[-1] + sum(fs)) / len(fs)  # QD-score = sum over the final elites of (ref - objective)
    assert ref == pytest.approx(shown, rel=5e-3) and ref >= max(fs) - 1e-12  # the slowest any elite had
    assert all(b >= a - 1e-9 for a, b in zip(cs, cs[1:]))  # an archive never loses a niche
    assert all(b >= a - 1e-6 * abs(a) for a, b in zip(qs, qs[1:]))  # elites only fill niches or improve
    at.radio(key="arch_bins").set_value("all").run()
    fig = next(f for f in figures_of(at) if f["data"][0]["type"] == "heatmap")
    assert np.array(decode(fig["data"][0]["z"])).shape[1] == 40


def figures_of(at):
    from apptest_util import figures
    return figures(at)

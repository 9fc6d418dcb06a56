"""Cluster plan page (AppTest): plan a small GPT on one DGX node, read the table and the chosen plan's charts."""

from __future__ import annotations

import json

from apptest_util import assert_clean, figures, goto, show_tab, start, text


def _gpt(at):
    show_tab(at, "net_tab", "A GPT by its shape")  # the form is drawn while its tab is open
    for key, value in (("layers", 2), ("hidden", 64), ("heads", 4), ("seq", 32), ("vocab", 100), ("batch", 8)):
        at.number_input(key=f"gpt_{key}").set_value(value)
    at.button(key="FormSubmitter:net_gpt-Build this GPT").click().run()


def test_plan_a_gpt_on_one_node():
    at = start()
    _gpt(at)
    goto(at, "cluster", timeout=120)
    assert_clean(at)
    at.number_input(key="cluster_nodes").set_value(1)
    at.number_input(key="cluster_batch").set_value(8)
    assert at.selectbox(key="cluster_tp").value == 0  # a GPT's tensor parallelism is searched unless chosen
    at.selectbox(key="cluster_tp").set_value(1)
    at.button(key="FormSubmitter:cluster_form-Plan").click().run(timeout=180)
    assert_clean(at)
    table = at.dataframe[0].value
    assert len(table) == 10  # pp 1, 2, 4, 8 with every micro-batch dividing a replica's share (tests/test_plan.py)
    steps = list(table["step (ms)"])
    assert steps == sorted(steps) and set(table["fits"]) == {"yes"}
    specs = {e.proto.spec and json.loads(e.proto.spec)["layout"].get("yaxis", {}).get("title", {}).get("text")
             for e in at.get("plotly_chart")}
    assert "GB" in specs  # the memory chart
    memory = next(json.loads(e.proto.spec) for e in at.get("plotly_chart")
                  if json.loads(e.proto.spec)["layout"].get("yaxis", {}).get("title", {}).get("text") == "GB")
    assert [t["name"] for t in memory["data"]] == ["weights", "gradients", "optimizer", "activations"]
    assert len(at.get("plotly_chart")) == 3  # time, memory, the step's Gantt
    # the Megatron-LM command for a plan whose 2 layers its stages cut evenly, else why there is none
    k = next(i for i, p in enumerate(table["pipeline stages"]) if 2 % p == 0)
    if k:
        assert "splits them evenly" in "\n".join(c.value for c in at.caption) and not at.code
        at.selectbox(key="cluster_pick").set_value(k).run(timeout=120)
    [code] = at.code
    assert code.value.startswith("torchrun --nnodes=1 --nproc-per-node=8 pretrain_gpt.py")
    assert f"--pipeline-model-parallel-size {table['pipeline stages'][k]}" in code.value
    at.selectbox(key="cluster_pick").set_value(3).run(timeout=120)
    assert_clean(at)
    assert at.metric[0].value == f"{steps[3]:.4g} ms"


def test_tensor_parallelism_is_searched_for_a_gpt():
    """Issue 28: the page offers tensor parallelism for a GPT; searched, the table holds tp 1, 2 and 4 (the 4
    heads' divisors within the node) and a tp 2 plan shows its exposed all-reduces and Megatron's flag."""
    at = start()
    _gpt(at)
    goto(at, "cluster", timeout=120)
    at.number_input(key="cluster_nodes").set_value(1)
    at.number_input(key="cluster_batch").set_value(8)
    at.number_input(key="cluster_micro").set_value(1)
    at.selectbox(key="cluster_tp").set_value(0)
    at.selectbox(key="cluster_recompute").set_value("full")
    at.button(key="FormSubmitter:cluster_form-Plan").click().run(timeout=180)
    assert_clean(at)
    table = at.dataframe[0].value
    assert set(table["tensor-parallel"]) == {1, 2, 4}
    assert all(t * p * d == 8 for t, p, d in zip(table["tensor-parallel"], table["pipeline stages"],
                                                 table["data-parallel"]))
    k = list(table["tensor-parallel"]).index(2)
    at.selectbox(key="cluster_pick").set_value(k).run(timeout=120)
    assert_clean(at)
    time_fig = next(json.loads(e.proto.spec) for e in at.get("plotly_chart")
                    if json.loads(e.proto.spec)["layout"].get("xaxis", {}).get("title", {}).get("text") == "ms")
    tp_bar = [t for t in time_fig["data"] if t["name"] == "exposed tensor-parallel communication"]
    assert tp_bar and tp_bar[0]["x"][0] > 0
    [code] = at.code
    assert "--tensor-model-parallel-size 2" in code.value and "--recompute-granularity full" in code.value


def test_plan_128_nodes_shows_one_replica_and_keeps_the_choice():
    """Issue 28: above 32 nodes the page plans as `placement plan` does, its dp replicas folded into one: 128
    DGX A100 nodes (1,024 GPUs), tp 8 fixed, micro-batch 1, global batch 256: pp 1..64 (divisors of the 128
    tensor-parallel groups up to the 101 ops), so 7 plans. The best, tp 8 × pp 2 × dp 64, is drawn as one
    replica: stage 0 on GPU 0 (n0g0), stage 1 from GPU dp · tp = 512 (n64g0)."""
    at = start()
    show_tab(at, "net_tab", "A GPT by its shape")
    for key, value in (("layers", 8), ("hidden", 1024), ("heads", 16), ("seq", 1024), ("vocab", 50257),
                       ("batch", 2)):
        at.number_input(key=f"gpt_{key}").set_value(value)
    at.button(key="FormSubmitter:net_gpt-Build this GPT").click().run()
    goto(at, "cluster", timeout=120)
    at.number_input(key="cluster_nodes").set_value(128)
    at.number_input(key="cluster_batch").set_value(256)
    at.number_input(key="cluster_micro").set_value(1)
    at.selectbox(key="cluster_tp").set_value(8)
    at.button(key="FormSubmitter:cluster_form-Plan").click().run(timeout=240)
    assert_clean(at)
    assert "7 plans on dgx-a100:nodes=128 (1024 GPUs)" in text(at)
    table = at.dataframe[0].value
    assert sorted(table["pipeline stages"]) == [1, 2, 4, 8, 16, 32, 64]
    assert all(t * p * d == 1024 for t, p, d in zip(table["tensor-parallel"], table["pipeline stages"],
                                                    table["data-parallel"]))
    pp, dp = table["pipeline stages"][0], table["data-parallel"][0]
    assert f"The other {dp - 1:,} replicas run the same step" in text(at)
    memory = next(f for f in figures(at) if f["layout"].get("yaxis", {}).get("title", {}).get("text") == "GB")
    assert memory["data"][0]["x"] == [f"n{s * dp}g0" for s in range(pp)]  # stage s from GPU s · dp · 8
    time_fig = next(f for f in figures(at) if f["layout"].get("xaxis", {}).get("title", {}).get("text") == "ms")
    dp_bar = [t for t in time_fig["data"] if t["name"] == "data-parallel gradient all-reduce"]
    assert dp_bar and dp_bar[0]["x"][0] > 0
    assert len(at.get("plotly_chart")) == 3  # time, memory and one replica's Gantt
    assert at.metric[0].value == f"{table['step (ms)'][0]:.4g} ms"
    # leave the page and come back: the choices and the plans are kept
    goto(at, "trace", timeout=120)
    goto(at, "cluster", timeout=120)
    assert_clean(at)
    assert at.number_input(key="cluster_nodes").value == 128 and at.selectbox(key="cluster_tp").value == 8
    assert "7 plans on dgx-a100:nodes=128 (1024 GPUs)" in text(at)


def test_gpt3_on_128_nodes_plans_without_drawing_600_thousand_tasks():
    """GPT-3 (96 layers, hidden 12,288, 96 heads) on 128 DGX A100 nodes, tp 8 × pp 16 fixed (so dp 8), micro-batch
    1, global batch 1,536: one plan, 192 micro-batches a replica. Its step is not drawn GPU by GPU: 2 · 1,544
    ops of one tensor-parallel rank's graph (the layers' ops and their collectives) · 192 = 592,896 tasks."""
    at = start()
    show_tab(at, "net_tab", "A GPT by its shape")
    for key, value in (("layers", 96), ("hidden", 12288), ("heads", 96), ("seq", 2048), ("vocab", 50257),
                       ("batch", 1)):
        at.number_input(key=f"gpt_{key}").set_value(value)
    at.button(key="FormSubmitter:net_gpt-Build this GPT").click().run(timeout=120)
    goto(at, "cluster", timeout=120)
    for key, value in (("cluster_nodes", 128), ("cluster_batch", 1536), ("cluster_micro", 1), ("cluster_pp", 16)):
        at.number_input(key=key).set_value(value)
    at.selectbox(key="cluster_tp").set_value(8)
    at.button(key="FormSubmitter:cluster_form-Plan").click().run(timeout=240)
    assert_clean(at)
    assert "1 plans on dgx-a100:nodes=128 (1024 GPUs)" in text(at)
    table = at.dataframe[0].value
    assert (table["tensor-parallel"][0], table["pipeline stages"][0], table["data-parallel"][0]) == (8, 16, 8)
    assert table["micro-batches"][0] == 192
    assert "The other 7 replicas run the same step" in text(at)
    assert "this step has 592,896 (192 micro-batches through 1,544 ops" in text(at)
    assert len(at.get("plotly_chart")) == 2  # where the time goes and memory per GPU; no Gantt
    memory = next(f for f in figures(at) if f["layout"].get("yaxis", {}).get("title", {}).get("text") == "GB")
    assert memory["data"][0]["x"] == [f"n{8 * s}g0" for s in range(16)]  # stage s from GPU s · dp · tp = 64 s

"""Hostile GPT specs, cluster specs and `placement plan` arguments: a network, a device graph, or exit 2 with
one line; never a traceback (the project's bad-input contract, docs/security.md)."""

from __future__ import annotations

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core import InputError, load_devices, load_network
from placement_core.cli import main

KEYS = ["layers", "hidden", "heads", "seq", "vocab", "batch", "precision", "tied", "LAYERS", "depth", "", " "]
VALUES = st.one_of(st.integers(-3, 40), st.sampled_from(["bf16", "fp8", "1e3", "0x10", "1_0", "", "nan", "２"]),
                   st.text(max_size=5))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.tuples(st.sampled_from(KEYS), VALUES, st.sampled_from(["=", "", "=="])), max_size=9),
       head=st.sampled_from(["gpt:", "GPT:", " gpt:", "gpt: "]))
def test_a_gpt_spec_is_a_network_or_a_named_refusal(parts, head):
    spec = head + ",".join(f"{k}{eq}{v}" for k, v, eq in parts)
    try:
        g = load_network(spec)
    except InputError as e:
        assert e.field == "network" and "\n" not in str(e)
        return
    layers = [int(str(v).strip().replace("_", "")) for k, v, eq in parts if k.strip().lower() == "layers" and eq == "="]
    assert len(layers) == 1 and len(g) == 12 * layers[0] + 5  # a spec that loads named its layers once


@settings(max_examples=examples(150), deadline=None)
@given(kind=st.sampled_from(["dgx-a100", "dgx-h100", "DGX-A100", "dgx-a100 "]),
       body=st.one_of(st.builds(lambda n: f"nodes={n}", st.integers(-2, 40)), st.text(max_size=12)))
def test_a_cluster_spec_is_a_device_graph_or_a_named_refusal(kind, body):
    try:
        d = load_devices(f"{kind}:{body}")
    except InputError as e:
        assert e.field == "devices" and "\n" not in str(e)
        return
    assert len(d) % 8 == 0 and 8 <= len(d) <= 256


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.one_of(st.integers(-2, 40), st.just(2**40), st.sampled_from(["x", "1.5", ""])),
       pp=st.one_of(st.none(), st.integers(-1, 17)), dp=st.one_of(st.none(), st.integers(0, 17)),
       micro=st.one_of(st.none(), st.integers(0, 9)), tp=st.one_of(st.none(), st.integers(0, 3)),
       extra=st.sampled_from([[], ["--schedule", "interleaved-1f1b", "--virtual-stages", "2"], ["--zero", "3"],
                              ["--export", "megatron"], ["--export", "stages", "--pick", "99"],
                              ["--recompute", "full"], ["--optimizer", "lion"], ["--precision", "fp32", "--json"]]))
def test_plan_arguments_end_in_a_plan_or_one_error_line(capsys, batch, pp, dp, micro, tp, extra):
    argv = ["plan", "--network", "gpt:layers=2,hidden=32,heads=4,seq=16,vocab=50", "--devices", "dgx-a100:nodes=1",
            "--global-batch", str(batch)]
    for flag, value in (("--pp", pp), ("--dp", dp), ("--micro-batch", micro), ("--tp", tp)):
        if value is not None:
            argv += [flag, str(value)]
    code = main(argv + extra)
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, err)
    assert "Traceback" not in err + out
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error:") and not out

"""Network page (AppTest): a GPT by its shape (issue 28, item 1 in the dashboard)."""

from __future__ import annotations

from apptest_util import assert_clean, goto, metrics, show_tab, sidebar_text, start, text


def _build(at, **values):
    show_tab(at, "net_tab", "A GPT by its shape")  # the form is drawn while its tab is open
    for key, value in values.items():
        at.number_input(key=f"gpt_{key}").set_value(value)
    at.button(key="FormSubmitter:net_gpt-Build this GPT").click().run()


def test_a_gpt_is_built_from_its_shape_and_the_other_pages_use_it():
    at = start()
    _build(at, layers=12, hidden=768, heads=12, seq=1024, batch=4)
    assert_clean(at)
    m = metrics(at)
    assert m["Ops"] == str(12 * 12 + 5)
    assert m["Parameters"] == "326 MB"  # 124,439,808 bf16 weights and the tied logit layer's copy, 2 bytes each
    assert "GPT, 124 M parameters (12 layers, hidden 768, bf16)" in sidebar_text(at)
    assert "Built GPT, 124 M parameters" in text(at)
    goto(at, "trace", timeout=120)
    assert_clean(at)
    goto(at, "network")
    assert metrics(at)["Ops"] == "149"  # it stays the network when the user comes back


def test_a_bad_shape_says_what_is_wrong_and_keeps_the_network():
    at = start()
    _build(at, hidden=1000, heads=16)
    assert not at.exception
    [err] = at.error
    assert "hidden=1000 is not a multiple of heads=16" in err.value and "ResNet-50" in err.value
    assert metrics(at)["Ops"] == "176"  # still ResNet-50

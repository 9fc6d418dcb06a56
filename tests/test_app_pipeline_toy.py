"""Pipeline page, toy model (AppTest): the lecture's numbers are the closed forms, and a transfer per hop
shows up as the part of the bubble the textbook does not have."""

import pytest

from apptest_util import assert_clean, figures, goto, metrics, start, text


def toy_page():
    at = start()
    goto(at, "pipeline")
    assert_clean(at)
    assert "Step (simulated)" not in metrics(at)  # closed, the lecture is not computed
    at.session_state["toy_section"] = True  # opened (the expander reruns the page)
    at.run()
    assert_clean(at)
    return at


@pytest.mark.slow
def test_the_default_toy_is_the_closed_form():
    at = toy_page()
    shown = metrics(at)
    # p = 4, m = 8, t_f = 1 ms, t_b = 2 ms: (8 + 4 - 1) * 3 ms = 33 ms; bubble 3/11
    assert shown["Step (simulated)"] == "33 ms" == shown["Closed form (m + p − 1)(t_f + t_b) + t_u"]
    assert shown["Bubble (p − 1)/(m + p − 1)"] == "27.3%"
    [fig] = [f for f in figures(at) if "4 equal stages" in str(f["layout"].get("title", ""))]
    assert "8 micro-batches" in str(fig["layout"]["title"])


@pytest.mark.slow
def test_a_transfer_per_hop_is_named_as_part_of_the_bubble():
    at = toy_page()
    for key, value in (("toy_p", 2), ("toy_m", 1), ("toy_hop", 0.25)):
        at.number_input(key=key).set_value(value).run()
    assert_clean(at)
    shown = metrics(at)
    # F0 1, hop 0.25, F1 + B1 3, hop back 0.25, B0 2: 6.5 ms against the closed form's 6 ms
    assert shown["Step (simulated)"] == "6.5 ms" and shown["Closed form (m + p − 1)(t_f + t_b) + t_u"] == "6 ms"
    assert "transfers add 1 ms (14%)" in text(at)
    at.radio(key="toy_schedule").set_value("1f1b").run()
    assert metrics(at)["Step (simulated)"] == "6.5 ms"  # one micro-batch: the two schedules are the same

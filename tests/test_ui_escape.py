"""Error messages carry a user's strings (op, device and file names, typed parameters): on every page they
are shown as literal text, never as markdown that could draw an image from elsewhere or restyle the page."""

import pytest
from streamlit.testing.v1 import AppTest


def _guarded_input_error():
    from dashboard import ui
    from placement_core import InputError
    with ui.guarded("the table"):
        raise InputError("op '![x](https://x.test/a.png)' is *not* <b>here</b>", field="ops[0].name",
                         fix="Rename it")


def _guarded_crash():
    from dashboard import ui
    with ui.guarded("the chart"):
        raise KeyError("[link](https://x.test) :red[alarm]")


def test_an_input_error_in_a_guarded_section_is_literal_text():
    at = AppTest.from_function(_guarded_input_error).run()
    [err] = at.error
    assert r"op '!\[x\](https://x.test/a.png)' is \*not\* &lt;b&gt;here&lt;/b&gt;" in err.value
    assert "Rename it" in err.value and not at.exception


@pytest.mark.slow
def test_an_unexpected_error_names_its_type_and_stays_text():
    at = AppTest.from_function(_guarded_crash).run()
    [err] = at.error
    assert err.value.startswith("Something went wrong while drawing the chart: KeyError: ")
    assert r"\[link\](https://x.test) :red\[alarm\]" in err.value and not at.exception

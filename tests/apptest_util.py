"""Helpers for the dashboard's AppTest tests (Streamlit's headless test runner)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def start(timeout: float = 30) -> AppTest:
    """The app after its first run (Network page, default state)."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    assert_clean(at)
    return at


def goto(at: AppTest, page: str, timeout: float | None = None) -> AppTest:
    at.switch_page(f"app_pages/{page}.py")
    at.run(timeout=timeout)
    return at


def assert_clean(at: AppTest) -> None:
    """No exception element and no error message on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def figures(at: AppTest) -> list[dict]:
    """The Plotly figure specs on the page, in order."""
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


def text(at: AppTest) -> str:
    parts = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "success", "error"):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


def sidebar_text(at: AppTest) -> str:
    return "\n".join(str(e.value) for e in at.sidebar.markdown)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def wait_for_runs(at: AppTest, timeout: float = 60) -> None:
    """Join every background run of this session, then rerun the page."""
    from dashboard.background_runs import REGISTRY

    deadline = time.time() + timeout
    for r in REGISTRY.runs(at.session_state["session_key"]):
        r.thread.join(max(0.0, deadline - time.time()))
        assert not r.active, f"{r.name} still running after {timeout} s"
    at.run()


def dashboard_run(at: AppTest, algorithm: str, evaluations: int = 300):
    """Start one run of ``algorithm`` from the Optimize page as a user does, wait for it; the run."""
    from dashboard.background_runs import REGISTRY

    goto(at, "optimize")
    at.number_input(key="opt_evaluations").set_value(evaluations)
    at.multiselect(key="opt_algorithms").set_value([algorithm])
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    return [r for r in REGISTRY.runs(at.session_state["session_key"]) if r.spec.algorithm == algorithm][-1]


def decode(values):
    """A Plotly data array: a plain list, or Plotly's base64 typed-array form."""
    import base64

    import numpy as np

    if isinstance(values, dict) and "bdata" in values:
        arr = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
        if "shape" in values:
            arr = arr.reshape([int(n) for n in str(values["shape"]).split(",")])
        return arr.tolist()
    return list(values)


def show_tab(at: AppTest, key: str, label: str) -> AppTest:
    """Choose the tab ``label`` of the lazy tabs ``key`` (as a click does: the page reruns drawing only it);
    nothing to do when it is the tab shown."""
    if key in at.session_state and at.session_state[key] == label:
        return at
    at.session_state[key] = label
    at.run()
    assert_clean(at)
    return at


def frame(at, first_column: str):
    """The dataframe on the page whose first column is ``first_column``."""
    for df in at.dataframe:
        v = df.value
        if len(v.columns) and v.columns[0] == first_column:
            return v
    raise KeyError(first_column)

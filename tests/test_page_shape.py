"""Every dashboard page has the same shape (docs/design.md §9), checked from its source:

a docstring saying what the page is for; imports; ``ui.header(title, purpose)`` as the first thing drawn;
and every top-level statement that draws inside ``with ui.guarded(...)``, so a bad input or a bug in one
section shows a message there and the rest of the page still draws. Pages never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[1] / "app_pages").glob("*.py"))


def _is_call_on(node: ast.AST, owner: str, name: str | None = None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner
            and (name is None or node.func.attr == name))


CONTROL = {"stop", "rerun", "switch_page"}  # Streamlit flow control: draws nothing


def _draws(node: ast.AST) -> bool:
    """Whether ``node`` calls ``st.*`` (other than flow control) or another page-drawing helper."""
    return any(_is_call_on(sub, "st") and sub.func.attr not in CONTROL for sub in ast.walk(node))


def _guarded(node: ast.AST) -> bool:
    return isinstance(node, ast.With) and any(_is_call_on(i.context_expr, "ui", "guarded") for i in node.items)


def _unguarded(stmts: list[ast.stmt]) -> list[int]:
    """Lines of top-level statements that draw outside ``with ui.guarded(...)``."""
    lines = []
    for node in stmts:
        if _guarded(node) or isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, (ast.If, ast.For, ast.While)):
            lines += _unguarded(node.body + node.orelse) + ([node.lineno] if _draws(node.test if isinstance(
                node, (ast.If, ast.While)) else node.iter) else [])
        elif _draws(node):
            lines.append(node.lineno)
    return lines


def shape_problems(source: str) -> list[str]:
    tree = ast.parse(source)
    problems = []
    body = tree.body
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        problems.append("no docstring")
    calls = [n for n in body[1:] if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    defs = (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    first = next((n for n in body[1:] if not isinstance(n, defs) and (_draws(n) or n in calls)), None)
    header = first is not None and first in calls and _is_call_on(first.value, "ui", "header")
    if not header:
        problems.append("ui.header(...) is not the first thing drawn")
    rest = [n for n in body[1:] if not (header and n is first)]
    problems += [f"line {line}: draws outside ui.guarded" for line in _unguarded(rest)]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app_pages"):
            problems.append(f"line {node.lineno}: imports another page")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_has_the_house_shape(page):
    assert shape_problems(page.read_text()) == []


def test_the_shape_check_sees_a_page_that_breaks_it():
    bad = '"""A page."""\nimport streamlit as st\nfrom dashboard import ui\nst.title("x")\nui.header("X", "y")\n'
    assert shape_problems(bad) == ["ui.header(...) is not the first thing drawn", "line 4: draws outside ui.guarded"]
    good = ('"""A page."""\nimport streamlit as st\nfrom dashboard import ui\nui.header("X", "y")\n'
            's = 1\nwith ui.guarded("it"):\n    st.write(s)\n')
    assert shape_problems(good) == []

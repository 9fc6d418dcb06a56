"""The import rules of docs/design.md ("Layers"), checked from the code's own imports.

Every import counts, including the ones inside functions: a lazy import still ties
two modules together, and a cycle through one breaks as soon as someone hoists it.
A module missing from LAYERS fails the test on purpose: place it in docs/design.md
and here when it is created.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import its own layer and the ones before it, never a later one.
# Matched by longest prefix; a name ending in "." is a folder (its __init__ included); "=name" is that module only.
LAYERS: list[tuple[str, list[str]]] = [
    ("base", ["placement_core.base."]),
    ("model", ["placement_core.model."]),
    ("formats", ["placement_core.formats.", "placement_core.families."]),
    ("cost", ["placement_core.cost."]),
    ("simulate", ["placement_core.simulate."]),
    ("problem", ["placement_core.problem."]),
    # The package's front door re-exports the everyday names of the layers below it.
    ("api", ["=placement_core"]),
    ("parallel", ["placement_core.parallel."]),
    ("optimize", ["placement_core.optimize.", "placement_core.policies."]),
    ("analysis", ["placement_core.analysis."]),
    ("surrogate", ["placement_core.surrogate."]),
    ("store", ["placement_core.store."]),
    ("torch", ["placement_core.torch."]),
    ("experiments", ["placement_core.experiments."]),
    ("cli", ["placement_core.cli.", "placement_core.__main__"]),
    ("dashboard", ["dashboard.", "app_pages.", "app"]),
]

DRAWING = ("streamlit", "plotly", "pyvis")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = list((ROOT / "placement_core").rglob("*.py")) + list((ROOT / "dashboard").rglob("*.py"))
    files += list((ROOT / "app_pages").rglob("*.py")) + [ROOT / "app.py"]
    return {_module_name(p): p for p in files}


SOURCES = _sources()


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of every module `name` imports (any depth in the file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                # `from pkg import sub` imports the module pkg.sub when it is one.
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in SOURCES else module)
    return found


IMPORTS = {name: _imports(name, path) for name, path in SOURCES.items()}


def layer_of(module: str) -> int | None:
    best, best_len = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.startswith("="):
                hit = module == prefix[1:]
            elif prefix.endswith("."):
                hit = module == prefix[:-1] or module.startswith(prefix)
            else:
                hit = module == prefix or module.startswith(prefix + ".")
            if hit and len(prefix) > best_len:
                best, best_len = rank, len(prefix)
    return best


def _own(module: str) -> bool:
    return module.split(".")[0] in ("placement_core", "dashboard", "app_pages", "app")


def _resolve(module: str, known=None) -> str:
    """The longest prefix of `module` that is one of our source files."""
    known = SOURCES if known is None else set(SOURCES) | set(known)
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module


def test_every_module_has_a_layer():
    missing = sorted(m for m in SOURCES if layer_of(m) is None)
    assert not missing, f"place these modules in LAYERS (tests/test_layering.py) and docs/design.md: {missing}"


def upward_imports(imports: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, imported in imports.items():
        mine = layer_of(module)
        for target in imported:
            if not _own(target):
                continue
            target = _resolve(target, imports)
            theirs = layer_of(target)
            if target and theirs is not None and mine is not None and theirs > mine:
                upward.append(f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    return sorted(upward)


def import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    graph = {m: {_resolve(t, imports) for t in ts if _own(t)} - {m, ""} for m, ts in imports.items()}
    # A package's __init__ re-exporting its children is not a cycle with them: drop child -> own package.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def torch_outside_its_folder(imports: dict[str, set[str]]) -> list[str]:
    return sorted(m for m, ts in imports.items() if not m.startswith("placement_core.torch")
                  and any(t.split(".")[0] in ("torch", "torchvision") for t in ts))


def pages_imported_outside_app(imports: dict[str, set[str]]) -> list[str]:
    """The pages sit above everything: only app.py (the navigation) may import them; the dashboard's
    helpers never do, so a page can change without touching what the other pages share."""
    return sorted(f"{m} imports {t}" for m, ts in imports.items() if m.startswith("dashboard")
                  for t in ts if t == "app_pages" or t.startswith("app_pages."))


def test_no_import_points_upward():
    upward = upward_imports(IMPORTS)
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    cycles = import_cycles(IMPORTS)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("library", DRAWING)
def test_core_never_draws(library):
    offenders = sorted(m for m, ts in IMPORTS.items() if m.startswith("placement_core")
                       and any(t == library or t.startswith(library + ".") for t in ts))
    assert not offenders, f"placement_core must not import {library}: {offenders}"


def test_only_the_torch_folder_imports_torch():
    offenders = torch_outside_its_folder(IMPORTS)
    assert not offenders, f"only placement_core/torch/ may import torch: {offenders}"


def test_the_dashboard_never_imports_a_page():
    offenders = pages_imported_outside_app(IMPORTS)
    assert not offenders, "\n".join(offenders)


def test_the_checks_see_planted_violations():
    """Each rule fires on a made-up import graph that breaks it, and only there."""
    planted = {
        "placement_core.model.graph": {"placement_core.optimize.base", "torch"},
        "placement_core.optimize.base": {"placement_core.model.graph"},
        "placement_core.cli.common": {"placement_core.model.graph", "torch.nn"},
    }
    assert upward_imports(planted) == ["placement_core.model.graph (model) imports placement_core.optimize.base (optimize)"]
    # the dashboard's helpers never import a page; app.py (the navigation) does
    assert pages_imported_outside_app({"dashboard.charts.trace": {"app_pages.trace"}, "app": {"app_pages.runs"}}) == [
        "dashboard.charts.trace imports app_pages.trace"]
    # parallel/ ranks below optimize/: a backend that imports an optimizer points upward
    assert upward_imports({"placement_core.parallel.pool": {"placement_core.optimize.variation"}}) == [
        "placement_core.parallel.pool (parallel) imports placement_core.optimize.variation (optimize)"]
    assert import_cycles(planted) == [["placement_core.model.graph", "placement_core.optimize.base"]]
    assert torch_outside_its_folder(planted) == ["placement_core.cli.common", "placement_core.model.graph"]
    fine = {"placement_core.optimize.base": {"placement_core.model.graph"}, "placement_core.torch.apply": {"torch"}}
    assert upward_imports(fine) == [] and import_cycles(fine) == [] and torch_outside_its_folder(fine) == []


def test_module_size():
    """Modules stay small enough to read in one sitting (the C kernel is the exception): the core, the
    dashboard's helpers and its pages alike."""
    big = {m: n for m, p in SOURCES.items() if m.split(".")[0] in ("placement_core", "dashboard", "app_pages")
           and (n := len(p.read_text().splitlines())) > 420}
    assert not big, f"split these modules by job: {big}"

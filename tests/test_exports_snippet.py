"""The exported PyTorch snippet: user strings (network, device, module names) can never become code."""

import ast
import json
import subprocess
import sys

import numpy as np

from helpers import op
from placement_core.formats.catalog import assets_dir
from placement_core.cli import main
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.analysis.exports import torch_snippet
from placement_core.model.graph import Graph

EVIL = 'x\nimport os; os.system("touch PWNED")\n# '


def test_a_hostile_name_stays_inside_the_comment_and_the_strings(tmp_path):
    g = Graph(EVIL, [op("x", kind="input"), op("fc", inputs=["x"], module=EVIL + "fc")])
    d = DeviceGraph(EVIL, [Device("gpu0", "gpu", 1e12, 1e9, 1e9), Device("gpu1", "gpu", 1e12, 1e9, 1e9)],
                    [Channel("bus", 1e9, 0.0, (("gpu0", "gpu1"), ("gpu1", "gpu0")))])
    text = torch_snippet(np.array([0, 1], dtype=np.int32), g, d)
    tree = ast.parse(text)
    # exactly what the snippet should hold at module level: the map and the function, nothing imported or called
    assert [type(n).__name__ for n in tree.body] == ["Assign", "FunctionDef"]
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))
    namespace: dict = {}
    exec(compile(tree, "snippet", "exec"), namespace)  # defines DEVICE_MAP and place(), runs nothing else
    assert namespace["DEVICE_MAP"] == {EVIL + "fc": "cuda:1"}
    assert text.splitlines()[0].startswith("# Placement of 'x\\nimport os;")
    _run_creates_nothing(text, tmp_path)


def _run_creates_nothing(text: str, folder) -> None:
    """Run the snippet as a script in ``folder``: it must only define names (and so create no file there)."""
    (folder / "snippet.py").write_text(text)
    done = subprocess.run([sys.executable, "snippet.py"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["snippet.py"]


def _module_level_calls(tree: ast.Module) -> list[str]:
    return [ast.unparse(n) for stmt in tree.body if not isinstance(stmt, ast.FunctionDef)
            for n in ast.walk(stmt) if isinstance(n, ast.Call)]


def test_runs_export_snippet_of_a_network_named_to_inject_code(tmp_path, capsys):
    """The path a user takes: a network file with a hostile name, optimized and stored, then
    `placement runs export --what snippet`; the file compiles to the map and the function only."""
    net = json.loads((assets_dir() / "networks" / "alexnet.json").read_text())
    net["name"] = 'x\nimport os; os.system("touch PWNED")'
    (tmp_path / "evil.json").write_text(json.dumps(net))
    home, out = tmp_path / "home", tmp_path / "out"
    out.mkdir()
    assert main(["optimize", "--network", str(tmp_path / "evil.json"), "--devices", "malvik", "--algorithm",
                 "random", "--budget", "3", "--home", str(home), "--quiet"]) == 0
    assert main(["runs", "export", "1", "--home", str(home), "--what", "snippet",
                 "--out", str(out / "snippet.py")]) == 0
    capsys.readouterr()
    text = (out / "snippet.py").read_text()
    tree = ast.parse(compile(text, "snippet.py", "exec", ast.PyCF_ONLY_AST))
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))
    assert _module_level_calls(tree) == []  # no os.system(...) or anything else runs when it is loaded
    assert [type(n).__name__ for n in tree.body] == ["Assign", "FunctionDef"]
    assert "x\\nimport os; os.system(\"touch PWNED\")" in text.splitlines()[0]  # still named, as a repr
    (out / "snippet.py").unlink()
    _run_creates_nothing(text, out)

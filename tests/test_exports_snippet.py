"""The exported PyTorch snippet: user strings (network, device, module names) can never become code."""

import ast

import numpy as np

from helpers import op
from placement_core.devices import Channel, Device, DeviceGraph
from placement_core.exports import torch_snippet
from placement_core.graph import Graph

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
    assert not (tmp_path / "PWNED").exists()
    assert text.splitlines()[0].startswith("# Placement of 'x\\nimport os;")

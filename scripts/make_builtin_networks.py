"""Generates the built-in networks under assets/networks/ from torchvision.

    python scripts/make_builtin_networks.py

Needs torch and torchvision (.venv/bin/pip install -e .[torch]); the core reads the
resulting JSON without them. Each network is traced with torch.fx at batch 1
and ImageNet input size, then scaled to the thesis' batch of 128.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torchvision  # noqa: E402

from placement_core.jsonio import write_json  # noqa: E402
from placement_core.netformat import network_to_dict  # noqa: E402
from placement_core.torch.model_import import import_module  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "assets" / "networks"
BATCH = 128

MODELS = {
    "alexnet": (lambda: torchvision.models.alexnet(weights=None), (1, 3, 224, 224)),
    "vgg16": (lambda: torchvision.models.vgg16(weights=None), (1, 3, 224, 224)),
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), (1, 3, 224, 224)),
    # No auxiliary classifier: the thesis' Inception-V3 has none either.
    "inception_v3": (lambda: torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False),
                     (1, 3, 299, 299)),
}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(MODELS):
        build, shape = MODELS[name]
        graph = import_module(build(), shape, name=name, batch_size=BATCH)
        write_json(OUT / f"{name}.json", network_to_dict(graph), indent=None)
        t = graph.totals()
        print(f"{name}: {t['ops']} ops, {t['fwd_flops'] / 1e12:.2f} TFLOP forward at batch {BATCH}, "
              f"{t['param_bytes'] / 1e6:.1f} MB parameters")


if __name__ == "__main__":
    main(sys.argv[1:])

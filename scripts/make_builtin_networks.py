"""Generates the built-in networks under assets/networks/ from torchvision and our own GPT-2.

    python scripts/make_builtin_networks.py [NAME ...]

Needs torch and torchvision (.venv/bin/pip install -e .[torch]); the core reads the
resulting JSON without them. Each network is traced with torch.fx at batch 1
and its input size (ImageNet images; GPT-2: 1,024 token ids), then scaled to its
batch: the thesis' 128 for the CNNs and ViT-B/16, 32 sequences (32,768 tokens)
for GPT-2 small (placement_core/torch/gpt2.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torchvision  # noqa: E402

from placement_core.base.jsonio import write_json  # noqa: E402
from placement_core.formats.network import network_to_dict  # noqa: E402
from placement_core.torch.gpt2 import gpt2  # noqa: E402
from placement_core.torch.model_import import import_module  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "assets" / "networks"
BATCH = 128

MODELS = {  # name: (build, input shape at batch 1, batch)
    "alexnet": (lambda: torchvision.models.alexnet(weights=None), (1, 3, 224, 224)),
    "vgg16": (lambda: torchvision.models.vgg16(weights=None), (1, 3, 224, 224)),
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), (1, 3, 224, 224)),
    # No auxiliary classifier: the thesis' Inception-V3 has none either.
    "inception_v3": (lambda: torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False),
                     (1, 3, 299, 299)),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(weights=None), (1, 3, 224, 224)),
    "gpt2": (gpt2, (1, 1024), 32),
}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(MODELS):
        build, shape, *batch = MODELS[name]
        batch = batch[0] if batch else BATCH
        graph = import_module(build(), shape, name=name, batch_size=batch)
        write_json(OUT / f"{name}.json", network_to_dict(graph), indent=None)
        t = graph.totals()
        print(f"{name}: {t['ops']} ops, {t['fwd_flops'] / 1e12:.2f} TFLOP forward at batch {batch}, "
              f"{t['param_bytes'] / 1e6:.1f} MB parameters")


if __name__ == "__main__":
    main(sys.argv[1:])

"""What every measuring worker does first: rebuild the model from its spec and trace it at the batch."""

from __future__ import annotations

from .devspec import LocalDevice


def load_traced(spec: dict, state_dict_required: bool = False):
    """(devices, input shape, traced model) from a worker spec: the model built from its source with the
    spec's seed, the parent's weights loaded when it sent them, traced at the batch it will run with."""
    import torch

    from .model_import import trace_for_batch
    from .sources import load_model

    devs = [LocalDevice(**d) for d in spec["devices"]]
    shape = tuple(spec["input_shape"])
    model = load_model(spec["source"], seed=spec["seed"])
    if spec.get("state_dict") or state_dict_required:
        model.load_state_dict(torch.load(spec["state_dict"], weights_only=True))
    return devs, shape, trace_for_batch(model, shape, spec["batch_size"])

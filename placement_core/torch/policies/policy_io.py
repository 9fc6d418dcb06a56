"""Trained networks to ``placement-policy/1`` files and back (the format: ``placement_core.policies.policy_file``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...base.errors import InputError
from ...policies.policy_file import policy_from_dict, policy_to_dict, read_policy, write_policy


@dataclass
class LoadedPolicy:
    method: str
    net: torch.nn.Module
    config: dict
    devices: dict
    training: dict
    source: str | None = None

    def check_devices(self, n_devices: int) -> None:
        """Placeto and GDP score devices, so they place on any number; a GDP policy of the first version (its
        config names ``devices``) has one output per device."""
        want = self.config.get("devices")
        if self.method == "gdp" and want is not None and want != n_devices:
            raise InputError(f"this GDP policy places on {want} devices, the device graph has {n_devices}",
                             source=self.source, field="devices",
                             fix="Use a device graph with that many devices, or train a GDP policy again with "
                                 "`placement train-policy --method gdp` (today's scores devices, any number)")


def build_net(method: str, config: dict) -> torch.nn.Module:
    from .gdp import GdpNet
    from .placeto_net import PlacetoNet
    try:
        if method == "placeto":
            return PlacetoNet(**{k: (str(v) if k == "start" else int(v)) for k, v in config.items()})
        return GdpNet(**{k: int(v) for k, v in config.items()})
    except (TypeError, ValueError) as e:
        raise InputError(f"the network's configuration does not fit a {method} policy ({e})", field="config",
                         fix="Use a file written by `placement train-policy`") from None


def policy_dict(method: str, net: torch.nn.Module, *, devices: dict, training: dict) -> dict:
    tensors = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    return policy_to_dict(method, net.config, tensors, devices=devices, training=training)


def save_policy(path: str | Path, method: str, net: torch.nn.Module, *, devices: dict, training: dict) -> None:
    write_policy(path, policy_dict(method, net, devices=devices, training=training))


def load_policy(path: str | Path) -> LoadedPolicy:
    return policy_from_data(read_policy(path), source=str(path))


def policy_from_data(data: dict, source: str | None = None) -> LoadedPolicy:
    """A decoded policy (``policyfile.policy_from_dict``'s output, or a raw dict) as a ready network."""
    if not isinstance(data.get("tensors"), dict) or any(not hasattr(v, "shape") for v in data["tensors"].values()):
        data = policy_from_dict(data, source=source)
    net = build_net(data["method"], data["config"])
    own = net.state_dict()
    tensors = data["tensors"]
    for name, value in own.items():
        if name not in tensors:
            raise InputError(f"the policy has no tensor {name!r}", source=source, field=f"tensors.{name}",
                             fix="Use a file written by `placement train-policy` with this version")
        if tuple(tensors[name].shape) != tuple(value.shape):
            raise InputError(f"tensor {name!r} has shape {list(tensors[name].shape)}, the network needs "
                             f"{list(value.shape)}", source=source, field=f"tensors.{name}")
    extra = sorted(set(tensors) - set(own))
    if extra:
        raise InputError(f"the policy has a tensor {extra[0]!r} this network does not", source=source,
                         field=f"tensors.{extra[0]}", fix="Use a file written by `placement train-policy`")
    net.load_state_dict({k: torch.from_numpy(tensors[k].copy()) for k in own})
    net.eval()
    return LoadedPolicy(data["method"], net, dict(data["config"]), dict(data.get("devices", {})),
                        dict(data.get("training", {})), source)

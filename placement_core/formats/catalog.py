"""Built-in networks and device presets, and loading either from a name or a file.

Files may be in our formats or in Exprimo's; the loader tells them apart by
their keys ("format" for ours, "layers" / "comm_channels" for Exprimo's).
Device presets also come from the user's data folder (``$PLACEMENT_HOME``,
default ``~/.placement``): ``placement calibrate`` saves the measured machine
there as ``devices/local.json``, so ``local`` works like a built-in name.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import clusters, exprimo
from ..families import gpt
from ..model.devices import DeviceGraph, devices_from_dict
from ..base.errors import InputError
from ..model.graph import Graph
from ..base.jsonio import parse_json, path_exists, read_json
from .network import network_from_dict


def assets_dir() -> Path:
    """``assets/`` of the checkout, or the copy installed inside the package."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "assets", package / "_assets"):
        if (candidate / "networks").is_dir():
            return candidate
    raise InputError("the built-in assets are missing", fix="Reinstall placement_core from its checkout")


def builtin_networks() -> list[str]:
    return sorted(p.stem for p in (assets_dir() / "networks").glob("*.json"))


def user_dir() -> Path:
    """Where calibrations are kept: ``$PLACEMENT_HOME``, default ``~/.placement``."""
    return Path(os.environ.get("PLACEMENT_HOME") or Path.home() / ".placement")


def _shipped_devices() -> list[str]:
    return sorted(p.stem for p in (assets_dir() / "devices").glob("*.json"))


def user_devices() -> list[str]:
    """Presets in the user's data folder (a shipped preset of the same name wins)."""
    shipped = set(_shipped_devices())
    return sorted(p.stem for p in (user_dir() / "devices").glob("*.json") if p.stem not in shipped)


def builtin_devices() -> list[str]:
    """Every preset name: the shipped ones and the user's (``local`` after a calibration)."""
    return sorted(_shipped_devices() + user_devices())


@lru_cache(maxsize=32)
def _builtin_network(name: str) -> Graph:
    path = assets_dir() / "networks" / f"{name}.json"
    return network_from_dict(read_json(path), source=name)


@lru_cache(maxsize=32)
def _builtin_devices(name: str) -> DeviceGraph:
    return devices_from_dict(read_json(assets_dir() / "devices" / f"{name}.json"), source=name)


def network_from_data(data: Any, source: str | None = None, batch_size: int | None = None) -> Graph:
    """A network from parsed JSON in either format."""
    if exprimo.is_exprimo_network(data):
        return exprimo.network_from_exprimo(data, source=source, batch_size=batch_size)
    graph = network_from_dict(data, source=source)
    return graph if batch_size is None else graph.with_batch_size(batch_size)


def devices_from_data(data: Any, source: str | None = None) -> DeviceGraph:
    if exprimo.is_exprimo_devices(data):
        return exprimo.devices_from_exprimo(data, source=source)
    return devices_from_dict(data, source=source)


def load_network(spec: str, batch_size: int | None = None) -> Graph:
    """A built-in name (``resnet50``), a parametric GPT (``gpt:layers=12,hidden=768,heads=12``, see
    :mod:`..families.gpt`) or a path to a network file."""
    if gpt.is_gpt(spec):
        return _gpt_network(spec.strip(), batch_size)
    if spec in builtin_networks():
        graph = _builtin_network(spec)
        return graph if batch_size is None else graph.with_batch_size(batch_size)
    path = Path(spec)
    if not path_exists(path, "network"):
        raise InputError(f"{spec!r} is neither a built-in network nor a file", field="network",
                         fix="Use one of: " + ", ".join(builtin_networks()) + ", gpt:layers=L,hidden=H,heads=A, "
                             "or a path to a JSON file")
    return network_from_data(read_json(path), source=str(path), batch_size=batch_size)


@lru_cache(maxsize=8)
def _gpt_network(spec: str, batch_size: int | None) -> Graph:
    return gpt.load(spec, batch_size)


def load_devices(spec: str) -> DeviceGraph:
    """A preset name (``malvik``, or ``local`` once calibrated), a parametric cluster (``dgx-a100:nodes=4``,
    :mod:`.clusters`) or a path to a device-graph file."""
    if clusters.is_cluster(spec):
        return _cluster(spec.strip().lower().replace(" ", ""))
    if spec in _shipped_devices():
        return _builtin_devices(spec)
    if spec in user_devices():  # not cached: a new calibration replaces it
        path = user_dir() / "devices" / f"{spec}.json"
        return devices_from_data(read_json(path), source=str(path))
    if spec == "local":
        raise InputError("there is no calibrated 'local' preset yet", field="devices",
                         fix="Run `placement calibrate --model ... --devices cpu:2` first (it saves it in "
                             f"{user_dir() / 'devices'})")
    path = Path(spec)
    if not path_exists(path, "devices"):
        raise InputError(f"{spec!r} is neither a device preset nor a file", field="devices",
                         fix="Use one of: " + ", ".join(builtin_devices()) + ", dgx-a100:nodes=N, dgx-h100:nodes=N, "
                             "or a path to a JSON file")
    return devices_from_data(read_json(path), source=str(path))


@lru_cache(maxsize=8)
def _cluster(spec: str) -> DeviceGraph:
    return clusters.load(spec)


def network_from_upload(content: bytes, filename: str, batch_size: int | None = None) -> Graph:
    return network_from_data(parse_json(content, filename), source=filename, batch_size=batch_size)


def devices_from_upload(content: bytes, filename: str) -> DeviceGraph:
    return devices_from_data(parse_json(content, filename), source=filename)

"""Device Placement Lab core: which device runs which part of a training step.

Plain functions over simple data, layered as docs/design.md §1 describes:
graph -> devices -> cost -> simulate -> problem -> optimize. No Streamlit,
and no torch at import time (``placement_core.torch`` imports it when used).
"""

from .formats.catalog import builtin_devices, builtin_networks, load_devices, load_network
from .model.devices import Channel, Device, DeviceGraph
from .base.errors import InputError
from .model.graph import Graph, Op
from .model.placement import placement_from_dict, placement_to_dict, random_placement, single_device
from .problem import Evaluation, Problem
from .simulate import SimResult, SimSettings

__all__ = [
    "Channel", "Device", "DeviceGraph", "Evaluation", "Graph", "InputError", "Op", "Problem", "SimResult",
    "SimSettings", "builtin_devices", "builtin_networks", "load_devices", "load_network",
    "placement_from_dict", "placement_to_dict", "random_placement", "single_device",
]

__version__ = "0.1.0"

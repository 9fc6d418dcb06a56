"""Peak memory of a training step per device.

CUDA has allocator statistics (``torch.cuda.max_memory_allocated``). The CPU
allocator keeps none, so :class:`CpuTracker` watches every tensor an ATen op
returns (a dispatch mode) and drops it from the live set once its storage is
freed (a weak reference to the storage). It sees what the simulator counts
(activations, gradients, received copies), not allocator caches or scratch
space inside an op. It slows a step down, so runners use it on a warm-up
step only.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class CpuTracker(TorchDispatchMode):
    """Live bytes of CPU tensors created inside the mode; ``peak`` is their maximum."""

    def __init__(self):
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.live = 0
        self.peak = 0

    def ignore(self, tensors) -> None:
        """Tensors that existed before (parameters): in-place updates of them are not new memory."""
        for t in tensors:
            s = t.untyped_storage()
            self._live[s._cdata] = (StorageWeakRef(s), 0)

    def track(self, value) -> None:
        """Count tensors made outside the mode (buffers that receive from other ranks)."""
        for key in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.live -= self._live.pop(key)[1]
        for t in tree_leaves(value):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                s = t.untyped_storage()
                if s._cdata not in self._live:
                    self._live[s._cdata] = (StorageWeakRef(s), s.nbytes())
                    self.live += s.nbytes()
        self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.track(out)
        return out


def tensor_bytes(tensors) -> int:
    """Bytes of distinct storages among ``tensors``."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s._cdata] = s.nbytes()
    return sum(seen.values())


def is_oom(e: BaseException) -> bool:
    """Out-of-memory, from CUDA, the CPU allocator or Python."""
    if isinstance(e, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)

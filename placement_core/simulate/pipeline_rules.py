"""What a pipeline schedule decides from the placement itself: stages, chunks, caps and orders.

The readable reference (``reference.py``) calls these; the compiled kernel (``_kernel.c``) computes
the same numbers in C with the same formulas, in the same floating-point order.

* **Stages**: the devices a placement uses, ordered by their first op (stage 0 holds the first op).
* **Chunks** (virtual stages, ``interleaved-1f1b``): each maximal run of consecutive ops (in topological
  order) on one device is a chunk; a device whose ops form a single run is cut into ``V`` chunks of
  about equal work (forward plus backward time on that device). Chunk ``v`` of a device is its v-th in
  topological order.
* **Megatron's order** (Narayanan et al., 2021): on a device with ``V_d`` chunks, micro-batch ``u``'s
  forward through chunk ``v`` is number ``(u // p) p V_d + v p + u % p`` and its backward number
  ``(u // p) p V_d + (V_d - 1 - v) p + u % p``: micro-batches go in groups of ``p``, each group through
  every chunk before the next group starts.
* **Caps**: a device may hold a limited number of (micro-batch, chunk) pairs whose backward has not
  finished there: ``p - r`` for stage ``r`` with one chunk (1F1B's warm-up), and Megatron's warm-up
  plus one, ``min(2 (p - r - 1) + (V_d - 1) p, m V_d) + 1``, with several.
"""

from __future__ import annotations

import numpy as np


def stage_order(place: list[int]) -> list[int]:
    """The used devices in order of their first op."""
    first: dict[int, int] = {}
    for i, d in enumerate(place):
        first.setdefault(d, i)
    return sorted(first, key=first.get)


def stage_index(place: list[int], n_devices: int) -> list[int]:
    """Per device, its stage (-1 for an unused device)."""
    out = [-1] * n_devices
    for s, d in enumerate(stage_order(place)):
        out[d] = s
    return out


def chunks(place: list[int], work: list[float], virtual_stages: int, n_devices: int):
    """``(chunk_of, local_of, chunk_device, per_device)``: each op's chunk (numbered over all devices,
    in order of first op), its index among its device's chunks, each chunk's device, and how many chunks
    each device holds. ``work[i]`` is op i's forward plus backward time on its device."""
    n = len(place)
    runs = [0] * n_devices
    for i in range(n):
        if i == 0 or place[i] != place[i - 1]:
            runs[place[i]] += 1
    # A single-run device cut into V parts by the midpoint of each op's work (or by op count when it has none).
    total = [0.0] * n_devices
    count = [0] * n_devices
    for i in range(n):
        total[place[i]] += work[i]
        count[place[i]] += 1
    part = [0] * n
    seen_work = [0.0] * n_devices
    seen_ops = [0] * n_devices
    for i in range(n):
        d = place[i]
        if runs[d] == 1 and virtual_stages > 1:
            if total[d] > 0.0:
                v = int(virtual_stages * (seen_work[d] + work[i] / 2.0) / total[d])
            else:
                v = int(virtual_stages * (2 * seen_ops[d] + 1) / (2 * count[d]))
            part[i] = min(v, virtual_stages - 1)
        seen_work[d] += work[i]
        seen_ops[d] += 1
    chunk_of = [0] * n
    local_of = [0] * n
    chunk_device: list[int] = []
    per_device = [0] * n_devices
    for i in range(n):
        d = place[i]
        new_run = i == 0 or place[i - 1] != d
        if new_run or part[i] != part[i - 1]:
            chunk_device.append(d)
            per_device[d] += 1
        chunk_of[i] = len(chunk_device) - 1
        local_of[i] = per_device[d] - 1
    return chunk_of, local_of, chunk_device, per_device


def order_index(forward: bool, u: int, v: int, p: int, vd: int) -> int:
    """Megatron's position of micro-batch ``u``'s forward (or backward) through local chunk ``v``."""
    return (u // p) * p * vd + (v if forward else vd - 1 - v) * p + u % p


def interleaved_caps(stage: list[int], per_device: list[int], units: int) -> list[int]:
    """Per device: the (micro-batch, chunk) pairs it may hold before their backward (0: unused)."""
    p = sum(1 for s in stage if s >= 0)
    caps = [0] * len(stage)
    for d, r in enumerate(stage):
        if r < 0:
            continue
        vd = per_device[d]
        caps[d] = p - r if vd == 1 else min(2 * (p - r - 1) + (vd - 1) * p, units * vd) + 1
    return caps


def interleaved_priority(place: list[int], local_of: list[int], per_device: list[int], units: int,
                         phases: int) -> np.ndarray:
    """Priorities [unit, phase, op] for interleaved 1F1B: forwards first, each in Megatron's order, then
    backwards in Megatron's order, then the weight update."""
    n = len(place)
    p = len(stage_order(place))
    off = float((units + p) * (n + 1))
    prio = np.empty((units, phases, n))
    for u in range(units):
        for i in range(n):
            vd = per_device[place[i]]
            prio[u, 0, i] = float(order_index(True, u, local_of[i], p, vd))
            prio[u, 1, i] = off + float(order_index(False, u, local_of[i], p, vd))
            prio[u, 2:, i] = 2.0 * off
    return prio


def order_slots(per_device: list[int], units: int, p: int) -> list[int]:
    """Per device, how many forward positions Megatron's order has (including those of micro-batches
    beyond the last, which are skipped)."""
    groups = -(-units // p) if p else 0
    return [groups * p * vd for vd in per_device]


def slot_exists(index: int, units: int, p: int, vd: int) -> bool:
    """Whether forward position ``index`` of a device with ``vd`` chunks belongs to a real micro-batch."""
    return (index // (p * vd)) * p + index % p < units


class Gates:
    """The reference simulator's per-run state for what holds a ready task back: a device's cap on open
    (micro-batch, chunk) pairs and Megatron's forward order under interleaved 1F1B; and which W tasks
    zb-h1's gate releases (a W is a dependant of its stage's B of a later micro-batch, not a waiting task).

    Without virtual stages a "group" is a device (1F1B's caps count micro-batches per device); with them
    it is a chunk. A pair opens when its first forward starts and closes when its last backward (B) there
    is done (its last forward in a forward-only run). The kernel keeps the same state in flat arrays.
    """

    def __init__(self, place: list[int], caps: list[int] | None, units: int, *, training: bool,
                 interleaved: tuple | None = None, zb: bool = False):
        n_dev = len(caps) if caps is not None else max(place) + 1
        self.place, self.caps, self.units, self.training = place, caps, units, training
        if interleaved is not None:
            self.group, self.local, group_device, per_device = interleaved
        else:
            self.group, self.local, group_device, per_device = place, [0] * len(place), list(range(n_dev)), None
        self.ops_in = [0] * len(group_device)
        for g in self.group:
            self.ops_in[g] += 1
        self.open: set[tuple[int, int]] = set()
        self.open_count = [0] * n_dev
        self.bwd_done: dict[tuple[int, int], int] = {}
        self.fwd_done: dict[tuple[int, int], int] = {}
        self.order = None
        if interleaved is not None:  # Megatron's forward order: the next position each device may open
            self.p = len(stage_order(place))
            self.per_device = per_device
            self.slots = order_slots(per_device, units, self.p)
            self.next_f = [0] * len(per_device)
            self.opened: set[tuple[int, int]] = set()
            self.order = True
        self.stage = stage_index(place, n_dev) if zb else None

    def _index(self, u: int, op: int) -> int:
        return order_index(True, u, self.local[op], self.p, self.per_device[self.place[op]])

    def blocked(self, u: int, phase: int, op: int, oldest: int) -> bool:
        """A forward may not open another pair on a full device, nor (interleaved) one out of Megatron's
        order, unless it is the oldest unfinished micro-batch's (progress on any placement)."""
        d = self.place[op]
        if phase != 0 or (u, self.group[op]) in self.open or u == oldest:
            return False
        if self.caps is not None and 0 < self.caps[d] <= self.open_count[d]:
            return True
        return self.order is not None and self._index(u, op) != self.next_f[d]

    def start(self, u: int, phase: int, op: int) -> None:
        if phase != 0 or (self.caps is None and self.order is None):
            return
        key = (u, self.group[op])
        if key in self.open:
            return
        self.open.add(key)
        d = self.place[op]
        self.open_count[d] += 1
        if self.order is not None:
            self.opened.add((d, self._index(u, op)))
            vd = self.per_device[d]
            while self.next_f[d] < self.slots[d] and ((d, self.next_f[d]) in self.opened or not slot_exists(
                    self.next_f[d], self.units, self.p, vd)):
                self.next_f[d] += 1

    def done(self, u: int, phase: int, op: int) -> list[int]:
        """A forward (forward-only runs) or a B finished: close its pair when it was the pair's last. Returns
        the micro-batches whose Ws on this device it releases (zb-h1: stage r's Ws of micro-batch u wait for
        its B of micro-batch min(u + r, m - 1); this was micro-batch ``u``'s last B here)."""
        key = (u, self.group[op])
        counts = self.bwd_done if phase == 1 else self.fwd_done
        counts[key] = counts.get(key, 0) + 1
        last = counts[key] == self.ops_in[key[1]]
        if last and (phase == 1 or not self.training) and key in self.open:
            self.open.discard(key)
            self.open_count[self.place[op]] -= 1
        if not (last and phase == 1 and self.stage is not None):
            return []
        r = self.stage[self.place[op]]
        lo, hi = (self.units - 1 - r, self.units - 1) if u == self.units - 1 else (u - r, u - r)
        return list(range(max(lo, 0), hi + 1))

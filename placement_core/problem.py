"""A Problem = network + devices + cost profile + simulator settings + memory penalty.

Everything that evaluates a placement goes through :meth:`Problem.evaluate`
(or ``evaluate_many``), so optimizers, parallel backends and the run store
all see the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from .cost.profiles import get_profile
from .model.devices import DeviceGraph
from .base.errors import InputError
from .model.graph import Graph
from .base.jsonio import to_jsonable
from .model.placement import check_placement
from .model.sharding import Split
from .simulate import SimResult, SimSettings, Simulator, compile_problem
from .simulate.shards import compile_shards
from .simulate.schedules import SCHEDULES, micro_batch_graph, schedule_settings

PENALTIES = ("thesis", "placeto", "infeasible")
# Thesis §3.2.2: the overflow in MB is added to the time in ms, i.e. 1 ms per MB.
THESIS_S_PER_BYTE = 1e-3 / 1e6
# Placeto App. A.7: r + c (m - M), m and M in GB, c = 2.
PLACETO_S_PER_BYTE = 2.0 / 1e9
# "infeasible": any overflowing placement loses to every fitting one.
INFEASIBLE_OFFSET_S = 1e6


@dataclass(frozen=True)
class Evaluation:
    """A simulated result plus the objective an optimizer minimises."""

    objective: float
    result: SimResult
    overflow: np.ndarray  # [devices] bytes over capacity

    @property
    def feasible(self) -> bool:
        return not bool(self.overflow.any())


@dataclass(frozen=True)
class ProblemSpec:
    """The whole recipe of what is simulated, as a value: every knob that changes a number.

    The CLI's options, the dashboard's settings, the run store and the experiments all
    go through it, so there is one translation from knobs to a :class:`Problem`, and two
    runs were simulated alike exactly when their resolved specs are equal.
    ``batches`` counts whole batches; under a pipeline schedule one batch is split into
    ``micro_batches`` units and ``batches`` and ``in_flight`` stay 1; ``virtual_stages`` cuts a
    device's single run of ops into chunks under ``interleaved-1f1b`` (1 elsewhere). ``None``
    efficiencies mean the profile's defaults; ``timings`` is a measured op-time table
    (:mod:`placement_core.cost.timings`) taken at batch ``timings_batch`` (0: the graph's own).
    """

    schedule: str = "thesis"
    micro_batches: int = 1
    batches: int = 1
    in_flight: int = 1
    forward_only: bool = False
    profile: str = "default"
    comp_efficiency: float | None = None
    comm_efficiency: float | None = None
    timings: Mapping[str, Any] | None = None
    timings_batch: int = 0
    penalty: str = "thesis"
    virtual_stages: int = 1
    # The split table: gene d + t of a placement is splits[t] (placement_core.model.sharding); empty: whole ops only.
    splits: tuple[Split, ...] = ()
    # What training keeps per parameter (placement_core.cost.training_state): "sgd" or "adam", and the ZeRO
    # stage over data-parallel groups (batch-split ops)
    optimizer: str = "sgd"
    zero: int = 0

    def build(self, graph: Graph, devices: DeviceGraph, *, whole_batch: bool = True, fast: bool = True,
              cost_model=None) -> "Problem":
        """Compile the problem. ``graph`` is the whole batch (split into micro-batches here) unless
        ``whole_batch`` is False: a stored problem's graph is already one unit. ``cost_model``, a profile
        object, replaces the named profile for what-ifs that have no name (the lecture's ideal pipeline)."""
        if self.penalty not in PENALTIES:
            raise InputError(f"unknown memory penalty {self.penalty!r}", field="penalty",
                             fix="Use one of: " + ", ".join(PENALTIES))
        if self.schedule not in SCHEDULES:
            raise InputError(f"unknown schedule {self.schedule!r}", field="schedule",
                             fix="Use " + ", ".join(SCHEDULES))
        unit = graph if self.schedule == "thesis" or not whole_batch else micro_batch_graph(graph, self.micro_batches)
        settings = schedule_settings(self.schedule, len(unit), micro_batches=self.micro_batches,
                                     batches=self.batches, in_flight=self.in_flight, forward_only=self.forward_only,
                                     virtual_stages=self.virtual_stages)
        profile = cost_model or get_profile(self.profile, comp_efficiency=self.comp_efficiency,
                                            comm_efficiency=self.comm_efficiency, timings=self.timings or None,
                                            timings_batch=self.timings_batch or None, optimizer=self.optimizer,
                                            zero=self.zero)
        return Problem(unit, devices, profile=profile, settings=settings, penalty=self.penalty, fast=fast,
                       splits=self.splits)

    def resolved(self) -> "ProblemSpec":
        """The same recipe with the profile's default efficiencies written out (for comparing specs)."""
        prof = get_profile(self.profile, comp_efficiency=self.comp_efficiency, comm_efficiency=self.comm_efficiency)
        # a pipeline step admits all its micro-batches at once: "in flight" is the thesis scheme's knob only
        # (runs stored before this spec wrote the micro-batch count there)
        return self.replace(comp_efficiency=prof.comp_efficiency, comm_efficiency=prof.comm_efficiency,
                            timings=self.timings or None, timings_batch=self.timings_batch if self.timings else 0,
                            in_flight=self.in_flight if self.schedule == "thesis" else 1,
                            virtual_stages=self.virtual_stages if self.schedule == "interleaved-1f1b" else 1)

    def replace(self, **changes) -> "ProblemSpec":
        return ProblemSpec(**{**self.__dict__, **changes})

    def to_dict(self) -> dict:
        """The JSON form (the run store's ``problem`` column)."""
        r = self.resolved()
        out = {"profile": r.profile, "comp_efficiency": r.comp_efficiency, "comm_efficiency": r.comm_efficiency,
               "timings": to_jsonable(dict(r.timings)) if r.timings else None, "timings_batch": r.timings_batch,
               "penalty": r.penalty, "schedule": r.schedule, "micro_batches": r.micro_batches,
               "batches": r.batches, "in_flight": r.in_flight, "forward_only": r.forward_only,
               "virtual_stages": r.virtual_stages}
        if r.splits:  # only when there are splits: unsharded specs keep the JSON they always had
            out["splits"] = [sp.to_dict() for sp in r.splits]
        if (r.optimizer, r.zero) != ("sgd", 0):  # likewise
            out["optimizer"], out["zero"] = r.optimizer, r.zero
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> "ProblemSpec":
        """Read the JSON form strictly; runs stored before ``timings_batch`` or ``virtual_stages`` existed
        still load."""
        if not isinstance(data, Mapping):
            raise InputError(f"a problem spec must be an object, got {type(data).__name__}", source=source)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"unknown field {unknown[0]!r} in the problem spec", source=source, field=unknown[0],
                             fix="Known fields: " + ", ".join(sorted(known)))
        missing = sorted(set(_REQUIRED) - set(data))
        if missing:
            raise InputError("the problem spec has no " + missing[0], source=source, field=missing[0])
        for key, kinds in _REQUIRED.items():
            value = data[key]
            if value is None and key.endswith("efficiency"):
                continue
            if isinstance(value, bool) != (kinds == (bool,)) or not isinstance(value, kinds):
                raise InputError(f"{key} has the wrong type ({type(value).__name__})", source=source, field=key)
        timings = data.get("timings")
        if timings is not None and not isinstance(timings, Mapping):
            raise InputError("timings must be an object or null", source=source, field="timings")
        batch = data.get("timings_batch", 0) or 0
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise InputError("timings_batch must be an integer", source=source, field="timings_batch")
        virtual = data.get("virtual_stages", 1)
        if isinstance(virtual, bool) or not isinstance(virtual, int) or virtual < 1:
            raise InputError("virtual_stages must be a positive integer", source=source, field="virtual_stages")
        raw = data.get("splits") or []
        if not isinstance(raw, list):
            raise InputError("splits must be a list", source=source, field="splits")
        splits = tuple(Split.from_dict(sp, source, f"splits[{j}]") for j, sp in enumerate(raw))
        optimizer, zero = data.get("optimizer", "sgd"), data.get("zero", 0)
        if not isinstance(optimizer, str) or isinstance(zero, bool) or not isinstance(zero, int):
            raise InputError("optimizer must be a name and zero an integer", source=source, field="optimizer")
        return cls(**{k: data[k] for k in _REQUIRED}, timings=timings or None, timings_batch=batch,
                   virtual_stages=virtual, splits=splits, optimizer=optimizer, zero=zero)

    @classmethod
    def of(cls, problem: "Problem") -> "ProblemSpec":
        s, prof = problem.settings, problem.profile
        timings = dict(prof.timings) if getattr(prof, "timings", None) else None
        return cls(schedule=s.schedule, micro_batches=s.micro_batches, batches=s.batches,
                   in_flight=s.units_in_flight if s.schedule == "thesis" else 1, forward_only=s.forward_only,
                   profile=prof.name,
                   comp_efficiency=prof.comp_efficiency, comm_efficiency=prof.comm_efficiency,
                   timings=timings, timings_batch=getattr(prof, "timings_batch", 0) if timings else 0,
                   penalty=problem.penalty, virtual_stages=s.virtual_stages, splits=problem.splits,
                   optimizer=getattr(prof, "optimizer", "sgd"), zero=getattr(prof, "zero", 0))


_REQUIRED = {"profile": (str,), "comp_efficiency": (int, float), "comm_efficiency": (int, float),
             "penalty": (str,), "schedule": (str,), "micro_batches": (int,), "batches": (int,),
             "in_flight": (int,), "forward_only": (bool,)}


class Problem:
    def __init__(self, graph: Graph, devices: DeviceGraph, *, profile: str | object = "default",
                 settings: SimSettings | None = None, penalty: str = "thesis",
                 comp_efficiency: float | None = None, comm_efficiency: float | None = None,
                 timings=None, timings_batch: int | None = None, fast: bool = True, splits: tuple[Split, ...] = ()):
        if penalty not in PENALTIES:
            raise InputError(f"unknown memory penalty {penalty!r}", field="penalty",
                             fix="Use one of: " + ", ".join(PENALTIES))
        self.graph = graph
        self.devices = devices
        if isinstance(profile, str):
            profile = get_profile(profile, comp_efficiency=comp_efficiency, comm_efficiency=comm_efficiency,
                                  timings=timings, timings_batch=timings_batch)
        self.profile = profile
        self.settings = (settings or SimSettings()).validate()
        self.penalty = penalty
        self.costs = profile.arrays(graph, devices)
        self.compiled = compile_problem(graph, devices, self.costs)
        self.splits = tuple(splits)
        self.fast = fast
        self.shards = compile_shards(graph, devices, profile, self.costs, self.splits) if self.splits else None
        self.simulator = Simulator(self.compiled, self.settings, fast=fast, shards=self.shards)
        self.capacity = np.array([d.memory_bytes for d in devices.devices], dtype=float)
        # The kernel's objective entry (whole ops only): the simulation and the objective in one C call, the
        # same numbers as objective(simulator.run(...)) bit for bit. (A kernel built before it has none.)
        self._objective = None
        set_objective = getattr(self.simulator._kernel, "set_objective", None)
        if set_objective is not None and not self.splits:
            set_objective(self.capacity, int(self.settings.batches), PENALTIES.index(penalty))
            self._objective = self.simulator._kernel.objective

    # Pickled as its inputs and rebuilt on arrival: worker processes and Dask workers get the
    # network once and compile their own kernel (the C object itself cannot be pickled).
    def __getstate__(self) -> dict:
        return {"graph": self.graph, "devices": self.devices, "profile": self.profile, "settings": self.settings,
                "penalty": self.penalty, "splits": self.splits}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["graph"], state["devices"], profile=state["profile"], settings=state["settings"],
                      penalty=state["penalty"], splits=state.get("splits", ()))

    def __repr__(self) -> str:
        return (f"Problem({self.graph.name!r} on {self.devices.name!r}, profile={self.profile.name!r}, "
                f"batches={self.settings.batches}, penalty={self.penalty!r})")

    @property
    def spec(self) -> ProblemSpec:
        """The recipe this problem was built from (its graph is one unit: a batch or a micro-batch)."""
        return ProblemSpec.of(self)

    @property
    def n_ops(self) -> int:
        return len(self.graph)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def n_genes(self) -> int:
        """Gene values a placement may hold: the devices, then the splits."""
        return len(self.devices) + len(self.splits)

    @property
    def allowed(self) -> np.ndarray | None:
        """``[ops, splits]``: may op i take split t (None without splits)."""
        return None if self.shards is None else self.shards.allowed

    def with_settings(self, settings: SimSettings) -> "Problem":
        return Problem(self.graph, self.devices, profile=self.profile, settings=settings, penalty=self.penalty,
                       splits=self.splits)

    def with_splits(self, splits) -> "Problem":
        """The same problem with another split table (a placement file brought splits it lacked)."""
        splits = tuple(splits)
        if splits == self.splits:
            return self
        return Problem(self.graph, self.devices, profile=self.profile, settings=self.settings, penalty=self.penalty,
                       fast=self.fast, splits=splits)

    def objective(self, result: SimResult) -> float:
        overflow = np.maximum(result.peak_memory - self.capacity, 0.0)
        t = result.batch_time
        if not overflow.any():
            return t
        if self.penalty == "thesis":
            return t + float(overflow.sum()) * THESIS_S_PER_BYTE
        if self.penalty == "placeto":
            return t + float(overflow.max()) * PLACETO_S_PER_BYTE
        return INFEASIBLE_OFFSET_S + t + float(overflow.sum()) / 1e9

    def evaluate(self, placement) -> float:
        """Objective of one placement (seconds per batch plus memory penalty). An int32 vector goes straight to
        the kernel's objective entry, which checks it there (length, device indices); anything else, or one the
        kernel refuses, is checked here first, so a bad placement gets the same clear error either way."""
        fast = self._objective
        if fast is not None and type(placement) is np.ndarray and placement.dtype == np.int32:
            try:
                return fast(placement)
            except (ValueError, TypeError, BufferError):
                pass  # the checked path below says what is wrong (or runs a non-contiguous view)
        return self.objective(self.simulator.run(self.check(placement)))

    def check(self, placement) -> np.ndarray:
        """One placement as the simulator takes it, or an error naming what is wrong (the op, for a split)."""
        return check_placement(placement, self.graph, self.devices, self.splits, self.allowed)

    def checked(self, placements) -> np.ndarray:
        """A batch of placements as the simulator takes it, ``(k, n_ops)`` int32, or a clear error
        (the parallel backends check here, before anything is shipped)."""
        arr = np.ascontiguousarray(placements, dtype=np.int32)
        if arr.ndim != 2 or arr.shape[1] != self.n_ops:
            raise InputError(f"expected placements of shape (k, {self.n_ops}), got {arr.shape}", field="placement")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_genes):
            raise InputError("a placement uses a device index out of range", field="placement",
                             fix=f"Use indices 0..{self.n_genes - 1}")
        if self.splits and arr.size and arr.max() >= self.n_devices:
            rows, cols = np.nonzero(arr >= self.n_devices)
            bad = ~self.allowed[cols, arr[rows, cols] - self.n_devices]
            if bad.any():
                self.check(arr[rows[bad][0]])  # raises with the op and the reason
        return arr

    def evaluate_many(self, placements) -> np.ndarray:
        return self.evaluate_valid(self.checked(placements))

    def evaluate_valid(self, placements: np.ndarray) -> np.ndarray:
        """Objectives of placements the caller built itself and knows valid: ``(k, n_ops)`` int32, every gene a
        device or a split its op may take (what :meth:`checked` returns; an optimizer's own children). Nothing is
        checked in Python (the kernel still refuses a gene outside its tables); the numbers are
        :meth:`evaluate_many`'s. Placements from users go through :meth:`evaluate` or :meth:`evaluate_many`."""
        if self._objective is not None:
            out = np.empty(len(placements))
            self.simulator._kernel.objectives(placements, out)
            return out
        return np.array([self.objective(r) for r in self.simulator.run_many(placements)])

    @property
    def tied(self) -> list[list[int]]:
        """The calls of each module with weights called more than once (``model.coarsen.tied_calls``): a real run
        needs them on one device, so :meth:`simulate` refuses a placement that splits them."""
        if getattr(self, "_tied", None) is None:
            from .model.coarsen import tied_calls
            self._tied = tied_calls(self.graph)
        return self._tied

    def tie(self, placements) -> np.ndarray:
        """Placements (k, n_ops) with every tied call on its module's first call's device (a copy; the
        placements themselves when nothing is tied). A split gene is left as it is."""
        arr = np.asarray(placements, dtype=np.int32)
        if not self.tied or not arr.size:
            return arr
        arr = arr.copy()
        flat = arr.reshape(-1, self.n_ops)
        for calls in self.tied:
            first = flat[:, calls[0]:calls[0] + 1]
            whole = first < self.n_devices
            flat[:, calls[1:]] = np.where(whole, first, flat[:, calls[1:]])
        return arr

    def check_tied(self, placement: np.ndarray) -> None:
        """Refuses a placement (of whole ops) that puts two calls of a shared module with weights on different
        devices, as ``placement benchmark`` would."""
        if not self.tied or (placement >= self.n_devices).any():
            return
        for calls in self.tied:
            devs = placement[calls]
            if (devs != devs[0]).any():
                names = [self.graph.ops[i].name for i in calls]
                other = int(np.flatnonzero(devs != devs[0])[0])
                dn = self.devices.names
                raise InputError(
                    f"module {self.graph.ops[calls[0]].module!r} has weights and is called by ops {names[0]!r} "
                    f"(on {dn[devs[0]]}) and {names[other]!r} (on {dn[devs[other]]}): a real run keeps one copy of "
                    f"its weights, on one device", field="placement",
                    fix=f"Place every call of {self.graph.ops[calls[0]].module} ({', '.join(names)}) on one device")

    def simulate(self, placement, trace: bool = False) -> Evaluation:
        placement = self.check(placement)
        self.check_tied(placement)
        result = self.simulator.run(placement, trace=trace)
        overflow = np.maximum(result.peak_memory - self.capacity, 0.0)
        return Evaluation(self.objective(result), result, overflow)

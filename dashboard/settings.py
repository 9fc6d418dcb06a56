"""The simulator settings a user chooses in the dashboard, as one frozen value: :class:`SimChoices`.

The session keeps the shared settings in ``st.session_state["sim"]`` (and the Trace page's what-if in
``["trace_what_if"]``); a run keeps the ones it was started with (``RunSpec.sim``). One method turns them into the
problem recipe (:meth:`SimChoices.spec`), one takes a stored run's recipe back (:meth:`SimChoices.adopt`). No
Streamlit here: the caches that load a calibration's op times are :mod:`.state`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from placement_core.model.devices import DeviceGraph
from placement_core.problem import ProblemSpec

SCHEDULES = {"thesis": "thesis (whole batches)", "gpipe": "GPipe (micro-batches)", "1f1b": "1F1B (micro-batches)",
             "interleaved-1f1b": "interleaved 1F1B (each device's runs of ops as chunks)",
             "zb-h1": "ZB-H1 (backward split into B and W)"}
SCHEDULE_NAMES = {"thesis": "thesis scheme", "gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "interleaved 1F1B",
                  "zb-h1": "ZB-H1"}
PROFILES = {"default": "Roofline (default)", "exprimo-2020": "Thesis' Exprimo (exprimo-2020)"}
PENALTIES = {
    "thesis": "thesis: +1 ms per MB over capacity",
    "placeto": "placeto: +2 s per GB over capacity",
    "infeasible": "infeasible: overflowing placements lose to every fitting one",
}
# The dimensions searches may split ops along (docs/sharding.md).
SHARDING = {"": "no (every op on one device)", "batch": "by batch", "channel": "by output channel",
            "channel,batch": "by batch or output channel"}
_SPEC = ProblemSpec()


@dataclass(frozen=True)
class SimChoices:
    """What the settings widgets say.

    The recipe's part has :class:`ProblemSpec`'s names and meanings: ``schedule``, ``batches`` and ``in_flight``
    (the thesis scheme's), ``penalty``, ``profile``. The dashboard's own knobs: ``micro_batches``, the count
    offered for the pipeline schedules (the recipe's when one is chosen; the thesis scheme runs whole batches);
    ``timings``, the name of a saved calibration (``placement calibrate``) whose measured op times replace the
    cost formulas when it was measured for the current network at its batch ("" = the formulas);
    ``sharding``, the dimensions searches may split ops along ("", "batch", "channel", "channel,batch") over
    windows of up to ``max_shards`` devices (0: every device of a kind); ``splits_extra``, splits a loaded
    placement or an adopted run brought. The problem's split table is the search's windows, then these."""

    schedule: str = _SPEC.schedule
    batches: int = _SPEC.batches
    in_flight: int = _SPEC.in_flight
    penalty: str = _SPEC.penalty
    profile: str = _SPEC.profile
    micro_batches: int = 4
    timings: str = ""
    sharding: str = ""
    max_shards: int = 0
    splits_extra: tuple = ()

    def __post_init__(self):
        for name in ("batches", "in_flight", "micro_batches", "max_shards"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "timings", self.timings or "")
        object.__setattr__(self, "sharding", self.sharding or "")
        object.__setattr__(self, "splits_extra", tuple(self.splits_extra or ()))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' names (the settings widgets' keys are ``PREFIX_NAME``)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: dict) -> SimChoices:
        """Settings from a dict of some of them (the form a session kept them in before this class); names
        that are not settings are ignored."""
        return cls(**{k: v for k, v in values.items() if k in cls.names()})

    def with_(self, **changes) -> SimChoices:
        return replace(self, **changes)

    def key(self) -> tuple:
        """A hashable form for caches: (name, value) pairs in name order."""
        return tuple(sorted((name, getattr(self, name)) for name in self.names()))

    @property
    def pipelined(self) -> bool:
        return self.schedule != "thesis"

    def split_table(self, devices: DeviceGraph) -> tuple:
        """The split table the settings stand for: the search's windows (``sharding``), then ``splits_extra``."""
        from placement_core.model.sharding import merge_splits, search_splits
        dims = [d for d in self.sharding.split(",") if d]
        table = ()
        if dims:
            k = self.max_shards or max(sum(1 for d in devices.devices if d.kind == kind)
                                       for kind in {d.kind for d in devices.devices})
            table = search_splits(devices, dims, max(2, min(k, 64)))
        return merge_splits(table, self.splits_extra)[0]

    def spec(self, devices: DeviceGraph | None = None, *, timings=None, timings_batch: int = 0) -> ProblemSpec:
        """The problem recipe these settings stand for: the one place they become a spec. ``timings``: the
        measured op-time table the ``timings`` name resolved to (:func:`dashboard.state.cost_kw`), or None.

        GPipe and 1F1B simulate one batch split into ``micro_batches`` (the step ends with a flush, so batches do
        not overlap): ``batches`` and ``in_flight`` apply to the thesis scheme only. Without ``devices`` the
        split table is left empty."""
        pipelined = self.pipelined
        return ProblemSpec(schedule=self.schedule, micro_batches=self.micro_batches if pipelined else 1,
                           batches=1 if pipelined else self.batches, in_flight=1 if pipelined else self.in_flight,
                           profile=self.profile, timings=timings, timings_batch=timings_batch if timings else 0,
                           penalty=self.penalty, splits=self.split_table(devices) if devices is not None else ())

    def adopt(self, spec: ProblemSpec) -> SimChoices:
        """The settings closest to a stored run's recipe; what these settings do not say (the calibration's name,
        the micro-batches offered under the thesis scheme) is kept. What they cannot express is listed by
        ``stored.setting_differences``."""
        new = replace(self, penalty=spec.penalty, profile=spec.profile if spec.profile in PROFILES else "default",
                      sharding="", max_shards=0, splits_extra=tuple(spec.splits))  # the run's table, as it was
        if spec.schedule == "thesis":
            return replace(new, schedule="thesis", batches=int(spec.batches), in_flight=int(spec.in_flight))
        return replace(new, schedule=spec.schedule, micro_batches=int(spec.micro_batches), batches=1, in_flight=1)

    def summary(self) -> str:
        """The schedule part in words: "thesis scheme, 4 batch(es), 2 in flight"."""
        split = f", ops split {SHARDING[self.sharding]}" if self.sharding in SHARDING and self.sharding else ""
        if not self.pipelined:
            return f"thesis scheme, {self.batches} batch(es), {self.in_flight} in flight{split}"
        return (f"{SCHEDULE_NAMES.get(self.schedule, self.schedule)} schedule, {self.micro_batches} micro-batches "
                f"per batch{split}")

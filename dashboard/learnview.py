"""The Learned policies page: trained placement policies, applied to the current network and trained anew.

Policies are ``placement-policy/1`` files: the shipped ones in ``assets/policies/``
and those trained here (or saved there by hand) in ``$PLACEMENT_HOME/policies/``.
Listing them reads their JSON only; torch is imported when a policy is applied
or trained. A training runs as a background job on its own board (it survives
page switches, has a live reward curve and a stop button) and is recorded in the
run store like the CLI's ``placement train-policy``.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from placement_core import InputError
from placement_core.model.devices import DeviceGraph

from .jobs import JobBoard

_ids = itertools.count(1)
METHODS = {"placeto": "Placeto (iterative, graph embedding)", "gdp": "GDP (one shot, GraphSAGE + attention)"}


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def shipped_dir() -> Path:
    from placement_core.formats.catalog import assets_dir
    return assets_dir() / "policies"


def user_dir(create: bool = False) -> Path:
    from placement_core.store import home_dir
    path = home_dir() / "policies"
    if create:
        try:
            path.mkdir(exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create {path} ({e.strerror})", field="PLACEMENT_HOME",
                             fix="Point PLACEMENT_HOME at a writable folder") from None
    return path


@dataclass(frozen=True)
class PolicyInfo:
    path: str
    name: str
    method: str
    devices: str
    device_count: int | None
    trained_on: str
    episodes: int | None
    shipped: bool

    def describe(self) -> str:
        where = "shipped" if self.shipped else "yours"
        return f"{self.name} · {self.method} · {self.trained_on} · for {self.devices} ({where})"


@st.cache_data(max_entries=256, show_spinner=False)
def _info(path: str, mtime: float, shipped: bool) -> PolicyInfo | str:
    from placement_core.base.jsonio import read_json
    try:
        data = read_json(path)
        method = data["method"]
        training = data.get("training", {})
        devices = data.get("devices", {})
    except (InputError, KeyError, TypeError, AttributeError) as e:
        return f"{Path(path).name}: {e}"
    what = training.get("family") or ", ".join(Path(n).stem for n in training.get("networks", [])) or "?"
    return PolicyInfo(path, Path(path).stem, str(method), str(devices.get("name", "?")), devices.get("count"),
                      str(what), training.get("episodes"), shipped)


def policies() -> tuple[list[PolicyInfo], list[str]]:
    """(readable policies, shipped first, problems with the unreadable ones)."""
    found, problems = [], []
    for folder, shipped in ((shipped_dir(), True), (user_dir(), False)):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            info = _info(str(path), path.stat().st_mtime, shipped)
            (found if isinstance(info, PolicyInfo) else problems).append(info)
    return found, problems


def apply_policy(info: PolicyInfo, problem) -> tuple:
    """(placement, seconds): the policy's zero-shot placement of ``problem`` (torch imported here)."""
    from placement_core.torch.policies.optimizers import cached_policy, place
    t = time.perf_counter()
    placement = place(cached_policy(info.path), problem)
    return placement, time.perf_counter() - t


# -- training in the background -------------------------------------------------------------------

@dataclass
class TrainJob:
    method: str
    families: list[str]
    episodes: int
    seed: int
    devices: DeviceGraph
    devices_label: str
    penalty: str
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "running"  # running | done | stopped | failed
    episodes_done: int = 0
    ratio: float | None = None
    curve: list = field(default_factory=list)  # (evaluations, ratio) per update
    elapsed_s: float = 0.0
    policy_path: str | None = None
    run_id: int | None = None
    store_note: str | None = None
    error: str | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.status == "running"

    @property
    def title(self) -> str:
        return f"{self.method} on {', '.join(self.families)} for {self.devices_label}"

    def stop(self) -> None:
        self.stop_event.set()

    def view(self) -> dict:
        with self.lock:
            return {"status": self.status, "episodes": self.episodes_done, "total": self.episodes,
                    "ratio": self.ratio, "curve": list(self.curve), "elapsed_s": self.elapsed_s,
                    "policy": self.policy_path, "run_id": self.run_id, "error": self.error,
                    "store_note": self.store_note, "stopping": self.stop_event.is_set()}

    def _progress(self, p) -> None:
        with self.lock:
            self.episodes_done, self.ratio, self.elapsed_s = p.episodes, p.ratio, p.elapsed_s
            self.curve = list(p.curve)

    def work(self) -> None:
        try:
            self._train()
        except InputError as e:
            with self.lock:
                self.error, self.status = str(e), "failed"
        except Exception as e:  # report, never crash the page
            traceback.print_exc()
            with self.lock:
                self.error, self.status = f"the training failed ({type(e).__name__}: {e})", "failed"

    def _train(self) -> None:
        from placement_core.model.devices import devices_hash
        from placement_core.families import family_graphs
        from placement_core.base.outputs import check_output_file
        from placement_core.problem import ProblemSpec
        from placement_core.store import RunStore
        from placement_core.torch.policies import TrainSettings
        from placement_core.torch.policies.policy_io import save_policy
        from placement_core.torch.policies.recorded_training import train_recorded

        spec = ProblemSpec(penalty=self.penalty)
        graphs = [fg.graph for f in self.families for fg in family_graphs(f, split="train")]
        problems = [spec.build(g, self.devices) for g in graphs]
        settings = TrainSettings(method=self.method, episodes=self.episodes, seed=self.seed,
                                 lr=2e-3 if self.method == "placeto" else 1e-3)
        meta = {"family": ",".join(self.families), "graphs": [g.name for g in graphs], "devices": self.devices.name}
        try:
            store = RunStore()
        except InputError as e:
            store, self.store_note = None, f"not recorded in the run store: {e}"
        try:
            run_id, result = train_recorded(store, problems, settings, label=f"dashboard: {self.title}", meta=meta,
                                            progress=self._progress, stop=self.stop_event,
                                            on_created=lambda i: setattr(self, "run_id", i))
        finally:
            if store is not None:
                store.close()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{self.method}-{'+'.join(self.families)}-{_safe(self.devices.name)}-{stamp}.json"
        path = check_output_file(str(user_dir(create=True) / name), "policy")
        save_policy(path, self.method, result.net,
                    devices={"name": self.devices.name, "count": len(self.devices), "hash": devices_hash(self.devices)},
                    training={"family": ",".join(self.families), "episodes": result.episodes, "seed": self.seed,
                              "evaluations": result.evaluations, "wall_s": round(result.wall_s, 1),
                              "stopped": result.stopped, "penalty": self.penalty, "trained_in": "dashboard"})
        with self.lock:
            self.policy_path = str(path)
            self.status = "stopped" if result.stopped else "done"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60] or "devices"


BOARD: JobBoard[TrainJob] = JobBoard("policy training", max_finished=10)


def start(session: str, job: TrainJob) -> TrainJob:
    job.thread = threading.Thread(target=job.work, name=f"placement-train-{job.id}", daemon=True)
    BOARD.add(session, job)
    job.thread.start()
    return job


def jobs(session: str) -> list[TrainJob]:
    return BOARD.jobs(session)

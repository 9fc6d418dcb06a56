"""Calibrating the simulator from the Benchmark page: ``placement calibrate`` for the current network.

The command runs in a subprocess (its own process group, so Stop ends it and every worker it started), read
by a daemon thread that never calls ``st.*``. Jobs live in a process-level registry keyed by session, like
optimization runs, so a calibration keeps going while the user reads other pages; the page polls it from a
fragment. When it is done the page offers what it saved in ``$PLACEMENT_HOME``: the ``local`` device preset
and this network's measured op times, which become the current device graph and the *Op times* setting.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import streamlit as st

from placement_core import InputError

from .jobs import JobBoard
from . import state, ui

PRESET = "local"
CLI = "import sys; from placement_core.cli import main; sys.exit(main())"
MAX_TRANSFERS = {"1 MB (fast)": "1MB", "10 MB": "10MB", "100 MB (the command's default)": "100MB"}


_CALIB_IDS = itertools.count(1)


@dataclass
class CalibJob:
    argv: list[str]
    network: str
    batch: int
    devices: str
    expected: int  # progress lines the command prints on the way (devices x rounds, links, the fit)
    status: str = "running"  # running | done | failed | stopped
    lines: list[str] = field(default_factory=list)  # its progress lines (stderr)
    output: str = ""  # its summary (stdout)
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    proc: subprocess.Popen | None = None
    thread: threading.Thread | None = None
    id: int = field(default_factory=lambda: next(_CALIB_IDS))

    @property
    def active(self) -> bool:
        return self.status == "running"

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.thread = threading.Thread(target=self._follow, name="placement-calibrate", daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
        self.output = self.proc.stdout.read()
        code = self.proc.wait()
        self.finished = time.time()
        if self.status == "stopped":
            return
        if code == 0:
            self.status = "done"
            return
        errors = [ln[len("error: "):] for ln in self.lines if ln.startswith("error: ")]
        self.error = errors[-1] if errors else f"placement calibrate ended with status {code}: " + \
            " / ".join(self.lines[-3:])
        self.status = "failed"

    def stop(self, grace: float = 15.0) -> None:
        """Interrupt the command as Ctrl-C does (it then stops the worker processes it started, which run in
        sessions of their own); whatever is left after ``grace`` seconds is killed."""
        if self.status != "running" or self.proc is None:
            return
        self.status = "stopped"
        _signal_group(self.proc.pid, signal.SIGINT)

        def kill_if_left():
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)

        threading.Thread(target=kill_if_left, name="placement-calibrate-stop", daemon=True).start()

    @property
    def fraction(self) -> float:
        done = sum(1 for ln in self.lines if re.search(r"\(round \d+/\d+\)|<->|^fitting |^message overhead", ln))
        return min(done / max(self.expected, 1), 0.99)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


BOARD: JobBoard[CalibJob] = JobBoard("calibration", max_finished=1)


def job(session: str) -> CalibJob | None:
    return BOARD.latest(session)


def start(session: str, source: str, sample: tuple, batch: int, devices: str, runner: str, *, steps: int,
          rounds: int, fit: int, max_transfer: str) -> CalibJob:
    """Start ``placement calibrate`` for this model at ``batch`` (the network's, so the op times match it)."""
    from placement_core.torch.devspec import parse_devices

    n = len(parse_devices(devices))
    argv = [sys.executable, "-c", CLI, "calibrate", "--model", source, "--input-shape",
            ",".join(str(v) for v in (1, *sample)), "--batch-size", str(batch), "--devices", devices, "--runner",
            runner, "--steps", str(steps), "--rounds", str(rounds), "--fit-placements", str(fit),
            "--max-transfer", max_transfer, "--preset", PRESET]
    expected = n * rounds + n * (n - 1) // 2 + (2 if fit > 0 and n > 1 else 0)
    j = CalibJob(argv, state.graph().name, batch, devices, expected)
    old = BOARD.latest(session)
    if old is not None and old.active:
        raise InputError("a calibration is already running", field="calibrate", fix="Wait for it or stop it")
    BOARD.add(session, j)
    j.start()
    return j


def use_calibration() -> str:
    """Make the saved ``local`` device graph current and, when it was measured for this network at this batch,
    its op times; returns what was done, in words."""
    from placement_core import load_devices
    from placement_core.formats.catalog import user_dir

    s = state.session()
    path = user_dir() / "devices" / f"{PRESET}.json"
    graph = load_devices(str(path))
    state.set_devices(graph, f"calibrated:{PRESET}:{state.digest(path.read_bytes())}", f"{PRESET} (calibrated)")
    s.pop("dev_tables", None)  # the Devices page shows the new graph
    g = state.graph()
    if PRESET in state.calibrations(g):
        state.set_sim(s.sim.with_(timings=PRESET))
        return (f"The device graph is now '{PRESET}' ({', '.join(graph.names)}) and the simulator uses the op times "
                f"measured for {g.name} at batch {g.batch_size}.")
    return (f"The device graph is now '{PRESET}' ({', '.join(graph.names)}). No op times of {g.name} at batch "
            f"{g.batch_size} were saved (the model's ops did not match this network), so the cost formulas apply.")


def render(source: str, sample_text: str, devices: str, runner: str) -> None:
    """The page's calibration section: options, Start / Stop, progress, and the result to use."""
    s = state.session()
    g = state.graph()
    st.markdown("##### Calibrate the simulator on this machine")
    st.caption(f"Runs `placement calibrate` for {ui.esc(g.name)} at its batch size ({g.batch_size}) on the local "
               "devices above: every op's forward and backward time on each device (at half the batch too: the "
               "part of each time a micro-batch or a batch shard keeps), the links between them and "
               "(optionally) the per-message overhead. The result is saved as the device preset "
               f"'{PRESET}' with this network's op times; use them to simulate this machine. Large models take "
               "minutes (every op is timed on every device).")
    c = st.columns(4)
    rounds = c[0].number_input("Rounds", 1, 5, 1, key=ui.persist("cal_rounds", bounds=(1, 5)),
                               help="Each device measured this many times in turn; the fastest round counts.")
    steps = c[1].number_input("Whole steps per device", 1, 50, 3, key=ui.persist("cal_steps", bounds=(1, 50)),
                              help="Timed single-device training steps the op times are scaled to.")
    fit = c[2].number_input("Placements to fit the message overhead", 0, 12, 0,
                            key=ui.persist("cal_fit", bounds=(0, 12)),
                            help="Whole-step runs of calibration placements to fit the CPU devices' time per "
                                 "message to; 0 leaves it at 0 (faster).")
    largest = c[3].selectbox("Largest link message", list(MAX_TRANSFERS), key=ui.persist("cal_max", MAX_TRANSFERS),
                             help="Link latency and bandwidth are fitted to one-way times from 1 kB up to this.")
    current = job(s.session_key)
    running = current is not None and current.status == "running"
    b1, b2 = st.columns([1, 4])
    if b1.button("Calibrate", icon=":material/tune:", key="cal_start", disabled=running or not source):
        from .torch_import import parse_sample_shape
        s.pop("cal_outcome", None)
        start(s.session_key, source, parse_sample_shape(sample_text), int(g.batch_size), devices, runner, steps=int(steps),
              rounds=int(rounds), fit=int(fit), max_transfer=MAX_TRANSFERS[largest])
        st.rerun()
    if running and b2.button("Stop the calibration", key="cal_stop"):
        current.stop()
        st.rerun()

    @st.fragment(run_every=1.0 if running else None)
    def progress():
        j = job(s.session_key)
        if j is None:
            return
        if j.status == "running":
            last = j.lines[-1] if j.lines else "starting the workers (they import PyTorch)"
            st.progress(j.fraction, text=f"Calibrating {ui.esc(j.network)} (batch {j.batch}) on {ui.esc(j.devices)} "
                                         f"for {time.time() - j.started:.0f} s: {ui.esc(last)}")
        elif running:  # it finished while this fragment polled: redraw the section with the result
            st.rerun(scope="app")

    progress()
    if current is None or current.status == "running":
        return
    took = f"{(current.finished or time.time()) - current.started:.0f} s"
    if current.status == "failed":
        st.error(f"The calibration failed: {ui.esc(current.error)}", icon=":material/error:")
    elif current.status == "stopped":
        st.info("The calibration was stopped; nothing was saved.", icon=":material/info:")
    else:
        st.success(f"Calibrated {ui.esc(current.network)} (batch {current.batch}) on {ui.esc(current.devices)} in "
                   f"{took}.",
                   icon=":material/check_circle:")
        st.code(current.output.strip(), language=None)
        if st.button("Use the calibrated devices and op times", type="primary", key="cal_use",
                     icon=":material/done_all:"):
            s.cal_outcome = use_calibration()
            st.rerun()
    if s.get("cal_outcome"):
        st.caption(ui.esc(s.cal_outcome))

"""Which optimization runs a browser session sees and may stop.

A run belongs to the server process that computes it, not to the browser tab that started it: a reload (a
new Streamlit session) or a second tab must still see it, watch it and stop it, or it computes on, out of
reach, until the server restarts. On a server that listens on the loopback address only (the default,
``.streamlit/config.toml``) everyone who reaches it is the machine's user, so every session sees every run
this process computes: each session adopts the runs still working (they join its job board, so their
results stay with it once they finish, and *Dismiss* forgets them for that session only). A server bound to
another address (``--server.address 0.0.0.0``) may be reached by other people: there each session sees
only its own runs, unless ``PLACEMENT_SHARED_RUNS=1`` says that one user reaches it (behind an
authenticating proxy); ``PLACEMENT_SHARED_RUNS=0`` keeps runs per session on a local server too
(docs/security.md).
"""

from __future__ import annotations

import ipaddress
import os

import streamlit as st

from . import state
from .background_runs import REGISTRY, Run

ENV = "PLACEMENT_SHARED_RUNS"
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def loopback(address: str | None) -> bool:
    """Whether a server bound to ``address`` is reachable from this machine only."""
    address = (address or "").strip().strip("[]")
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # "" (every interface) or a host name
        return False


def shared() -> bool:
    """Whether every session of this server sees and may stop every run it computes."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice in _ON:
        return True
    if choice in _OFF:
        return False
    try:
        return loopback(st.get_option("server.address"))
    except Exception:  # noqa: BLE001 - no server options (a script): keep runs per session
        return False


def adopt_live_runs() -> None:
    """With shared runs, every run of this server that is still working joins this session's board."""
    if not shared():
        return
    session = state.session().session_key
    mine = {r.id for r in REGISTRY.runs(session)}
    for run in sorted(REGISTRY.board.everywhere(), key=lambda r: (r.started, r.id)):
        if run.active and run.id not in mine:
            REGISTRY.board.add(session, run)


def runs() -> list[Run]:
    """The runs this session shows: its own, and (shared) those of this server it adopted, in start order."""
    adopt_live_runs()
    return sorted(REGISTRY.runs(state.session().session_key), key=lambda r: (r.started, r.id))


def live_run_of(store_id: int) -> Run | None:
    """The run of this server, visible to this session, that records stored run ``store_id`` while it works."""
    return next((r for r in runs() if r.active and store_id in (r.store_id, r.spec.resume_id)), None)

"""benchmarks/fuzz_campaign.py at a hundredth of its size: every family runs, nothing breaks the contract, and the
counts it prints are the inputs it made (the full campaign's figures are in docs/security.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parent.parent


def campaign_module():
    spec = importlib.util.spec_from_file_location("fuzz_campaign", ROOT / "benchmarks" / "fuzz_campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_small_campaign_breaks_no_contract_and_counts_every_input(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the campaign moves into its own folder and sets PLACEMENT_HOME: both restored
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    assert campaign_module().main_campaign(["--scale", "0.01"]) == 0
    out = capsys.readouterr().out
    total, zero, two, other = map(lambda t: int(t.replace(",", "")), re.search(
        r"^inputs: ([\d,]+) +exit 0: ([\d,]+) +exit 2: ([\d,]+) +anything else: ([\d,]+)", out, re.M).groups())
    assert other == 0 and total == zero + two
    families = {m[0]: [int(x.replace(",", "")) for x in m[1:]] for m in re.findall(
        r"^  (.+?) +([\d,]+) +exit 0 +([\d,]+) +exit 2 +([\d,]+) +else +([\d,]+)$", out, re.M)}
    assert all(n == a + b and c == 0 for n, a, b, c in families.values())
    assert sum(n for n, *_ in families.values()) == total
    # scale 0.01: 2 rounds of files (two commands per network file, one per other file), 2 pipeline plans and 1
    # initial mapping, 1 policy, 2 surrogate models, no damaged store, 10 hostile argument lists
    counts = {f: n for f, (n, *_) in families.items()}
    assert {f: counts[f] for f in ("network", "exprimo network", "devices", "exprimo devices", "placement",
                                   "sharded placement", "exprimo placement", "timings", "raw bytes", "pipeline plan",
                                   "initial mappings", "policy", "surrogate model")} == {
        "network": 4, "exprimo network": 4, "devices": 2, "exprimo devices": 2, "placement": 2,
        "sharded placement": 2, "exprimo placement": 2, "timings": 2, "raw bytes": 2, "pipeline plan": 2,
        "initial mappings": 1, "policy": 1, "surrogate model": 2}
    assert sum(n for f, n in counts.items() if f.startswith("arguments: ")) == 10
    assert not any(f.startswith("damaged store") for f in counts)


@pytest.mark.slow  # waits the limit out: one second
def test_the_time_limit_is_not_swallowed_by_the_clis_last_resort(monkeypatch):
    """A command past the limit is counted as such, not as the CLI's exit 1 ("unexpected failure")."""
    module = campaign_module()
    monkeypatch.setattr(module, "LIMIT_S", 1)

    def forever(argv):
        try:
            while True:
                pass
        except Exception:  # noqa: BLE001 - what the CLI's last resort does
            return 1
    monkeypatch.setattr(module, "main", forever)
    assert module.run(["anything"])[0] == "ran past 1 s"

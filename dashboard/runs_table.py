"""The Runs page's table as a W&B user expects it: evaluations per second, wall time, best, and runs grouped by
configuration (everything but the seed and the label: the same search repeated)."""

from __future__ import annotations

import hashlib
import json
import time

from . import stored


def wall_time(rec) -> float | None:
    """Seconds the run computed: its stored wall time, or for one still running, since it started."""
    if rec.wall_s is not None:
        return float(rec.wall_s)
    if rec.display_status == "running":
        return max(float(rec.updated) - float(rec.created), 0.0)
    return None


def configuration(rec) -> str:
    """What makes two runs the same experiment: algorithm, parameters, network, devices, simulator settings and
    budget; the seed and the label are left out (repeats with other seeds form one group)."""
    spec = rec.problem or {}
    if rec.algorithm == "plan-archive":  # placement_core.store.plan_runs: a plan request, not a simulator's spec
        params = ", ".join(f"{k} {v}" for k, v in sorted(rec.params.items()))
        request = json.dumps(spec.get("request"), sort_keys=True, default=str)
        return (f"{stored.title(rec.algorithm)} ({params}) · {rec.network_name} on {spec.get('devices_spec')} · "
                f"plan request #{hashlib.sha256(request.encode()).hexdigest()[:6]}")
    how = (f"{spec.get('batches')} batch(es), {spec.get('in_flight')} in flight" if spec.get("schedule") == "thesis"
           else f"{spec.get('schedule')}, {spec.get('micro_batches')} micro-batches")
    params = ", ".join(f"{k} {v}" for k, v in sorted(rec.params.items())) if rec.params else "defaults"
    budget = f"{rec.budget_evaluations:,} evaluations" if rec.budget_evaluations else "no budget"
    init = f", init {rec.seeding['init']}" if rec.seeding and rec.seeding.get("init") else ""
    named = ("batches", "in_flight", "schedule", "micro_batches", "profile", "penalty")
    rest = json.dumps({k: v for k, v in spec.items() if k not in named}, sort_keys=True, default=str)
    return (f"{stored.title(rec.algorithm)} ({params}) · {rec.network_name} on {rec.devices_name} · {how}, "
            f"{spec.get('profile')} costs, {spec.get('penalty')} penalty · {budget}{init}"
            + ("" if rest == "{}" else f" · other settings #{hashlib.sha256(rest.encode()).hexdigest()[:6]}"))


def kind(rec) -> str:
    """What a run is: a placement search, a policy training or a plan archive (its best is a plan's step)."""
    if rec.algorithm == "plan-archive":
        return "plan archive"
    return "policy training" if rec.algorithm.startswith("train-") else "placement search"


def rows(records, sizes: dict) -> list[dict]:
    """One row per run. Columns without a value hold None (drawn empty: the page passes ``placeholder=""``)."""
    out = []
    for r in records:
        wall = wall_time(r)
        out.append({
            "run": r.id, "status": r.display_status, "kind": kind(r), "algorithm": stored.title(r.algorithm),
            "network": r.network_name, "devices": r.devices_name,
            "best objective (ms)": None if r.best_objective is None else r.best_objective * 1e3,
            "evaluations": r.evaluations, "budget": r.budget_evaluations,
            "evaluations/s": r.evaluations / wall if wall else None,
            "wall time (s)": wall,
            "elites": sizes.get(r.id, len((r.extras.get("plan_archive") or {}).get("elites") or []) or None),
            "seed": r.seed,
            "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)),
            "seeded": r.seeding["init"] if r.seeding else "", "label": r.label or "",
            "configuration": configuration(r)})
    return out


def groups(table: list[dict]) -> list[dict]:
    """The rows grouped by configuration, as W&B's group-by: how many runs (seeds), the best and the mean of
    their best objectives, the spread, evaluations in all, mean evaluations per second and wall time."""
    by: dict[str, list[dict]] = {}
    for row in table:
        by.setdefault(row["configuration"], []).append(row)
    out = []
    for conf, members in by.items():
        best = [m["best objective (ms)"] for m in members if m["best objective (ms)"] is not None]
        rate = [m["evaluations/s"] for m in members if m["evaluations/s"] is not None]
        wall = [m["wall time (s)"] for m in members if m["wall time (s)"] is not None]
        out.append({"configuration": conf, "runs": len(members),
                    "seeds": ", ".join(str(s) for s in sorted({m["seed"] for m in members})),
                    "best objective (ms)": min(best) if best else None,
                    "mean best (ms)": sum(best) / len(best) if best else None,
                    "worst best (ms)": max(best) if best else None,
                    "evaluations": sum(m["evaluations"] for m in members),
                    "evaluations/s": sum(rate) / len(rate) if rate else None,
                    "wall time (s)": sum(wall) / len(wall) if wall else None,
                    "run ids": ", ".join(str(m["run"]) for m in members)})
    return sorted(out, key=lambda g: (g["best objective (ms)"] is None, g["best objective (ms)"] or 0.0))

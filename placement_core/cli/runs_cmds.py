"""``placement runs list|show|export|delete|benchmarks``: the run store from the command line."""

from __future__ import annotations

import csv
import io
import sys
import time

from ..analysis.exports import RUN_EXPORTS as FORMATS
from ..base.units import fmt_seconds
from .common import print_json, printable, table
from .validate import check_output_file, run_id, write_output_bytes

EXPORTS = tuple(FORMATS)


def add_home(p) -> None:
    p.add_argument("--home", metavar="DIR", help="data directory with runs.sqlite (default $PLACEMENT_HOME or "
                                                 "~/.placement)")


def register(sub) -> None:
    runs = sub.add_parser("runs", help="list, show, export or delete stored runs; export stored benchmarks")
    rsub = runs.add_subparsers(dest="runs_command", metavar="ACTION", parser_class=type(runs))
    rsub.required = True
    p = rsub.add_parser("list", help="all runs, newest first")
    add_home(p)
    p.add_argument("--status", choices=["running", "done", "stopped", "failed", "interrupted"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_list)
    p = rsub.add_parser("show", help="one run: problem, parameters, result, history")
    add_home(p)
    p.add_argument("run", type=run_id)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)
    p = rsub.add_parser("export", help="export a run's placement, archive, history, trace or benchmarks")
    add_home(p)
    p.add_argument("run", type=run_id)
    p.add_argument("--what", choices=EXPORTS, default="placement",
                   help="placement (placement/1 JSON), torch (device map JSON), snippet (Python), archive "
                        "(CSV/Parquet), history (CSV), trace (Chrome JSON), benchmarks (CSV)")
    p.add_argument("--format", choices=["json", "csv", "parquet", "py"], help="default: the natural one")
    p.add_argument("--out", required=True, metavar="FILE")
    p.set_defaults(handler=cmd_export)
    p = rsub.add_parser("delete", help="delete a run and everything stored with it (not while it runs)")
    add_home(p)
    p.add_argument("run", type=run_id)
    p.add_argument("--force", action="store_true",
                   help="delete a run that claims to be running (its process on a host that is gone, say); a process "
                        "still driving it stops at its next checkpoint")
    p.set_defaults(handler=cmd_delete)
    p = rsub.add_parser("doctor", help="check the run store and salvage what can be read into a new file",
                        description="Check runs.sqlite (SQLite's integrity check, then every run and benchmark read "
                                    "on its own). When something is damaged, copy every readable run (ids "
                                    "unchanged) and benchmark into a new store file next to it; the damaged file is "
                                    "only read, never changed. Exit status 0: no problems; 3: damage found.")
    add_home(p)
    p.add_argument("--out", metavar="FILE", help="the new store file (default: runs-salvaged-DATE-TIME.sqlite next "
                                                 "to runs.sqlite; never an existing file)")
    p.add_argument("--check-only", action="store_true", help="report, but write no salvaged store")
    p.set_defaults(handler=cmd_doctor)
    p = rsub.add_parser("benchmarks", help="every stored benchmark as CSV (from `placement benchmark` and the "
                                           "dashboard), for comparing placements measured for real",
                        description="Write every stored measurement (optionally of one network) as CSV: benchmark, "
                                    "created, network, batch_size, run, placement, runner, devices, status, "
                                    "simulated_s, measured_median_s, iqr_s, host.")
    add_home(p)
    p.add_argument("--network", metavar="NAME", help="only the benchmarks of this network (by name)")
    p.add_argument("--out", metavar="FILE", help="CSV file to write (default: print the CSV)")
    p.set_defaults(handler=cmd_benchmarks)


def open_store(args):
    from ..store import RunStore
    return RunStore(home=args.home)


def cmd_list(args) -> int:
    with open_store(args) as store:
        runs, damaged = store.runs_checked(status=args.status)
        rows = [{"id": r.id, "status": r.display_status, "algorithm": r.algorithm, "network": r.network_name,
                 "devices": r.devices_name, "evaluations": r.evaluations, "budget": r.budget_evaluations,
                 "best_objective_s": r.best_objective, "created": when(r.created),
                 "label": r.label, "seeded": r.seeding["init"] if r.seeding else None} for r in runs]
    for d in damaged:  # the rest is listed; each damaged run is named once, with the way out
        rows.append({"id": d.run_id, "status": "damaged", "algorithm": "?", "network": "?", "devices": "?",
                     "evaluations": None, "budget": None, "best_objective_s": None, "created": "?", "label": None,
                     "seeded": None, "error": d.why})
        print(f"warning: {printable(d.message)}", file=sys.stderr)
    rows.sort(key=lambda r: -r["id"])
    if args.json:
        print_json(rows)
    elif not rows:
        print(f"no runs stored yet in {store.path}")
    else:
        print(table([[r["id"], r["status"], printable(r["algorithm"]), printable(r["network"]), printable(r["devices"]),
                      "?" if r["evaluations"] is None else f"{r['evaluations']}/{r['budget'] or '-'}",
                      "-" if r["best_objective_s"] is None else f"{r['best_objective_s']:.6g}", r["created"]]
                     for r in rows], ["id", "status", "algorithm", "network", "devices", "evaluations", "best (s)",
                                      "created"], right=(0, 5, 6)))
    return 0


def cmd_show(args) -> int:
    with open_store(args) as store:
        r = store.get(args.run)
        history = store.history(r.id)
        n_archive = len(store.archive_rows(r.id)) or len((r.extras.get("plan_archive") or {}).get("elites") or [])
        data = {"id": r.id, "status": r.display_status, "label": r.label, "network": r.network_name,
                "devices": r.devices_name, "problem": r.problem, "algorithm": r.algorithm, "params": r.params,
                "seed": r.seed, "budget_evaluations": r.budget_evaluations, "budget_seconds": r.budget_seconds,
                "evaluations": r.evaluations, "best_objective_s": r.best_objective, "wall_s": r.wall_s,
                "error": r.error, "archive_size": n_archive, "history_points": len(history), "seeding": r.seeding,
                "extras": {k: v for k, v in r.extras.items() if k not in ("plan", "plan_archive")}}
    if args.json:
        print_json(data)
        return 0
    print(f"run {r.id} [{data['status']}]: {r.algorithm} on {r.network_name} / {r.devices_name}"
          + (f" ({r.label})" if r.label else ""))
    print(f"  problem: {r.problem}")
    print(f"  params: {r.params}, seed {r.seed}")
    if r.seeding:
        from ..optimize.seeding import seeding_text
        print(f"  {printable(seeding_text(r.seeding, best=True))}")
    best = "-" if r.best_objective is None else f"{r.best_objective:.6g} s"
    print(f"  {r.evaluations}/{r.budget_evaluations or '-'} evaluations, best objective {best}"
          + (f", wall {fmt_seconds(r.wall_s)}" if r.wall_s else ""))
    if n_archive:
        print(f"  archive: {n_archive} " + ("plans, one per niche (the dashboard's Archive page browses it)"
                                           if r.algorithm == "plan-archive" else "elites"))
    if r.error:
        print(f"  error: {r.error}")
    return 0


def cmd_export(args) -> int:
    from ..analysis.exports import export_run
    out = check_output_file(args.out, "--out", f"run{args.run}-{args.what}")
    with open_store(args) as store:
        exported = export_run(store, args.run, args.what, args.format)
    write_output_bytes(out, exported.data, "--out")
    print(f"wrote {out}")
    return 0


def cmd_benchmarks(args) -> int:
    from ..analysis.exports import export_benchmarks
    out = check_output_file(args.out, "--out", "benchmarks.csv") if args.out is not None else None
    with open_store(args) as store:
        exported = export_benchmarks(store, args.network)
    if out is None:
        sys.stdout.write(exported.data.decode())
        return 0
    write_output_bytes(out, exported.data, "--out")
    n = len(list(csv.reader(io.StringIO(exported.data.decode())))) - 1
    print(f"wrote {out} ({n} benchmark{'s' if n != 1 else ''})")
    return 0


def cmd_delete(args) -> int:
    with open_store(args) as store:
        store.delete(args.run, force=args.force)
    print(f"deleted run {args.run}")
    return 0


def cmd_doctor(args) -> int:
    from ..store import home_dir
    from ..store.doctor import examine
    out = check_output_file(args.out, "--out", "runs-salvaged.sqlite") if args.out is not None else None
    report = examine(home_dir(args.home) / "runs.sqlite", out, salvage=not args.check_only)
    for line in report.lines():
        print(printable(line))
    return 0 if report.healthy else 3


def when(timestamp) -> str:
    """A stored time as local date and minute; '?' for one no calendar holds (a damaged cell: 1e300)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"

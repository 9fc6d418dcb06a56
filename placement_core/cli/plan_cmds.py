"""``placement plan``: the best 3D-parallel plan of a network on a GPU cluster, every plan simulated."""

from __future__ import annotations

import sys

from ..optimize.plan_space import DIMS
from .common import positive_int, print_json, printable, table
from .plan_output import NOTHING_FITS, plan_rows
from .optimize_cmds import note
from .validate import count_int, seed_int


def register(sub) -> None:
    p = sub.add_parser("plan", help="the best tensor x pipeline x data-parallel plan of a network on a GPU cluster",
                       description="Search the ways to run one training step of the global batch on the "
                                   "GPUs of a device graph: tensor-parallel groups inside a node, pipeline "
                                   "stages across groups of them, data parallelism inside each stage, "
                                   "micro-batches under a pipeline schedule. "
                                   "Every dimension not given is searched; every plan is simulated by the event "
                                   "simulator (docs/clusters.md).")
    p.add_argument("--network", required=True, help="gpt:layers=L,hidden=H,heads=A[,...], a built-in name or a file")
    p.add_argument("--devices", required=True, help="dgx-a100:nodes=N, dgx-h100:nodes=N (N up to 1024), a preset "
                                                     "or a file")
    p.add_argument("--fold", action="store_true",
                   help="simulate one data-parallel replica and cost its gradient all-reduce with the collective "
                        "model (always so above 32 nodes; a dgx-...:nodes=N cluster)")
    p.add_argument("--global-batch", required=True, type=positive_int, help="sequences (samples) per step")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel degree, inside a node (default: searched for a "
                                                     "gpt: network, 1 otherwise)")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="Megatron's sequence parallelism over each tensor-parallel group")
    p.add_argument("--pp", type=positive_int, help="pipeline stages (default: searched)")
    p.add_argument("--dp", type=positive_int, help="data-parallel replicas (default: searched)")
    p.add_argument("--micro-batch", type=positive_int, help="sequences per micro-batch and replica (searched)")
    p.add_argument("--schedule", choices=["1f1b", "gpipe", "zb-h1", "interleaved-1f1b"],
                   help="pipeline schedule (default 1f1b; searched by --search map-elites)")
    p.add_argument("--virtual-stages", type=positive_int,
                   help="chunks per GPU (interleaved-1f1b; default 1, searched by --search map-elites)")
    p.add_argument("--recompute", choices=["none", "selective", "full"],
                   help="activation recomputation: none, selective (attention's scores) or full (each layer's "
                        "forward again in its backward); a gpt: network (default none; searched by --search "
                        "map-elites)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3],
                   help="ZeRO stage over each data-parallel group (3: a gpt: network; default 0, searched by "
                        "--search map-elites)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="adam", help="training state (default adam)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="default: the network's own")
    p.add_argument("--comm-efficiency", type=float, help="share of link bandwidth transfers reach (default 0.25)")
    p.add_argument("--top", type=positive_int, default=10, help="plans listed (default 10)")
    p.add_argument("--export", choices=["megatron", "nemo", "stages"],
                   help="print what a training stack needs to run a plan instead of the table: Megatron-LM's "
                        "launch command, NeMo's overrides, or the stage split as JSON")
    p.add_argument("--pick", type=positive_int, default=1, metavar="K", help="the plan to export (default 1: the best)")
    p.add_argument("--search", choices=["exhaustive", "map-elites"], default="exhaustive",
                   help="exhaustive (default): simulate every tp x pp x dp x micro-batch plan (at most 400); "
                        "map-elites: keep an archive of the best plan per niche (--niches), searching the "
                        "schedule, virtual stages, recomputation and ZeRO stage too unless given")
    p.add_argument("--budget", type=count_int, default=100, help="map-elites: plans to simulate (default 100)")
    p.add_argument("--niches", default="pp,tp", metavar="DIMS",
                   help="map-elites: two or more of " + ", ".join(DIMS) + " (default pp,tp)")
    p.add_argument("--seed", type=seed_int, default=0, help="map-elites: random seed (default 0)")
    p.add_argument("--label", type=note, help="map-elites: a note stored with the run")
    p.add_argument("--no-store", action="store_true",
                   help="map-elites: do not record the archive in the run store (placement runs list; the "
                        "dashboard's Archive page)")
    p.add_argument("--home", metavar="DIR", help="data directory (default $PLACEMENT_HOME or ~/.placement)")
    p.add_argument("--json", action="store_true", help='print {"best": {...}, "candidates": [...]} (and "archive" '
                                                       "under --search map-elites)")
    p.set_defaults(handler=cmd_plan)


def _devices(spec: str, fold: bool):
    """The device graph, or a :class:`Cluster` not materialised when the replicas are folded (``--fold``, or a
    cluster above the 32 nodes a device graph holds)."""
    from ..base.errors import InputError
    from ..formats import clusters
    from ..formats.catalog import load_devices

    if clusters.is_cluster(spec):
        c = clusters.load_plan_cluster(spec.strip().lower().replace(" ", ""))
        return c if fold or c.nodes > clusters.MAX_NODES else load_devices(spec)
    if fold:
        raise InputError("--fold folds the replicas of a dgx-a100:nodes=N or dgx-h100:nodes=N cluster",
                         field="--fold", fix="Plan on such a cluster, or leave --fold out")
    return load_devices(spec)


DEFAULTS = {"schedule": "1f1b", "virtual_stages": 1, "recompute": "none", "zero": 0}


def _search(args, graph, devices, req, config, vary):
    """MAP-Elites over the plans, stored as a run unless --no-store: (archive, run id or None)."""
    import time

    from ..optimize.plan_elites import search_plans

    niches = tuple(n.strip() for n in args.niches.split(",") if n.strip())
    t0 = time.perf_counter()
    archive = search_plans(graph, devices, req, config, vary=vary, niches=niches, budget=args.budget, seed=args.seed)
    if args.no_store:
        return archive, None
    from ..store import RunStore
    from ..store.plan_runs import PlanSearch, save_plan_archive

    search = PlanSearch(devices_spec=args.devices, request=req, network_spec=args.network if config else None,
                        vary=tuple(vary), niches=niches, budget=args.budget, seed=args.seed)
    with RunStore(home=args.home) as store:
        return archive, save_plan_archive(store, archive, search, graph, devices,
                                          wall_s=time.perf_counter() - t0, label=args.label)


def stored_note(run_id: int) -> str:
    return (f"stored as run {run_id} (see `placement runs show {run_id}`; the dashboard's Archive page browses "
            "it)")


def cmd_plan(args) -> int:
    from ..base.errors import InputError
    from ..families import gpt
    from ..formats.catalog import load_network
    from ..optimize.plans import PlanRequest, plan

    graph = load_network(args.network)
    if args.precision:
        graph = graph.with_precision(args.precision)
    devices = _devices(args.devices, args.fold)
    given = {k: getattr(args, k) for k in DEFAULTS}
    fixed = {k: DEFAULTS[k] if v is None else v for k, v in given.items()}
    req = PlanRequest(global_batch=args.global_batch, tp=args.tp, pp=args.pp, dp=args.dp,
                      micro_batch=args.micro_batch, optimizer=args.optimizer, comm_efficiency=args.comm_efficiency,
                      sequence_parallel=args.sequence_parallel, **fixed)
    config = gpt.parse(args.network) if gpt.is_gpt(args.network) else None
    archive = run_id = None
    if args.search == "map-elites":
        archive, run_id = _search(args, graph, devices, req, config, [k for k, v in given.items() if v is None])
        plans = [e.plan for e in archive.ranked()]
    else:
        plans = plan(graph, devices, req, config)
    gpus = plans[0].tp * plans[0].pp * plans[0].dp
    if args.export:
        from ..optimize.plan_export import export
        if args.pick > len(plans):
            raise InputError(f"there are {len(plans)} plans, not {args.pick}", field="--pick",
                             fix=f"Pick 1 to {len(plans)}")
        chosen = plans[args.pick - 1]
        per_node = 8 if args.devices.strip().lower().startswith("dgx-") else gpus
        print(export(args.export, chosen.graph or graph, config, chosen, max(1, gpus // per_node), min(per_node, gpus),
                     args.global_batch, args.optimizer))
        if run_id is not None:
            print(stored_note(run_id), file=sys.stderr)
        return 0
    model = {"network": graph.name, "ops": len(graph), "precision": graph.precision, "gpus": gpus,
             "global_batch": args.global_batch}
    flops = c = None
    if gpt.is_gpt(args.network):
        c = gpt.parse(args.network, args.global_batch)
        flops = c.matmul_flops()
        model.update(parameters=c.parameters(), tokens_per_step=args.global_batch * c.seq,
                     matmul_flops_per_step=flops)

    def row(p) -> dict:
        d = p.to_dict()
        if flops is not None and p.step_time_s > 0:
            d["tokens_per_s"] = model["tokens_per_step"] / p.step_time_s
            d["model_tflops_per_gpu"] = flops / p.step_time_s / gpus / 1e12
            # the recomputed forward counted too (hardware FLOPs, as Megatron-LM reports its throughput)
            d["hardware_tflops_per_gpu"] = (flops + c.recomputed_flops(p.recompute)) / p.step_time_s / gpus / 1e12
        return d

    rows = [row(p) for p in plans]
    setting = (f"{printable(graph.name)} ({len(graph)} ops, {graph.precision}) on {printable(devices.name)}: "
               f"{gpus} GPUs, global batch {args.global_batch}, {args.optimizer}"
               + (", sequence-parallel" if args.sequence_parallel else ""))
    if archive is not None:
        from .plan_output import archive_json, print_archive
        if args.json:
            print_json({**archive_json(archive, model, row, args.budget, args.seed), "run_id": run_id})
        else:
            print_archive(archive, setting, rows, args.budget, args.seed, args.top, flops is not None)
            if run_id is not None:
                print(stored_note(run_id))
        return 0
    if args.json:
        print_json({"model": model, "best": rows[0], "candidates": rows})
        return 0
    print(setting + f", {fixed['schedule']}" + (f", ZeRO-{fixed['zero']}" if fixed["zero"] else "")
          + (f", recompute {fixed['recompute']}" if fixed["recompute"] != "none" else "")
          + f"; {len(plans)} plans simulated")
    header, body = plan_rows(rows[:args.top], flops is not None)
    print(table(body, header, right=range(len(header))))
    if not plans[0].fits:
        print(NOTHING_FITS)
    return 0

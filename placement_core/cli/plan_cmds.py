"""``placement plan``: the best 3D-parallel plan of a network on a GPU cluster, every plan simulated."""

from __future__ import annotations

from ..base.units import fmt_bytes, fmt_seconds
from .common import positive_int, print_json, printable, table


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
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe", "zb-h1", "interleaved-1f1b"])
    p.add_argument("--virtual-stages", type=positive_int, default=1, help="chunks per GPU (interleaved-1f1b)")
    p.add_argument("--recompute", default="none", choices=["none", "selective", "full"],
                   help="activation recomputation: none, selective (attention's scores) or full (each layer's "
                        "forward again in its backward); a gpt: network")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0,
                   help="ZeRO stage over each data-parallel group (3: a gpt: network)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="adam", help="training state (default adam)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="default: the network's own")
    p.add_argument("--comm-efficiency", type=float, help="share of link bandwidth transfers reach (default 0.25)")
    p.add_argument("--top", type=positive_int, default=10, help="plans listed (default 10)")
    p.add_argument("--export", choices=["megatron", "nemo", "stages"],
                   help="print what a training stack needs to run a plan instead of the table: Megatron-LM's "
                        "launch command, NeMo's overrides, or the stage split as JSON")
    p.add_argument("--pick", type=positive_int, default=1, metavar="K", help="the plan to export (default 1: the best)")
    p.add_argument("--json", action="store_true", help='print {"best": {...}, "candidates": [...]}')
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


def cmd_plan(args) -> int:
    from ..base.errors import InputError
    from ..families import gpt
    from ..formats.catalog import load_network
    from ..optimize.plans import PlanRequest, plan

    graph = load_network(args.network)
    if args.precision:
        graph = graph.with_precision(args.precision)
    devices = _devices(args.devices, args.fold)
    req = PlanRequest(global_batch=args.global_batch, tp=args.tp, pp=args.pp, dp=args.dp,
                      micro_batch=args.micro_batch, schedule=args.schedule, virtual_stages=args.virtual_stages,
                      optimizer=args.optimizer, zero=args.zero, comm_efficiency=args.comm_efficiency,
                      sequence_parallel=args.sequence_parallel, recompute=args.recompute)
    config = gpt.parse(args.network) if gpt.is_gpt(args.network) else None
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
        return 0
    model = {"network": graph.name, "ops": len(graph), "precision": graph.precision, "gpus": gpus,
             "global_batch": args.global_batch}
    flops = None
    if gpt.is_gpt(args.network):
        c = gpt.parse(args.network, args.global_batch)
        flops = c.matmul_flops()
        model.update(parameters=c.parameters(), tokens_per_step=args.global_batch * c.seq,
                     matmul_flops_per_step=flops)
    rows = []
    for p in plans:
        d = p.to_dict()
        if flops is not None and p.step_time_s > 0:
            d["tokens_per_s"] = model["tokens_per_step"] / p.step_time_s
            d["model_tflops_per_gpu"] = flops / p.step_time_s / gpus / 1e12
        rows.append(d)
    if args.json:
        print_json({"model": model, "best": rows[0], "candidates": rows})
        return 0
    print(f"{printable(graph.name)} ({len(graph)} ops, {graph.precision}) on {printable(devices.name)}: "
          f"{gpus} GPUs, global batch {args.global_batch}, {args.schedule}, {args.optimizer}"
          + (f", ZeRO-{args.zero}" if args.zero else "") + (", sequence-parallel" if args.sequence_parallel else "")
          + (f", recompute {args.recompute}" if args.recompute != "none" else "") + f"; {len(plans)} plans simulated")
    body = [[str(r["tp"]), str(r["pp"]), str(r["dp"]), str(r["micro_batch"]), str(r["micro_batches"]),
             fmt_seconds(r["step_time_s"]),
             fmt_bytes(r["peak_memory_bytes"]), "yes" if r["fits"] else "no",
             f"{r['breakdown']['bubble_fraction']:.0%}", fmt_seconds(r["breakdown"]["tensor_parallel_comm_s"])]
            + ([f"{r['model_tflops_per_gpu']:.0f}"] if "model_tflops_per_gpu" in r else [])
            for r in rows[:args.top]]
    header = ["tp", "pp", "dp", "micro-batch", "micro-batches", "step", "fullest GPU", "fits", "idle", "TP comm"] + (
        ["TFLOP/s per GPU"] if flops is not None else [])
    print(table(body, header, right=range(len(header))))
    if not plans[0].fits:
        print("no plan fits in memory: try more GPUs, ZeRO (--zero 1 to 3), --recompute selective or full, smaller "
              "micro-batches or a smaller model")
    return 0

"""``placement benchmark --schedule ...``: a placement's stages run by torch.distributed.pipelining, timed, stored,
and (``--simulate DEVICES``) set against the simulator's step and bubble for the same pipeline."""

from __future__ import annotations

from ..base.units import fmt_seconds
from ..base.errors import InputError
from .common import print_json, table
from .torch_common import _assignment, _shape_and_network


def cmd_benchmark_pipeline(args) -> int:
    from ..analysis.pipeline_stages import pipeline_plan
    from ..torch.benchmark import BenchmarkSettings
    from ..torch.devspec import check_available, parse_devices
    from ..torch.pipeline_bench import benchmark_pipeline

    if args.run is not None:
        raise InputError("--schedule measures one placement, not a stored run's best", field="--run",
                         fix="Give --placement (e.g. stages:4, or stages:4x2 for interleaved-1f1b)")
    if args.placement is None:
        raise InputError("nothing to measure", field="--placement", fix="Give --placement, e.g. stages:4")
    if args.runner != "ranks":
        raise InputError("a pipelined run is one rank per device", field="--runner", fix="Leave --runner out")
    if args.profile is not None:
        raise InputError("--profile traces the send/recv runners; a pipelined run is not profiled",
                         field="--profile", fix="Leave --schedule out to profile the placement's step")
    devs = parse_devices(args.devices)
    check_available(devs)
    shape, batch, network, groups = _shape_and_network(args)
    assignment, traced = _assignment(args, shape, network, groups, devs)
    m = args.micro_batches or 4
    plan = pipeline_plan(traced.graph, assignment, args.schedule, m, batch, [d.name for d in devs])
    simulated = simulate_plan(args, traced.graph.with_batch_size(batch), assignment, plan) if args.simulate else None
    settings = BenchmarkSettings(steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                 memory_limit=args.memory_limit, timeout=args.timeout, seed=args.seed)
    result = benchmark_pipeline(args.model, shape, assignment, devs, plan, batch_size=batch, settings=settings,
                                name=traced.graph.name)
    if simulated is not None:
        result.pipeline["simulated"] = simulated
    report = {"model": args.model, "network": traced.graph.name, "batch_size": batch, "placement": args.placement,
              **result.to_dict()}
    if not args.no_store:
        from ..formats.network import network_hash
        from ..store import RunStore
        with RunStore(home=args.home) as store:
            report["benchmark_id"] = store.add_benchmark(
                network_name=traced.graph.name, devices_spec=args.devices, runner="ranks", placement=assignment,
                simulated_s=simulated["step_s"] if simulated else None, measured_median_s=result.median_step_s,
                result=result.to_dict(), label=f"{args.placement} {plan.schedule} m={m}",
                network_hash=network_hash(traced.graph.with_batch_size(batch)), batch_size=batch)
    if args.json:
        print_json(report)
        return 0 if result.ok else 1
    pipe = result.pipeline
    print(f"{traced.graph.name} (batch {batch}, {m} micro-batches) on {', '.join(plan.order)}: {plan.schedule} "
          f"({pipe['torch_schedule']}), {len(plan.chunks)} stage(s), placement {args.placement}")
    if not result.ok:
        print(f"status: {result.status}: {result.message}")
        return 1
    print(f"median_step_s: {result.median_step_s:.6f} ({fmt_seconds(result.median_step_s)}), measured bubble "
          f"{pipe['bubble_fraction']:.1%} (mean share of the step a rank waits)")
    if simulated:
        print(f"simulated ({args.simulate}): step {fmt_seconds(simulated['step_s'])}, bubble "
              f"{simulated['bubble_fraction']:.1%}")
    if result.message:
        print(f"note: {result.message}")
    rows = [[d, fmt_seconds(pipe["busy_s"][d]), fmt_seconds(pipe["idle_s"][d])]
            + ([fmt_seconds(simulated["idle_s"][d])] if simulated else []) for d in plan.order]
    print(table(rows, ["rank", "busy", "idle"] + (["simulated idle"] if simulated else []), right=(1, 2, 3)))
    return 0


def simulate_plan(args, graph, assignment: dict[str, str], plan) -> dict:
    """The simulator's step, bubble and idle time per device for the same pipeline on ``--simulate`` devices
    (a calibrated preset such as ``local``), with ``--timings`` op times when given."""
    import numpy as np

    from ..formats.catalog import load_devices
    from ..problem import ProblemSpec
    from ..cost.timings import load_timings

    devices = load_devices(args.simulate)
    missing = sorted({d for d in assignment.values() if d not in devices.index})
    if missing:
        raise InputError(f"the device graph {args.simulate!r} has no {', '.join(missing)}", field="--simulate",
                         fix="Use the preset calibrated on these devices (placement calibrate ... saves 'local')")
    timings = load_timings(args.timings, graph) if args.timings else None
    spec = ProblemSpec(schedule=plan.schedule, micro_batches=plan.micro_batches, virtual_stages=plan.virtual_stages,
                       timings=timings, timings_batch=graph.batch_size if timings else 0)
    placement = np.array([devices.index[assignment[op.name]] for op in graph.ops], dtype=np.int32)
    r = spec.build(graph, devices).simulate(placement).result
    stage = [devices.index[d] for d in plan.order]
    return {"devices": args.simulate, "timings": args.timings, "step_s": float(r.makespan),
            "bubble_fraction": float(np.mean(r.idle_fraction()[stage])),
            "idle_s": {devices.names[d]: float(r.makespan - r.busy[d]) for d in stage}}

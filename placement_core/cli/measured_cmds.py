"""``placement optimize --objective measured``: a search whose objective is measured for real (thesis E4).

It starts from a stored run (``--from-run ID``: its problem, and its best placements, kept placements and
archive as the starting candidates) and spends ``--budget-measurements M`` measurements with the benchmark
protocol of ``placement benchmark`` on the local ``--devices``: ``--search assisted`` (the GA on a surrogate
refit as measurements arrive, measuring only the most promising), ``ga`` (a plain GA on measurements) or
``top-k`` (re-measure the candidates in simulated order). The search is a run of its own; ``--resume`` it
after a kill and nothing measured is measured again.
"""

from __future__ import annotations

import sys

from ..base.errors import InputError
from .common import positive_int, print_json, printable
from .torch_common import MODEL_HELP, _needs_torch
from .validate import positive_seconds, run_id as run_id_arg


def add_options(p) -> None:
    g = p.add_argument_group("measured objective (--objective measured; see docs/surrogate.md)")
    g.add_argument("--objective", choices=["simulated", "measured"], default="simulated",
                   help="simulated (default) or measured: time placements for real on --devices (e.g. cpu:2)")
    g.add_argument("--from-run", type=run_id_arg, metavar="ID",
                   help="measured: the stored run whose problem and best placements the search starts from")
    g.add_argument("--budget-measurements", type=positive_int, metavar="M", help="measured: placements to measure")
    g.add_argument("--search", choices=["assisted", "ga", "top-k"], default="assisted",
                   help="measured: assisted (GA on a surrogate, default), ga (plain GA) or top-k (candidates in "
                        "simulated order)")
    g.add_argument("--model", help="measured: the model to run, " + MODEL_HELP)
    g.add_argument("--input-shape", help="measured: example input (default: the run's network's)")
    g.add_argument("--map", metavar="DEV=LOCAL,...", help="measured: which local device plays each device of the "
                                                          "run's device graph (default: same name, else in turn)")
    g.add_argument("--steps", type=positive_int, default=4, help="measured: timed steps per round (default 4)")
    g.add_argument("--warmup", type=positive_int, default=1, help="measured: warm-up steps per round (default 1)")
    g.add_argument("--rounds", type=positive_int, default=2, help="measured: interleaved rounds (default 2)")
    g.add_argument("--timeout", type=positive_seconds, default=600.0,
                   help="measured: seconds before a placement is killed (default 600)")
    g.add_argument("--batch", type=positive_int, default=5, help="measured, assisted: measurements per round (default 5)")
    g.add_argument("--initial-measurements", type=positive_int, default=10,
                   help="measured, assisted: the run's best placements measured before the first surrogate "
                        "(default 10)")
    g.add_argument("--population", type=positive_int, default=30,
                   help="measured: the GA's population (default 30, the thesis' E4)")


def truth_for(params: dict, problem, progress=None):
    """The measurer a measured run's stored ``params`` describe (``placement_core.torch``)."""
    _needs_torch()
    from ..torch.measure import measurer_from_params

    return measurer_from_params(params, problem, progress)


def cmd_measured(args) -> int:
    """A new measured search (``args.resume`` is None) or a resumed one."""
    _needs_torch()
    import numpy as np

    from ..analysis.benchmark_plan import default_mapping, distinct_top, parse_mapping, run_candidates, shared_warning
    from ..surrogate.search import SearchSettings
    from ..surrogate.model import SurrogateSpec, require_sklearn
    from ..store.measured_search import resume_measured, start_measured
    from ..store import RunStore
    from ..cost.timings import input_shape_of
    from ..torch.devspec import parse_devices
    from ..torch.sources import parse_input_shape

    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    progress = lambda used, best: say(f"measured {used}, best {best * 1e3:.2f} ms")  # noqa: E731
    measurer = {}

    def make(params, problem):
        measurer["m"] = truth_for(params, problem)
        return measurer["m"]

    details = lambda key: measurer["m"].results.get(key) if "m" in measurer else None  # noqa: E731
    with RunStore(home=args.home) as store:
        if args.resume is not None:
            run_id = args.resume
            result = resume_measured(store, run_id, make, details=details, progress=progress, force=args.force)
            rec = store.get(run_id)
            params, problem = rec.params, store.problem(run_id)
        else:
            for name in ("from_run", "budget_measurements", "model", "devices"):
                if getattr(args, name) is None:
                    raise InputError(f"--objective measured needs --{name.replace('_', '-')}",
                                     field=f"--{name.replace('_', '-')}",
                                     fix="e.g. --objective measured --from-run 3 --model torchvision:resnet18 "
                                         "--devices cpu:2 --budget-measurements 50")
            if args.search == "assisted":
                require_sklearn()
            problem, cands, _ = run_candidates(store, args.from_run)
            ranked = distinct_top(problem, cands, 10_000)
            graph, names = problem.graph, problem.devices.names
            devs = parse_devices(args.devices)
            local = [d.name for d in devs]
            chosen = parse_mapping(args.map, names, local) if args.map else {}
            mapping = {names[i]: chosen.get(names[i], loc)
                       for i, loc in default_mapping(names, list(range(len(names))), local).items()}
            warning = shared_warning(mapping, {d.name: d.torch for d in devs})
            if warning:
                say(f"warning: {warning}")
            if args.input_shape:
                shape = parse_input_shape(args.input_shape)
            elif input_shape_of(graph):
                shape = input_shape_of(graph)
            else:
                raise InputError(f"run {args.from_run}'s network {graph.name} does not say its input's shape",
                                 field="--input-shape", fix="Give --input-shape, e.g. 1,3,224,224")
            params = {"model": args.model, "input_shape": list(shape), "batch_size": args.batch_size or graph.batch_size,
                      "devices": args.devices, "mapping": mapping, "steps": args.steps, "warmup": args.warmup,
                      "rounds": args.rounds, "timeout": args.timeout, "runner": "ranks"}
            settings = SearchSettings(budget=args.budget_measurements, search=args.search, seed=args.seed,
                                      population=args.population, initial=args.initial_measurements, batch=args.batch,
                                      surrogate=SurrogateSpec(simulated=True, seed=args.seed))
            initial = np.array([r.placement for r in ranked], dtype=np.int32)
            say(f"measured search ({args.search}) from run {args.from_run}: {len(ranked)} candidate placement(s), "
                f"budget {args.budget_measurements} measurements on {args.devices}")
            run_id, result = start_measured(store, args.from_run, settings, make(params, problem), params=params,
                                            initial=initial, label=args.label, details=details, progress=progress,
                                            on_created=lambda i: say(f"stored as run {i} (resume it with "
                                                                     f"placement optimize --resume {i})"))
        sim_best = problem.simulate(result.best_placement)
        report = {"run_id": run_id, "from_run": params.get("from_run", args.from_run), "search": result.algorithm,
                  "measurements": int(result.evaluations), "measurements_made": result.extras["measurements_made"],
                  "best_measured_s": result.best_objective, "best_simulated_s": float(sim_best.result.batch_time),
                  "stopped": result.stopped,
                  "history": [[int(u), b] for u, b, _ in result.history.tolist()],
                  "best_assignment": {op.name: problem.devices.names[int(i)]
                                      for op, i in zip(problem.graph.ops, result.best_placement)}}
    if args.json:
        print_json(report)
        return 0
    print(f"{result.algorithm} on {printable(problem.graph.name)} ({params['devices']}): best measured "
          f"{result.best_objective * 1e3:.3f} ms (simulated {sim_best.result.batch_time * 1e3:.3f} ms) after "
          f"{result.evaluations} measurements ({report['measurements_made']} made now, the rest read back from the "
          f"store)" + ("; stopped before the budget" if result.stopped else ""))
    print(f"stored as run {run_id}; its measurements: placement runs benchmarks (run {run_id})")
    return 0

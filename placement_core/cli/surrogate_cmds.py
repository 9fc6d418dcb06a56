"""``placement surrogate fit|score``: a learned cost model of a run's problem, and how well it ranks."""

from __future__ import annotations

import numpy as np

from ..base.args import int_in
from ..base.errors import InputError
from ..base.jsonio import read_json, write_json
from .common import positive_int, print_json, printable, table
from .validate import check_output_file, run_id as run_id_arg, seed_int


def register(sub) -> None:
    p = sub.add_parser("surrogate", help="a learned cost model (gradient boosting) of a run's objective",
                       description="Fit a gradient-boosted model of the objective from placement features, and "
                                   "score it on placements it has not seen (docs/surrogate.md).")
    ss = p.add_subparsers(dest="surrogate_command", metavar="ACTION")
    ss.required = True
    f = ss.add_parser("fit", help="fit a model on simulated (or measured) samples of a stored run's problem")
    f.add_argument("--run", type=run_id_arg, required=True, metavar="ID", help="a stored run (placement runs list)")
    f.add_argument("--measured", action="store_true",
                   help="learn the run's stored measurements (placement benchmark --run ID, a measured search) "
                        "instead of the simulator; the simulated time becomes one more feature")
    f.add_argument("--samples", type=positive_int, default=2000,
                   help="simulated placements to learn from (default 2000; ignored with --measured)")
    f.add_argument("--encoding", default="features", choices=("features", "one-hot", "both"),
                   help="engineered features (default), the dissertation's one-hot op->device encoding, or both")
    f.add_argument("--learner", default="hist-gbr", choices=("hist-gbr", "gbr"),
                   help="scikit-learn's HistGradientBoostingRegressor (default) or GradientBoostingRegressor")
    f.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0,
                   help="seed of the samples and the learner, 0 to 2^32-1 (scikit-learn's limit; default 0)")
    f.add_argument("--out", required=True, metavar="MODEL", help="the model file to write (placement-surrogate/1)")
    _common(f)
    f.set_defaults(handler=cmd_fit)
    s = ss.add_parser("score", help="Kendall tau, Pearson r and MAPE on held-out placements, and the learning curve")
    s.add_argument("--model", required=True, metavar="MODEL", help="a file written by placement surrogate fit")
    s.add_argument("--run", type=run_id_arg, required=True, metavar="ID",
                   help="a stored run of the same network and device graph")
    s.add_argument("--test", type=positive_int, default=1000,
                   help="held-out simulated placements (default 1000); a measured model is scored on the run's "
                        "measurements it was not fitted on")
    s.add_argument("--seed", type=seed_int, help="seed of the held-out placements (default: the model's + 1)")
    _common(s)
    s.set_defaults(handler=cmd_score)


def _common(p) -> None:
    p.add_argument("--home", metavar="DIR", help="data directory (default $PLACEMENT_HOME or ~/.placement)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _seeds(store, run_id: int) -> np.ndarray:
    from ..analysis.benchmark_plan import run_candidates

    _, cands, _ = run_candidates(store, run_id)
    return np.array([x for _, x in cands], dtype=np.int32)


def measured_samples(store, run_id: int, problem) -> tuple[np.ndarray, np.ndarray, int]:
    """The run's successful measurements as (placements over its devices, median step times, skipped): a
    measurement whose devices are not the run's own (``benchmark --map`` onto other local devices) is
    skipped."""
    names = problem.devices.names
    xs, ys, skipped = [], [], 0
    seen: dict[bytes, int] = {}
    for b in store.benchmarks(run_id=run_id):
        a = b["placement"]
        if b["measured_median_s"] is None or any(a.get(op.name) not in names for op in problem.graph.ops):
            skipped += 1
            continue
        x = np.array([names.index(a[op.name]) for op in problem.graph.ops], dtype=np.int32)
        key = x.tobytes()
        if key in seen:  # measured twice: the later measurement
            ys[seen[key]] = float(b["measured_median_s"])
            continue
        seen[key] = len(xs)
        xs.append(x)
        ys.append(float(b["measured_median_s"]))
    return np.array(xs, dtype=np.int32).reshape(-1, problem.n_ops), np.array(ys), skipped


def cmd_fit(args) -> int:
    from ..surrogate.model import (SurrogateSpec, check_sample_count, cross_validate, model_to_dict, require_sklearn,
                                   sample_placements)
    from ..store import RunStore

    require_sklearn()
    out = check_output_file(args.out, "--out", "model.json")
    spec = SurrogateSpec(encoding=args.encoding, learner=args.learner, seed=args.seed, simulated=args.measured)
    with RunStore(home=args.home) as store:
        problem = store.problem(args.run)
        if args.measured:
            X, y, skipped = measured_samples(store, args.run, problem)
            if len(y) < 5:
                raise InputError(f"run {args.run} has {len(y)} usable measurement(s); a measured surrogate needs at "
                                 "least 5", field="--measured",
                                 fix=f"Measure more: placement benchmark --run {args.run} --top 20 ...")
        else:
            check_sample_count(args.samples, problem, "--samples")
            X = sample_placements(problem, _seeds(store, args.run), args.samples, np.random.default_rng(args.seed))
            y, skipped = problem.evaluate_many(X), 0
    validation = cross_validate(problem, spec, X, y)
    write_json(out, model_to_dict(problem, spec, X, y, target="measured" if args.measured else "simulated",
                                  run_id=args.run, validation=validation))
    report = {"model": str(args.out), "run": args.run, "target": "measured" if args.measured else "simulated",
              "kendall_tau": validation["kendall_tau"], "pearson_r": validation["pearson_r"],
              "mape": validation["mape"], "n_train": int(len(y)), "n_test": int(len(y)),
              "validation": f"{validation['folds']}-fold cross-validation", "skipped": skipped,
              "encoding": spec.encoding, "learner": spec.learner}
    if args.json:
        print_json(report)
        return 0
    what = "measurements" if args.measured else "simulated placements"
    print(f"fitted on {len(y)} {what} of run {args.run} ({printable(problem.graph.name)} on "
          f"{printable(problem.devices.name)}); model written to {printable(args.out)}")
    if skipped:
        print(f"note: {skipped} measurement(s) skipped (failed, or on other devices than the run's)")
    print(f"{validation['folds']}-fold cross-validation: " + _line(validation))
    return 0


def _line(m: dict) -> str:
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    return f"Kendall tau {f(m['kendall_tau'], '.3f')}, Pearson r {f(m['pearson_r'], '.3f')}, MAPE {f(m['mape'], '.2f')} %"


def cmd_score(args) -> int:
    from ..surrogate.model import (check_sample_count, learning_curve, metrics, model_from_dict, require_sklearn,
                                   sample_placements)
    from ..store import RunStore

    require_sklearn()
    data = read_json(args.model)
    with RunStore(home=args.home) as store:
        problem = store.problem(args.run)
        model, data = model_from_dict(data, str(args.model), problem)
        X = np.asarray(data["placements"], dtype=np.int32).reshape(-1, problem.n_ops)
        y = np.asarray(data["targets"], dtype=float)
        if data["target"] == "measured":
            Xm, ym, _ = measured_samples(store, args.run, problem)
            trained = {x.tobytes() for x in X}
            keep = [i for i, x in enumerate(Xm) if x.tobytes() not in trained]
            X_test, y_test = Xm[keep], ym[keep]
            if len(y_test) < 3:
                raise InputError(f"run {args.run} has {len(y_test)} measurement(s) the model was not fitted on; "
                                 "scoring needs at least 3", field="--run",
                                 fix="Measure more placements of the run, or score on another run of the same problem")
        else:
            check_sample_count(args.test, problem, "--test")
            seed = model.spec.seed + 1 if args.seed is None else args.seed
            X_test = sample_placements(problem, _seeds(store, args.run), args.test, np.random.default_rng(seed),
                                       exclude=X)
            y_test = problem.evaluate_many(X_test)
    held = metrics(y_test, model.predict(X_test))
    curve = learning_curve(problem, model.spec, X, y, X_test, y_test)
    report = {"model": str(args.model), "run": args.run, "target": data["target"], "kendall_tau": held["kendall_tau"],
              "pearson_r": held["pearson_r"], "mape": held["mape"], "n_train": int(len(y)), "n_test": int(len(y_test)),
              "learning_curve": curve}
    if args.json:
        print_json(report)
        return 0
    print(f"held-out {data['target']} placements: {len(y_test)}; fitted on {len(y)}: " + _line(held))
    rows = [[str(c["n_train"]), *("-" if c[k] is None else f"{c[k]:.3f}" for k in ("kendall_tau", "pearson_r")),
             "-" if c["mape"] is None else f"{c['mape']:.2f}"] for c in curve]
    print(table(rows, ["training samples", "Kendall tau", "Pearson r", "MAPE (%)"], right=(0, 1, 2, 3)))
    return 0

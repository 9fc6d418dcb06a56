"""``placement graphs generate`` and ``placement train-policy``: graph families and learned placers."""

from __future__ import annotations

import sys
import time

from ..base.units import fmt_bytes, fmt_seconds
from .common import Parser, fraction, positive_int, print_json, printable, stop_on_first_interrupt, table
from .optimize_cmds import note
from .validate import check_output_dir, check_output_file, seed_int


def register(sub) -> None:
    from ..families import DEFAULT_COUNT, FAMILIES, SPLITS

    graphs = sub.add_parser("graphs", help="generate families of computation graphs (nmt, ptb, cifar10)")
    gsub = graphs.add_subparsers(dest="graphs_command", metavar="ACTION", parser_class=Parser)
    gsub.required = True
    p = gsub.add_parser("generate", help="write a family's graphs as placement-network/1 files",
                        description="Generate graphs like Placeto's datasets (App. A.3): nmt (2-layer LSTM "
                                    "encoder-decoder with attention, L steps), ptb (an ENAS-like recurrent cell "
                                    "unrolled L steps), cifar10 (stacked ENAS-like conv cells); L and the batch "
                                    "size are sampled per graph. The same family, seed and index give the same "
                                    "graph everywhere; even indices are the training split, odd ones the test "
                                    "split.")
    p.add_argument("--family", required=True, choices=list(FAMILIES))
    p.add_argument("--count", type=lambda t: positive_int(t, 10_000), default=DEFAULT_COUNT,
                   help=f"graphs in the family (default {DEFAULT_COUNT}, like Placeto)")
    p.add_argument("--seed", type=seed_int, default=0, help="the family's seed (default 0)")
    p.add_argument("--split", choices=list(SPLITS), help="write only the training or the test graphs")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for FAMILY-sSEED-INDEX.json files")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(handler=cmd_generate)

    p = sub.add_parser("train-policy", help="train a learned placer (Placeto or GDP) on a family of graphs",
                       description="Train a placement policy on the simulator and write it as a "
                                   "placement-policy/1 file; the run and its reward curve are stored in the run "
                                   "store. Apply it with `placement optimize --algorithm placeto --policy FILE "
                                   "--budget 0` (zero-shot) or a positive budget (fine-tuning). Needs the torch "
                                   "extra.")
    p.add_argument("--method", choices=["placeto", "gdp"], default="placeto",
                   help="placeto: iterative improvement over a graph embedding, REINFORCE (default); gdp: "
                        "GraphSAGE + attention, the whole placement at once, PPO")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--family", action="append", choices=list(FAMILIES),
                     help="train on this family's training split (repeat for a mix of families)")
    src.add_argument("--networks", nargs="+", metavar="FILE", help="train on these networks instead")
    p.add_argument("--count", type=lambda t: positive_int(t, 10_000), default=DEFAULT_COUNT,
                   help=f"graphs in each family; its even-indexed half trains (default {DEFAULT_COUNT})")
    p.add_argument("--graph-seed", type=seed_int, default=0, help="the family's seed (default 0)")
    p.add_argument("--devices", required=True, help="preset name or device graph file")
    p.add_argument("--episodes", type=lambda t: positive_int(t, 10_000_000), default=2000,
                   help="episodes (placements sampled) in all (default 2000)")
    p.add_argument("--rollouts", type=lambda t: positive_int(t, 1024), default=8,
                   help="episodes per update, of one graph (default 8; the time-step baseline averages them)")
    p.add_argument("--lr", type=float, default=None, help="Adam's initial learning rate, decaying linearly to 0 "
                                                          "(default 0.002 Placeto, 0.001 GDP)")
    p.add_argument("--entropy", type=float, default=0.005,
                   help="initial weight of the entropy bonus, decaying linearly to 0 (default 0.005)")
    p.add_argument("--start", choices=["heft", "m-etf", "fastest"], default="heft",
                   help="Placeto: the placement each episode improves: memory-aware HEFT's (default), m-ETF's, or "
                        "every node on the fastest device (Placeto's trivial start)")
    p.add_argument("--rewards", choices=["step", "final"], default="step",
                   help="Placeto: step = the objective's improvement after every move (Placeto's intermediate "
                        "rewards, one evaluation per step), final = the final objective only (default step)")
    p.add_argument("--hidden", type=lambda t: positive_int(t, 1024), default=16,
                   help="hidden units of the embedding (default 16)")
    p.add_argument("--rounds", type=lambda t: positive_int(t, 64), default=3,
                   help="message-passing rounds (Placeto) or GraphSAGE layers (GDP) (default 3)")
    p.add_argument("--seed", type=seed_int, default=0, help="training seed (default 0; same seed, same policy)")
    p.add_argument("--penalty", default="thesis", choices=["thesis", "placeto", "infeasible"],
                   help="memory-overflow penalty in the objective (default thesis: +1 ms per MB)")
    p.add_argument("--comm-efficiency", type=fraction, help="fraction of link bandwidth reached (default 0.25)")
    p.add_argument("--out", required=True, metavar="POLICY", help="the policy file to write (JSON)")
    p.add_argument("--label", type=note, help="a note stored with the run")
    p.add_argument("--no-store", action="store_true", help="do not record the training in the run store")
    p.add_argument("--home", metavar="DIR", help="data directory (default $PLACEMENT_HOME or ~/.placement)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_train)


def cmd_generate(args) -> int:
    from ..families import family_graphs
    from ..base.jsonio import write_json
    from ..formats.network import network_to_dict

    out = check_output_dir(args.out, "--out")
    graphs = family_graphs(args.family, count=args.count, seed=args.seed, split=args.split)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for fg in graphs:
        path = out / f"{fg.graph.name}.json"
        write_json(path, network_to_dict(fg.graph))
        t = fg.graph.totals()
        rows.append({"file": str(path), "name": fg.graph.name, "split": fg.split, "ops": t["ops"],
                     "batch_size": fg.graph.batch_size, "fwd_gflop": t["fwd_flops"] / 1e9,
                     "param_bytes": t["param_bytes"], "activation_bytes": t["activation_bytes"], **{
                         k: v for k, v in fg.meta.items() if k in ("steps", "cells_per_stage", "ops_before_grouping")}})
    if args.json:
        print_json(rows)
        return 0
    print(table([[printable(r["name"]), r["split"], r["ops"], r["batch_size"], f"{r['fwd_gflop']:,.0f}",
                  fmt_bytes(r["param_bytes"]), fmt_bytes(r["activation_bytes"])] for r in rows],
                ["graph", "split", "ops", "batch", "fwd GFLOP", "weights", "activations"], right=(2, 3, 4, 5, 6)))
    print(f"wrote {len(rows)} graph(s) to {printable(out)}")
    return 0


def training_problems(args):
    """(problems, graph names, what was trained on, device graph) for train-policy's options."""
    from ..formats.catalog import load_devices, load_network
    from ..families import family_graphs
    from ..problem import ProblemSpec

    devices = load_devices(args.devices)
    spec = ProblemSpec(penalty=args.penalty, comm_efficiency=args.comm_efficiency)
    if args.family:
        graphs = [fg.graph for f in dict.fromkeys(args.family)
                  for fg in family_graphs(f, count=args.count, seed=args.graph_seed, split="train")]
        what = {"family": ",".join(dict.fromkeys(args.family)), "count": args.count, "graph_seed": args.graph_seed,
                "split": "train"}
    else:
        graphs = [load_network(n) for n in args.networks]
        what = {"networks": list(args.networks)}
    return [spec.build(g, devices) for g in graphs], [g.name for g in graphs], what, devices


def cmd_train(args) -> int:
    from ..torch import require_torch
    require_torch()
    from ..torch.policies import TrainSettings
    from ..torch.policies.policy_io import save_policy
    from ..torch.policies.recorded_training import train_recorded
    from ..store import RunStore
    from ..model.devices import devices_hash

    out = check_output_file(args.out, "--out", "policy.json")
    lr = args.lr if args.lr is not None else (2e-3 if args.method == "placeto" else 1e-3)
    settings = TrainSettings(method=args.method, episodes=args.episodes, rollouts=args.rollouts, lr=lr,
                             entropy=args.entropy, rewards=args.rewards, hidden=args.hidden, rounds=args.rounds,
                             seed=args.seed, start=args.start).check()
    problems, names, what, devices = training_problems(args)
    bar = TrainBar(enabled=not args.quiet and not args.json and sys.stderr.isatty(), method=args.method)
    command = "placement train-policy " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["train-policy"] else None
    meta = {**what, "graphs": names, "devices": devices.name}
    t0 = time.perf_counter()
    with stop_on_first_interrupt() as stop:
        if args.no_store:
            run_id, result = train_recorded(None, problems, settings, meta=meta, progress=bar, stop=stop)
        else:
            with RunStore(home=args.home) as store:
                run_id, result = train_recorded(store, problems, settings, label=args.label, meta=meta, progress=bar,
                                                stop=stop)
    training = {**what, "graphs": len(names), "episodes": result.episodes, "evaluations": result.evaluations,
                "seed": settings.seed, "rollouts": settings.rollouts, "lr": settings.lr, "entropy": settings.entropy,
                "rewards": settings.rewards, "start": settings.start, "hidden": settings.hidden,
                "rounds": settings.rounds, "wall_s": round(result.wall_s, 1), "stopped": result.stopped,
                "final_ratio": float(result.curve[-1, 2]) if len(result.curve) else None,
                "penalty": args.penalty}
    if command:
        training["command"] = command
    save_policy(out, settings.method, result.net, training=training,
                devices={"name": devices.name, "count": len(devices), "hash": devices_hash(devices)})
    data = {"policy": str(out), "method": settings.method, "run_id": run_id, "episodes": result.episodes,
            "evaluations": result.evaluations, "wall_s": result.wall_s, "stopped": result.stopped,
            "final_ratio": training["final_ratio"],
            "curve": [[int(e), b, c] for e, b, c in result.curve.tolist()]}
    if args.json:
        print_json(data)
        return 0
    print(f"{settings.method} trained on {len(names)} graph(s) for {result.episodes} episodes "
          f"({result.evaluations:,} evaluations) in {fmt_seconds(time.perf_counter() - t0)}; last round's mean "
          f"objective {training['final_ratio']:.3f} x the best single device")
    print(f"policy written to {printable(out)}")
    if run_id is not None:
        print(f"stored as run {run_id} (see `placement runs show {run_id}`)")
    return 0


class TrainBar:
    """A one-line progress bar on stderr for training, redrawn at most ten times a second."""

    def __init__(self, enabled: bool, method: str):
        self.enabled = enabled
        self.method = method
        self.last = 0.0

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not p.done and now - self.last < 0.1:
            return
        self.last = now
        k = int(p.fraction * 30)
        sys.stderr.write(f"\r{self.method}: [{'#' * k}{'.' * (30 - k)}] {p.episodes}/{p.total} episodes, "
                         f"objective {p.ratio:.3f} x best single device, {fmt_seconds(p.elapsed_s)} ")
        if p.done:
            sys.stderr.write("\n")
        sys.stderr.flush()


"""Placeto's node-traversal-order experiment (§4.3): train under fixed orders, place under unseen ones.

Placeto is trained on one network, each episode visiting the nodes in one of
``--train-orders`` fixed random orders (any order, not only topological ones);
the trained policy then places the network greedily under ``--test-orders``
new random orders. Each placement's objective is divided by the optimized
placement's: the best of MAP-Elites with ``--budget`` evaluations, the best
placement training met, m-ETF's and HEFT's. Placeto reports a mean within 5 % of the
optimized placement and about 10 % between the fastest and the slowest.
Writes ``traversal.csv``, ``traversal.md`` and ``traversal.png``.
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path

import numpy as np

from ..base.args import MAX_BUDGET, Parser, int_in
from ..base.outputs import check_output_dir, check_output_file
from .plotting import pyplot, skipped


def random_orders(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.permutation(n) for _ in range(k)]


def main(argv: list[str] | None = None) -> int:
    from ..torch import require_torch
    ap = Parser(prog="placement experiment traversal", description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="inception_v3")
    ap.add_argument("--batch-size", type=int_in(1, 2**31 - 1), default=384,
                    help="default 384: Inception-V3 then needs 50 GB, so one 32 GB GPU does not hold it and a good "
                         "placement must split it (at 128 one GPU is optimal, and any order finds that)")
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--start", choices=["fastest", "heft", "m-etf"], default="fastest",
                    help="the placement each episode improves (default: Placeto's trivial one, every node on the "
                         "fastest device, so that the order in which nodes are moved matters)")
    ap.add_argument("--train-orders", type=int_in(1, 100_000), default=64)
    ap.add_argument("--test-orders", type=int_in(1, 100_000), default=64)
    ap.add_argument("--episodes", type=int_in(1, 10_000_000), default=1600)
    ap.add_argument("--rollouts", type=int_in(1, 1024), default=8)
    ap.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=20000, help="MAP-Elites' evaluations for the reference")
    ap.add_argument("--seed", type=int_in(0), default=0)
    ap.add_argument("--policy-out", help="also write the trained policy here")
    ap.add_argument("--out", default="docs/learned", help="folder for traversal.csv, .md and .png")
    args = ap.parse_args(argv)
    out = check_output_dir(args.out, "--out")  # before the training, not after it
    if args.policy_out:
        check_output_file(args.policy_out, "--policy-out", "policy.json")
    require_torch()
    from ..formats.catalog import load_devices, load_network
    from ..policies.features import GraphInfo
    from ..optimize import run
    from ..problem import ProblemSpec
    from ..torch.policies.optimizers import fast_greedy
    from ..torch.policies.train import TrainSettings, train

    problem = ProblemSpec().build(load_network(args.network, batch_size=args.batch_size), load_devices(args.devices))
    rng = np.random.default_rng(args.seed)
    train_orders = random_orders(problem.n_ops, args.train_orders, rng)
    test_orders = random_orders(problem.n_ops, args.test_orders, rng)
    settings = TrainSettings(episodes=args.episodes, rollouts=args.rollouts, seed=args.seed, start=args.start)
    t0 = time.perf_counter()
    last = [0.0]

    def progress(p):
        if p.elapsed_s - last[0] >= 30 or p.done:
            last[0] = p.elapsed_s
            print(f"training: {p.episodes}/{p.total} episodes, mean objective {p.ratio:.3f} x the best single "
                  f"device ({p.elapsed_s:.0f} s)", flush=True)

    result = train([problem], settings, progress=progress, orders=[train_orders])
    train_s = time.perf_counter() - t0
    if args.policy_out:
        from ..model.devices import devices_hash
        from ..torch.policies.policy_io import save_policy
        save_policy(args.policy_out, "placeto", result.net, devices={"name": problem.devices.name,
                    "count": problem.n_devices, "hash": devices_hash(problem.devices)},
                    training={"networks": [f"{args.network}@{args.batch_size}"], "episodes": result.episodes,
                              "seed": args.seed, "wall_s": round(train_s, 1), "start": args.start,
                              "orders": args.train_orders, "command": "placement experiment traversal " +
                              " ".join(argv or [])})
    # the optimized placement: the best of MAP-Elites, what training met, and the list schedulers (on a graph that
    # must be split, m-ETF's plan can beat 20,000 evaluations of MAP-Elites from random placements)
    candidates = {"MAP-Elites": run(problem, "map-elites", evaluations=args.budget, seed=args.seed).best_objective,
                  "training's best": result.best[0][0] if 0 in result.best else np.inf,
                  **{name: run(problem, name, evaluations=1, seed=args.seed).best_objective
                     for name in ("m-etf", "heft")}}
    source = min(candidates, key=candidates.get)
    reference = candidates[source]
    info = GraphInfo(problem, start=settings.start)
    rows = []
    for kind, orders in (("train", train_orders[:8]), ("test", test_orders), ("topological", [None])):
        for k, order in enumerate(orders):
            objective = problem.evaluate(fast_greedy(result.net, info, order))
            rows.append({"orders": kind, "order": k, "objective_s": objective, "ratio": objective / reference})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "traversal.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["orders", "order", "objective_s", "ratio"])
        w.writeheader()
        w.writerows(rows)
    test = [r["ratio"] for r in rows if r["orders"] == "test"]
    seen = [r["ratio"] for r in rows if r["orders"] == "train"]
    trained = candidates["training's best"]
    topo = next(r["ratio"] for r in rows if r["orders"] == "topological")
    command = ("placement experiment traversal " + " ".join(_without_policy_out(argv or []))).strip()
    text = "\n".join([
        f"Reproduce with `{command}`.", "",
        f"{args.network} at batch {args.batch_size} on {args.devices}, episodes starting from the {args.start} "
        f"placement: trained for {result.episodes} episodes under {args.train_orders} fixed random orders in "
        f"{train_s:.0f} s; reference (optimized placement) {reference:.4f} s, {source}'s (MAP-Elites with "
        f"{args.budget} evaluations {candidates['MAP-Elites']:.4f} s, training's best {trained:.4f} s, m-ETF "
        f"{candidates['m-etf']:.4f} s, HEFT {candidates['heft']:.4f} s).",
        "",
        "| placements | mean / optimized | min | max | spread (max − min) |", "|---|---|---|---|---|",
        f"| {len(test)} unseen random orders | {statistics.fmean(test):.3f} | {min(test):.3f} | {max(test):.3f} | "
        f"{max(test) - min(test):.3f} |",
        f"| {len(seen)} of the training orders | {statistics.fmean(seen):.3f} | {min(seen):.3f} | {max(seen):.3f} | "
        f"{max(seen) - min(seen):.3f} |",
        f"| topological order | {topo:.3f} | | | |", ""])
    (out / "traversal.md").write_text(text + "\n")
    _plot(rows, out / "traversal.png", args.network)
    print(text)
    print(f"wrote {out / 'traversal.csv'}, {out / 'traversal.md'} and {out / 'traversal.png'}")
    return 0


def _plot(rows: list[dict], path: Path, network: str) -> None:
    plt = pyplot()
    if plt is None:
        skipped(path)
        return
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for k, kind in enumerate(("train", "test")):
        ratios = sorted(r["ratio"] for r in rows if r["orders"] == kind)
        ax.step(ratios, np.arange(1, len(ratios) + 1) / len(ratios), where="post", lw=1.8,
                label=f"{kind} orders", color=plt.get_cmap("tab10").colors[k])
    ax.axvline(1.0, color="grey", ls="--", lw=1)
    ax.set_xlabel("objective / optimized placement's")
    ax.set_ylabel("fraction of orders")
    ax.set_title(f"{network}: greedy placements under random node orders")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _without_policy_out(argv: list[str]) -> list[str]:
    """The command line without ``--policy-out FILE`` (where the policy went does not change the table)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--policy-out":
            skip = True
        elif not a.startswith("--policy-out="):
            out.append(a)
    return out

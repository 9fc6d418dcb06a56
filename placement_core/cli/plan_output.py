"""``placement plan``'s output: the plan table, and under ``--search map-elites`` the niche map as a grid and the
archive as JSON."""

from __future__ import annotations

from typing import Callable

from ..analysis.archive_view import archive_heatmap
from ..base.units import fmt_bytes, fmt_seconds
from ..optimize.plan_elites import PlanArchive, rank_key
from ..optimize.plan_space import LABELS
from .common import table


def archive_json(archive: PlanArchive, model: dict, row: Callable, budget: int, seed: int) -> dict:
    """``{"model", "search", "best", "candidates", "archive"}``: ``candidates`` are every plan simulated (best
    first), as the exhaustive search lists them; ``archive`` each niche's elite with its niche's values."""
    simulated = sorted(archive.plans.items(), key=lambda kv: rank_key(kv[1], kv[0]))
    elites = archive.ranked()
    data = archive.to_dict()
    for e, d in zip(elites, data["elites"]):
        d["plan"] = row(e.plan)
    return {"model": model,
            "search": {"algorithm": "map-elites", "budget": budget, "seed": seed, "evaluations": archive.evaluations,
                       "plans_in_space": len(archive.space), "searched": archive.space.searched(),
                       "niches": archive.names, "coverage": archive.coverage},
            "best": row(elites[0].plan), "candidates": [row(p) for _, p in simulated], "archive": data}


def niche_grid(archive: PlanArchive) -> str:
    """The first two niche dimensions as a grid (rows, columns; the best elite over any other dimension): each
    cell its elite's step, "over memory" with its fullest GPU when none simulated there fits, "not found" where
    valid plans exist but none was simulated, blank where no plan is valid."""
    heat = archive_heatmap(archive, 1, 0, fits=archive.fits)
    rows_d, cols_d = archive.descriptors[0], archive.descriptors[1]
    reachable = {(n[0], n[1]) for n in archive.reachable}
    body = []
    for yi in range(rows_d.size):
        cells = [str(rows_d.axis[yi])]
        for xi in range(cols_d.size):
            niche = heat.niche[yi][xi]
            if niche is not None:
                e = archive.elites[niche]
                cells.append(fmt_seconds(e.objective) if e.fits
                             else f"over memory ({fmt_bytes(e.plan.peak_memory_bytes)})")
            else:
                cells.append("not found" if (yi, xi) in reachable else "")
        body.append(cells)
    corner = f"{rows_d.label} \\ {cols_d.label}"
    return table(body, [corner] + [str(v) for v in cols_d.axis], right=range(1, cols_d.size + 1))


def print_archive(archive: PlanArchive, setting: str, rows: list[dict], budget: int, seed: int, top: int,
                  tflops: bool) -> None:
    space = archive.space
    searched = ", ".join(LABELS[d] for d in space.searched()) or "nothing"
    print(f"{setting}; MAP-Elites over {' × '.join(d.label for d in archive.descriptors)}, searching {searched}: "
          f"{archive.evaluations} of {len(space):,} plans simulated (budget {budget}, seed {seed}), "
          f"{len(archive)} of {len(archive.reachable)} niches filled")
    print()
    print(niche_grid(archive))
    print()
    extra = [d for d in ("schedule", "virtual_stages", "recompute", "zero") if d in space.searched()]
    header, body = plan_rows(rows[:top], tflops, extra)
    print(f"the best plan of each niche ({min(top, len(rows))} of {len(rows)}, best first; --top for more):")
    print(table(body, header, right=range(len(header))))
    if not archive.best().fits:
        print(NOTHING_FITS)
    if len(archive.descriptors) > 2:
        print(f"(the grid shows the best over {', '.join(d.label for d in archive.descriptors[2:])})")


NOTHING_FITS = ("no plan fits in memory: try more GPUs, ZeRO (--zero 1 to 3), --recompute selective or full, smaller "
                "micro-batches or a smaller model")


def plan_rows(rows: list[dict], tflops: bool, extra=()) -> tuple[list[str], list[list[str]]]:
    """The plan table's header and body; ``extra``, more plan fields to show (those an archive searched)."""
    # a plan that recomputes does more arithmetic than the model needs: its hardware rate gets a column too
    hardware = tflops and any(r.get("recompute", "none") != "none" for r in rows)
    header = ["tp", "pp", "dp", "micro-batch", "micro-batches", *[e.replace("_", " ") for e in extra], "step",
              "fullest GPU", "fits", "idle", "TP comm"] + (["TFLOP/s per GPU"] if tflops else []) \
        + (["with recompute"] if hardware else [])
    body = [[str(r["tp"]), str(r["pp"]), str(r["dp"]), str(r["micro_batch"]), str(r["micro_batches"]),
             *[str(r[e]) for e in extra], fmt_seconds(r["step_time_s"]),
             fmt_bytes(r["peak_memory_bytes"]), "yes" if r["fits"] else "no",
             f"{r['breakdown']['bubble_fraction']:.0%}", fmt_seconds(r["breakdown"]["tensor_parallel_comm_s"])]
            + ([f"{r['model_tflops_per_gpu']:.0f}"] if tflops and "model_tflops_per_gpu" in r else [])
            + ([f"{r['hardware_tflops_per_gpu']:.0f}"] if hardware and "hardware_tflops_per_gpu" in r else [])
            for r in rows]
    return header, body

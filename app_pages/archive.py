"""Archive: browse MAP-Elites' diverse elites, inspect one, compare two, use one."""

import streamlit as st

from dashboard import archive_bins, planarchive, state, ui
from dashboard.charts import archive as archive_charts
from dashboard.archiveview import archive_sources, clicked_cell, fits_in_memory, is_plan_archive
from placement_core.analysis import (archive_heatmap, compare_placements, elite_label, fmt_bytes, fmt_seconds,
                                     placement_summary, top_elites)

SCALES = {"clipped": "clipped to the elites that fit", "log": "log", "linear": "linear"}

s = state.session()


def map_section(run, pick_key) -> None:
    """The archive as a heatmap over two chosen dimensions; a click on a cell inspects its elite."""
    archive = run.archive
    dims = list(range(len(archive.descriptors)))
    labels = {i: archive.descriptors[i].label for i in dims}
    names = [d.name for d in archive.descriptors]
    dx = names.index("cross_device_edges") if "cross_device_edges" in names else 0
    dy = names.index("most_used_device") if "most_used_device" in names else (1 if dx == 0 else 0)
    c1, c2, c3 = st.columns([2, 2, 3])
    x_key = ui.persist(f"arch_x_{run.key}", dims)
    s.setdefault(x_key, dx)
    x_dim = c1.selectbox("Columns", dims, format_func=labels.get, key=x_key)
    y_options = [i for i in dims if i != x_dim]
    y_key = ui.persist(f"arch_y_{run.key}", y_options)
    s.setdefault(y_key, dy if dy in y_options else y_options[0])
    y_dim = c2.selectbox("Rows", y_options, format_func=labels.get, key=y_key)
    s.setdefault(ui.persist("arch_scale", list(SCALES)), "clipped")
    scale = c3.radio("Colour scale", list(SCALES), format_func=SCALES.get, key="arch_scale", horizontal=True,
                     help="Clipped: the colours span the elites that fit in memory (up to their 95th "
                          "percentile); slower cells that fit take the top colour and a ▲, cells whose elite "
                          "is over memory (penalised) a red ✕ on any scale. Log: every cell on a logarithmic "
                          "scale. Hover a cell for its true objective.")
    heat = archive_heatmap(archive, x_dim, y_dim, fits=fits_in_memory(archive))
    x_of, y_of = list(range(heat.z.shape[1])), list(range(heat.z.shape[0]))
    many = [a for a, n in ((1, heat.z.shape[1]), (0, heat.z.shape[0])) if n > archive_bins.MANY_BINS]
    if many:
        s.setdefault(ui.persist("arch_bins", ["quantile", "all"]), "quantile")
        binning = st.radio("Bins", ["quantile", "all"], key="arch_bins", horizontal=True,
                           format_func={"quantile": f"{archive_bins.GROUPS} quantile groups",
                                        "all": "every bin"}.get,
                           help=f"A dimension of over {archive_bins.MANY_BINS} bins is shown as at most "
                                f"{archive_bins.GROUPS} groups of adjacent bins holding about the same number of "
                                "elites; each cell shows the best elite of the bins it merges.")
        if binning == "quantile":
            for axis in many:
                group = archive_bins.quantile_groups(heat.count.sum(axis=1 - axis), archive_bins.GROUPS)
                heat = archive_bins.coarsen(heat, axis, group)
                if axis == 1:
                    x_of = group.tolist()
                else:
                    y_of = group.tolist()
    others = [labels[i] for i in dims if i not in (x_dim, y_dim)]
    picked = s[pick_key]
    st.markdown("##### Map of the archive")
    over = ("a plan over memory (no plan simulated in its niche fits)" if is_plan_archive(archive)
            else "an elite over memory (its objective includes the penalty)")
    st.caption(f"Each cell: the best elite over {', '.join(others) or 'nothing else'}; darker is slower; a red ✕ "
               f"marks {over}, a ▲ one slower than the colour "
               "scale that fits; grey cells with a dot are empty niches. Click a cell to inspect its elite (outlined in red), or "
               "choose one from the list below.")
    event = st.plotly_chart(archive_charts.heatmap_figure(heat, (y_of[picked[y_dim]], x_of[picked[x_dim]]), scale),
                            key=f"arch_heat_{run.key}", on_select="rerun", selection_mode="points",
                            config={"displaylogo": False})
    points = ((event or {}).get("selection") or {}).get("points") or []
    for point in points:
        cell = clicked_cell(point, heat.cells(), heat.z.shape)
        if cell is not None and heat.niche[cell[0]][cell[1]] is not None:
            if heat.niche[cell[0]][cell[1]] != picked:
                s[pick_key] = heat.niche[cell[0]][cell[1]]
                st.rerun()
            break


def archive_section(run, ranked, rank_of, pick_key) -> None:
    """Metrics, the map (click a cell) and the inspected elite."""
    archive, problem, options = run.archive, run.archive.problem, [e.niche for e in ranked]
    with ui.guarded("the archive"):
        c = st.columns(4)
        c[0].metric("Elites", f"{len(archive):,}")
        c[1].metric("Niches filled", f"{archive.coverage:.1%}", help=f"of {archive.coverage and len(archive) / archive.coverage:,.0f} "
                    "niches (" + " × ".join(f"{d.size} {d.label}" for d in archive.descriptors) + ")")
        c[2].metric("Best objective", fmt_seconds(ranked[0].objective))
        c[3].metric("Evaluations", f"{run.evaluations:,}")

        map_section(run, pick_key)  # MAP-Elites archives have two dimensions or more
        niche = st.selectbox("Elite", options, key=pick_key,
                             format_func=lambda n: f"#{rank_of[n]} · {fmt_seconds(archive.elites[n].objective)} · "
                                                   f"{elite_label(archive, archive.elites[n])}")
        elite = archive.elites[niche]
        summary = placement_summary(problem, elite.placement)
        with st.container(border=True):
            st.markdown(f"**Elite #{rank_of[niche]}** · {ui.esc(elite_label(archive, elite))}")
            m = st.columns(5)
            m[0].metric("Objective", fmt_seconds(summary["objective_s"]), help="time per batch + memory penalty")
            m[1].metric("Time per batch", fmt_seconds(summary["batch_time_s"]))
            m[2].metric("Transfers", f"{summary['transfers']:,}", help=f"{fmt_bytes(summary['bytes_moved'])} moved")
            m[3].metric("Devices used", summary["devices_used"])
            m[4].metric("Fits in memory", "yes" if summary["feasible"] else "no",
                        help=None if summary["feasible"] else f"{fmt_bytes(summary['overflow_bytes'])} over")
            capacity = {dv.name: dv.memory_bytes for dv in problem.devices.devices}
            st.plotly_chart(archive_charts.device_load_figure(summary, capacity), key="arch_elite_load",
                            config={"displaylogo": False})
            b1, b2, _ = st.columns([1, 1, 3])
            label = f"elite #{rank_of[niche]} of {run.name}"
            if b1.button("Use this placement", type="primary", key="arch_use"):
                run.adopt(elite.placement, label)
                st.rerun()
            if b2.button("Use it and show its trace", key="arch_trace"):
                run.adopt(elite.placement, label)
                st.switch_page("app_pages/trace.py")
        st.markdown("##### Coverage and QD-score")
        if run.quality:
            st.plotly_chart(archive_charts.quality_figure(run.quality), key="arch_quality",
                            config={"displaylogo": False})
            st.caption("Coverage and QD-score over the run, as pyribs reports them: the QD-score sums, over the "
                       "elites, how much faster each is than the slowest objective any elite had (pyribs' offset), "
                       "so it grows as niches fill and elites improve.")
        else:
            st.caption("Coverage and QD-score over time are recorded for MAP-Elites runs this dashboard computes; "
                       "a stored run keeps only its best-so-far curve (Runs page).")


def top_section(archive) -> None:
    """The k best elites as a table."""
    with ui.guarded("the top elites"):
        st.markdown("##### Top elites")
        top = max(3, min(100, len(archive)))
        s.setdefault(ui.persist("arch_k", bounds=(3, top)), min(10, top))
        k = st.slider("How many", 3, top, key="arch_k")
        rows = top_elites(archive, k)
        for r in rows:
            r["objective (ms)"] = r.pop("objective_s") * 1e3
            r.pop("niche")
        st.dataframe(rows, hide_index=True, key="arch_top",
                     column_config={"objective (ms)": st.column_config.NumberColumn(format="%.4g")})


def compare_section(run, ranked, rank_of, pick_key) -> None:
    """Any two placements side by side; A follows the inspected elite until the user chooses A."""
    archive, problem = run.archive, run.archive.problem
    with ui.guarded("the comparison"):
        st.markdown("##### Compare two placements")
        candidates = {f"elite #{k}": e.placement for k, e in enumerate(ranked, start=1)}
        described = {f"elite #{k}": f"elite #{k} · {fmt_seconds(e.objective)} · {elite_label(archive, e)}"
                     for k, e in enumerate(ranked, start=1)}
        candidates.update(run.others)
        if run.current_problem:
            candidates[f"current: {s.placement_label}"] = state.current_placement()
        keys = list(candidates)
        a_key = ui.persist(f"cmp_a_{run.key}", keys)
        b_key = ui.persist(f"cmp_b_{run.key}", keys)
        a_chosen = f"cmp_a_chosen_{run.key}"  # the user picked A: it no longer follows the inspected elite
        inspected = f"elite #{rank_of[s[pick_key]]}"
        if not s.get(a_chosen) or a_key not in s:
            s[a_key] = inspected
        if b_key not in s:
            s[b_key] = next((k_ for k_ in keys if k_ != s[a_key]), keys[0])
        c1, c2 = st.columns(2)
        a = c1.selectbox("Placement A", keys, key=a_key, format_func=lambda k_: described.get(k_, k_),
                         on_change=lambda: s.__setitem__(a_chosen, True),
                         help="Every elite of this archive, other runs' best placements and the current one. "
                              "A follows the elite you inspect above until you choose A yourself.")
        b = c2.selectbox("Placement B", keys, key=b_key, format_func=lambda k_: described.get(k_, k_))
        rows, diff = compare_placements(problem, candidates[a], candidates[b])

        def show(v, unit):
            return fmt_seconds(v) if unit == "s" else fmt_bytes(v) if unit == "B" else f"{v:,.0f}"

        table = [{"": r["metric"], "A": show(r["a"], r["unit"]), "B": show(r["b"], r["unit"]),
                  "B − A": ("+" if r["difference"] > 0 else "") + show(r["difference"], r["unit"])
                  if r["difference"] else "="} for r in rows]
        c1, c2 = st.columns([2, 3])
        c1.dataframe(table, hide_index=True, key="cmp_table")
        c2.markdown(f"**A**: {ui.esc(described.get(a, a))}  \n**B**: {ui.esc(described.get(b, b))}")
        c2.markdown(f"**{diff['ops_moved']} of {diff['ops']} ops** run on a different device.")
        c2.plotly_chart(archive_charts.placement_strip_figure([candidates[a], candidates[b]], ["A", "B"],
                                                      problem.devices.names, problem.splits), key="cmp_strip",
                        config={"displaylogo": False})


ui.header("Archive", "MAP-Elites keeps the best placement it found in every niche: by the device used most, "
          "the number of devices used and how many tensors cross devices. Instead of one answer you get a map "
          "of good, different placements to choose from, e.g. a slightly slower one that uses fewer devices. "
          "A plan archive (Cluster plan page) keeps the fastest plan that fits per pipeline depth × tensor degree.")
sources = []
with ui.guarded("the list of archives"):
    sources = archive_sources()

with ui.guarded("the archive"):
    if not sources:
        st.info("No archive yet: run **MAP-Elites** on the Optimize page; its archive appears here when it finishes "
                "(stored MAP-Elites runs from earlier sessions and the command line appear too). An archive of "
                "cluster plans comes from the Cluster plan page (Search with MAP-Elites).",
                icon=":material/info:")
        st.page_link("app_pages/optimize.py", label="Go to Optimize", icon=":material/rocket_launch:")
    else:
        by_key = {src.key: src for src in sources}
        key = st.selectbox("MAP-Elites run", list(by_key), key=ui.persist("arch_run", list(by_key)),
                           format_func=lambda k: by_key[k].description,
                           help="This session's runs first, then every MAP-Elites run in the run store (see Runs).")
        run = by_key[key]
        ranked = run.archive.ranked()
        options = [e.niche for e in ranked]
        rank_of = {e.niche: k for k, e in enumerate(ranked, start=1)}
        pick_key = ui.persist(f"arch_pick_{run.key}", options)  # the inspected elite, by niche
        if not ranked:
            st.info("This run's archive holds no elite yet: run MAP-Elites for longer.", icon=":material/info:")
        elif is_plan_archive(run.archive):
            s.setdefault(pick_key, options[0])
            planarchive.elite_section(run, ranked, rank_of, pick_key, map_section)
            planarchive.top_section(run.archive)
        else:
            s.setdefault(pick_key, options[0])
            archive_section(run, ranked, rank_of, pick_key)
            top_section(run.archive)
            compare_section(run, ranked, rank_of, pick_key)

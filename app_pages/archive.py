"""Archive: browse MAP-Elites' diverse elites, inspect one, compare two, use one."""

import streamlit as st

from dashboard import charts, state, ui
from dashboard.archiveview import archive_sources
from placement_core.analysis import (archive_heatmap, compare_placements, elite_label, fmt_bytes, fmt_seconds,
                                     placement_summary, top_elites)

ui.header("Archive", "MAP-Elites keeps the best placement it found in every niche: by the device used most, "
          "the number of devices used and how many tensors cross devices. Instead of one answer you get a map "
          "of good, different placements to choose from, e.g. a slightly slower one that uses fewer devices.")
s = state.ss()
sources = []
with ui.guarded("the list of archives"):
    sources = archive_sources()

if not sources:
    st.info("No archive yet: run **MAP-Elites** on the Optimize page; its archive appears here when it finishes "
            "(stored MAP-Elites runs from earlier sessions and the command line appear too).",
            icon=":material/info:")
    st.page_link("app_pages/optimize.py", label="Go to Optimize", icon=":material/rocket_launch:")
else:
    by_key = {src.key: src for src in sources}
    if s.get("arch_run") not in by_key:
        s.pop("arch_run", None)
    key = st.selectbox("MAP-Elites run", list(by_key), key="arch_run",
                       format_func=lambda k: by_key[k].description,
                       help="This session's runs first, then every MAP-Elites run in the run store (see Runs).")
    run = by_key[key]
    archive = run.archive
    problem = archive.problem
    ranked = archive.ranked()
    with ui.guarded("the archive"):
        c = st.columns(4)
        c[0].metric("Elites", f"{len(archive):,}")
        c[1].metric("Niches filled", f"{archive.coverage:.1%}", help=f"of {archive.coverage and len(archive) / archive.coverage:,.0f} "
                    "niches (" + " × ".join(f"{d.size} {d.label}" for d in archive.descriptors) + ")")
        c[2].metric("Best objective", fmt_seconds(ranked[0].objective))
        c[3].metric("Evaluations", f"{run.evaluations:,}")

        dims = list(range(len(archive.descriptors)))
        labels = {i: archive.descriptors[i].label for i in dims}
        names = [d.name for d in archive.descriptors]
        dx = names.index("cross_device_edges") if "cross_device_edges" in names else 0
        dy = names.index("most_used_device") if "most_used_device" in names else (1 if dx == 0 else 0)
        c1, c2 = st.columns(2)
        x_dim = c1.selectbox("Columns", dims, index=dims.index(dx), format_func=labels.get, key=f"arch_x_{run.key}")
        y_dim = c2.selectbox("Rows", [i for i in dims if i != x_dim], format_func=labels.get, key=f"arch_y_{run.key}")
        heat = archive_heatmap(archive, x_dim, y_dim)
        others = [labels[i] for i in dims if i not in (x_dim, y_dim)]
        pick_key = f"arch_pick_{run.key}"
        options = [e.niche for e in ranked]
        rank_of = {e.niche: k for k, e in enumerate(ranked, start=1)}
        picked = s.get(pick_key, options[0])
        cell = None
        for yi, row in enumerate(heat.niche):
            for xi, n in enumerate(row):
                if n is not None and n == picked:
                    cell = (yi, xi)
        st.markdown("##### Map of the archive")
        st.caption(f"Each cell: the best elite over {', '.join(others) or 'nothing else'}; darker is slower. "
                   "Click a cell to inspect its elite, or choose one from the list below.")
        event = st.plotly_chart(charts.heatmap_figure(heat, cell), key=f"arch_heat_{run.key}",
                                on_select="rerun", selection_mode="points", config={"displaylogo": False})
        points = (event or {}).get("selection", {}).get("points", []) if event else []
        if points:
            cd = points[0].get("customdata")
            sel = (int(cd[0]), int(cd[1])) if cd else None
            if sel and s.get(f"arch_last_click_{run.key}") != sel and heat.niche[sel[0]][sel[1]] is not None:
                s[f"arch_last_click_{run.key}"] = sel
                s[pick_key] = heat.niche[sel[0]][sel[1]]
                st.rerun()

        niche = st.selectbox("Elite", options, key=pick_key,
                             format_func=lambda n: f"#{rank_of[n]} · {fmt_seconds(archive.elites[n].objective)} · "
                                                   f"{elite_label(archive, archive.elites[n])}")
        elite = archive.elites[niche]
        summary = placement_summary(problem, elite.placement)
        with st.container(border=True):
            st.markdown(f"**Elite #{rank_of[niche]}** · {elite_label(archive, elite)}")
            m = st.columns(5)
            m[0].metric("Objective", fmt_seconds(summary["objective_s"]), help="time per batch + memory penalty")
            m[1].metric("Time per batch", fmt_seconds(summary["batch_time_s"]))
            m[2].metric("Transfers", f"{summary['transfers']:,}", help=f"{fmt_bytes(summary['bytes_moved'])} moved")
            m[3].metric("Devices used", summary["devices_used"])
            m[4].metric("Fits in memory", "yes" if summary["feasible"] else "no",
                        help=None if summary["feasible"] else f"{fmt_bytes(summary['overflow_bytes'])} over")
            capacity = {dv.name: dv.memory_bytes for dv in problem.devices.devices}
            st.plotly_chart(charts.device_load_figure(summary, capacity), key="arch_elite_load",
                            config={"displaylogo": False})
            b1, b2, _ = st.columns([1, 1, 3])
            label = f"elite #{rank_of[niche]} of {run.name}"
            if b1.button("Use this placement", type="primary", key="arch_use"):
                run.adopt(elite.placement, label)
                st.rerun()
            if b2.button("Use it and show its trace", key="arch_trace"):
                run.adopt(elite.placement, label)
                st.switch_page("app_pages/trace.py")

    with ui.guarded("the top elites"):
        st.markdown("##### Top elites")
        k = st.slider("How many", 3, max(3, min(100, len(archive))), min(10, max(3, len(archive))), key="arch_k")
        rows = top_elites(archive, k)
        for r in rows:
            r["objective (ms)"] = r.pop("objective_s") * 1e3
            r.pop("niche")
        st.dataframe(rows, hide_index=True, key="arch_top",
                     column_config={"objective (ms)": st.column_config.NumberColumn(format="%.4g")})

    with ui.guarded("the comparison"):
        st.markdown("##### Compare two placements")
        candidates = {f"elite #{k}": e.placement for k, e in enumerate(ranked[:50], start=1)}
        candidates.update(run.others)
        if run.current_problem:
            candidates[f"current: {s.placement_label}"] = state.current_placement()
        keys = list(candidates)
        c1, c2 = st.columns(2)
        a = c1.selectbox("Placement A", keys, index=0, key="cmp_a")
        b = c2.selectbox("Placement B", keys, index=min(1, len(keys) - 1), key="cmp_b")
        rows, diff = compare_placements(problem, candidates[a], candidates[b])

        def show(v, unit):
            return fmt_seconds(v) if unit == "s" else fmt_bytes(v) if unit == "B" else f"{v:,.0f}"

        table = [{"": r["metric"], "A": show(r["a"], r["unit"]), "B": show(r["b"], r["unit"]),
                  "B − A": ("+" if r["difference"] > 0 else "") + show(r["difference"], r["unit"])
                  if r["difference"] else "="} for r in rows]
        c1, c2 = st.columns([2, 3])
        c1.dataframe(table, hide_index=True, key="cmp_table")
        c2.markdown(f"**{diff['ops_moved']} of {diff['ops']} ops** run on a different device.")
        c2.plotly_chart(charts.placement_strip_figure([candidates[a], candidates[b]], ["A", "B"],
                                                      problem.devices.names), key="cmp_strip",
                        config={"displaylogo": False})

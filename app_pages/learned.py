"""Learned policies: place the current network with a trained policy in one click, or train a new policy."""

import streamlit as st

from dashboard import learnview, state, ui
from dashboard.charts import curves
from placement_core.analysis import fmt_seconds
from placement_core.families import FAMILIES

ui.header("Learned policies", "A trained policy places a network it has never seen in well under a second, "
          "without a search (Placeto, GDP). Apply a shipped or trained policy to the current network, or "
          "train one on a family of graphs in the background; trainings are kept with the runs.")
s = state.session()

with ui.guarded("the policies"):
    if not learnview.torch_available():
        st.info('Learned policies need PyTorch: `.venv/bin/pip install -e ".[torch]"`, then reload this page.',
                icon=":material/info:")
        st.stop()
    found, problems = learnview.policies()
    for text in problems:
        st.warning(f"Not a readable policy: {ui.esc(text)}", icon=":material/warning:")
    st.markdown(f"##### Place {ui.esc(s.network_label)} on {ui.esc(s.devices_label)} with a policy")
    if not found:
        st.info("No policies yet: train one below.", icon=":material/info:")
    else:
        by_path = {p.path: p for p in found}
        paths = list(by_path)
        pick = st.selectbox("Policy", paths, key=ui.persist("learn_policy", paths),
                            format_func=lambda p: by_path[p].describe(),
                            help="Shipped policies come with the lab (assets/policies/); yours are the ones trained "
                                 "here or saved in your data folder's policies/.")
        info = by_path[pick]
        d = state.devices()
        if info.method == "gdp" and info.device_count not in (None, len(d)):
            st.warning(f"This GDP policy places on {info.device_count} devices; {ui.esc(s.devices_label)} has "
                       f"{len(d)}. Choose a Placeto policy (it scores any number of devices) or other devices.",
                       icon=":material/warning:")
        elif info.devices != d.name:
            st.caption(f"Trained for {ui.esc(info.devices)}; it will place on {ui.esc(d.name)} all the same "
                       "(zero-shot on other devices is a guess, not a promise).")
        if st.button("Place the current network", type="primary", icon=":material/bolt:", key="learn_apply"):
            problem = state.problem()
            placement, seconds = learnview.apply_policy(info, problem)
            state.set_placement(placement, f"{info.name} (zero-shot)")
            ev = state.simulate(problem, placement)
            s.learn_applied = {"policy": info.name, "seconds": seconds, "objective": ev.objective,
                               "fits": ev.feasible, "graph": state.graph_key()}
            st.rerun()
        done = s.get("learn_applied")
        if done and done["graph"] == state.graph_key():
            fits = "fits in memory" if done["fits"] else "does not fit in memory"
            st.success(f"{ui.esc(done['policy'])} placed {len(state.graph())} ops in {done['seconds'] * 1e3:,.0f} ms: "
                       f"{fmt_seconds(done['objective'])} per batch, {fits}. It is now the current placement.",
                       icon=":material/check_circle:")
            st.page_link("app_pages/trace.py", label="See its trace", icon=":material/view_timeline:")

with ui.guarded("the training form"):
    st.markdown(f"##### Train a policy for {ui.esc(s.devices_label)}")
    c1, c2, c3, c4 = st.columns(4)
    methods = list(learnview.METHODS)
    method = c1.selectbox("Method", methods, key=ui.persist("learn_method", methods),
                          format_func=learnview.METHODS.get)
    families = c2.multiselect("Families", list(FAMILIES), default=["nmt"], key=ui.persist("learn_families"),
                              help="The training split (16 graphs) of each; a mix trains one policy for all.")
    episodes = c3.number_input("Episodes", 8, 1_000_000, 400, step=100, key=ui.persist("learn_episodes"),
                               help="Placements sampled in all (8 per update). The shipped policies had 8,000.")
    seed = c4.number_input("Seed", 0, 2**31 - 1, 0, key=ui.persist("learn_seed"))
    running = [j for j in learnview.jobs(s.session_key) if j.active]
    if st.button("Start training", icon=":material/play_arrow:", key="learn_start",
                 disabled=not families or bool(running)):
        learnview.start(s.session_key, learnview.TrainJob(
            method=method, families=list(families), episodes=int(episodes), seed=int(seed), devices=state.devices(),
            devices_label=s.devices_label, penalty=s.sim.penalty))
        st.rerun()
    if running:
        st.caption("One training at a time: it uses a whole core.")

jobs = learnview.jobs(s.session_key)
shown_done = {j.id for j in jobs if not j.active}


@st.fragment(run_every=1.0 if any(j.active for j in jobs) else None)
def progress():
    current = learnview.jobs(s.session_key)
    for job in reversed(current[-3:]):
        v = job.view()
        with st.container(border=True):
            head = f"**{ui.esc(job.title)}** · {v['status']}"
            if v["status"] == "running":
                c1, c2 = st.columns([6, 1])
                ratio = "" if v["ratio"] is None else f" · {v['ratio']:.3f} × best single device"
                c1.progress(min(1.0, v["episodes"] / max(v["total"], 1)),
                            text=f"{head} · {v['episodes']:,} / {v['total']:,} episodes{ratio} · "
                                 f"{fmt_seconds(v['elapsed_s'])}" + (" · stopping…" if v["stopping"] else ""))
                if c2.button("Stop", key=f"learn_stop_{job.id}", icon=":material/stop:"):
                    job.stop()
            else:
                st.markdown(head)
            if v["error"]:
                st.error(ui.esc(v["error"]), icon=":material/error:")
            if v["curve"]:
                st.plotly_chart(curves.reward_curve_figure(v["curve"], f"training #{job.id}: reward curve"),
                                key=f"learn_curve_{job.id}", config={"displaylogo": False})
            if v["policy"]:
                st.success(f"Saved as {ui.esc(v['policy'])}; it is listed above."
                           + (f" Stored as run {v['run_id']} (Runs page)." if v["run_id"] else ""),
                           icon=":material/check_circle:")
            if v["store_note"]:
                st.caption(v["store_note"])
    if {j.id for j in current if not j.active} - shown_done:
        st.rerun(scope="app")  # a training finished: list its policy above


with ui.guarded("the trainings"):
    if jobs:
        st.markdown("##### Trainings")
        progress()

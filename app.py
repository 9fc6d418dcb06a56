"""Device Placement Lab dashboard: `streamlit run app.py`.

Declares the pages; each page in app_pages/ is a thin script over placement_core
(numbers) and dashboard (state, background runs, charts). See docs/dashboard.md.
(Not "pages/": Streamlit treats a folder of that name as an old-style multipage app,
which runs a page URL opened first without this script and breaks AppTest's reruns.)
"""


from pathlib import Path


def main() -> None:
    import streamlit as st

    from dashboard import server_runs, state, ui

    # A local icon: a material icon as page_icon makes every browser fetch it from a web font server.
    st.set_page_config(page_title="Device Placement Lab", page_icon=str(Path(__file__).parent / "assets" / "icon.svg"),
                       layout="wide")
    state.init()
    state.keep_widget_values()
    server_runs.adopt_live_runs()  # a reload or another tab sees the runs this server computes
    pages = [
        st.Page("app_pages/network.py", title="Network", icon=":material/account_tree:", default=True),
        st.Page("app_pages/devices.py", title="Devices", icon=":material/memory:"),
        st.Page("app_pages/optimize.py", title="Optimize", icon=":material/rocket_launch:"),
        st.Page("app_pages/archive.py", title="Archive", icon=":material/grid_view:"),
        st.Page("app_pages/trace.py", title="Trace", icon=":material/view_timeline:"),
        st.Page("app_pages/pipeline.py", title="Pipeline", icon=":material/stacked_bar_chart:"),
        st.Page("app_pages/cluster.py", title="Cluster plan", icon=":material/hub:"),
        st.Page("app_pages/learned.py", title="Learned policies", icon=":material/psychology:"),
        st.Page("app_pages/benchmark.py", title="Benchmark", icon=":material/speed:"),
        st.Page("app_pages/runs.py", title="Runs", icon=":material/history:"),
    ]
    page = st.navigation(pages)
    try:
        with ui.guarded(f"the {page.title} page"):
            page.run()
    finally:
        with ui.guarded("the sidebar"):
            ui.sidebar()


# Streamlit runs this file as __main__. Worker processes of a parallel optimization (multiprocessing
# "spawn") re-import the main script as __mp_main__: they must not start the app.
if __name__ == "__main__":
    main()

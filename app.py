"""TAPS Studio: the Streamlit frame. Sets up every run once (page, type, presenter mode, the model
pair and latency profile in the sidebar), then runs the chosen page.

    streamlit run app.py
"""

import os

# Before torch is first imported: one thread per decode. The app is a server: its decode service
# runs one decode per core at once (taps.studio.serve, docs/serving.md), each with no OpenMP team to
# wake, so a class's steps use every core and a laptop busy with other work slows a decode by its
# share of the CPU, not many times over. OMP_NUM_THREADS=2 (say) gives fewer, wider decodes.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import streamlit as st  # noqa: E402

from app_pages import warmup  # noqa: E402  (light: draws before the engine is imported)

st.set_page_config(page_title="TAPS Studio", page_icon="🌳", layout="wide")
warmup.hold_still()           # a class's pages do not animate while they wait (app_pages/warmup.py)
warmup.wait_for_engine()      # the first pages after a start say what they wait for (app_pages/warmup.py)

from app_pages import frame  # noqa: E402

PAGES = [
    st.Page("app_pages/0_Home.py", title="Home", icon=":material/home:", default=True),
    st.Page("app_pages/1_Step_through.py", title="Step through", icon=":material/account_tree:"),
    st.Page("app_pages/2_Race_and_sweep.py", title="Race and sweep", icon=":material/sports_score:"),
    st.Page("app_pages/3_Failure_cases.py", title="Failure cases", icon=":material/search:"),
    st.Page("app_pages/4_Learn.py", title="Learn", icon=":material/school:"),
]
frame.frame(PAGES).run()

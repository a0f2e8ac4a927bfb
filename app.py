"""TAPS Studio: the Streamlit frame. Sets up every run once (page, type, presenter mode, the model
pair and latency profile in the sidebar), then runs the chosen page.

    streamlit run app.py
"""

import os

# Before torch is first imported: OpenMP threads that sleep at barriers instead of spinning, so a
# busy laptop slows the app down by its share of the CPU, not many times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import streamlit as st  # noqa: E402

from app_pages import common as ui  # noqa: E402

st.set_page_config(page_title="TAPS Studio", page_icon="🌳", layout="wide")
PAGES = [
    st.Page("app_pages/0_Home.py", title="Home", icon=":material/home:", default=True),
    st.Page("app_pages/1_Step_through.py", title="Step through", icon=":material/account_tree:"),
    st.Page("app_pages/2_Race_and_sweep.py", title="Race and sweep", icon=":material/sports_score:"),
    st.Page("app_pages/3_Failure_cases.py", title="Failure cases", icon=":material/search:"),
    st.Page("app_pages/4_Learn.py", title="Learn", icon=":material/school:"),
]
ui.frame(PAGES).run()

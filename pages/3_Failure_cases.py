"""Failure cases: rounds where TAPS accepted less than DDTree or the oracle, or wasted its budget."""

import pandas as pd
import streamlit as st

import app_common as ui
from taps import DecodeConfig, viz
from taps.estimate import ESTIMATORS
from taps.failures import display_name, find_failures
from taps.prompts import example_prompts, humaneval_prompts, parse_prompt_text
from taps.selectors import TAPS_MODES

ui.setup_page("Failure cases", "🔍", ("fail_",))
st.title("Failure cases")
st.markdown("TAPS runs greedily over a set of prompts. From the root of every TAPS round, DDTree and the "
            "oracle each run one round over the same context, so all three are compared at the same "
            "position. Rounds where TAPS accepted fewer tokens, or spent most of its verified nodes under a "
            "rejected prefix, are listed worst first.")
pair = ui.pair_sidebar()
if pair is None:
    st.stop()
state = st.session_state
SOURCES = ("Shipped examples", "HumanEval", "Your own")

source = st.radio("Prompts", SOURCES, horizontal=True, key="fail_source")
if source == "Your own":
    left, right = st.columns(2)
    left.text_area("Paste prompts: JSONL lines with a \"prompt\" field, or plain text with prompts separated "
                   "by a line holding only ---", key="fail_text", height=150)
    right.file_uploader("…or upload a .txt or .jsonl file", type=["txt", "jsonl"], key="fail_upload")
cols = st.columns(6)
budget = cols[0].number_input("Budget", min_value=1, max_value=1024, value=32, key="fail_budget")
estimator = cols[1].selectbox("TAPS estimator", ESTIMATORS, index=ESTIMATORS.index("online"), key="fail_estimator")
taps_mode = cols[2].selectbox("TAPS mode", TAPS_MODES, key="fail_taps_mode")
max_new = cols[3].number_input("Max new tokens", min_value=1, max_value=4096, value=32, key="fail_max_new")
limit = cols[4].number_input("Prompts at most", min_value=1, max_value=200, value=5, key="fail_limit")
threshold = cols[5].slider("Waste flag at", min_value=0.1, max_value=1.0, value=0.5, step=0.05,
                           key="fail_waste_threshold", help="Flag rounds whose waste share reaches this")


def gather_prompts() -> list[dict]:
    if source == "Shipped examples":
        prompts = example_prompts()
    elif source == "HumanEval":
        prompts = humaneval_prompts()
    else:
        upload = state.get("fail_upload")
        if upload is not None:
            try:
                text = upload.getvalue().decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{upload.name} is not UTF-8 text") from None
            prompts = parse_prompt_text(text, upload.name)
        else:
            prompts = parse_prompt_text(state.get("fail_text", ""), "the pasted text")
    return prompts[: int(limit)]


if st.button("Find failures", key="fail_btn", type="primary"):
    config = DecodeConfig(selector="taps", estimator=estimator, budget=int(budget), max_new_tokens=int(max_new),
                          taps_mode=taps_mode)
    try:
        prompts = gather_prompts()
        config.validate(pair)
    except ValueError as exc:
        st.error(f"Cannot start: {exc}")
    else:
        bar = st.progress(0.0, text="Starting…")

        def tick(done: int, total: int, name: str) -> None:
            bar.progress(done / total, text=f"{done} of {total} prompts · {name}")

        state["fail_report"] = find_failures(pair, prompts, config, waste_threshold=float(threshold),
                                             on_progress=tick)
        state.pop("fail_case", None)
        bar.empty()

report = state.get("fail_report")
if report is not None:
    st.markdown(f"Checked **{report.rounds_checked}** TAPS rounds over **{report.prompts_run}** prompts: "
                f"**{len(report.cases)}** flagged.")
    for message in report.skipped:
        st.warning(f"Skipped {message}")
    if report.cases:
        frame = pd.DataFrame([case.row() for case in report.cases])
        st.dataframe(frame, key="fail_table", hide_index=True)
        labels = [f"{n + 1}. {c.prompt_id}, round {c.taps_round.index + 1}: {', '.join(c.kinds)}"
                  for n, c in enumerate(report.cases)]
        chosen = st.selectbox("Open a case", range(len(labels)), format_func=labels.__getitem__, key="fail_case")
        case = report.cases[chosen]
        st.info(case.explanation)
        color_by = st.radio("Colour nodes by", list(viz.COLOR_MODES), index=1, horizontal=True,
                            format_func=viz.COLOR_MODES.get, key="fail_color_by")
        tabs = st.tabs(["TAPS's round"] + [f"{display_name(name, capital=True)}'s round (same position)"
                                           for name in case.others] + ["Marginal vs path-conditioned"])
        with tabs[0]:
            st.plotly_chart(viz.round_tree_figure(case.taps_round, color_by), key="fail_tree_chart", theme=None,
                            config={"displaylogo": False})
        for tab, (name, other) in zip(tabs[1:], case.others.items()):
            with tab:
                if other is None:
                    st.caption(f"{display_name(name, capital=True)} could not run from this position "
                               "(the context is full).")
                else:
                    st.plotly_chart(viz.round_tree_figure(other, color_by), key=f"fail_{name}_chart", theme=None,
                                    config={"displaylogo": False})
        with tabs[-1]:
            st.plotly_chart(viz.ranking_comparison_figure(case.taps_round), key="fail_compare_chart", theme=None,
                            config={"displaylogo": False})
        st.download_button("Cases as CSV", data=frame.to_csv(index=False), file_name="taps-failures.csv",
                           mime="text/csv", key="fail_dl_csv", on_click="ignore")
    else:
        st.success("No round was flagged: TAPS matched DDTree and the oracle and kept waste under the threshold.")

"""Failure cases: rounds where TAPS accepted less than DDTree or the oracle, or wasted its budget."""

import pandas as pd
import streamlit as st

from app_pages import common as ui
from taps.eval.prompts import humaneval_prompts, parse_prompt_text
from taps.policies import DDTREE, TAPS
from taps.studio import figures
from taps.studio.app_state import profile_needed
from taps.studio.failures import KINDS, display_name, find_failures

pair = ui.current_pair()
state = st.session_state
SOURCES = ("Shipped examples", "HumanEval", "Your own")

st.title("Failure cases")
st.markdown("TAPS runs greedily over a set of prompts. From the root of every TAPS round, DDTree and the oracle each "
            "run one round over the same context, so all three are compared at the same position. Rounds where "
            "TAPS accepted fewer tokens, or spent most of its verified nodes under a rejected prefix, are listed "
            "worst first.")
state.setdefault("fail_source", SOURCES[0])
state.setdefault("fail_limit", 5)
state.setdefault("fail_waste_threshold", 0.5)
ui.keep("fail_source", "fail_text", "fail_limit", "fail_waste_threshold", "fail_kind")
source = st.radio("Prompts", SOURCES, horizontal=True, key="fail_source")
if source == "Your own":
    left, right = st.columns(2)
    left.text_area("Paste prompts: JSONL lines with a \"prompt\" field, or plain text with prompts separated by a "
                   "line holding only ---", key="fail_text", height=150)
    right.file_uploader("…or upload a .txt or .jsonl file", type=["txt", "jsonl"], key="fail_upload")
cols = st.columns(6)
budget = ui.setting("budget", "fail_budget", "Budget", cols[0])
estimator = ui.setting("estimator", "fail_estimator", "TAPS estimator", cols[1])
taps_mode = ui.setting("taps_mode", "fail_taps_mode", "TAPS mode", cols[2])
max_new = ui.setting("max_new_tokens", "fail_max_new", "Max new tokens", cols[3], default=32)
limit = cols[4].number_input("Prompts at most", step=1, key="fail_limit", help="1 to 200")
threshold = cols[5].slider("Waste flag at", min_value=0.1, max_value=1.0, step=0.05, key="fail_waste_threshold",
                           help="Flag rounds whose waste share reaches this")


def gather_prompts() -> list[dict]:
    if not 1 <= int(limit) <= 200:
        raise ValueError(f"prompts at most must be from 1 to 200, got {limit}")
    if source == "Shipped examples":
        prompts = ui.examples()
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
    state.pop("fail_report", None)                  # a failed search never leaves the old report under its error
    config, problem = ui.build_config(pair, selector=TAPS.name, estimator=estimator, budget=budget,
                                      max_new_tokens=max_new, taps_mode=taps_mode)
    profile, _ = ui.machine_profile(pair, budget if config else 0)
    try:
        if problem:
            raise ValueError(problem)
        if config.uses_profile and profile is None:
            raise ValueError(profile_needed(config))
        prompts = gather_prompts()
    except ValueError as exc:
        st.error(f"Cannot start: {exc}")
    else:
        bar = st.progress(0.0, text="Starting…")

        def tick(done: int, total: int, name: str) -> None:
            bar.progress(done / total, text=f"{done} of {total} prompts · {name}")

        report = find_failures(pair, prompts, config, waste_threshold=float(threshold), on_progress=tick,
                               profile=profile)
        state["fail_report"] = report
        state["fail_report_id"] = state.get("fail_report_id", 0) + 1
        state["fail_report_source"] = f"{source.lower()} ({len(prompts)} prompts)"
        bar.empty()

report = state.get("fail_report")
if report is not None:
    settings = report.config
    st.markdown(f"Checked **{report.rounds_checked}** TAPS rounds over **{report.prompts_run}** prompts from the "
                f"{state.get('fail_report_source', 'prompts')} (TAPS/{settings.get('estimator')}, budget "
                f"{settings.get('budget')}, {settings.get('taps_mode')} mode): **{len(report.cases)}** flagged.")
    for message in report.skipped:
        st.warning(f"Skipped {message}")
    counts = report.counts()
    kinds = list(KINDS) + ["all"]
    state.setdefault("fail_kind", DDTREE.name)
    kind = st.segmented_control(
        "Show", kinds, key="fail_kind", required=True,
        format_func=lambda k: f"{KINDS[k]} ({counts[k]})" if k in KINDS else f"all flagged ({len(report.cases)})")
    cases = report.of_kind(None if kind == "all" else kind)
    if not cases:
        st.success(f"No round of this kind: {KINDS.get(kind, 'nothing flagged')}." if kind != "all" else
                   "No round was flagged: TAPS matched DDTree and the oracle and kept waste under the threshold.")
    else:
        frame = pd.DataFrame([case.row() for case in cases])
        st.dataframe(frame, key="fail_table", hide_index=True)
        labels = [f"{n + 1}. {c.prompt_id}, round {c.taps_round.number}: "
                  f"{', '.join(KINDS[k] for k in c.kinds)}" for n, c in enumerate(cases)]
        case_key = f"fail_case_{state['fail_report_id']}_{kind}"     # a new search or filter starts at the top
        chosen = st.selectbox("Open a case", range(len(labels)), format_func=labels.__getitem__, key=case_key)
        case = cases[chosen]
        st.info(case.explanation)

        def open_in_step() -> None:
            state["step_request"] = {"prompt": case.prompt, "config": dict(report.config),
                                     "round": case.taps_round.number}

        if st.button(f"Open in Step through at round {case.taps_round.number}", key="fail_open_step",
                     on_click=open_in_step):
            st.switch_page("app_pages/1_Step_through.py")
        state.setdefault("fail_color_by", "reach")
        ui.keep("fail_color_by")
        color_by = st.radio("Colour nodes by", list(figures.COLOR_MODES), horizontal=True,
                            format_func=figures.COLOR_MODES.get, key="fail_color_by")
        tabs = st.tabs(["TAPS's round"] + [f"{display_name(name, capital=True)}'s round (same position)"
                                           for name in case.others] + ["Marginal vs path-conditioned"])
        plot = ui.tree_plot()
        with tabs[0]:
            ui.chart(figures.round_tree_figure(case.taps_round, color_by, plot=plot, prompt=case.prompt,
                                               config=report.config), "fail_tree_chart")
        for tab, (name, other) in zip(tabs[1:], case.others.items()):
            with tab:
                if other is None:
                    st.caption(f"{display_name(name, capital=True)} could not run from this position "
                               "(the context is full).")
                else:
                    ui.chart(figures.round_tree_figure(other, color_by, plot=plot, prompt=case.prompt,
                                                       config=report.config), f"fail_{name}_chart")
        with tabs[-1]:
            ui.chart(figures.ranking_comparison_figure(case.taps_round, plot=plot, prompt=case.prompt),
                     "fail_compare_chart")
        st.download_button("Cases as CSV", data=pd.DataFrame([c.row() for c in report.cases]).to_csv(index=False),
                           file_name="taps-failures.csv", mime="text/csv", key="fail_dl_csv", on_click="ignore")

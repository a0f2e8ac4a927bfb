"""Failure cases: rounds where TAPS accepted less than DDTree or the oracle, or wasted its budget."""

from functools import partial

import pandas as pd
import streamlit as st

from app_pages import inputs, pair_box, profiles
from app_pages import page_style as style
from taps.eval.prompts import humaneval_prompts, parse_prompt_text
from taps.policies import DDTREE, DFLASH2, ORACLE, TAPS
from taps.studio import figures
from taps.studio.app_state import profile_needed
from taps.studio.failures import KINDS, checked_summary, display_name, find_failures
from taps.studio.serve import decode_service

pair = pair_box.current_pair()
state = st.session_state
SOURCES = ("Shipped examples", "HumanEval", "Your own")
on_stage = style.presenter()
PRESENTER_EXTRA_PX = 100        # presenter mode: the pickers' row and the case's why, beyond what style.tree_plot keeps
INTRO = ("TAPS runs greedily over a set of prompts. From the root of every TAPS round, DDTree runs one round over "
         "the same context (and, when asked, the oracle, which knows the target's tokens), so they are compared "
         "at the same position. Rounds where TAPS accepted fewer tokens than DDTree come first, most tokens lost "
         "first; then rounds that spent most of their verified nodes under a rejected prefix.")

if not on_stage:                # presenter mode: the top bar names the page; the settings fold into its popover
    st.title("Failure cases")
    st.markdown(INTRO)
state.setdefault("fail_source", SOURCES[0])
state.setdefault("fail_limit", 5)
state.setdefault("fail_waste_threshold", 0.5)
inputs.keep("fail_source", "fail_text", "fail_limit", "fail_waste_threshold", "fail_kind", "fail_oracle",
            "fail_dflash2")
settings_box = style.settings_area("Prompts and settings")
with settings_box:
    source = st.radio("Prompts", SOURCES, horizontal=True, key="fail_source", help=INTRO if on_stage else None)
    if source == "Your own":
        left, right = st.columns(2)
        left.text_area("Paste prompts: JSONL lines with a \"prompt\" field, or plain text with prompts separated "
                       "by a line holding only ---", key="fail_text", height=150)
        right.file_uploader("…or upload a .txt or .jsonl file", type=["txt", "jsonl"], key="fail_upload")
    cols = st.columns(3 if on_stage else 6)
    budget = inputs.setting("budget", "fail_budget", "Budget", cols[0])
    estimator = inputs.setting("estimator", "fail_estimator", "TAPS estimator", cols[1])
    taps_mode = inputs.setting("taps_mode", "fail_taps_mode", "TAPS mode", cols[2])
    cols = cols[3:] if not on_stage else st.columns(3)
    max_new = inputs.setting("max_new_tokens", "fail_max_new", "Max new tokens", cols[0], default=32)
    limit = cols[1].number_input("Prompts at most", step=1, key="fail_limit", help="1 to 200")
    threshold = cols[2].slider("Waste flag at", min_value=0.1, max_value=1.0, step=0.05, key="fail_waste_threshold",
                               help="Flag rounds whose waste share reaches this")
    with_oracle = st.checkbox("Also flag rounds below the oracle", key="fail_oracle",
                              help="The oracle knows the target's tokens (hindsight), so TAPS is below it in most "
                                   "rounds: a kind to ask for, not a default")
    with_dflash2 = DFLASH2.runs_on(pair) and st.checkbox(
        "Also flag rounds below DFlash2", key="fail_dflash2",
        help="DFlash2's chain, its path selector walking the drafter's top candidates, run from the same position: "
             "where one well-chosen path beat TAPS's tree")


def gather_prompts() -> list[dict]:
    if not 1 <= int(limit) <= 200:
        raise ValueError(f"prompts at most must be from 1 to 200, got {limit}")
    if source == "Shipped examples":
        prompts = inputs.examples()
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


# presenter mode: the settings fold into the top bar's popover, and the button stays on the page
find_area = st.container(horizontal=True, vertical_alignment="center") if on_stage else settings_box
if find_area.button("Find failures", key="fail_btn", type="primary"):
    state.pop("fail_report", None)                  # a failed search never leaves the old report under its error
    config, problem = inputs.build_config(pair, selector=TAPS.name, estimator=estimator, budget=budget,
                                          max_new_tokens=max_new, taps_mode=taps_mode)
    profile, profile_id = profiles.run_profile(pair, budget if config else 0)
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

        with decode_service().held(on_wait=inputs.queue_notice(bar)):
            compare = (DDTREE.name, *([DFLASH2.name] if with_dflash2 else []), *([ORACLE.name] if with_oracle else []))
            report = find_failures(pair, prompts, config, compare=compare, waste_threshold=float(threshold),
                                   on_progress=tick, profile=profile)
        state["fail_report"] = report
        state["fail_report_id"] = state.get("fail_report_id", 0) + 1
        state["fail_report_source"] = source
        state["fail_report_profile"] = profiles.profile_label(profile_id) if config.uses_profile else ""
        bar.empty()

report = state.get("fail_report")
if report is None and on_stage:
    find_area.caption("TAPS against DDTree round by round over the prompts chosen under **Prompts and settings** "
                      "(top bar): press **Find failures**.")
if report is not None:
    settings = report.config
    sized = state.get("fail_report_profile")
    # presenter mode: the summary goes with the settings (in the top bar's popover), the trees get the window
    summary_box = settings_box if on_stage else st
    summary_box.markdown(checked_summary(report.rounds_checked, report.prompts_run, state.get("fail_report_source", ""))
                         + f" (TAPS/{settings.get('estimator')}, budget {settings.get('budget')}, "
                         f"{settings.get('taps_mode')} mode" + (f"; trees sized from {sized}" if sized else "")
                         + f"): **{len(report.cases)}** flagged.")
    for message in report.skipped:
        summary_box.warning(f"Skipped {message}")
    tables = report.reliability_tables()
    if any(tables.values()):
        with st.expander("Reliability: did TAPS know how much the target would accept?", expanded=False):
            st.markdown("Every node these rounds verified, binned by the reach it was predicted (TAPS's calibrated "
                        "estimate; the marginal product for DDTree, over its rounds from the same positions), "
                        "against the share of them the target accepted. On the dashed diagonal the estimate is "
                        "calibrated; below it, over-confident. " + report.calibration_line())
            style.chart(figures.reliability_figure(tables), "fail_reliability_chart")
    counts = report.counts()
    kinds = report.kinds + ["all"]
    if state.get("fail_kind") not in kinds:
        state["fail_kind"] = DDTREE.name
    state.setdefault("fail_color_by", "reach")
    inputs.keep("fail_color_by")
    # presenter mode: the filter, the case and the colouring in one row, so the trees get the window
    picker = st.columns([2.2, 2.2, 1.6]) if on_stage else [st, st, None]
    # presenter mode: a menu (the segmented control's buttons do not fit a third of 1280 px)
    kind_widget = picker[0].selectbox if on_stage else partial(st.segmented_control, required=True)
    kind = kind_widget(
        "Show", kinds, key="fail_kind",
        format_func=lambda k: f"{KINDS[k]} ({counts[k]})" if k in KINDS else f"all flagged ({len(report.cases)})")
    cases = report.of_kind(None if kind == "all" else kind)
    if not cases:
        st.success(f"No round of this kind: {KINDS.get(kind, 'nothing flagged')}." if kind != "all" else
                   f"No round was flagged: TAPS matched {' and '.join(display_name(n) for n in report.compared)} "
                   "and kept waste under the threshold.")
    else:
        # the table without its long "why" column (a cell cuts it): the chosen case's why is in full below it
        frame = pd.DataFrame([case.row() for case in cases]).drop(columns="why")
        if not on_stage:
            st.dataframe(frame, key="fail_table", hide_index=True)
            st.caption("Open a case for the whole of why it was flagged; the CSV below has every case's why.")
        labels = [f"{n + 1}. {c.prompt_id}, round {c.taps_round.number}: "
                  f"{', '.join(KINDS[k] for k in c.kinds)}" for n, c in enumerate(cases)]
        case_key = f"fail_case_{state['fail_report_id']}_{kind}"     # a new search or filter starts at the top
        chosen = picker[1].selectbox("Open a case", range(len(labels)), format_func=labels.__getitem__,
                                     key=case_key)
        case = cases[chosen]
        why, go = st.columns([5, 2], vertical_alignment="center") if on_stage else (st, st)
        why.info(case.explanation)

        def open_in_step() -> None:
            state["step_request"] = {"prompt": case.prompt, "config": dict(report.config),
                                     "round": case.taps_round.number}

        if go.button(f"Open in Step through at round {case.taps_round.number}", key="fail_open_step",
                     on_click=open_in_step):
            st.switch_page("app_pages/1_Step_through.py")
        colour_widget = picker[2].selectbox if on_stage else partial(st.radio, horizontal=True)
        color_by = colour_widget("Colour nodes by", list(figures.COLOR_MODES), format_func=figures.COLOR_MODES.get,
                                 key="fail_color_by")
        tabs = st.tabs(["TAPS's round"] + [f"{display_name(name, capital=True)}'s round (same position)"
                                           for name in case.others] + ["Marginal vs path-conditioned"]
                       + (["All flagged"] if on_stage else []))
        plot = style.tree_plot(reserve=PRESENTER_EXTRA_PX if on_stage else 0)
        with tabs[0]:
            style.chart(figures.round_tree_figure(case.taps_round, color_by, plot=plot, prompt=case.prompt,
                                                  config=report.config), "fail_tree_chart")
        for tab, (name, other) in zip(tabs[1:], case.others.items()):
            with tab:
                if other is None:
                    st.caption(f"{display_name(name, capital=True)} could not run from this position "
                               "(the context is full).")
                else:
                    style.chart(figures.round_tree_figure(other, color_by, plot=plot, prompt=case.prompt,
                                                          config=report.config), f"fail_{name}_chart")
        if on_stage:
            with tabs[-1]:
                st.dataframe(frame, key="fail_table", hide_index=True, height=plot.height)
        with tabs[len(case.others) + 1]:
            style.chart(figures.ranking_comparison_figure(case.taps_round, plot=plot, prompt=case.prompt),
                        "fail_compare_chart")
        st.download_button("Cases as CSV", data=pd.DataFrame([c.row() for c in report.cases]).to_csv(index=False),
                           file_name="taps-failures.csv", mime="text/csv", key="fail_dl_csv", on_click="ignore")

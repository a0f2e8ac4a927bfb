"""What the Step-through page draws of a run: the counters, and the round on view in its tabs (the
draft tree, stage by stage, marginal vs path, candidates, all rounds; the Export tab is
`app_pages.step_export`). What the page decides is `taps.studio.step_page`."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from app_pages import inputs, lecture, step_export
from app_pages import page_style as style
from taps import ModelPair
from taps.config import MAX_BUDGET, check_value
from taps.record import STAGES
from taps.studio import figures
from taps.studio.app_state import rounds_table
from taps.studio.lesson import STAGE_TITLES, run_uses_profile
from taps.studio.step_page import COUNTER_WIDTHS, move_stage, remembered, stage_for_view
from taps.studio.stepper import StepController

NOTE_PX = 46                   # one caption line under the buttons and the gap after it (compact layouts)


@dataclass(frozen=True)
class StepScreen:
    """The run on this page and how the page is laid out: `compact` (presenter mode, or a short
    window: buttons, counters and tree on one screen), `on_stage` (presenter mode), `below` (the
    settings drawn under the run); `model` the profile the modelled figures are priced by."""

    ctrl: StepController
    pair: ModelPair
    model: object
    compact: bool
    on_stage: bool
    below: bool


def draw_counters(figures_: list) -> None:
    """The counters (`taps.studio.step_page.counters`), one column each."""
    for col, counter in zip(st.columns(list(COUNTER_WIDTHS)), figures_):
        col.metric(counter.label, counter.value, delta=counter.delta, delta_color="off", delta_arrow="off",
                   help=counter.help)


def _move_stage(ctrl: StepController, delta: int) -> None:
    move_stage(st.session_state, ctrl.view, delta)


def remember(key: str) -> None:
    st.session_state[f"{key}__value"] = st.session_state[key]


def tree_options() -> None:
    """The Draft tree tab's colouring, how many pool nodes to draw, and whether the tree is drawn
    light (static SVG: no chart library in the browser, tooltips, no zoom)."""
    cols = st.columns([3, 1])
    cols[0].radio("Colour nodes by", list(figures.COLOR_MODES), horizontal=True, format_func=figures.COLOR_MODES.get,
                  key="step_color_by", on_change=remember, args=("step_color_by",))
    cols[1].number_input("Pool nodes drawn at most", min_value=0, max_value=800, step=20, key="step_pool_shown",
                         on_change=remember, args=("step_pool_shown",))
    cols[1].toggle("Light drawing", key=style.LIGHT_TREES, on_change=remember, args=(style.LIGHT_TREES,),
                   help="The tree as a plain picture: your browser does far less per Step (a class on one "
                        "laptop shares its cores), hover a node for its tooltip; no zoom or pan. On by default "
                        "when the app is served to a class.")


def note_px(screen: StepScreen) -> int:
    """The room a compact page's note line (what the next Step does, the run's end) takes above the figures."""
    return NOTE_PX if screen.compact and st.session_state.get("_step_note_shown") else 0


def views(screen: StepScreen, record) -> None:
    """The round on view in the page's six tabs (each drawn only while open)."""
    state, ctrl, compact, on_stage = st.session_state, screen.ctrl, screen.compact, screen.on_stage
    tabs = st.tabs(list(lecture.TAB_LABELS), key="step_tab", on_change="rerun")
    drawn = bool(state.get("step_tree_widgets_drawn"))
    remembered(state, "step_color_by", "reach", drawn)
    remembered(state, "step_pool_shown", 60, drawn)
    remembered(state, style.LIGHT_TREES, style.light_trees_default(), drawn)
    inputs.keep("step_compare_budget")
    run_config = ctrl.config
    shown_prompt = ctrl.prompt_text
    state["step_tree_widgets_drawn"] = tabs[0].open is not False and not on_stage
    with tabs[0]:
        if tabs[0].open is not False:
            if not compact:
                tree_options()
            color_by, pool_shown, plot = state["step_color_by"], int(state["step_pool_shown"]), style.tree_plot(
                reserve=note_px(screen))
            style.round_chart(record, ("tree", color_by, pool_shown, plot, shown_prompt, run_config),
                              lambda: figures.round_tree_figure(record, color_by, pool_shown, plot, shown_prompt,
                                                                run_config), "step_tree_chart",
                              light=plot.width if state[style.LIGHT_TREES] else 0)
            if screen.below:                       # under the tree: the window is the tree's
                tree_options()
            if not on_stage:
                st.caption("Look for: the thick path is what the target accepted; diamonds are siblings it rejected; "
                           "crosses on dotted edges sat under a rejected prefix and could never be accepted. A token "
                           "cut short to fit its column ends in “…”: hover its node for the whole token (presenter "
                           "mode's S gives labels more room).")
    with tabs[1]:
        if tabs[1].open:
            stage = STAGES[stage_for_view(state, ctrl.view)]
            row = st.container(horizontal=True, vertical_alignment="center", gap="small")
            row.button("◀ Previous stage", key="step_stage_prev", on_click=_move_stage, args=(ctrl, -1),
                       disabled=stage == STAGES[0], help="↑")
            row.button("Next stage ▶", key="step_stage_next", on_click=_move_stage, args=(ctrl, 1), type="primary",
                       disabled=stage == STAGES[-1], help="↓ (past the last stage: the next round)")
            row.markdown(" → ".join(f"**{STAGE_TITLES[s]}**" if s == stage else STAGE_TITLES[s] for s in STAGES))
            if not on_stage:
                state.setdefault("step_default_stage", STAGES[0])
                row.selectbox("A new round opens at", STAGES, key="step_default_stage", width=190,
                              format_func=STAGE_TITLES.get)
            color_by, pool_shown = state["step_color_by"], int(state["step_pool_shown"])
            # at Select, the cost model's curve beside the tree (below it, it sat under a 720 px window)
            curve = stage == "select" and ctrl.profile is not None and run_uses_profile(record.selector, run_config)
            left, right = st.columns([2.6, 1], gap="small") if curve else (st.container(), None)
            plot = style.tree_plot(share=0.72 if curve else 1.0, reserve=64 + note_px(screen))
            with left:
                style.round_chart(record, ("lesson", stage, color_by, pool_shown, plot, shown_prompt, run_config),
                                  lambda: figures.lesson_figure(record, stage, color_by, pool_shown, plot, shown_prompt,
                                                                run_config), "step_lesson_chart")
            if curve:
                with right:
                    style.chart(figures.size_curve_figure(record, ctrl.profile, height=plot.height), "step_size_chart",
                                config={"displayModeBar": False})
    with tabs[2]:
        if tabs[2].open:
            state.setdefault("step_compare_budget", max(int(record.verified_nodes), 1))
            row = st.container(horizontal=True, vertical_alignment="center", gap="small")
            row.markdown("Compare the two rankings at")
            compare_at = row.number_input("Compare at budget", step=1, key="step_compare_budget", width=170,
                                          label_visibility="collapsed",
                                          help=f"Nodes each ranking picks (1 to {MAX_BUDGET}); it starts at the "
                                               "nodes the first round you open verified")
            row.markdown("nodes (this round verified "
                         f"{record.verified_nodes} of a budget of {record.budget})")
            try:
                check_value("budget", compare_at)
            except ValueError as exc:
                st.error(str(exc))
            else:
                plot = style.tree_plot(reserve=72 + note_px(screen))
                style.chart(figures.ranking_comparison_figure(record, int(compare_at), plot=plot, prompt=shown_prompt),
                            "step_compare_chart")
                st.caption("Look for: diamonds (only the marginal product keeps them) sitting under an early "
                           "off-mode choice, and squares (only reach keeps them) along the target's path. Verdicts "
                           "come from hindsight: what the target chose this round.")
    with tabs[3]:
        if tabs[3].open:
            candidates(screen, record, shown_prompt, run_config)
    with tabs[4]:
        if tabs[4].open:
            st.dataframe(rounds_table(ctrl.visible), key="step_rounds_table", hide_index=True)
    with tabs[5]:
        if tabs[5].open:
            step_export.exports(screen, record, shown_prompt, run_config)


def candidates(screen: StepScreen, record, shown_prompt: str, run_config: dict) -> None:
    """The round's block as a grid of the drafter's candidates, each selector's round on it, and the
    headroom per position below (built once per shared round and run so far)."""
    ctrl, compact, on_stage = screen.ctrl, screen.compact, screen.on_stage
    plot = style.tree_plot(reserve=note_px(screen) + (16 if compact else 40))
    visible, decoded = len(ctrl.visible), len(ctrl.session.tokens) if ctrl.session is not None else 0

    def build():
        return figures.candidates_figure(ctrl.candidates(record), plot, shown_prompt)

    try:
        style.round_chart(record, ("candidates", plot, shown_prompt, run_config, visible, decoded), build,
                          "step_candidates_chart")
    except ValueError as exc:
        st.info(f"No candidates view: {exc}.")
        return
    if not on_stage:
        st.caption("Look for: where the boxed target's token sits in each column. In the top row, DFlash's argmax "
                   "chain takes it; lower down, only a path selector (DFlash2's walk) or a tree (DDTree, TAPS) can. "
                   "The shares below count, over the run so far, how often it was the drafter's top 1 and how often in "
                   "its top 16: the gap is the headroom a selector can take.")


"""Step through: decode a prompt round by round, or walk one round stage by stage."""

import streamlit as st

from app_pages import common as ui
from app_pages import widgets as app_widgets
from taps.config import MAX_BUDGET, check_value
from taps.record import STAGES
from taps.studio import figures
from taps.studio.app_state import profile_needed, rounds_table
from taps.studio.export import ExportError
from taps.studio.lesson import STAGE_TITLES, prompt_excerpt, run_uses_profile
from taps.studio.speed import machine_load, profile_name
from taps.studio.stepper import StepController

pair = ui.current_pair()
state = st.session_state
ctrl: StepController = state.setdefault("step_controller", StepController())
on_stage = ui.presenter()
own_block = pair.drafter.block_size if pair.drafter is not None else 2
if state.get("step_pair_seen") != pair.name:                 # a new pair drafts its own block size
    state["step_pair_seen"], state["step_block_size"] = pair.name, own_block

request = state.pop("step_request", None)                   # "open in Step through" from Failure cases
if request:
    state["step_prompt"], state["step_example"] = request["prompt"], ui.OWN_PROMPT
    for name, value in request["config"].items():
        key = {"max_new_tokens": "step_max_new"}.get(name, f"step_{name}")
        state[key] = own_block if name == "block_size" and value is None else value

# ---------------------------------------------------------------- prompt and settings
with ui.settings_area():
    if not on_stage:
        st.title("Step through the rounds")
    prompt = ui.prompt_picker("step", 110, "Code and prose examples; or type any prompt on the left.")
    cols = st.columns(6)
    selector = ui.setting("selector", "step_selector", "Selector", cols[0])
    estimator = ui.setting("estimator", "step_estimator", "Estimator (TAPS)", cols[1],
                           extra_help="marginal: DDTree's surrogate · online: calibrated on this run's verdicts · "
                                      "learned: the pair's TAPS scorer.")
    budget = ui.setting("budget", "step_budget", "Budget (nodes)", cols[2])
    temperature = ui.setting("temperature", "step_temperature", "Temperature", cols[3])
    block_size = ui.setting("block_size", "step_block_size", "Block size", cols[4], default=own_block,
                            disabled=pair.drafter is None, extra_help=f"This drafter's own: {own_block}.")
    max_new = ui.setting("max_new_tokens", "step_max_new", "Max new tokens", cols[5], default=64)
    with st.expander("TAPS cost, DDTree and pool settings"):
        more = ui.more_settings("step", ui.MAIN_SETTINGS)

config, problem = ui.build_config(
    pair, selector=selector, estimator=estimator, budget=budget, temperature=temperature, max_new_tokens=max_new,
    block_size=block_size if pair.drafter is not None else None, **more)
profile, _ = ui.machine_profile(pair, config.budget if config else 0)
if problem:
    st.error(f"Cannot run these settings: {problem}. The run on view stays as it was.")
elif config is not None and config.uses_profile and profile is None:
    st.warning(profile_needed(config) + (f" (The saved one covers fewer than {config.budget} nodes: re-measure "
                                         "it.)" if ui.machine_profile(pair)[0] is not None else ""))
model = ui.model_profile(pair)

if request:
    with st.spinner(f"Replaying the run up to round {request['round']}…"):
        try:
            with ctrl.lock:
                ctrl.open_at(pair, prompt, config, profile, request["round"])
        except (ValueError, RuntimeError) as exc:
            st.error(f"Cannot open that case: {exc}")


# ---------------------------------------------------------------- the run: buttons, counters, views
def pick_round(number: int) -> None:
    ctrl.show(number)


def move_stage(delta: int) -> None:
    state["step_stage"] = min(max(state.get("step_stage", 0) + delta, 0), len(STAGES) - 1)


def counters(record, numbers) -> None:
    speed = numbers.speed
    modelled, measured = speed.modelled, speed.measured
    where = ui.short_profile_name()
    cols = st.columns([0.8, 0.9, 0.9, 0.9, 0.9, 1.8, 1.8])
    cols[0].metric("Tokens", numbers.tokens)
    cols[1].metric("τ this round", record.tau)
    cols[2].metric("τ mean", f"{numbers.tau_mean:.2f}")
    cols[3].metric("Verified", record.verified_nodes, help="Draft nodes the target checked this round")
    cols[4].metric("Waste", f"{100 * numbers.waste_share:.0f}%", help="Verified nodes under a rejected prefix, so far")
    cols[5].metric(f"Modelled speed-up ({where})", "—" if modelled is None else f"{modelled['speedup']:.2f}×",
                   help="Deterministic: τ × AR step ÷ round time, read from " + profile_name(model))
    cols[6].metric("Measured speed-up", "—" if measured is None else f"{measured.median:.2f}×",
                   delta=None if measured is None or measured.count < 2 else
                   f"{measured.low:.2f}–{measured.high:.2f}× middle half", delta_color="off", delta_arrow="off",
                   help="Wall clock: per round, τ × the median AR step of this prompt here ÷ the round's time; "
                        "the median over the rounds so far, with their middle half")
    if on_stage:
        return
    lines = []
    if modelled is not None:
        lines.append(f"**Modelled** {modelled['speedup']:.2f}× = τ {modelled['tau']:.2f} × AR step "
                     f"{1000 * modelled['ar_step_s']:.2f} ms ÷ round {1000 * modelled['round_s']:.2f} ms, on the "
                     f"{profile_name(model)}.")
    else:
        lines.append("**Modelled**: no latency profile of this machine yet (measure it in the sidebar, or model "
                     "the speed on a reference profile).")
    if measured is not None:
        lines.append(f"**Measured** {measured.text(2)} (median over {measured.count} rounds, middle half in "
                     f"brackets) against an AR run of this prompt in this process.")
        note = machine_load().note()
        if measured.wide or note:
            lines.append(note or "The rounds' measured speed-ups spread widely: the machine may be busy.")
    elif not ctrl.live:
        lines.append("**Measured**: — for a saved run (its times were measured where it ran).")
    st.caption(" ".join(lines))


@st.fragment
def run_panel() -> None:
    with ctrl.lock:            # another run of this session may still be stepping the controller
        run_panel_locked()


def run_panel_locked() -> None:
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small", key="step_buttons")
    do_step = ui.action_button(row, "Step", key="step_btn_step", type="primary", width="content")
    do_ten = ui.action_button(row, "Run 10", key="step_btn_run10", width="content")
    do_end = ui.action_button(row, "Run to end", key="step_btn_run_end", width="content")
    do_reset = ui.action_button(row, "Reset", key="step_btn_reset", width="content")
    slot = row.empty()
    message = st.empty()
    if do_step or do_ten or do_end or do_reset:
        if problem:
            message.error(f"Cannot run these settings: {problem}")
        else:
            bar = st.progress(0.0, text="Decoding…") if (do_ten or do_end) else None

            def tick(session) -> None:
                if bar is not None:
                    share = len(session.generated) / session.config.max_new_tokens
                    bar.progress(min(share, 1.0), text=f"round {len(session.rounds)} · {len(session.generated)} tokens")

            try:
                if do_reset:
                    ctrl.start(pair, prompt, config, profile)
                    message.success("Reset: a fresh run with the current settings. Press **Step**.")
                else:
                    notice = ctrl.advance(pair, prompt, config, profile, 1 if do_step else 10 if do_ten else None,
                                          on_round=tick)
                    if notice:
                        message.info(notice)
            except (ValueError, RuntimeError) as exc:
                message.error(f"Cannot run: {exc}")
            if bar is not None:
                bar.empty()
    rounds = ctrl.rounds
    if ctrl.saved is not None:
        st.info(f"Viewing a saved run ({len(rounds)} rounds, pair {ctrl.saved.pair_name}). Its timings were "
                "measured where it ran; press **Reset** or **Step** to decode live here.")
    elif ctrl.live and config is not None and not ctrl.matches(pair, prompt, config, profile):
        st.caption("Settings or prompt changed: the next **Step** starts a new run.")
    if not rounds:
        st.info("Press **Step** to run the first round.")
        return
    if len(rounds) > 1:
        # keyed by the view's version: after a step or a pick the slider is a new one at that round
        ctrl.view = slot.slider("Round", min_value=1, max_value=len(rounds), value=min(max(ctrl.view, 1), len(rounds)),
                                key=f"step_round_view_{ctrl.view_version}", width=320,
                                label_visibility="collapsed" if on_stage else "visible")
    record = ctrl.record()
    counters(record, ctrl.numbers(model))
    if not on_stage:
        app_widgets.run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)
    views(record)
    if on_stage:
        app_widgets.run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)


def views(record) -> None:
    tabs = st.tabs(["Draft tree", "Stage by stage", "Marginal vs path", "All rounds", "Export"], key="step_tab",
                   on_change="rerun")
    state.setdefault("step_color_by", "reach")
    state.setdefault("step_pool_shown", 60)
    ui.keep("step_color_by", "step_pool_shown", "step_compare_budget")
    run_config = ctrl.config
    shown_prompt = ctrl.prompt_text
    with tabs[0]:
        if tabs[0].open is not False:
            if not on_stage:
                cols = st.columns([3, 1])
                cols[0].radio("Colour nodes by", list(figures.COLOR_MODES), horizontal=True,
                              format_func=figures.COLOR_MODES.get, key="step_color_by")
                cols[1].number_input("Pool nodes drawn at most", min_value=0, max_value=800, step=20,
                                     key="step_pool_shown")
            figure = figures.round_tree_figure(record, state["step_color_by"], int(state["step_pool_shown"]),
                                               ui.tree_plot(), shown_prompt, run_config)
            ui.chart(figure, "step_tree_chart")
            if not on_stage:
                st.caption("Look for: the thick path is what the target accepted; diamonds are siblings it rejected; "
                           "crosses on dotted edges sat under a rejected prefix and could never be accepted.")
    with tabs[1]:
        if tabs[1].open:
            stage = STAGES[state.get("step_stage", 0)]
            row = st.container(horizontal=True, vertical_alignment="center", gap="small")
            row.button("◀ Previous stage", key="step_stage_prev", on_click=move_stage, args=(-1,),
                       disabled=stage == STAGES[0])
            row.button("Next stage ▶", key="step_stage_next", on_click=move_stage, args=(1,), type="primary",
                       disabled=stage == STAGES[-1])
            row.markdown(" → ".join(f"**{STAGE_TITLES[s]}**" if s == stage else STAGE_TITLES[s] for s in STAGES))
            ui.chart(figures.lesson_figure(record, stage, state["step_color_by"], int(state["step_pool_shown"]),
                                           ui.tree_plot(reserve=64), shown_prompt, run_config), "step_lesson_chart")
            if stage == "select" and ctrl.profile is not None and run_uses_profile(record.selector, run_config):
                ui.chart(figures.size_curve_figure(record, ctrl.profile), "step_size_chart",
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
                ui.chart(figures.ranking_comparison_figure(record, int(compare_at), plot=ui.tree_plot(reserve=72),
                                                           prompt=shown_prompt), "step_compare_chart")
                st.caption("Look for: diamonds (only the marginal product keeps them) sitting under an early "
                           "off-mode choice, and squares (only reach keeps them) along the target's path. Verdicts "
                           "come from hindsight: what the target chose this round.")
    with tabs[3]:
        if tabs[3].open:
            st.dataframe(rounds_table(ctrl.rounds), key="step_rounds_table", hide_index=True)
    with tabs[4]:
        if tabs[4].open:
            exports(record, shown_prompt, run_config)


def exports(record, shown_prompt: str, run_config: dict) -> None:
    stem = f"taps-round{record.number}-{record.selector}-budget{record.budget}"
    tree = figures.round_tree_figure(record, state["step_color_by"], int(state["step_pool_shown"]),
                                     figures.DEFAULT_PLOT, shown_prompt, run_config)
    figure = figures.export_title(tree, shown_prompt, record)
    st.caption(f"Files are named after the round; each figure's title carries the prompt "
               f"(“{prompt_excerpt(shown_prompt)}”), selector, estimator, budget and round.")
    cols = st.columns(5)
    for col, fmt in zip(cols[:2], ("png", "svg")):
        if col.button(f"Make the tree as {fmt.upper()}", key=f"step_make_{fmt}"):
            with st.spinner(f"Rendering the {fmt.upper()} (at most a minute)…"):
                try:
                    render = figures.figure_png if fmt == "png" else figures.figure_svg
                    state[f"step_{fmt}_file"] = (stem, render(figure))
                except ExportError as exc:
                    state.pop(f"step_{fmt}_file", None)
                    st.error(f"No {fmt.upper()}: {exc}")
        made = state.get(f"step_{fmt}_file")
        if made is not None and made[0] == stem:
            col.download_button(f"Download {fmt.upper()}", data=made[1], file_name=f"{stem}.{fmt}",
                                mime="image/png" if fmt == "png" else "image/svg+xml", key=f"step_dl_{fmt}",
                                on_click="ignore")
    cols[2].download_button("Tree as HTML", data=lambda: figures.figure_html(figure), file_name=f"{stem}.html",
                            mime="text/html", key="step_dl_html", on_click="ignore")
    cols[3].download_button("Run as JSON", data=ctrl.run_file(pair.name), file_name="taps-run.json",
                            mime="application/json", key="step_dl_json", on_click="ignore")
    cols[4].download_button("Metrics as CSV", data=ctrl.metrics_file(), file_name="taps-rounds.csv",
                            mime="text/csv", key="step_dl_csv", on_click="ignore")


run_panel()


# ---------------------------------------------------------------- loading a saved run
def load_upload() -> None:
    upload = state.get("step_upload")
    if upload is None:
        return
    try:
        ctrl.load(upload.getvalue())
        state.pop("step_load_error", None)
    except ValueError as exc:
        state["step_load_error"] = f"{upload.name}: {exc}"


if not on_stage:
    with st.expander("Load a saved run (JSON from the Export tab)"):
        st.file_uploader("Run file", type=["json"], key="step_upload", on_change=load_upload)
        if state.get("step_load_error"):
            st.error(state["step_load_error"])

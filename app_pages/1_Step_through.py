"""Step through: decode a prompt round by round, or walk one round stage by stage. The address bar
always holds a link that replays the view (`app_pages.lecture`, `taps.studio.link`); keys, Back /
Forward and autoplay drive it in a lecture."""

from dataclasses import asdict

import streamlit as st

from app_pages import classroom, inputs, lecture, pair_box, profiles
from app_pages import page_style as style
from app_pages import widgets as app_widgets
from taps.chat import chat_prompt_text, has_chat_template
from taps.config import MAX_BUDGET, check_value
from taps.record import STAGES
from taps.studio import export, figures
from taps.studio.app_state import profile_needed, rounds_table
from taps.studio.export import ExportError
from taps.studio.lesson import STAGE_TITLES, prompt_excerpt, run_uses_profile
from taps.studio.link import page_defaults
from taps.studio.speed import MIN_MEASURED_ROUNDS, ar_progress_note, machine_load, measured_shown, profile_name
from taps.studio.stepper import StepController, saved_config

pair = pair_box.current_pair()
state = st.session_state
ctrl: StepController = state.setdefault("step_controller", StepController())
on_stage = style.presenter()
compact = style.compact_page()     # presenter mode or a short window: buttons, counters and tree on one screen
own_block = pair.drafter.block_size if pair.drafter is not None else 2
if state.get("step_pair_seen") != pair.name:                 # a new pair drafts its own block size
    state["step_pair_seen"], state["step_block_size"] = pair.name, own_block
DEFAULTS = page_defaults(max_new_tokens=64, block_size=own_block if pair.drafter is not None else None)
classroom.follow_lecturer()                                        # a student following the lecturer: their link
link = lecture.read_link(pair, DEFAULTS)                    # a link opened, or a challenge card followed

request = state.pop("step_request", None)                   # "open in Step through" from Failure cases
if request:
    state["step_prompt"], state["step_example"] = request["prompt"], inputs.OWN_PROMPT
    state["step_chat"] = bool(request.get("chat", False)) and has_chat_template(pair.tokenizer)
    for name, value in request["config"].items():
        key = {"max_new_tokens": "step_max_new"}.get(name, f"step_{name}")
        state[key] = own_block if name == "block_size" and value is None else value

# ---------------------------------------------------------------- prompt and settings
def chat_box() -> bool:
    """The Chat prompt checkbox under the prompt box; disabled, with a caption saying why, when the
    pair's tokenizer has no chat template. Returns whether the prompt runs chat-formatted."""
    usable = has_chat_template(pair.tokenizer)
    if not usable:
        state["step_chat"] = False
    inputs.keep("step_chat")
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    on = row.checkbox("Chat prompt", key="step_chat", disabled=not usable,
                      help="Run the prompt as the pair's chat template formats it: one user message, the "
                           "assistant's turn opened, thinking disabled. Public DFlash drafters were trained on such "
                           "prompts, and their published acceptance is measured on them.")
    if not usable:
        row.caption(f"Off: {pair.name}'s tokenizer has no chat template; prompts run as typed.")
    return bool(on) and usable


def session_prompt(typed: str, chat: bool) -> tuple[str, str]:
    """The prompt the runs decode, and a problem ("" when none): as typed, or with Chat prompt on as the
    pair's chat template formats it (remembered with the typed text, for the link of a run on view)."""
    if not chat or not typed.strip():
        return typed, ""
    try:
        text = chat_prompt_text(pair.tokenizer, typed, name=pair.name)
    except ValueError as exc:
        return typed, f"the prompt cannot be chat-formatted: {exc}"
    shown = pair.tokenizer.decode(pair.tokenizer.encode(text, add_special_tokens=False))   # ctrl.prompt_text's
    state.setdefault("step_chat_typed", {})[shown] = typed
    return text, ""


# a short window in the default mode: the run (buttons, counters, tree) first, the prompt and settings
# under it; elsewhere the settings first (in presenter mode, in the top bar's popover)
below = compact and not on_stage
# three fixed places: the run always in the middle one, the settings above it or under it. A switch of
# layout (the window's size reported) moves the settings, never the run: the run panel is a fragment,
# and a fragment that moved is a new one, so a Step clicked in the old one just then was lost
above, run_box, under = st.container(), st.container(), st.container()
settings_box = under if below else above
if on_stage:
    settings_box = style.settings_area()
notes = run_box.container()
with settings_box:
    if not compact:
        st.title("Step through the rounds")
    typed = inputs.prompt_picker("step", 110, "Code and prose examples; or type any prompt on the left.")
    chat = chat_box()
    cols = st.columns(6)
    selector = inputs.setting("selector", "step_selector", "Selector", cols[0])
    estimator = inputs.setting("estimator", "step_estimator", "Estimator (TAPS)", cols[1],
                           extra_help="marginal: DDTree's surrogate · online: calibrated on this run's verdicts · "
                                      "learned: the pair's TAPS scorer.")
    budget = inputs.setting("budget", "step_budget", "Budget (nodes)", cols[2])
    temperature = inputs.setting("temperature", "step_temperature", "Temperature", cols[3])
    block_size = inputs.setting("block_size", "step_block_size", "Block size", cols[4], default=own_block,
                            disabled=pair.drafter is None, extra_help=f"This drafter's own: {own_block}.")
    max_new = inputs.setting("max_new_tokens", "step_max_new", "Max new tokens", cols[5], default=64)
    with st.expander("TAPS cost, DDTree and pool settings"):
        more = inputs.more_settings("step", inputs.MAIN_SETTINGS)

config, problem = inputs.build_config(
    pair, selector=selector, estimator=estimator, budget=budget, temperature=temperature, max_new_tokens=max_new,
    block_size=block_size if pair.drafter is not None else None, **more)
prompt, chat_problem = session_prompt(typed, chat)
if chat_problem and not problem:
    config, problem = None, chat_problem
profile, profile_id = lecture.session_profile(pair, config.budget if config else 0)
with notes:
    lecture.link_messages(typed)
    if problem:
        st.error(f"Cannot run these settings: {problem}. The run on view stays as it was.")
    elif config is not None and config.uses_profile and profile is None:
        st.warning(profile_needed(config))
    lecture.profile_notice(pair, profile_id)
model = profiles.model_profile(pair)

replay = request["round"] if request else link.round if link is not None else 0
if replay and config is not None:
    with notes, st.spinner(f"Replaying the run up to round {replay}…"):
        queue = st.empty()
        try:
            with ctrl.lock:
                ctrl.open_at(pair, prompt, config, profile, replay, on_wait=inputs.queue_notice(queue))
            lecture.replay_notice(replay, ctrl.view)
        except (ValueError, RuntimeError) as exc:
            st.error(f"Cannot open that {'case' if request else 'link'}: {exc}")
        queue.empty()


# ---------------------------------------------------------------- the run: buttons, counters, views
def pick_round(number: int) -> None:
    ctrl.show(number)


def move_stage(delta: int) -> None:
    state["step_stage"] = min(max(state.get("step_stage", 0) + delta, 0), len(STAGES) - 1)
    state["step_stage_view"] = ctrl.view


def default_stage() -> int:
    return STAGES.index(state.get("step_default_stage", STAGES[0]))


def stage_for_view() -> int:
    """The stage Stage by stage shows: a new round (one not walked yet) opens at the default stage."""
    if state.get("step_stage_view") != ctrl.view:
        state["step_stage"], state["step_stage_view"] = default_stage(), ctrl.view
    return min(max(int(state.get("step_stage", 0)), 0), len(STAGES) - 1)


def counters(record, numbers) -> str:
    speed = numbers.speed
    modelled, measured = speed.modelled, speed.measured
    where = profiles.short_profile_name()
    shown = ctrl.visible[: ctrl.view]
    verified_run = sum(r.verified_nodes for r in shown)
    waste_round = record.waste_nodes / record.verified_nodes if record.verified_nodes else 0.0
    # widths for the widest value each counter can show ("1024", "16.00", "100%", "10.00×") in the main
    # column beside the sidebar at 1280 px, in the compact layout and in the default one (a window
    # taller than 800 px, or the moment before the browser reports a new size), where the column is
    # narrower; the metric font shrinks to 1.6rem there (BASE_CSS) and the delta chips wrap
    cols = st.columns([0.8, 0.9, 0.95, 1.4, 1.35, 2.0, 1.6])
    cols[0].metric("Tokens", numbers.tokens)
    cols[1].metric("τ this round", record.tau)
    cols[2].metric("τ mean", f"{numbers.tau_mean:.2f}")
    cols[3].metric("Verified this round", record.verified_nodes, delta=f"run {verified_run}", delta_color="off",
                   delta_arrow="off", help="Draft nodes the target checked this round; below, over the run so far")
    cols[4].metric("Waste this round", f"{100 * waste_round:.0f}%", delta=f"run {100 * numbers.waste_share:.0f}%",
                   delta_color="off", delta_arrow="off",
                   help="Verified nodes under a rejected prefix, this round; below, over the run so far")
    # in presenter mode the shorter label keeps the row one line high (the tree gets the rest)
    cols[5].metric(f"Modelled ({where})" if on_stage else f"Modelled speed-up ({where})",
                   "—" if modelled is None else f"{modelled['speedup']:.2f}×",
                   help="Deterministic: τ × AR step ÷ round time, read from " + profile_name(model))
    load = machine_load()
    shown_measured = measured_shown(measured, load if ctrl.live else None)
    cols[6].metric("Measured speed-up", shown_measured.value, delta=shown_measured.note or None, delta_color="off",
                   delta_arrow="off",
                   help=f"Wall clock: per round, τ × the median AR step of this prompt here ÷ the round's time; the "
                        f"median over the rounds so far, with their middle half. Shown after {MIN_MEASURED_ROUNDS} "
                        "rounds, and greyed while the machine is busy")
    lines = []
    if modelled is not None:
        lines.append(f"**Modelled** {modelled['speedup']:.2f}× = τ {modelled['tau']:.2f} × AR step "
                     f"{1000 * modelled['ar_step_s']:.2f} ms ÷ round {1000 * modelled['round_s']:.2f} ms, on the "
                     f"{profile_name(model)}.")
    else:
        lines.append("**Modelled**: no latency profile of this machine yet (measure it in the sidebar, or model "
                     "the speed on a reference profile).")
    if measured is not None:
        lines.append(shown_measured.sentence)
        if shown_measured.shown and measured.wide:
            lines.append("The rounds' measured speed-ups spread widely: the machine may be busy.")
        if shown_measured.shown:
            lines.append(ar_progress_note(speed))
    elif not ctrl.live:
        lines.append("**Measured**: — for a saved run (its times were measured where it ran).")
    return " ".join(lines)


@st.fragment
def run_panel() -> None:
    with ctrl.lock:            # another run of this session may still be stepping the controller
        run_panel_locked()


class Actions:
    """Keys and autoplay ticks waiting to be acted on, filled by the keyboard component's callback
    (a plain list: see `inputs.action_button` on callbacks that touch st.session_state)."""

    def __init__(self) -> None:
        self.waiting: list[str] = []

    def add(self, name: str) -> None:
        self.waiting.append(name)

    def take(self) -> list[str]:
        taken, self.waiting = self.waiting, []
        return taken


def toggle_play() -> None:
    state["step_playing"] = not state.get("step_playing", False)


def on_stage_tab() -> bool:
    return state.get("step_tab") == lecture.STAGE_TAB


def stage_move(delta: int) -> str:
    """↓ / ↑ (and autoplay in Stage by stage): open Stage by stage; the next or previous stage, past
    the last one the next round (at the first stage), before the first the previous round's last."""
    if not on_stage_tab():
        state["step_tab"] = lecture.STAGE_TAB
        stage_for_view()
        return ""
    stage = stage_for_view() + delta
    if 0 <= stage < len(STAGES):
        move_stage(delta)
        return ""
    if delta > 0:
        notice = ctrl.forward(pair, prompt, config, profile, on_wait=waiting()) if config is not None else problem
        state["step_stage"], state["step_stage_view"] = 0, ctrl.view
        return notice
    if ctrl.view > 1:
        ctrl.back()
        state["step_stage"], state["step_stage_view"] = len(STAGES) - 1, ctrl.view
    return ""


def act(name: str) -> str:
    """One key's (or autoplay tick's) move; returns a notice for the page."""
    if name in ("play", "pause"):
        state["step_playing"] = name == "play" and not state.get("step_playing", False)
        return ""
    if name == "tick" and not state.get("step_playing"):
        return ""
    if name in ("stage_next", "stage_prev") or (name == "tick" and on_stage_tab()):
        return stage_move(-1 if name == "stage_prev" else 1)
    if name in ("next", "tick"):
        if config is None:
            return f"Cannot run these settings: {problem}"
        return ctrl.forward(pair, prompt, config, profile, on_wait=waiting())
    {"prev": ctrl.back, "first": ctrl.first, "last": ctrl.last}[name]()
    return ""


def say(message, notice: str) -> None:
    """A move's notice: on a page laid out for one screen, a line in the buttons' row with what the
    next Step does (`run_panel_locked`), the run's end said once; otherwise an info box under them,
    without the end-of-run sentence the caption under it says anyway."""
    if compact:
        state.setdefault("_step_notices", []).append(notice)
    elif shown := without_stop(notice):
        message.info(shown)


def without_stop(notice: str) -> str:
    """A notice less the end-of-run sentence (`stop_text`), which the page says once elsewhere."""
    return notice.replace(ctrl.stop_text(), "").strip() if ctrl.finished else notice


def waiting():
    """What a move that may decode tells the page while its job waits for the decode service (the
    queue slot drawn under the buttons; nothing when there is none)."""
    slot = state.get("_step_queue_slot")
    return inputs.queue_notice(slot) if slot is not None else None


def lecture_row(message, row) -> bool:
    """Back, Forward, Play and (not in presenter mode, where the row must stay one line) the speed
    and Copy link, in the buttons' row; keys and autoplay's clock. Returns whether moves were made."""
    actions = state.setdefault("step_actions", Actions())
    if inputs.action_button(row, "◀ Back", key="step_btn_back", width="content", help="Previous round (←)"):
        actions.add("prev")
    if inputs.action_button(row, "Forward ▶", key="step_btn_forward", width="content",
                        help="Next round (→); past the last round shown, decodes the next one"):
        actions.add("next")
    moved = False
    for name in actions.take():             # the keys' and autoplay's moves (their callbacks ran first)
        try:
            notice = act(name)
        except (ValueError, RuntimeError) as exc:
            notice, state["step_playing"] = f"Cannot run: {exc}", False
        moved = True
        state["step_moves"] = state.get("step_moves", 0) + 1      # tells the keys' component its move was made
        if notice:
            say(message, notice)
    if state.get("step_playing"):
        if ctrl.finished and ctrl.view >= len(ctrl.visible) and (not on_stage_tab() or
                                                                  stage_for_view() == len(STAGES) - 1):
            state["step_playing"] = False
            say(message, "Autoplay stopped at the end of the run.")
        else:
            ctrl.decode_ahead(2)                # the next rounds decode while this one is on show
    playing = bool(state.get("step_playing"))
    row.button("⏸ Pause" if playing else "▶ Play", key="step_play_toggle", on_click=toggle_play,
               help="Autoplay (space): rounds, or in Stage by stage the stages of each round; any click pauses")
    state.setdefault("step_play_speed", 1.0)
    inputs.keep("step_play_speed", "step_default_stage")
    if not compact:
        row.select_slider("Seconds a step", [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], key="step_play_speed", width=150,
                          format_func=lambda v: f"{v:g} s", help="Autoplay's pace: seconds a round (or a stage)")
        with row:
            app_widgets.copy_link("step_copy_link")
    position = f"{state.get('step_moves', 0)}:{ctrl.view}:{state.get('step_stage', 0)}:{state.get('step_tab')}"
    with row:
        reduced = app_widgets.lecture_keys("step_keys", playing, float(state["step_play_speed"]), position,
                                           actions.add)
    if reduced and not compact:
        st.caption("Your browser asks for reduced motion: nothing plays by itself until you press **▶ Play** "
                   "(or space).")
    return moved


NOTE_PX = 46                   # one caption line under the buttons and the gap after it (compact layouts)


def run_panel_locked() -> None:
    state["_step_note_shown"] = False
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small", key="step_buttons")
    do_step = inputs.action_button(row, "Step", key="step_btn_step", type="primary", width="content")
    do_ten = inputs.action_button(row, "Run 10", key="step_btn_run10", width="content")
    do_end = inputs.action_button(row, "Run to end", key="step_btn_run_end", width="content")
    do_reset = inputs.action_button(row, "Reset", key="step_btn_reset", width="content")
    message = st.empty()
    state["_step_queue_slot"] = queue = st.empty()      # "2 steps ahead of yours" while a move waits
    lecture_row(message, row)
    slot = row.empty()
    if do_step or do_ten or do_end or do_reset:
        state["step_playing"] = False
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
                    ctrl.start(pair, prompt, config, profile, on_wait=waiting())
                    message.success("Reset: the run with the current settings from its first round. Press **Step**.")
                else:
                    notice = ctrl.advance(pair, prompt, config, profile, 1 if do_step else 10 if do_ten else None,
                                          on_round=tick, on_wait=waiting())
                    if notice:
                        say(message, notice)
            except (ValueError, RuntimeError) as exc:
                message.error(f"Cannot run: {exc}")
            if bar is not None:
                bar.empty()
    queue.empty()
    rounds = ctrl.visible
    write_link()
    if ctrl.saved is not None:
        st.info(f"Viewing a saved run ({len(rounds)} rounds, pair {ctrl.saved.pair_name}). Its timings were "
                f"measured where it ran. {ctrl.what_next_step_does(pair, prompt, config, profile)}")
    else:
        ahead = ctrl.what_next_step_does(pair, prompt, config, profile) or ctrl.stop_text()
        said = [without_stop(notice) for notice in state.pop("_step_notices", [])]
        text = " ".join(dict.fromkeys(part for part in [*said, ahead] if part))
        if text and compact:         # one line, whose room the tree's figure leaves (NOTE_PX): a box and a line
            message.caption(text)    # below it pushed the tree's axis off a 1280x720 window
            state["_step_note_shown"] = True
        elif ahead:
            st.caption(ahead)
    if not rounds:
        if not problem:                     # beside "Cannot run these settings", "Press Step" would mislead
            st.info("Press **Step** (or →) to run the first round; **?** lists the keys.")
        return
    if len(rounds) > 1:
        # keyed by the view's version: after a step or a pick the slider is a new one at that round
        ctrl.view = slot.slider("Round", min_value=1, max_value=len(rounds), value=min(max(ctrl.view, 1), len(rounds)),
                                key=f"step_round_view_{ctrl.view_version}", width=200 if compact else 320,
                                label_visibility="collapsed" if compact else "visible")
    record = ctrl.record()
    speeds = counters(record, ctrl.numbers(model))
    if not compact:
        st.caption(speeds)
        app_widgets.run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)
    views(record)
    if compact:                             # below the tree: the window is the tree's
        app_widgets.run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)
        if not on_stage:
            st.caption(speeds)
    write_link()
    ctrl.catch_up_later()                   # the AR baseline's remaining steps, once the page is drawn


def write_link() -> None:
    """The address bar: a link that replays the run on view (or, before one, the settings above)."""
    if ctrl.session is not None or ctrl.saved is not None:
        shown = ctrl.prompt_text
        chat_typed = state.get("step_chat_typed", {}).get(shown)      # a chat run's prompt as typed
        lecture.write_link(shown if chat_typed is None else chat_typed, ctrl.config, ctrl.view, DEFAULTS, profile_id,
                           chat=chat_typed is not None)
    else:
        lecture.write_link(typed, asdict(config) if config is not None else {}, 0, DEFAULTS, profile_id, chat=chat)


def remembered(key: str, default) -> None:
    """A widget's value kept apart from the widget, put back into it before it is drawn: a widget a
    run does not draw (its tab closed) loses its state, and must not show another value than the
    one the figure uses when it comes back. While the widget was drawn, its own value (the
    browser's latest) is the one kept."""
    if state.get("step_tree_widgets_drawn") and key in state:
        state[f"{key}__value"] = state[key]
    state[key] = state.setdefault(f"{key}__value", state.get(key, default))


def remember(key: str) -> None:
    state[f"{key}__value"] = state[key]


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


def note_px() -> int:
    """The room a compact page's note line (what the next Step does, the run's end) takes above the figures."""
    return NOTE_PX if compact and state.get("_step_note_shown") else 0


def views(record) -> None:
    tabs = st.tabs(list(lecture.TAB_LABELS), key="step_tab", on_change="rerun")
    remembered("step_color_by", "reach")
    remembered("step_pool_shown", 60)
    remembered(style.LIGHT_TREES, style.light_trees_default())
    inputs.keep("step_compare_budget")
    run_config = ctrl.config
    shown_prompt = ctrl.prompt_text
    state["step_tree_widgets_drawn"] = tabs[0].open is not False and not on_stage
    with tabs[0]:
        if tabs[0].open is not False:
            if not compact:
                tree_options()
            color_by, pool_shown, plot = state["step_color_by"], int(state["step_pool_shown"]), style.tree_plot(
                reserve=note_px())
            style.round_chart(record, ("tree", color_by, pool_shown, plot, shown_prompt, run_config),
                           lambda: figures.round_tree_figure(record, color_by, pool_shown, plot, shown_prompt,
                                                             run_config), "step_tree_chart",
                           light=plot.width if state[style.LIGHT_TREES] else 0)
            if below:                       # under the tree: the window is the tree's
                tree_options()
            if not on_stage:
                st.caption("Look for: the thick path is what the target accepted; diamonds are siblings it rejected; "
                           "crosses on dotted edges sat under a rejected prefix and could never be accepted. A token "
                           "cut short to fit its column ends in “…”: hover its node for the whole token (presenter "
                           "mode's S gives labels more room).")
    with tabs[1]:
        if tabs[1].open:
            stage = STAGES[stage_for_view()]
            row = st.container(horizontal=True, vertical_alignment="center", gap="small")
            row.button("◀ Previous stage", key="step_stage_prev", on_click=move_stage, args=(-1,),
                       disabled=stage == STAGES[0], help="↑")
            row.button("Next stage ▶", key="step_stage_next", on_click=move_stage, args=(1,), type="primary",
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
            plot = style.tree_plot(share=0.72 if curve else 1.0, reserve=64 + note_px())
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
                plot = style.tree_plot(reserve=72 + note_px())
                style.chart(figures.ranking_comparison_figure(record, int(compare_at), plot=plot, prompt=shown_prompt),
                         "step_compare_chart")
                st.caption("Look for: diamonds (only the marginal product keeps them) sitting under an early "
                           "off-mode choice, and squares (only reach keeps them) along the target's path. Verdicts "
                           "come from hindsight: what the target chose this round.")
    with tabs[3]:
        if tabs[3].open:
            candidates(record, shown_prompt, run_config)
    with tabs[4]:
        if tabs[4].open:
            st.dataframe(rounds_table(ctrl.visible), key="step_rounds_table", hide_index=True)
    with tabs[5]:
        if tabs[5].open:
            exports(record, shown_prompt, run_config)


def candidates(record, shown_prompt: str, run_config: dict) -> None:
    """The round's block as a grid of the drafter's candidates, each selector's round on it, and the
    headroom per position below (built once per shared round and run so far)."""
    plot = style.tree_plot(reserve=note_px() + (16 if compact else 40))
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


def exports(record, shown_prompt: str, run_config: dict) -> None:
    stem = f"taps-round{record.number}-{record.selector}-budget{record.budget}"
    tree = figures.round_tree_figure(record, state["step_color_by"], int(state["step_pool_shown"]),
                                     figures.DEFAULT_PLOT, shown_prompt, run_config)
    figure = figures.export_title(tree, shown_prompt, record)
    st.caption(f"Files are named after the round; each figure's title carries the prompt "
               f"(“{prompt_excerpt(shown_prompt)}”), selector, estimator, budget and round.")
    cols = st.columns(5)
    for col, fmt in zip(cols[:2], ("png", "svg")):
        if col.button(f"Make {'a PNG' if fmt == 'png' else 'an SVG'}", key=f"step_make_{fmt}",
                      help=f"Render the tree as {fmt.upper()} (at most a minute)"):
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
    from taps.studio.lecture_file import controller_lecture

    short = profiles.short_profile_name()                 # read here: the file is made on another thread, on click
    load = machine_load() if ctrl.live else None    # the load the counters above judge "measured" by
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.download_button("Lecture as offline HTML",
                        data=lambda: controller_lecture(ctrl, pair.name, model, short, load=load),
                        file_name=f"taps-lecture-{record.selector}-budget{record.budget}-{len(ctrl.visible)}rounds"
                                  ".html", mime="text/html", key="step_dl_lecture", on_click="ignore",
                        help="Every round shown so far, each with its six stages, the counters, the narration and "
                             "the keys and autoplay of this page, in one HTML file that opens in any browser with no "
                             "server and no network (a few MB: plotly.js is inside)")
    row.caption("For a lecture without a server: students open the file from a folder or a course page.")
    slides(record, tree, shown_prompt, run_config, stem)


SLIDES = {  # key: (button, file suffix, mime, what it renders)
    "slide": ("Slide PNG 1920×1080", "slide.png", "image/png",
              lambda record, tree, prompt, config: export.slide_png(figures.export_title(
                  figures.round_tree_figure(record, state["step_color_by"], int(state["step_pool_shown"]),
                                            export.slide_plot(), prompt, config), prompt, record))),
    "stages_gif": ("Stages as GIF", "stages.gif", "image/gif",
                   lambda record, tree, prompt, config: export.stages_gif(record, prompt, config)),
    "rounds_gif": ("First rounds as GIF", "rounds.gif", "image/gif",
                   lambda record, tree, prompt, config: export.rounds_gif(ctrl.rounds, min(len(ctrl.rounds), 10),
                                                                          prompt, config)),
    "stages_mp4": ("Stages as MP4", "stages.mp4", "video/mp4",
                   lambda record, tree, prompt, config: export.stages_mp4(record, prompt, config)),
}


def slides(record, tree, shown_prompt: str, run_config: dict, stem: str) -> None:
    """For slides: the tree at 1920x1080, and animations of this round's six stages and of the run's
    first rounds (one frame each), all through the time-limited export."""
    st.caption("For slides: type sized for 1920×1080; a GIF or MP4 holds one frame per stage (or per round, the "
               "first ten).")
    kinds = [k for k in SLIDES if k != "stages_mp4" or export.mp4_encoder() is not None]
    cols = st.columns(len(kinds))
    for col, kind in zip(cols, kinds):
        label, suffix, mime, make = SLIDES[kind]
        if col.button(label, key=f"step_make_{kind}"):
            with st.spinner(f"Rendering {label.lower()} (at most a few minutes)…"):
                try:
                    state[f"step_{kind}_file"] = (stem, make(record, tree, shown_prompt, run_config))
                except (ExportError, ValueError) as exc:
                    state.pop(f"step_{kind}_file", None)
                    st.error(f"No {label.lower()}: {exc}")
        made = state.get(f"step_{kind}_file")
        if made is not None and made[0] == stem:
            col.download_button(f"Download {suffix.split('.')[-1].upper()}", data=made[1],
                                file_name=f"{stem}-{suffix}", mime=mime, key=f"step_dl_{kind}", on_click="ignore")


with run_box:
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
        return
    saved = ctrl.saved
    settings = saved_config(saved)
    if saved.pair_name != pair.name or settings is None:
        return                       # the page says what the next Step does with it
    # this pair can continue it: its prompt and settings go into the widgets, so Step replays it (a chat
    # run's prompt as the text its template made, which reads back as the same tokens)
    state["step_prompt"], state["step_chat"] = saved.prompt, False
    state["step_example"] = next((e["title"] for e in inputs.examples() if e["prompt"] == saved.prompt),
                                 inputs.OWN_PROMPT)
    for name, value in asdict(settings).items():
        key = lecture.widget_key(name)
        if key in state or name in DEFAULTS:
            state[key] = own_block if name == "block_size" and value is None else value


if not on_stage:
    with st.expander("Load a saved run (JSON from the Export tab)"):
        st.file_uploader("Run file", type=["json"], key="step_upload", on_change=load_upload)
        if state.get("step_load_error"):
            st.error(state["step_load_error"])

"""Step through: decode a prompt round by round, or walk one round stage by stage. The address bar
always holds a link that replays the view (`app_pages.lecture`, `taps.studio.link`); keys, Back /
Forward and autoplay drive it in a lecture."""

from dataclasses import asdict

import streamlit as st

from app_pages import classroom, inputs, lecture, pair_box, profiles, step_settings
from app_pages import page_style as style
from app_pages.browser_window import copy_link
from app_pages.lecture_keys import lecture_keys
from app_pages.run_text import run_text
from app_pages.step_views import StepScreen, draw_counters, views
from taps.chat import has_chat_template
from taps.studio.app_state import profile_needed
from taps.studio.link import page_defaults
from taps.studio.speed import machine_load, profile_name
from taps.studio.step_page import (
    Actions,
    StepMoves,
    counters,
    note_line,
    request_values,
    saved_run_values,
    without_stop,
)
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
classroom.follow_lecturer()                                 # a student following the lecturer: their link
link = lecture.read_link(pair, DEFAULTS)                    # a link opened, or a challenge card followed

request = state.pop("step_request", None)                   # "open in Step through" from Failure cases
if request:
    state.update(request_values(request, own_block, has_chat_template(pair.tokenizer), inputs.OWN_PROMPT))


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
    chat = step_settings.chat_box(pair)
    values = step_settings.decode_settings(pair, own_block)

config, problem = inputs.build_config(pair, **values)
prompt, chat_problem = step_settings.session_prompt(pair, typed, chat)
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
screen = StepScreen(ctrl, pair, model, compact, on_stage, below)


def forward() -> str:
    return ctrl.forward(pair, prompt, config, profile, on_wait=waiting())


moves = StepMoves(state, ctrl, forward if config is not None else None, problem)


def pick_round(number: int) -> None:
    ctrl.show(number)


@st.fragment
def run_panel() -> None:
    with ctrl.lock:            # another run of this session may still be stepping the controller
        run_panel_locked()


def toggle_play() -> None:
    state["step_playing"] = not state.get("step_playing", False)


def say(message, notice: str) -> None:
    """A move's notice: on a page laid out for one screen, a line in the buttons' row with what the
    next Step does (`run_panel_locked`), the run's end said once; otherwise an info box under them,
    without the end-of-run sentence the caption under it says anyway."""
    if compact:
        state.setdefault("_step_notices", []).append(notice)
    elif shown := without_stop(notice, ctrl):
        message.info(shown)


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
            notice = moves.act(name)
        except (ValueError, RuntimeError) as exc:
            notice, state["step_playing"] = f"Cannot run: {exc}", False
        moved = True
        state["step_moves"] = state.get("step_moves", 0) + 1      # tells the keys' component its move was made
        if notice:
            say(message, notice)
    if state.get("step_playing"):
        if moves.autoplay_done():
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
            copy_link("step_copy_link")
    position = f"{state.get('step_moves', 0)}:{ctrl.view}:{state.get('step_stage', 0)}:{state.get('step_tab')}"
    with row:
        reduced = lecture_keys("step_keys", playing, float(state["step_play_speed"]), position,
                                           actions.add)
    if reduced and not compact:
        st.caption("Your browser asks for reduced motion: nothing plays by itself until you press **▶ Play** "
                   "(or space).")
    return moved


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
        text = note_line(state.pop("_step_notices", []), ahead, ctrl)
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
    numbers, where = ctrl.numbers(model), profiles.short_profile_name()
    counted, speeds = counters(record, numbers, ctrl.visible[: ctrl.view], where, profile_name(model), on_stage,
                               ctrl.live, machine_load() if ctrl.live else None)
    draw_counters(counted)
    if not compact:
        st.caption(speeds)
        run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)
    views(screen, record)
    if compact:                             # below the tree: the window is the tree's
        run_text("step_text", ctrl.prompt_text, ctrl.spans(), ctrl.view, pick_round)
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
    # this pair can continue it: its prompt and settings go into the widgets, so Step replays it
    state.update(saved_run_values(saved, settings, inputs.examples(), own_block, inputs.OWN_PROMPT,
                                  lambda name, key: key in state or name in DEFAULTS))


if not on_stage:
    with st.expander("Load a saved run (JSON from the Export tab)"):
        st.file_uploader("Run file", type=["json"], key="step_upload", on_change=load_upload)
        if state.get("step_load_error"):
            st.error(state["step_load_error"])

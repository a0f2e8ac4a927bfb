"""The race's lanes on Race and sweep: decoded once, then replayed on the page's clock (the Race,
Play, Pause, Step, Restart and End buttons, the lanes redrawn as it plays), and the finish table."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from app_pages import inputs, profiles
from app_pages import page_style as style
from app_pages.race_setup import Setup
from taps.studio.figures.charts import lane_tree_figure
from taps.studio.lesson import prompt_excerpt
from taps.studio.race import (
    Replay,
    batch_companions,
    clock_html,
    decode_batch_race,
    decode_race,
    finish_table,
    lane_html,
    lane_title,
    on_clock,
    race_caption,
    race_jobs,
    speed_formula,
)
from taps.studio.serve import decode_service
from taps.studio.speed import profile_name

TICK_S = 0.3


def replay() -> Replay:
    return st.session_state.setdefault("race_replay", Replay())


def current_race(setup: Setup):
    """The decoded lanes on this page's clock (the modelled one priced by the page's profile), and a
    problem ("" when none)."""
    lanes = st.session_state.get("race_lanes")
    if not lanes:
        return None, ""
    try:
        return on_clock(lanes["decoded"], setup.clock, setup.found.model), ""
    except ValueError as exc:
        return None, str(exc)


def decode_lanes(pair, setup: Setup) -> None:
    """Every lane decoded once (a progress bar), then the replay starts."""
    batched = setup.batch > 1
    what = f" in a batch of {setup.batch}" if batched else ""
    bar = st.progress(0.0, text=f"Decoding every lane once{what}: AR first…")
    config, max_new = setup.config, setup.max_new
    count = 1 + len(race_jobs(config, setup.oracle, setup.dflash2)) + batched

    def tick(label: str, tokens: int, done: int) -> None:
        share = (done + min(tokens, max_new) / max_new) / count
        bar.progress(min(share, 1.0), text=f"Decoding {label}: {tokens} of {max_new} tokens ({done} of {count} lanes "
                                           "done)")

    try:
        with decode_service().held(on_wait=inputs.queue_notice(bar)):
            if batched:
                decoded = decode_batch_race(pair, setup.prompt, config,
                                            batch_companions(setup.prompt, inputs.examples(), setup.batch),
                                            profile=setup.found.sizing, oracle=setup.oracle, on_round=tick,
                                            dflash2=setup.dflash2)
            else:
                decoded = decode_race(pair, setup.prompt, config, profile=setup.found.sizing, oracle=setup.oracle,
                                      on_round=tick, dflash2=setup.dflash2)
    except (ValueError, RuntimeError) as exc:
        st.session_state.pop("race_lanes", None)
        st.error(f"Cannot race: {exc}")
        return
    finally:
        bar.empty()
    st.session_state["race_lanes"] = {"decoded": decoded, "key": setup.key}
    replay().start(time.monotonic())
    st.rerun()                   # the controls, drawn before the click was known, now say Pause


def controls(pair, setup: Setup) -> None:
    """Race (decode every lane), Play or Pause, Step, Restart, End, and which clock the replay runs on."""
    race, _ = current_race(setup)
    clock = replay()
    idle = race is None          # nothing decoded yet (or still decoding): nothing to replay, and a click on a
    # replay button while the lanes decode would rerun the page and drop the race
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small", key="race_controls")
    with bar:
        clicked = inputs.action_button(st, "Race", key="lanes_btn", type="primary", disabled=bool(setup.problem),
                                       help="Decode every lane once (a progress bar), then replay them together on the "
                                            "clock")
        if clock.playing:
            st.button("Pause", key="race_pause", on_click=clock.pause, icon=":material/pause:", disabled=idle)
        else:
            st.button("Play", key="race_play", on_click=lambda: clock.play(current_race(setup)[0], time.monotonic()),
                      icon=":material/play_arrow:", disabled=idle)
        st.button("Step", key="race_step", on_click=lambda: clock.step(current_race(setup)[0]),
                  icon=":material/skip_next:", help="Pause and move the clock to the next round's end in any lane",
                  disabled=idle)
        st.button("Restart", key="race_restart", on_click=clock.restart, icon=":material/replay:", disabled=idle)
        st.button("End", key="race_end", on_click=lambda: clock.to_end(current_race(setup)[0]),
                  icon=":material/last_page:", disabled=idle)
        st.caption(clock_caption(setup))
    if clicked and not setup.problem:
        decode_lanes(pair, setup)
    _, clock_problem = current_race(setup)
    if clock_problem:
        st.error(clock_problem)
    lanes = st.session_state.get("race_lanes")
    if race is not None and lanes["key"] != setup.key:
        st.caption("The lanes show the last race; press **Race** to race these settings.")


def clock_caption(setup: Setup) -> str:
    """Which clock the lanes run on: the modelled one names the page's profile (and, when a what-if
    prices it, the profile the trees were sized from)."""
    batch = f" · each round the whole step of a batch of {setup.batch}" if setup.batch > 1 else ""
    if setup.clock != "modelled":
        return f"Clock: **{setup.clock}** · this machine, one decode{batch}"
    found = setup.found
    text = f"Clock: **modelled** · {profiles.profile_label(found.model_id)}"
    if found.what_if:
        text += f" · trees sized from {profiles.profile_label(found.sizing_id)}"
    return text + batch


def lanes_view(setup: Setup) -> None:
    """The lanes at the replay's clock, redrawn every TICK_S seconds while it plays."""
    race, _ = current_race(setup)
    playing = replay().playing and race is not None
    st.fragment(run_every=TICK_S if playing else None)(_draw_lanes)(setup)


def _draw_lanes(setup: Setup) -> None:
    shown, _ = current_race(setup)
    if shown is None:
        return
    clock = replay()
    ended = clock.advance(shown, time.monotonic(), st.session_state.get("race_pace", "normal"))
    st.html(clock_html(shown, clock.t))
    st.progress(min(clock.t / shown.end, 1.0) if shown.end > 0 else 1.0)
    states = shown.lanes_at(clock.t)
    text_px, tree_px = (96, 150) if style.presenter() else (130, 190)
    for column, lane, info in zip(st.columns(len(states)), shown.lanes, states):
        with column:
            st.html(lane_html(info, text_px))
            style.chart(lane_tree_figure(info.last, height=tree_px, title=lane_title(info)), f"lane_tree_{lane.label}",
                        config={"displayModeBar": False})
    if ended:
        st.rerun(scope="app")


def finish(setup: Setup) -> None:
    """Once the replay has ended: the finish table, its speed-up as a formula, the caption written
    from its numbers (naming the profile that priced the modelled clock), and any lane's verdict."""
    race, _ = current_race(setup)
    if not replay().at_end(race):
        return
    rows = race.results()
    decoded = race.decoded
    if decoded.batch > 1:
        others = ", ".join(f"“{prompt_excerpt(p, 24)}”" for p in decoded.companions)
        st.caption(f"**A batch of {decoded.batch} requests**: every lane shows the first, this page's prompt; the "
                   f"others ({others}) were decoded with it, one target forward per round verifying every request's "
                   "tree, so each round here lasts that whole batched step. The speed-up is over AR in the same batch.")
    st.table(pd.DataFrame(finish_table(rows)).astype(str).set_index("method"))
    priced_by = profile_name(setup.found.model) if race.clock == "modelled" else ""
    st.markdown(speed_formula(rows, race.clock, priced_by))
    st.container(key="race_caption").markdown(race_caption(rows, race.clock, priced_by))
    for lane in race.lanes:
        if lane.verdict != "yes" and lane.verdict_detail:
            st.caption(f"{lane.name}: {lane.verdict_detail}")
    st.caption("Legend of the small trees: ■ root · ● accepted (thick path) · ◆ rejected sibling · ✕ waste under a "
               "rejected prefix (dotted) · ★ the target's bonus token.")



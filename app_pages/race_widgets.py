"""Race and sweep's Streamlit pieces: the race's link (read when a new one arrives, written after
every change), the lanes decoded once and replayed on the page's clock, the finish table, the
repeated race's live boards and the image buttons. The logic is `taps.studio.race`'s (no
streamlit); the page (`app_pages/2_Race_and_sweep.py`) only arranges these."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from app_pages import address, inputs, profiles
from app_pages import page_style as style
from taps.config import MAX_BUDGET, DecodeConfig, check_value
from taps.eval.metrics import summarize
from taps.eval.runner import runnable_selectors
from taps.policies import AR
from taps.studio import figures
from taps.studio.app_state import best_table, repeated_table, results_frame, sweep_csv
from taps.studio.export import ExportError
from taps.studio.figures.charts import lane_tree_figure
from taps.studio.lesson import prompt_excerpt
from taps.studio.link import RACE_BATCHES, RaceLink, example_of, fits, parse_race_link, race_link_params, too_long
from taps.studio.page_profile import PageProfile
from taps.studio.race import (
    Replay,
    batch_companions,
    batch_sweep,
    batch_sweep_caption,
    batch_sweep_series,
    clock_html,
    decode_batch_race,
    decode_race,
    finish_table,
    lane_html,
    lane_title,
    on_clock,
    race_caption,
    race_jobs,
    repeated_race,
    speed_formula,
    sweep,
    sweep_caption,
)
from taps.studio.serve import decode_service
from taps.studio.speed import best_budgets, machine_load, profile_name, spread_notes, summarize_repeats

TICK_S = 0.3
WIDGETS = {"budget": "race_budget", "estimator": "race_estimator", "temperature": "race_temperature",
           "clock": "race_clock", "batch": "race_batch"}


# ---------------------------------------------------------------- the race link
def read_link(pair) -> None:
    """A new link's settings, applied to the page's widgets (call before they are drawn), its
    profile to the session's runs; a message per bad parameter (`link_messages`)."""
    params = address.arrived()
    if params is None:
        return
    state = st.session_state
    link, messages = parse_race_link(params, inputs.examples(), pair)
    if {"example", "prompt"} & link.given:
        state["race_prompt"] = link.prompt
        chosen = next((e for e in inputs.examples() if e["id"] == link.example), None)
        state["race_example"] = chosen["title"] if chosen else inputs.OWN_PROMPT
    for name, key in WIDGETS.items():
        if name in link.given:
            state[key] = getattr(link, name)
    if link.profile:
        profiles.use_profile(link.profile if link.profile != profiles.page_profile(pair).default_id else None)
    state["race_link_messages"] = messages


def link_messages() -> None:
    messages = st.session_state.get("race_link_messages") or []
    if messages:
        st.warning("This link had settings the page could not use:\n\n" + "\n".join(f"- {m}" for m in messages))


def write_link(prompt: str, budget, estimator: str, temperature, clock: str, profile_id: str, batch: int = 1) -> None:
    """The address bar: a link that reopens these settings (without a prompt longer than a link carries)."""
    if not fits(prompt):
        st.caption(f"No link holds this prompt: {too_long(prompt)}; the address bar keeps the settings only.")
    link = RaceLink(prompt, example_of(prompt, inputs.examples()), budget, estimator, temperature or 0.0, clock,
                    profile_id or None, style.presenter(), batch=int(batch))
    address.show(race_link_params(link))


# ---------------------------------------------------------------- decode once, then replay
@dataclass
class Setup:
    """What a race on this page runs: the prompt and settings, the page's profiles, the lanes asked for."""

    prompt: str
    config: DecodeConfig | None
    max_new: int
    oracle: bool
    clock: str
    found: PageProfile
    problem: str = ""                # why the settings cannot run ("" when they can)
    dflash2: bool = False            # DFlash2's lane besides (a pair with a path selector)
    batch: int = 1                   # requests decoded together (the others: the example prompts after it)

    @property
    def key(self) -> tuple:
        """What the decoded lanes depend on (not the clock, nor the profile that prices them)."""
        return self.prompt, self.config, self.max_new, self.oracle, self.dflash2, self.found.sizing_id, self.batch


def batch_profile_notice(pair, setup: Setup) -> None:
    """At a batch, when the profile the trees are sized from has no verify cost at a batch (one
    measured from the sidebar, a request at a time): say so, and offer one that has it, the pair's
    shipped reference profile, else the H200 x Qwen3-8B roofline estimate."""
    from taps.batch_cost import of_profile
    from taps.studio.page_profile import batch_offer

    sizing = setup.found.sizing
    if setup.batch <= 1 or sizing is None or of_profile(sizing) is not None:
        return
    offer, label = batch_offer(pair)
    st.warning(f"A race at a batch sizes batch-aware TAPS and prices its steps with the verify cost at a batch, and "
               f"the {profile_name(sizing)} has none (the sidebar measures one request at a time; "
               "`python -m taps.bench --batch 1 --measure` measures this machine's at a batch).")
    st.button(f"Race on {label}", key="race_batch_profile", on_click=profiles.use_profile, args=(offer,))


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


# ---------------------------------------------------------------- the repeated race and the sweep
def live_boards(selectors: list[str], temperature: float, repeats: int):
    """A board per run of the repeated race (AR first), redrawn at most every 0.25 s with its tokens
    and τ: the `on_round` of `taps.studio.race.repeated_race`."""
    shown = [AR.name, *runnable_selectors(selectors, temperature)]
    boards = {name: slot.empty() for name, slot in zip(shown, st.columns(len(shown)))}
    last_draw = {name: 0.0 for name in shown}

    def draw(repeat, job, session, record) -> None:
        now = time.perf_counter()
        if not session.finished and now - last_draw[job.selector] < 0.25:
            return
        last_draw[job.selector] = now
        summary = summarize(session.rounds)
        with boards[job.selector].container():
            st.markdown(f"**{job.label}** · repeat {repeat + 1} of {repeats}" + (" ✓" if session.finished else " …"))
            st.metric("Tokens", summary.new_tokens)
            st.metric("τ", f"{summary.tau:.2f}")
    return draw


def _model_label(setup: Setup) -> str:
    return profiles.short_label(setup.found.model_id) if setup.found.model is not None else "no profile"


def repeated(pair, setup: Setup, selectors: list[str], repeats: int) -> None:
    """The repeated race: its profile named, its button (live boards while it runs), then the
    modelled and measured speed-ups as a chart and a table, with the spread's notes and downloads."""
    state, model = st.session_state, setup.found.model
    st.caption(f"Modelled speed-ups use the {profile_name(model)}. Measured ones are wall clock on this machine, "
               f"repeated {repeats} times." if model is not None else
               "No latency profile for this pair yet: measure this machine's (sidebar) for the modelled speed-ups.")
    if st.button("Race, repeated", key="race_btn", type="primary"):
        load = machine_load()
        try:
            if setup.config is None:
                raise ValueError(setup.problem)
            draw = live_boards(selectors, setup.config.temperature, repeats)
            with st.status(f"Racing: AR first, then each selector; {repeats} repeats…", expanded=False) as status, \
                    decode_service().held(on_wait=inputs.queue_notice(st.empty())):
                runs = repeated_race(pair, setup.prompt, setup.config, selectors, repeats=repeats,
                                     profile=setup.found.sizing, on_round=draw)
                status.update(label="Race finished", state="complete")
            state["race_result"] = {"runs": runs, "load": load, "prompt": setup.prompt}
        except (ValueError, RuntimeError) as exc:
            state.pop("race_result", None)
            st.error(f"Cannot race: {exc}")
    result = state.get("race_result")
    if not result:
        return
    summary = summarize_repeats(result["runs"], model)
    figure = figures.race_figure(summary, _model_label(setup))
    style.chart(figure, "race_chart")
    for note in spread_notes(summary, result["load"]):
        st.warning(note)
    st.caption("Look for: the modelled bars follow from τ and the nodes verified, priced by the profile, and do not "
               "move when the machine is busy; the measured bars are this machine's wall clock, with their range.")
    st.dataframe(repeated_table(summary), key="race_table", hide_index=True)
    cols = st.columns(3)
    cols[0].download_button("Race results as CSV", data=results_frame(summary).to_csv(index=False),
                            file_name="taps-race.csv", mime="text/csv", key="race_dl_csv", on_click="ignore")
    config = setup.config or DecodeConfig()
    with cols[1]:
        image_buttons(figures.export_title(figure, result["prompt"], what=f"Race · estimator {config.estimator} · "
                                                                          f"budget {config.budget}"),
                      f"taps-race-budget{config.budget}", "race")


def keep_result(key: str, what: str, run) -> None:
    """`run()`'s result kept in the session under `key`; when the settings cannot run, the engine's
    message ("Cannot <what>: ...") and no result (not the last one either)."""
    try:
        st.session_state[key] = run()
    except (ValueError, RuntimeError) as exc:
        st.session_state.pop(key, None)
        st.error(f"Cannot {what}: {exc}")


def swept(pair, setup: Setup, selectors: list[str], budgets: list[int], repeats: int) -> None:
    """The sweep: its button (a progress bar), then the modelled and measured curves over budgets,
    the caption from their numbers, acceptance against cost, the best budget per selector, downloads."""
    state, model = st.session_state, setup.found.model
    if st.button("Sweep", key="sweep_btn", type="primary"):
        progress = st.progress(0.0, text="AR first…")

        def tick(done: int, total: int, row: dict) -> None:
            progress.progress(done / total,
                              text=f"{done} of {total} runs · last: {row['label']} budget {row['budget']}")

        load = machine_load()

        def run() -> dict:
            if setup.config is None:
                raise ValueError(setup.problem)
            for value in budgets:
                check_value("budget", value)
            with decode_service().held(on_wait=inputs.queue_notice(progress)):
                runs = sweep(pair, setup.prompt, setup.config, selectors, budgets, setup.config.estimator,
                             repeats=repeats, profile=setup.found.sizing, on_result=tick)
            return {"runs": runs, "load": load, "prompt": setup.prompt}

        keep_result("sweep_result", "sweep", run)
        progress.empty()
    result = state.get("sweep_result")
    if not result:
        return
    summary = summarize_repeats(result["runs"], model)
    best = best_budgets(summary)
    figure = figures.sweep_figure(summary, _model_label(setup), best)
    style.chart(figure, "sweep_chart")
    for note in spread_notes(summary, result["load"]):
        st.warning(note)
    st.markdown(sweep_caption(summary, best))
    st.caption("A measured best budget is starred only where even its slowest repeat beat every other budget's "
               "fastest; the modelled curves, priced by the profile, carry no noise.")
    style.chart(figures.tradeoff_figure(summary), "tradeoff_chart")
    st.caption("Look for: the steeper a curve, the more each verified node buys in accepted tokens.")
    # the table gets the page's whole width: in a column beside the chart, 2.5 of its 5 columns showed at 1280 px
    with st.container():
        st.markdown("**Best budget per selector on this device**")
        st.dataframe(best_table(best), key="sweep_best_table", hide_index=True)
        noisy = [f"{row['selector']}: {', '.join(map(str, row['tied']))}" for row in best if row["tied"]]
        st.caption((f"Within noise (measured): {'; '.join(noisy)}. " if noisy else "")
                   + f"Budgets {', '.join(str(b) for b in sorted(set(budgets)))} (up to {MAX_BUDGET} allowed)"
                   + (f"; modelled on the {profile_name(model)}." if model is not None else "."))
        st.download_button("Sweep as CSV", data=sweep_csv(summary), file_name="taps-sweep.csv", mime="text/csv",
                           key="sweep_dl_csv", on_click="ignore")
        estimator = (setup.config or DecodeConfig()).estimator
        image_buttons(figures.export_title(figure, result["prompt"], what=f"Sweep · estimator {estimator} · budgets "
                                                                           f"{', '.join(map(str, sorted(budgets)))}"),
                      f"taps-sweep-{prompt_excerpt(result['prompt'], 12).replace('/', '_')}", "sweep")


def image_buttons(figure, stem: str, key: str) -> None:
    """Make a PNG of `figure` (the time-limited export), then download it."""
    state = st.session_state
    if st.button("Make PNG", key=f"{key}_make_png"):
        with st.spinner("Rendering the PNG (at most a minute)…"):
            try:
                state[f"{key}_png"] = (stem, figures.figure_png(figure))
            except ExportError as exc:
                state.pop(f"{key}_png", None)
                st.error(f"No PNG: {exc}")
    made = state.get(f"{key}_png")
    if made is not None and made[0] == stem:
        st.download_button("Download PNG", data=made[1], file_name=f"{stem}.png", mime="image/png",
                           key=f"{key}_dl_png", on_click="ignore")


def batch_swept(pair, setup: Setup) -> None:
    """The sweep over requests in a batch: the race's prompt with 0, 1, 3 and 7 of the example prompts
    as batch-mates, every method and both batch plans, priced on the page's modelled clock (and one
    measured decode beside it); the curve, its caption from the numbers, and the table."""
    state, model = st.session_state, setup.found.model
    st.caption("The race's prompt decoded with 1, 2, 4 and 8 requests in a batch (its batch-mates: the example prompts "
               "after it), AR, DFlash, DDTree and TAPS at the race's budget, batch-aware TAPS and a "
               "confidence-scheduled chain (the chain servers run at a batch); the speed-up of the first request "
               "over AR in the same batch. `python -m taps.bench --batch` runs it over a suite.")
    if st.button("Sweep the batch", key="batch_sweep_btn", type="primary", disabled=bool(setup.problem)):
        progress = st.progress(0.0, text="Batch 1 first…")

        def tick(done: int, total: int, text: str) -> None:
            progress.progress(done / total, text=f"{done} of {total} runs · last: {text}")

        def run() -> dict:
            with decode_service().held(on_wait=inputs.queue_notice(progress)):
                rows = batch_sweep(pair, setup.prompt, setup.config, inputs.examples(), RACE_BATCHES,
                                   profile=setup.found.sizing, price=model, on_result=tick)
            return {"rows": rows, "prompt": setup.prompt, "priced": profile_name(model)}

        keep_result("batch_sweep_result", "sweep the batch", run)
        progress.empty()
    result = state.get("batch_sweep_result")
    if not result:
        return
    series, policies, dashed = batch_sweep_series(result["rows"])
    figure = figures.batch_figure(series, policies, title=f"{prompt_excerpt(result['prompt'], 24)}, modelled on the "
                                  f"{result['priced']}", dashed=dashed)
    style.chart(figure, "batch_sweep_chart")
    st.markdown(batch_sweep_caption(result["rows"]))
    st.dataframe(pd.DataFrame(result["rows"]).drop(columns="run"), key="batch_sweep_table", hide_index=True)

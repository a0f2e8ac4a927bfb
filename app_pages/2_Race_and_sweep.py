"""Race and sweep: AR, DFlash, DDTree and TAPS side by side on one clock (decoded once, then
replayed: play, pause, step), the finish table with its decomposition and a caption from the
data; then the repeated race (modelled beside measured, median and range) and the sweep over
budgets. The logic is in `taps.studio.race` and `taps.studio.app_state`."""

import html
import time

import pandas as pd
import streamlit as st

from app_pages import common as ui
from taps.config import MAX_BUDGET, check_value
from taps.eval.metrics import summarize
from taps.policies import AR, ORACLE, names, policy
from taps.studio import figures
from taps.studio.app_state import race as run_race
from taps.studio.app_state import results_frame, sweep_frame
from taps.studio.app_state import sweep as run_sweep
from taps.studio.export import ExportError
from taps.studio.figures.charts import lane_tree_figure
from taps.studio.lesson import prompt_excerpt
from taps.studio.race import (
    CLOCKS,
    DEFAULT_NEW_TOKENS,
    decode_race,
    link_values,
    on_clock,
    race_caption,
    race_link,
    sweep_caption,
)
from taps.studio.serve import decode_service
from taps.studio.speed import MAX_REPEATS, MIN_REPEATS, best_budgets, machine_load, profile_name, spread_notes
from taps.studio.speed import summarize_repeats as summarize_runs

pair = ui.current_pair()
state = st.session_state
on_stage = ui.presenter()
BUDGETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PACES = {"slow": 20.0, "normal": 10.0, "fast": 4.0}          # seconds the whole replay takes
TICK_S = 0.3
LANE_CSS = """
<style>
.race-lane { border-left: 6px solid var(--lane); padding: 0.1rem 0.5rem; }
.race-lane .head { font-weight: 700; font-size: 1.1rem; }
.race-lane .stats { font-size: 0.95rem; line-height: 1.35; }
.race-lane .text { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace;
  font-size: 0.9rem; line-height: 1.35; height: var(--text-h); overflow: hidden; display: flex; overflow-wrap: anywhere;
  flex-direction: column-reverse; border: 1px solid #ccc; border-radius: 4px; padding: 0.2rem 0.35rem;
  background: #fff; color: #111; margin-top: 0.2rem; }
.race-clock { font-size: 1.05rem; }
</style>
"""


# ---------------------------------------------------------------- the race link
def apply_link() -> None:
    """Settings from the URL (once per new link): bad parameters get a message, the page keeps its
    defaults for them."""
    params = st.query_params.to_dict()
    if not params or params == state.get("race_link_seen"):
        return
    state["race_link_seen"] = params
    values, problems = link_values(params, ui.examples())
    if "prompt" in values:
        state["race_prompt"] = values["prompt"]
        chosen = next((e for e in ui.examples() if e["id"] == values.get("example")), None)
        state["race_example"] = chosen["title"] if chosen else ui.OWN_PROMPT
    for name, key in (("budget", "race_budget"), ("estimator", "race_estimator"),
                      ("temperature", "race_temperature"), ("clock", "race_clock")):
        if name in values:
            state[key] = values[name]
    if "profile" in values:
        try:
            ui.use_profile(values["profile"])
        except ValueError as exc:
            problems.append(f"link: {exc}")
    state["race_link_problems"] = problems


apply_link()
if not on_stage:
    st.title("Race and sweep")
for problem_text in state.get("race_link_problems", []):
    st.warning(f"{problem_text} (the page's default is used instead)")

state.setdefault("race_clock", CLOCKS[0])
state.setdefault("race_pace", "normal")
ui.keep("race_clock", "race_pace", "race_oracle")
with ui.settings_area("Race settings"):
    prompt = ui.prompt_picker("race", 90 if on_stage else 100)
    cols = st.columns(6)
    estimator = ui.setting("estimator", "race_estimator", "TAPS estimator", cols[0])
    budget = ui.setting("budget", "race_budget", "Budget", cols[1])
    max_new = ui.setting("max_new_tokens", "race_max_new", "New tokens", cols[2], default=DEFAULT_NEW_TOKENS)
    temperature = ui.setting("temperature", "race_temperature", "Temperature", cols[3])
    clock = cols[4].selectbox("Clock", CLOCKS, key="race_clock",
                              help="modelled: each round lasts what the latency profile says it costs (the same "
                                   "on any machine, every time); measured: the seconds it took here (noisy)")
    pace = cols[5].selectbox("Replay", list(PACES), key="race_pace",
                             help="How long the whole race takes to replay: slow 20 s, normal 10 s, fast 4 s")
    oracle = st.checkbox("Add the oracle's lane (hindsight: it knows the target's tokens; greedy only)",
                         key="race_oracle")
config, problem = ui.build_config(pair, estimator=estimator, budget=budget, max_new_tokens=max_new,
                                  temperature=temperature)
profile, profile_id = ui.run_profile(pair, config.budget if config else 0)
if problem:
    st.error(f"Cannot run these settings: {problem}")
link = race_link(prompt, ui.examples(), budget, estimator, temperature or 0.0, clock, profile_id or "")
if link != st.query_params.to_dict():
    st.query_params.from_dict(link)
    state["race_link_seen"] = link
settings_key = (prompt, budget, estimator, temperature, max_new, bool(oracle), profile_id)


# ---------------------------------------------------------------- decode once, then replay
def decode_lanes() -> None:
    bar = st.progress(0.0, text="Decoding every lane once: AR first…")
    lanes = 4 + (1 if oracle and not temperature else 0)

    def tick(label: str, tokens: int, done: int) -> None:
        share = (done + min(tokens, max_new) / max_new) / lanes
        bar.progress(min(share, 1.0), text=f"Decoding {label}: {tokens} of {max_new} tokens ({done} of {lanes} lanes "
                                           "done)")

    try:
        with decode_service().held(on_wait=ui.queue_notice(bar)):
            decoded = decode_race(pair, prompt, config, profile=profile, oracle=bool(oracle), on_round=tick)
    except (ValueError, RuntimeError) as exc:
        state.pop("race_lanes", None)
        st.error(f"Cannot race: {exc}")
        return
    finally:
        bar.empty()
    state["race_lanes"] = {"decoded": decoded, "profile": profile, "profile_id": profile_id, "key": settings_key}
    state.update(race_t=0.0, race_playing=True, race_last_tick=time.monotonic())
    st.rerun()                   # the controls, drawn before the click was known, now say Pause


def current_race():
    lanes = state.get("race_lanes")
    if not lanes:
        return None, ""
    try:
        return on_clock(lanes["decoded"], clock, lanes["profile"]), ""
    except ValueError as exc:
        return None, str(exc)


def play() -> None:
    race, _ = current_race()
    if race is not None and state.get("race_t", 0.0) >= race.end:
        state["race_t"] = 0.0
    state.update(race_playing=True, race_last_tick=time.monotonic())


def pause() -> None:
    state["race_playing"] = False


def step_event() -> None:
    race, _ = current_race()
    if race is not None:
        state.update(race_playing=False, race_t=race.next_event(state.get("race_t", 0.0)))


def restart() -> None:
    state.update(race_playing=False, race_t=0.0)


def to_end() -> None:
    race, _ = current_race()
    if race is not None:
        state.update(race_playing=False, race_t=race.end)


if not on_stage:
    st.subheader("Race: the methods side by side on one clock")
bar = st.container(horizontal=True, vertical_alignment="center", gap="small", key="race_controls")
with bar:
    race_clicked = ui.action_button(st, "Race", key="lanes_btn", type="primary", disabled=bool(problem),
                   help="Decode every lane once (a progress bar), then replay them together on the clock")
    playing = state.get("race_playing", False)
    if playing:
        st.button("Pause", key="race_pause", on_click=pause, icon=":material/pause:")
    else:
        st.button("Play", key="race_play", on_click=play, icon=":material/play_arrow:")
    st.button("Step", key="race_step", on_click=step_event, icon=":material/skip_next:",
              help="Pause and move the clock to the next round's end in any lane")
    st.button("Restart", key="race_restart", on_click=restart, icon=":material/replay:")
    st.button("End", key="race_end", on_click=to_end, icon=":material/last_page:")
    st.caption(f"Clock: **{clock}**" + (f" · {ui.profile_label(profile_id)}" if clock == "modelled" else
                                         " · this machine, one decode"))
if race_clicked and not problem:
    decode_lanes()

race, clock_problem = current_race()
if clock_problem:
    st.error(clock_problem)
if race is not None and state["race_lanes"]["key"] != settings_key:
    st.caption("The lanes show the last race; press **Race** to race these settings.")


def lane_html(lane, colour: str, text_px: int) -> str:
    waste = f"{lane.waste} ({100 * lane.waste / lane.verified:.0f}%)" if lane.verified else "0"
    where = "done" if lane.finished else f"round {lane.running}"
    return (f'<div class="race-lane" data-lane="{html.escape(lane.label)}" data-tokens="{lane.tokens}" '
            f'style="--lane: {colour}; --text-h: {text_px}px">'
            f'<div class="head">{html.escape(lane.name)} <span style="font-weight:400">· {where}</span></div>'
            f'<div class="stats"><b>{lane.tokens}</b> tokens · τ {lane.tau:.2f}<br>verified {lane.verified} · '
            f'waste {waste}</div><div class="text"><span>{html.escape(lane.text) or "&nbsp;"}</span></div></div>')


@st.fragment(run_every=TICK_S if state.get("race_playing") and race is not None else None)
def lanes_view() -> None:
    shown, _ = current_race()
    if shown is None:
        return
    end = shown.end
    if state.get("race_playing"):
        now = time.monotonic()
        rate = end / PACES.get(state.get("race_pace"), 10.0)
        state["race_t"] = min(end, state.get("race_t", 0.0) + (now - state.get("race_last_tick", now)) * rate)
        state["race_last_tick"] = now
    t = state.get("race_t", 0.0)
    st.html(LANE_CSS + f'<div class="race-clock" data-t="{t!r}" data-end="{end!r}">clock <b>{1000 * t:.2f} ms</b> '
            f'of {1000 * end:.2f} ms · {html.escape(shown.clock)}</div>')
    st.progress(min(t / end, 1.0) if end > 0 else 1.0)
    states = shown.lanes_at(t)
    text_px, tree_px = (96, 150) if on_stage else (130, 190)
    for column, lane, info in zip(st.columns(len(states)), shown.lanes, states):
        with column:
            st.html(lane_html(info, policy(lane.selector).colour, text_px))
            title = f"round {info.last.number}: τ {info.last.tau}, verified {info.last.verified_nodes}" \
                if info.last is not None else "no round finished yet"
            ui.chart(lane_tree_figure(info.last, height=tree_px, title=title), f"lane_tree_{lane.label}",
                     config={"displayModeBar": False})
    if state.get("race_playing") and t >= end:
        state["race_playing"] = False
        st.rerun(scope="app")


lanes_view()
if race is not None and not state.get("race_playing") and state.get("race_t", 0.0) >= race.end:
    rows = race.results()
    digits = {"τ": 2, "speed-up": 2, "t_round (ms)": 3, "t_AR (ms)": 3, "verified / round": 1, "waste %": 1,
              "finish (ms)": 2}
    shown_rows = [{**r, **{name: f"{r[name]:.{n}f}" for name, n in digits.items()}} for r in rows]
    st.table(pd.DataFrame(shown_rows).drop(columns=["run"]).astype(str).set_index("method"))
    ar = next(r for r in rows if policy(r["run"]).baseline)
    st.markdown(f"**speed-up = τ × t_AR / t_round**, with t_AR = {ar['t_AR (ms)']:.3f} ms (AR's mean round on the "
                f"{race.clock} clock) and t_round each method's mean round: the same as AR's finish time over the "
                "method's when both wrote the same tokens.")
    st.container(key="race_caption").markdown(race_caption(rows, race.clock))
    for lane in race.lanes:
        if lane.verdict != "yes" and lane.verdict_detail:
            st.caption(f"{lane.name}: {lane.verdict_detail}")
    st.caption("Legend of the small trees: ■ root · ● accepted (thick path) · ◆ rejected sibling · ✕ waste under a "
               "rejected prefix (dotted) · ★ the target's bonus token.")


def image_buttons(figure, stem: str, key: str) -> None:
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


# ---------------------------------------------------------------- the repeated race
st.subheader("Repeated race: modelled beside measured")
state.setdefault("race_selectors", list(names()))
state.setdefault("race_repeats", MIN_REPEATS)
ui.keep("race_selectors", "race_repeats", "sweep_budgets")
cols = st.columns([3, 1])
selectors = cols[0].multiselect("Selectors (AR always runs first: it is the baseline)", names(),
                                key="race_selectors")
repeats = cols[1].number_input("Repeats", step=1, key="race_repeats",
                               help=f"Every run, AR included, this many times ({MIN_REPEATS} to {MAX_REPEATS}); "
                                    "measured figures are the median with the range")
if temperature and temperature > 0 and ORACLE.name in selectors:
    st.caption("The oracle is defined for greedy decoding only: it sits out at temperature > 0.")
model = ui.model_profile(pair)            # the sidebar's "Model the speed on": what-if hardware for these figures
model_label = "no profile" if model is None else ui.short_profile_name()
st.caption(f"Modelled speed-ups use the {profile_name(model)}. Measured ones are wall clock on this machine, "
           f"repeated {repeats} times." if model is not None else
           "No latency profile for this pair yet: measure this machine's (sidebar) for the modelled speed-ups.")

if st.button("Race, repeated", key="race_btn", type="primary"):
    if problem:
        st.error(f"Cannot race: {problem}")
    else:
        shown = [AR.name] + [s for s in selectors
                             if not policy(s).baseline and not (policy(s).greedy_only and temperature > 0)]
        boards = {name: slot.empty() for name, slot in zip(shown, st.columns(len(shown)))}
        last_draw = {name: 0.0 for name in shown}

        def draw(repeat, job, session, record) -> None:
            now = time.perf_counter()
            if not session.finished and now - last_draw[job.selector] < 0.25:
                return
            last_draw[job.selector] = now
            s = summarize(session.rounds)
            with boards[job.selector].container():
                st.markdown(f"**{job.label}** · repeat {repeat + 1} of {repeats}"
                            + (" ✓" if session.finished else " …"))
                st.metric("Tokens", s.new_tokens)
                st.metric("τ", f"{s.tau:.2f}")

        load = machine_load()
        try:
            with st.status(f"Racing: AR first, then each selector; {repeats} repeats…", expanded=False) as status, \
                    decode_service().held(on_wait=ui.queue_notice(st.empty())):
                runs = run_race(pair, prompt, config, selectors, repeats=int(repeats), profile=profile, on_round=draw)
                status.update(label="Race finished", state="complete")
            state["race_result"] = {"runs": runs, "load": load, "prompt": prompt}
        except (ValueError, RuntimeError) as exc:
            state.pop("race_result", None)
            st.error(f"Cannot race: {exc}")

result = state.get("race_result")
if result:
    summary = summarize_runs(result["runs"], model)
    figure = figures.race_figure(summary, model_label)
    ui.chart(figure, "race_chart")
    for note in spread_notes(summary, result["load"]):
        st.warning(note)
    st.caption("Look for: the modelled bars follow from τ and the nodes verified, priced by the profile, and do not "
               "move when the machine is busy; the measured bars are this machine's wall clock, with their range.")
    table = pd.DataFrame({
        "selector": [r["label"] for r in summary], "τ": [round(r["tau"], 2) for r in summary],
        "verified/round": [round(r["verified_nodes"] / max(r["rounds"], 1), 1) for r in summary],
        "waste %": [round(100 * r["waste_share"], 1) for r in summary],
        "modelled speed-up": [round(r["modelled_speedup"], 2) for r in summary],
        "measured speed-up (range)": [r["speedup"].text(2) for r in summary],
        "tokens/s (range)": [r["tokens_per_s"].text(1, "") for r in summary],
        "same output as AR": [r.get("verdict") or ("yes" if r["lossless"] else "NO") for r in summary],
        "same rounds every repeat": [r["same_rounds"] for r in summary]})
    st.dataframe(table, key="race_table", hide_index=True)
    cols = st.columns(3)
    cols[0].download_button("Race results as CSV", data=results_frame(summary).to_csv(index=False),
                            file_name="taps-race.csv", mime="text/csv", key="race_dl_csv", on_click="ignore")
    with cols[1]:
        image_buttons(figures.export_title(figure, result["prompt"], what=f"Race · estimator {estimator} · budget "
                                                                          f"{budget}"),
                      f"taps-race-budget{budget}", "race")

# ---------------------------------------------------------------- the sweep
st.subheader("Sweep: which budget is best on this device")
state.setdefault("sweep_budgets", [4, 8, 16, 32, 64])
budgets = st.multiselect("Budgets", BUDGETS, key="sweep_budgets")
if st.button("Sweep", key="sweep_btn", type="primary"):
    progress = st.progress(0.0, text="AR first…")

    def tick(done: int, total: int, row: dict) -> None:
        progress.progress(done / total, text=f"{done} of {total} runs · last: {row['label']} budget {row['budget']}")

    load = machine_load()
    try:
        if problem:
            raise ValueError(problem)
        for value in budgets:
            check_value("budget", value)
        with decode_service().held(on_wait=ui.queue_notice(progress)):
            runs = run_sweep(pair, prompt, config, selectors, budgets, estimator, repeats=int(repeats),
                             profile=profile, on_result=tick)
        state["sweep_result"] = {"runs": runs, "load": load, "prompt": prompt}
    except (ValueError, RuntimeError) as exc:
        state.pop("sweep_result", None)
        st.error(f"Cannot sweep: {exc}")
    progress.empty()

result = state.get("sweep_result")
if result:
    summary = summarize_runs(result["runs"], model)
    best = best_budgets(summary)
    figure = figures.sweep_figure(summary, model_label, best)
    ui.chart(figure, "sweep_chart")
    for note in spread_notes(summary, result["load"]):
        st.warning(note)
    st.markdown(sweep_caption(summary, best))
    st.caption("A measured best budget is starred only where even its slowest repeat beat every other budget's "
               "fastest; the modelled curves, priced by the profile, carry no noise.")
    left, right = st.columns([3, 2])
    with left:
        ui.chart(figures.tradeoff_figure(summary), "tradeoff_chart")
        st.caption("Look for: the steeper a curve, the more each verified node buys in accepted tokens.")
    with right:
        st.markdown("**Best budget per selector on this device**")
        shown_best = pd.DataFrame(best).drop(columns=["clear", "tied"]).round({"modelled speed-up": 2})
        st.dataframe(shown_best, key="sweep_best_table", hide_index=True)
        noisy = [f"{row['selector']}: {', '.join(map(str, row['tied']))}" for row in best if row["tied"]]
        st.caption((f"Within noise (measured): {'; '.join(noisy)}. " if noisy else "")
                   + f"Budgets {', '.join(str(b) for b in sorted(set(budgets)))} (up to {MAX_BUDGET} allowed)"
                   + (f"; modelled on the {profile_name(model)}." if model is not None else "."))
        frame = results_frame(summary)
        st.download_button("Sweep as CSV", data=sweep_frame(frame.to_dict("records")).drop(
            columns=["round_counts", "round_shape"], errors="ignore").to_csv(index=False),
            file_name="taps-sweep.csv", mime="text/csv", key="sweep_dl_csv", on_click="ignore")
        image_buttons(figures.export_title(figure, result["prompt"], what=f"Sweep · estimator {estimator} · budgets "
                                                                           f"{', '.join(map(str, sorted(budgets)))}"),
                      f"taps-sweep-{prompt_excerpt(result['prompt'], 12).replace('/', '_')}", "sweep")

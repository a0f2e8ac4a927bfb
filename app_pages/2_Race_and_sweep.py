"""Race and sweep: every selector on one prompt, then against budget; modelled speed-ups beside
measured ones (repeated, median and range)."""

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
from taps.studio.lesson import prompt_excerpt
from taps.studio.speed import MAX_REPEATS, MIN_REPEATS, best_budgets, machine_load, profile_name, spread_notes
from taps.studio.speed import summarize_repeats as summarize_runs

pair = ui.current_pair()
state = st.session_state
BUDGETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]

st.title("Race and sweep")
prompt = ui.prompt_picker("race", 100)
state.setdefault("race_selectors", list(names()))
state.setdefault("race_repeats", MIN_REPEATS)
ui.keep("race_selectors", "race_repeats", "sweep_budgets")
cols = st.columns([3, 1])
selectors = cols[0].multiselect("Selectors (AR always runs first: it is the baseline)", names(),
                                key="race_selectors")
estimator = ui.setting("estimator", "race_estimator", "TAPS estimator", cols[1])
cols = st.columns(4)
budget = ui.setting("budget", "race_budget", "Budget", cols[0])
max_new = ui.setting("max_new_tokens", "race_max_new", "Max new tokens", cols[1], default=64)
temperature = ui.setting("temperature", "race_temperature", "Temperature", cols[2])
repeats = cols[3].number_input("Repeats", step=1, key="race_repeats",
                               help=f"Every run, AR included, this many times ({MIN_REPEATS} to {MAX_REPEATS}); "
                                    "measured figures are the median with the range")
config, problem = ui.build_config(pair, estimator=estimator, budget=budget, max_new_tokens=max_new,
                                  temperature=temperature)
if problem:
    st.error(f"Cannot run these settings: {problem}")
if temperature and temperature > 0 and ORACLE.name in selectors:
    st.caption("The oracle is defined for greedy decoding only: it sits out at temperature > 0.")
profile, _ = ui.machine_profile(pair, config.budget if config else 0)
model = ui.model_profile(pair)
model_label = "no profile" if model is None else ui.short_profile_name() + (
    "" if ui.short_profile_name() == ui.THIS_MACHINE else " (reference)")
st.caption(f"Modelled speed-ups use the {profile_name(model)}. Measured ones are wall clock on this machine, "
           f"repeated {repeats} times." if model is not None else
           "Measure this machine's latency profile (sidebar) for TAPS's cost mode and the modelled speed-ups.")


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


# ---------------------------------------------------------------- the race
st.subheader("Race: the same prompt through every selector")
if st.button("Race", key="race_btn", type="primary"):
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
            with st.status(f"Racing: AR first, then each selector; {repeats} repeats…", expanded=False) as status:
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
        "same output as AR": [r["lossless"] for r in summary],
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
    bar = st.progress(0.0, text="AR first…")

    def tick(done: int, total: int, row: dict) -> None:
        bar.progress(done / total, text=f"{done} of {total} runs · last: {row['label']} budget {row['budget']}")

    load = machine_load()
    try:
        if problem:
            raise ValueError(problem)
        for value in budgets:
            check_value("budget", value)
        runs = run_sweep(pair, prompt, config, selectors, budgets, estimator, repeats=int(repeats), profile=profile,
                         on_result=tick)
        state["sweep_result"] = {"runs": runs, "load": load, "prompt": prompt}
    except (ValueError, RuntimeError) as exc:
        state.pop("sweep_result", None)
        st.error(f"Cannot sweep: {exc}")
    bar.empty()

result = state.get("sweep_result")
if result:
    summary = summarize_runs(result["runs"], model)
    best = best_budgets(summary)
    figure = figures.sweep_figure(summary, model_label, best)
    ui.chart(figure, "sweep_chart")
    for note in spread_notes(summary, result["load"]):
        st.warning(note)
    st.caption("Look for: τ keeps rising with the budget while speed peaks at a middle budget, where verifying more "
               "nodes stops paying for itself. A measured best budget is starred only where even its slowest "
               "repeat beat the runner-up's fastest.")
    left, right = st.columns([3, 2])
    with left:
        ui.chart(figures.tradeoff_figure(summary), "tradeoff_chart")
        st.caption("Look for: the steeper a curve, the more each verified node buys in accepted tokens.")
    with right:
        st.markdown("**Best budget per selector on this device**")
        st.dataframe(pd.DataFrame(best).drop(columns=["clear"]).round({"modelled speed-up": 2}),
                     key="sweep_best_table", hide_index=True)
        st.caption(f"Budgets {', '.join(str(b) for b in sorted(set(budgets)))} up to {MAX_BUDGET}; modelled on the "
                   f"{profile_name(model)}." if model is not None else "")
        frame = results_frame(summary)
        st.download_button("Sweep as CSV", data=sweep_frame(frame.to_dict("records")).drop(
            columns=["round_counts", "round_shape"], errors="ignore").to_csv(index=False),
            file_name="taps-sweep.csv", mime="text/csv", key="sweep_dl_csv", on_click="ignore")
        image_buttons(figures.export_title(figure, result["prompt"], what=f"Sweep · estimator {estimator} · budgets "
                                                                           f"{', '.join(map(str, sorted(budgets)))}"),
                      f"taps-sweep-{prompt_excerpt(result['prompt'], 12).replace('/', '_')}", "sweep")

"""The result panels under the race on Race and sweep: the repeated race (live boards while it runs),
the sweep over budgets and the sweep over requests in a batch, each a button, then charts, tables
and downloads (CSV, PNG)."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from app_pages import inputs, profiles
from app_pages import page_style as style
from app_pages.race_setup import Setup
from taps.config import MAX_BUDGET, DecodeConfig, check_value
from taps.eval.metrics import summarize
from taps.eval.runner import runnable_selectors
from taps.policies import AR
from taps.studio import figures
from taps.studio.app_state import best_table, repeated_table, results_frame, sweep_csv
from taps.studio.export import ExportError
from taps.studio.lesson import prompt_excerpt
from taps.studio.link import RACE_BATCHES
from taps.studio.race import (
    batch_sweep,
    batch_sweep_caption,
    batch_sweep_series,
    repeated_race,
    sweep,
    sweep_caption,
)
from taps.studio.serve import decode_service
from taps.studio.speed import best_budgets, machine_load, profile_name, spread_notes, summarize_repeats


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

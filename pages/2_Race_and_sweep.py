"""Race and sweep: every selector on one prompt, live; then tau and tokens/s against budget."""

import time

import pandas as pd
import streamlit as st

import app_common as ui
from taps import DecodeConfig, viz
from taps.app_state import RACE_SELECTORS, best_budgets, race, sweep, sweep_frame
from taps.estimate import ESTIMATORS
from taps.metrics import summarize

ui.setup_page("Race and sweep", "🏁", ("race_", "sweep_"))
st.title("Race and sweep")
pair = ui.pair_sidebar()
if pair is None:
    st.stop()
state = st.session_state
BUDGETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]

prompt = ui.prompt_picker("race", 110)
cols = st.columns([3, 1, 1, 1, 1])
selectors = cols[0].multiselect("Selectors (AR always runs first: it is the baseline)", RACE_SELECTORS,
                                default=list(RACE_SELECTORS), key="race_selectors")
estimator = cols[1].selectbox("TAPS estimator", ESTIMATORS, index=ESTIMATORS.index("online"), key="race_estimator")
budget = cols[2].number_input("Budget", min_value=1, max_value=1024, value=32, key="race_budget")
max_new = cols[3].number_input("Max new tokens", min_value=1, max_value=4096, value=64, key="race_max_new")
temperature = cols[4].number_input("Temperature", min_value=0.0, max_value=5.0, value=0.0, step=0.1,
                                   key="race_temperature")
config = DecodeConfig(estimator=estimator, budget=int(budget), max_new_tokens=int(max_new),
                      temperature=float(temperature))
if temperature > 0 and "oracle" in selectors:
    st.caption("The oracle is defined for greedy decoding only: it sits out at temperature > 0.")

# ---------------------------------------------------------------- the race
st.subheader("Race: the same prompt through every selector")
if st.button("Race", key="race_btn", type="primary"):
    shown = ["ar"] + [s for s in selectors if s != "ar" and not (s == "oracle" and temperature > 0)]
    slots = dict(zip(shown, st.columns(len(shown))))
    boards = {name: slot.empty() for name, slot in slots.items()}
    last_draw = {name: 0.0 for name in shown}

    def draw(job, session, record) -> None:
        selector = job.selector
        now = time.perf_counter()
        if not session.finished and now - last_draw[selector] < 0.2:
            return
        last_draw[selector] = now
        s = summarize(session.rounds)
        with boards[selector].container():
            st.markdown(f"**{selector}**" + (" ✓" if session.finished else " …"))
            st.metric("Tokens", s.new_tokens)
            st.metric("τ", f"{s.tau:.2f}")
            st.metric("Tokens/s", f"{s.tokens_per_s:.1f}")

    try:
        with st.status("Racing: AR first, then each selector…", expanded=False) as status:
            state["race_rows"] = race(pair, prompt, config, selectors, on_round=draw)
            status.update(label="Race finished", state="complete")
    except (ValueError, RuntimeError) as exc:
        st.error(f"Cannot race: {exc}")

rows = state.get("race_rows")
if rows:
    frame = pd.DataFrame(rows)
    st.plotly_chart(viz.race_figure(rows), key="race_chart", theme=None, config={"displaylogo": False})
    st.caption("Look for: τ rises with tree methods, but tokens/s is what the user feels; the speed-up is "
               "measured against the AR run of this same prompt, in this process.")
    table = pd.DataFrame({"selector": frame["label"], "τ": frame["tau"].round(2),
                          "tokens/s": frame["tokens_per_s"].round(1), "speed-up vs AR": frame["speedup_vs_ar"].round(2),
                          "waste %": (100 * frame["waste_share"]).round(1), "verified nodes": frame["verified_nodes"],
                          "rounds": frame["rounds"], "new tokens": frame["new_tokens"],
                          "same output as AR": frame["lossless"]})
    st.dataframe(table, key="race_table", hide_index=True)
    st.download_button("Race results as CSV", data=frame.drop(columns=["text"]).to_csv(index=False),
                       file_name="taps-race.csv", mime="text/csv", key="race_dl_csv", on_click="ignore")

# ---------------------------------------------------------------- the sweep
st.subheader("Sweep: which budget is best on this device")
budgets = st.multiselect("Budgets", BUDGETS, default=[4, 8, 16, 32, 64], key="sweep_budgets")
if st.button("Sweep", key="sweep_btn", type="primary"):
    bar = st.progress(0.0, text="AR first…")

    def tick(done: int, total: int, row: dict) -> None:
        bar.progress(done / total, text=f"{done} of {total} runs · last: {row['selector']} budget {row['budget']}")

    try:
        state["sweep_rows"] = sweep(pair, prompt, config, selectors, budgets, estimator, on_result=tick)
    except (ValueError, RuntimeError) as exc:
        st.error(f"Cannot sweep: {exc}")
    bar.empty()

rows = state.get("sweep_rows")
if rows:
    sweep_fig, trade_fig = viz.sweep_figure(rows), viz.tradeoff_figure(rows)
    st.plotly_chart(sweep_fig, key="sweep_chart", theme=None, config={"displaylogo": False})
    st.caption("Look for: τ keeps rising with the budget while tokens/s peaks at a middle budget (starred), "
               "where verifying more nodes stops paying for itself.")
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(trade_fig, key="tradeoff_chart", theme=None, config={"displaylogo": False})
        st.caption("Look for: the steeper a curve, the more each verified node buys in accepted tokens.")
    with right:
        st.markdown("**Best budget per selector on this device**")
        st.dataframe(best_budgets(rows), key="sweep_best_table", hide_index=True)
        cols = st.columns(2)
        cols[0].download_button("Sweep as CSV", data=sweep_frame(rows).drop(columns=["token_ids", "text"],
                                                                          errors="ignore").to_csv(index=False),
                                file_name="taps-sweep.csv", mime="text/csv", key="sweep_dl_csv", on_click="ignore")
        cols[1].download_button("Sweep plot as PNG", data=lambda: viz.figure_png(sweep_fig),
                                file_name="taps-sweep.png", mime="image/png", key="sweep_dl_png", on_click="ignore")

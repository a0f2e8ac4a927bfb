"""Step through: decode a prompt round by round and look inside every round."""

import streamlit as st

import app_common as ui
from taps import DecodeConfig, DecodeSession, viz
from taps.app_state import ArBaseline, counters, load_run, metrics_csv, run_json, session_matches
from taps.estimate import ESTIMATORS
from taps.metrics import rounds_frame
from taps.selectors import SELECTORS, TAPS_MODES

ui.setup_page("Step through", "🌳", ("step_",))
st.title("Step through the rounds")
pair = ui.pair_sidebar()
if pair is None:
    st.stop()
state = st.session_state

# ---------------------------------------------------------------- prompt and settings
prompt = ui.prompt_picker("step", 130, "Code and prose examples; or type any prompt on the left.")

max_block = pair.drafter.block_size if pair.drafter is not None else 2
state["step_block_size"] = min(state.get("step_block_size", max_block), max_block)   # a new pair may draft less
cols = st.columns(6)
selector = cols[0].selectbox("Selector", SELECTORS, index=SELECTORS.index("taps"), key="step_selector")
estimator = cols[1].selectbox("Estimator (TAPS)", ESTIMATORS, index=ESTIMATORS.index("online"), key="step_estimator",
                              help="marginal: DDTree's surrogate · online: calibrated on this run's verdicts · "
                                   "learned: the pair's TAPS scorer")
budget = cols[2].number_input("Budget (nodes)", min_value=1, max_value=1024, value=32, key="step_budget")
temperature = cols[3].number_input("Temperature", min_value=0.0, max_value=5.0, value=0.0, step=0.1,
                                   key="step_temperature")
block_size = cols[4].number_input("Block size", min_value=2, max_value=max_block, key="step_block_size",
                                  disabled=pair.drafter is None,
                                  help="Draft positions per round + 1 (at most the drafter's own)")
max_new = cols[5].number_input("Max new tokens", min_value=1, max_value=4096, value=64, key="step_max_new")
with st.expander("TAPS cost and pool settings"):
    cols = st.columns(4)
    taps_mode = cols[0].selectbox("TAPS mode", TAPS_MODES, key="step_taps_mode",
                                  help="cost: tree size from the measured latency profile · reach: the budget's "
                                       "best nodes by reach · utility: the authors' r / (λ_node + λ_depth·depth)")
    lambda_node = cols[1].number_input("λ node", min_value=0.0, value=1.0, step=0.1, key="step_lambda_node")
    lambda_depth = cols[2].number_input("λ depth", min_value=0.0, value=0.002, step=0.001, format="%.3f",
                                        key="step_lambda_depth")
    endpoint_cap = cols[3].number_input("Endpoint cap", min_value=1, value=64, key="step_endpoint_cap")
    cols = st.columns(4)
    top_k = cols[0].number_input("Top-K per depth", min_value=1, value=64, key="step_top_k")
    beam_width = cols[1].number_input("Beam width", min_value=1, value=48, key="step_beam_width")
    pool_cap = cols[2].number_input("Pool cap", min_value=1, value=768, key="step_pool_cap")
    seed = cols[3].number_input("Seed", min_value=0, value=0, key="step_seed")

config = DecodeConfig(selector=selector, estimator=estimator, budget=int(budget), temperature=float(temperature),
                      seed=int(seed), max_new_tokens=int(max_new), taps_mode=taps_mode,
                      block_size=int(block_size) if pair.drafter is not None else None, top_k=int(top_k),
                      beam_width=int(beam_width), pool_cap=int(pool_cap), lambda_node=float(lambda_node),
                      lambda_depth=float(lambda_depth), endpoint_cap=int(endpoint_cap))

cols = st.columns([1, 1, 1, 1, 4])
do_step = cols[0].button("Step", key="step_btn_step", type="primary", width="stretch")
do_ten = cols[1].button("Run 10", key="step_btn_run10", width="stretch")
do_end = cols[2].button("Run to end", key="step_btn_run_end", width="stretch")
do_reset = cols[3].button("Reset", key="step_btn_reset", width="stretch")


# ---------------------------------------------------------------- actions
def start_session() -> bool:
    """A fresh run (and its AR baseline) for the current prompt and settings; False after
    showing why not, with the previous run left as it was."""
    try:
        with st.spinner("Preparing the run (the first TAPS run on this device measures a latency profile)…"):
            session = DecodeSession(pair, prompt, config)
            baseline = ArBaseline(pair, prompt, config)
    except (ValueError, RuntimeError) as exc:
        st.error(f"Cannot start: {exc}")
        return False
    state["step_session"], state["step_baseline"] = session, baseline
    state.pop("step_saved", None)
    return True


def advance(rounds: int | None) -> None:
    session = state["step_session"]
    if session.finished:
        st.info(f"This run has finished ({session.stop_reason}). Press **Reset** to start again.")
        return
    bar = st.progress(0.0, text="Decoding…") if rounds != 1 else None
    done = 0
    try:
        while not session.finished and (rounds is None or done < rounds):
            session.step()
            done += 1
            if bar is not None:
                share = done / rounds if rounds else len(session.generated) / session.config.max_new_tokens
                bar.progress(min(share, 1.0), text=f"round {len(session.rounds)} · {len(session.generated)} tokens")
    except RuntimeError as exc:
        st.error(str(exc))
    if bar is not None:
        bar.empty()
    state["step_round_view"] = len(session.rounds)


if do_reset:
    if start_session():
        state["step_round_view"] = 1
        st.success("Reset: a fresh run with the current settings. Press **Step**.")
if do_step or do_ten or do_end:
    current = state.get("step_session")
    fresh = not session_matches(current, pair, prompt, config) or state.get("step_saved") is not None
    if not fresh or start_session():
        if fresh and current is not None:
            st.info("Settings or prompt changed: started a new run.")
        advance(1 if do_step else 10 if do_ten else None)


# ---------------------------------------------------------------- loading a saved run
def load_upload() -> None:
    upload = state.get("step_upload")
    if upload is None:
        return
    try:
        state["step_saved"] = load_run(upload.getvalue())
        state.pop("step_load_error", None)
        state["step_round_view"] = len(state["step_saved"].rounds)
    except ValueError as exc:
        state["step_load_error"] = f"{upload.name}: {exc}"


saved = state.get("step_saved")
session = state.get("step_session")
if saved is not None:
    rounds, baseline, shown_prompt = saved.rounds, None, saved.prompt
    st.info(f"Viewing a saved run ({len(rounds)} rounds, pair {saved.pair_name}). Its timings were measured where "
            "it ran; press **Reset** or **Step** to decode live here.")
elif session is not None:
    rounds, baseline, shown_prompt = session.rounds, state.get("step_baseline"), session.pair.tokenizer.decode(
        session.prompt_ids)
    if not session_matches(session, pair, prompt, config):
        st.caption("Settings or prompt changed: the next **Step** starts a new run.")
else:
    rounds, baseline, shown_prompt = [], None, ""

# ---------------------------------------------------------------- the view
if not rounds:
    st.info("Press **Step** to run the first round.")
else:
    count = len(rounds)
    if count > 1:
        state["step_round_view"] = min(max(int(state.get("step_round_view", count)), 1), count)
        view = st.slider("Round", min_value=1, max_value=count, key="step_round_view")
    else:
        view = 1
    record = rounds[view - 1]
    with st.spinner("Measuring autoregressive decoding of this prompt for the speed-up…"):
        numbers = counters(rounds[:view], baseline)
    cols = st.columns(7)
    cols[0].metric("Tokens so far", numbers.tokens)
    cols[1].metric("τ this round", record.tau)
    cols[2].metric("τ mean", f"{numbers.tau_mean:.2f}")
    cols[3].metric("Tokens/s", f"{numbers.tokens_per_s:.1f}")
    cols[4].metric("Speed-up vs AR", "—" if numbers.speedup_vs_ar is None else f"{numbers.speedup_vs_ar:.2f}×",
                   help="Tokens/s over an autoregressive run of the same prompt measured in this process, over "
                        "the same number of tokens (— for a saved run)")
    cols[5].metric("Waste", f"{100 * numbers.waste_share:.0f}%", help="Verified nodes under a rejected prefix")
    cols[6].metric("Verified this round", record.verified_nodes)
    st.plotly_chart(viz.stage_share_figure(numbers.stage_shares), key="step_stage_chart", theme=None,
                    config={"displayModeBar": False})
    st.markdown("**Generated text** (each round's tokens on their own tint; the viewed round is boxed)")
    st.html(viz.run_text_html(shown_prompt, rounds, current=record.index))

    tree_tab, compare_tab, table_tab, export_tab = st.tabs(
        ["Draft tree", "Marginal vs path-conditioned", "All rounds", "Export"])
    with tree_tab:
        cols = st.columns([3, 1])
        color_by = cols[0].radio("Colour nodes by", list(viz.COLOR_MODES), index=1, horizontal=True,
                                 format_func=viz.COLOR_MODES.get, key="step_color_by")
        shown = cols[1].slider("Pool nodes drawn", min_value=20, max_value=800, value=100, step=20,
                               key="step_pool_shown")
        tree_figure = viz.round_tree_figure(record, color_by, shown)
        st.plotly_chart(tree_figure, key="step_tree_chart", theme=None, config={"displaylogo": False})
        st.caption("Look for: the thick path is what the target accepted; diamonds are siblings it rejected; "
                   "crosses on dotted edges sat under a rejected prefix and could never be accepted.")
    with compare_tab:
        compare_at = st.number_input("Compare at budget", min_value=1, max_value=1024, value=int(record.budget),
                                     key="step_compare_budget")
        st.plotly_chart(viz.ranking_comparison_figure(record, int(compare_at), shown), key="step_compare_chart",
                        theme=None, config={"displaylogo": False})
        st.caption("Look for: nodes the marginal product keeps under an early off-mode choice (crosses, left) "
                   "that reach drops in favour of the target's path (right). Verdicts come from hindsight: "
                   "what the target chose this round."
                   + ("" if record.selector == "taps" else f" This {record.selector} round has no path-conditioned "
                      "estimate, so its reach is the marginal product and both panels agree."))
    with table_tab:
        st.dataframe(rounds_frame(rounds), key="step_rounds_table", hide_index=True)
    with export_tab:
        stem = f"round{record.index + 1}"
        cols = st.columns(5)
        cols[0].download_button("Tree as PNG", data=lambda: viz.figure_png(tree_figure), file_name=f"{stem}.png",
                                mime="image/png", key="step_dl_png", on_click="ignore")
        cols[1].download_button("Tree as SVG", data=lambda: viz.figure_svg(tree_figure), file_name=f"{stem}.svg",
                                mime="image/svg+xml", key="step_dl_svg", on_click="ignore")
        cols[2].download_button("Tree as HTML", data=lambda: viz.figure_html(tree_figure),
                                file_name=f"{stem}.html", mime="text/html", key="step_dl_html", on_click="ignore")
        if saved is not None:
            run_text = run_json(rounds, prompt=saved.prompt, pair_name=saved.pair_name, config=saved.config,
                                text=saved.text)
        else:
            run_text = run_json(rounds, prompt=shown_prompt, pair_name=pair.name, config=session.config,
                                text=session.text)
        cols[3].download_button("Run as JSON", data=run_text, file_name="taps-run.json", mime="application/json",
                                key="step_dl_json", on_click="ignore")
        cols[4].download_button("Metrics as CSV", data=metrics_csv(rounds), file_name="taps-rounds.csv",
                                mime="text/csv", key="step_dl_csv", on_click="ignore")

with st.expander("Load a saved run (JSON from the Export tab)"):
    st.file_uploader("Run file", type=["json"], key="step_upload", on_change=load_upload)
    if state.get("step_load_error"):
        st.error(state["step_load_error"])

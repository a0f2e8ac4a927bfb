"""Race and sweep: AR, DFlash, DDTree and TAPS side by side on one clock (decoded once, then
replayed: play, pause, step), the finish table with its decomposition and a caption from the
data; then the repeated race (modelled beside measured, median and range) and the sweep over
budgets. Every modelled figure of the page is priced by one profile, named beside it
(`profiles.page_profile`). The logic is in `taps.studio.race`; the page's Streamlit pieces in
`app_pages.race_setup` (the link, the settings), `app_pages.race_lanes` (the race) and
`app_pages.race_sweeps` (the repeated race and the sweeps)."""

import streamlit as st

from app_pages import inputs, pair_box, profiles, race_lanes, race_setup, race_sweeps
from app_pages import page_style as style
from taps.policies import DFLASH2, ORACLE, names, policy
from taps.studio.link import CLOCKS, RACE_BATCHES
from taps.studio.race import DEFAULT_NEW_TOKENS, PACES
from taps.studio.speed import MAX_REPEATS, MIN_REPEATS

pair = pair_box.current_pair()
state = st.session_state
on_stage = style.presenter()
BUDGETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]

race_setup.read_link(pair)
if not on_stage:
    st.title("Race and sweep")
race_setup.link_messages()

state.setdefault("race_clock", CLOCKS[0])
state.setdefault("race_pace", "normal")
state.setdefault("race_batch", RACE_BATCHES[0])
inputs.keep("race_clock", "race_pace", "race_oracle", "race_dflash2", "race_batch")
with style.settings_area("Race settings"):
    prompt = inputs.prompt_picker("race", 90 if on_stage else 100)
    cols = st.columns(6)
    estimator = inputs.setting("estimator", "race_estimator", "TAPS estimator", cols[0])
    budget = inputs.setting("budget", "race_budget", "Budget", cols[1])
    max_new = inputs.setting("max_new_tokens", "race_max_new", "New tokens", cols[2], default=DEFAULT_NEW_TOKENS)
    temperature = inputs.setting("temperature", "race_temperature", "Temperature", cols[3])
    clock = cols[4].selectbox("Clock", CLOCKS, key="race_clock",
                              help="modelled: each round lasts what the latency profile says it costs (the same "
                                   "on any machine, every time); measured: the seconds it took here (noisy)")
    cols[5].selectbox("Replay", list(PACES), key="race_pace",
                      help="How long the whole race takes to replay: slow 20 s, normal 10 s, fast 4 s")
    lanes_row = st.container(horizontal=True, gap="medium", vertical_alignment="center")
    batch = lanes_row.selectbox(
        "Requests in a batch", RACE_BATCHES, key="race_batch", width=170,
        help="Decode the prompt together with other requests (the example prompts after it): one target forward "
             "verifies every request's tree, and each lane's rounds last the whole batched step. Above 1, batch-aware "
             "TAPS gets a lane: one tree width for the whole forward, sized from the verify cost at a batch")
    oracle = lanes_row.checkbox("Add the oracle's lane (hindsight: it knows the target's tokens; greedy only)",
                                key="race_oracle")
    dflash2 = DFLASH2.runs_on(pair) and lanes_row.checkbox(
        "Add DFlash2's lane (a chain walked by its path selector)", key="race_dflash2",
        help="DFlash's drafter with DFlash2's path selector: one chain through the drafter's top 16 candidates "
             "per position, at the same budget")
config, problem = inputs.build_config(pair, estimator=estimator, budget=budget, max_new_tokens=max_new,
                                      temperature=temperature)
found = profiles.page_profile(pair, config.budget if config else 0)
if problem:
    st.error(f"Cannot run these settings: {problem}")
profiles.profile_banner(pair)
race_setup.write_link(prompt, budget, estimator, temperature, clock, found.sizing_id, batch)
setup = race_setup.Setup(prompt, config, max_new, bool(oracle), clock, found, problem, dflash2=bool(dflash2),
                         batch=int(batch))
race_setup.batch_profile_notice(pair, setup)

# ---------------------------------------------------------------- the race: decoded once, then replayed
if not on_stage:
    st.subheader("Race: the methods side by side on one clock")
race_lanes.controls(pair, setup)
race_lanes.lanes_view(setup)
race_lanes.finish(setup)

# ---------------------------------------------------------------- the repeated race
st.subheader("Repeated race: modelled beside measured")
RUNNABLE = [name for name in names() if policy(name).runs_on(pair)]    # DFlash2 needs the pair's path selector
state.setdefault("race_selectors", RUNNABLE)
state.setdefault("race_repeats", MIN_REPEATS)
inputs.keep("race_selectors", "race_repeats", "sweep_budgets")
cols = st.columns([3, 1])
state["race_selectors"] = [name for name in state["race_selectors"] if name in RUNNABLE]
selectors = cols[0].multiselect("Selectors (AR always runs first: it is the baseline)", RUNNABLE,
                                key="race_selectors")
repeats = cols[1].number_input("Repeats", step=1, key="race_repeats",
                               help=f"Every run, AR included, this many times ({MIN_REPEATS} to {MAX_REPEATS}); "
                                    "measured figures are the median with the range")
if temperature and temperature > 0 and ORACLE.name in selectors:
    st.caption("The oracle is defined for greedy decoding only: it sits out at temperature > 0.")
race_sweeps.repeated(pair, setup, selectors, int(repeats))

# ---------------------------------------------------------------- the sweep
st.subheader("Sweep: which budget is best on this device")
state.setdefault("sweep_budgets", [4, 8, 16, 32, 64])
budgets = st.multiselect("Budgets", BUDGETS, key="sweep_budgets")
race_sweeps.swept(pair, setup, selectors, budgets, int(repeats))

# ---------------------------------------------------------------- the sweep over requests in a batch
st.subheader("Batch sweep: when do trees stop paying?")
race_sweeps.batch_swept(pair, setup)

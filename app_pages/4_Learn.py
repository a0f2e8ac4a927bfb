"""Learn: a toy draft tree with no model, to see why reach beats the marginal product."""

import streamlit as st

from app_pages import common as ui
from taps.studio import figures
from taps.studio.toy import (
    PRESETS,
    acceptance_curve,
    build_toy_tree,
    choose,
    descendants,
    parse_marginals,
    ranking_table,
)

st.title("Learn: marginals versus path-conditioned reach")
state = st.session_state
FIRST = next(iter(PRESETS))
ui.keep("learn_preset", "learn_marginals", "learn_factor", "learn_budget", "learn_reject")


def use_preset() -> None:
    preset = PRESETS[state["learn_preset"]]
    state["learn_marginals"] = preset.as_text()
    state["learn_factor"] = preset.off_mode_factor
    state["learn_reject"] = 0


state.setdefault("learn_marginals", PRESETS[FIRST].as_text())
state.setdefault("learn_factor", PRESETS[FIRST].off_mode_factor)

st.markdown(
    "A drafter gives, for each depth, a distribution over a few candidate tokens: its **marginals**. "
    "In this toy the truth is one rule: the marginals are right along the drafter's favourite path, but "
    "once a path has taken a non-favourite token, every deeper token is accepted only "
    "**off-mode factor** × its marginal. **Reach** is the true chance the target accepts a node's whole "
    "path. DDTree verifies the nodes of highest *marginal product*; TAPS those of highest *reach*.")

controls, picture = st.columns([1, 2])
with controls:
    st.selectbox("Preset", list(PRESETS), key="learn_preset", on_change=use_preset)
    st.caption(PRESETS[state["learn_preset"]].description)
    text = st.text_area("Marginals: one line per depth, `token=probability` items", key="learn_marginals",
                        height=210, help="At most 6 depths and 4 candidates per depth, every token of a depth "
                                         "different; a depth's probabilities add up to at most 1 (the rest goes to "
                                         "tokens outside the tree).")
    factor = st.slider("Off-mode factor", min_value=0.0, max_value=1.0, step=0.05, key="learn_factor",
                       help="How much acceptance drops below a non-favourite token (1 = marginals are exact)")
    try:
        marginals, tokens = parse_marginals(text)
        tree = build_toy_tree(marginals, factor, tokens)
        state["learn_last_good"] = (marginals, tokens)
    except ValueError as exc:
        st.error(f"These marginals cannot be a drafter's: {exc}. The figures show the last valid ones.")
        marginals, tokens = state.get("learn_last_good", (PRESETS[FIRST].marginals, PRESETS[FIRST].tokens))
        tree = build_toy_tree(marginals, factor, tokens)
    top = min(tree.size, 60)
    state["learn_budget"] = min(state.get("learn_budget", 8), top)
    budget = st.slider("Budget (nodes verified)", min_value=1, max_value=top, key="learn_budget")
    options = [0] + [v for v in range(1, len(tree.labels)) if tree.depths[v] <= 2]
    if state.get("learn_reject", 0) not in options:
        state["learn_reject"] = 0
    rejected = st.selectbox("Suppose the target rejects", options, key="learn_reject",
                            format_func=lambda v: f"depth {tree.depths[v]}: {tree.path_text(v)}" if v else "(nothing)")

by_marginal, by_reach = choose(tree.path_marginal, budget), choose(tree.reach, budget)
with picture:
    ui.chart(figures.toy_tree_figure(tree, budget, rejected or None), "learn_tree_chart")
    st.caption("Look for: nodes below a non-favourite token keep a high marginal product (left) but a low "
               "reach (right), so TAPS spends those nodes along the favourite path instead.")

cols = st.columns(4)
expected = [1 + tree.reach[chosen[1:]].sum() for chosen in (by_marginal, by_reach)]
cols[0].metric("Expected tokens/round, DDTree", f"{expected[0]:.2f}")
cols[1].metric("Expected tokens/round, TAPS", f"{expected[1]:.2f}", delta=f"{expected[1] - expected[0]:+.2f}")
if rejected:
    below = set(descendants(tree, rejected))
    cols[2].metric("DDTree nodes made unreachable", len(below & set(by_marginal.tolist())))
    cols[3].metric("TAPS nodes made unreachable", len(below & set(by_reach.tolist())))
    st.caption(f"Rejecting '{tree.path_text(rejected)}' makes {len(below)} nodes unreachable: any of them in a "
               "tree is rejected-prefix waste, paid for and never accepted.")
else:
    st.caption("Pick a prefix under *Suppose the target rejects* to see which nodes it makes unreachable.")

left, right = st.columns(2)
with left:
    ui.chart(figures.toy_curve_figure(acceptance_curve(tree, 30), budget), "learn_curve_chart",
             config={"displayModeBar": False})
    st.caption("Look for: the gap between the lines is what path conditioning buys; it closes as the "
               "off-mode factor goes to 1, where the marginals are the truth.")
with right:
    st.markdown("**The two rankings** (sorted by marginal product)")
    st.dataframe(ranking_table(tree, budget).head(25), key="learn_ranking_table", hide_index=True,
                 column_config={"marginal product": st.column_config.NumberColumn(format="%.4f"),
                                "reach": st.column_config.NumberColumn(format="%.4f")})
    st.caption("Look for: rows DDTree picks but TAPS does not; they sit below a non-favourite token.")

"""Home: what speculative decoding, diffusion drafting and TAPS are, the loaded pair, where to go."""

import streamlit as st

from app_pages import page_style as style
from app_pages import pair_box, profiles
from taps.studio import figures
from taps.studio.app_state import pair_facts
from taps.studio.toy import PRESETS, build_toy_tree, choose, descendants

INTRO = """
**Speculative decoding.** A small *drafter* guesses several next tokens; the large *target* model
checks them all in one forward pass and keeps the longest prefix it agrees with, plus one token of
its own (the *bonus*). The output is exactly what the target alone would write: only faster.

**Diffusion drafting.** A block-diffusion drafter (DFlash) proposes every position of a block in
one pass. Its per-position distributions are *marginals*: position 3 does not know which token
was picked at position 2. Taking the top few tokens per position gives a lattice, and any path
through it is a candidate: a **draft tree** the target verifies at once.

**TAPS** (target-aware prefix tree selection). A node can only be accepted if its whole prefix is,
and after an off-mode choice the marginals are too optimistic. So TAPS scores every candidate by
its **path-conditioned reach** (the chance the target accepts the whole path) instead of the
marginal product DDTree uses, and spends the budget where acceptance is likely, not under
prefixes the target will reject (**rejected-prefix waste**).
"""
on_stage = style.presenter()
st.title("TAPS Studio")
if not on_stage:
    st.markdown("#### See and measure tree speculative decoding with diffusion drafters")
pair = pair_box.current_pair(stop=False)

left, right = st.columns([1, 1] if not on_stage else [2, 3])
with left:
    if on_stage:      # the figure gets the screen; the prose is one click away
        st.markdown("A drafter guesses a **tree** of next tokens; the target verifies it in one pass and keeps the "
                    "longest prefix it agrees with. **TAPS** ranks the tree's nodes by the chance the target "
                    "accepts their whole path (*reach*), DDTree by the drafter's *marginal product*.")
        with st.expander("More: speculative decoding, diffusion drafting, TAPS"):
            st.markdown(INTRO)
    else:
        st.markdown(INTRO)
    if pair is not None:
        _, profile_id = profiles.run_profile(pair)
        st.caption(f"**Latency profile** — {profiles.profile_label(profile_id)}: what verifying a tree of each size "
                   "costs; TAPS's cost mode sizes every tree from it, and modelled speed-ups use it as their clock.")
with right:
    preset = PRESETS["Two good openings"]
    toy = build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens)
    rejected, budget = 2, 8
    below = set(descendants(toy, rejected))
    lost = [len(below & set(choose(score, budget).tolist())) for score in (toy.path_marginal, toy.reach)]
    height = style.tree_plot(reserve=-130).height if on_stage else None     # the window less the bar and title
    style.chart(figures.toy_tree_figure(toy, budget=budget, rejected=rejected, height=height), "home_toy_chart",
                config={"displayModeBar": False})
    st.caption(f"A toy tree with a budget of {budget} nodes. Suppose the target rejects '{toy.labels[rejected]}': "
               f"everything below it is waste. DDTree (left) put {lost[0]} nodes there, TAPS (right) {lost[1]}.")
if on_stage:
    st.stop()

st.subheader("The loaded model pair")
if pair is not None:
    facts = pair_facts(pair)
    cols = st.columns(2)
    cols[0].metric("Pair", facts["name"])
    cols[1].metric("Device", facts["device"])
    st.markdown(f"- **Target:** {facts['target']}\n- **Drafter:** {facts['drafter']}\n"
                f"- **TAPS scorer:** {facts['TAPS scorer']}\n- **Vocabulary:** {facts['vocabulary']}; "
                f"**context:** {facts['context']}")
else:
    st.info("No model pair is loaded; the **Learn** page works without one.")

st.subheader("Where to start")
cols = st.columns(4)
for col, (page, label, icon, text) in zip(cols, [
        ("app_pages/1_Step_through.py", "Step through", ":material/account_tree:",
         "One round at a time, stage by stage: the draft tree, what was verified, accepted and wasted."),
        ("app_pages/2_Race_and_sweep.py", "Race and sweep", ":material/sports_score:",
         "AR, DFlash, DDTree, TAPS and the oracle on one prompt: modelled and measured speed-ups."),
        ("app_pages/3_Failure_cases.py", "Failure cases", ":material/search:",
         "Rounds where TAPS lost to DDTree or the oracle, or wasted its budget, explained."),
        ("app_pages/4_Learn.py", "Learn", ":material/school:",
         "A toy tree with no model: edit the marginals, watch the two rankings part ways.")]):
    with col:
        st.page_link(page, label=label, icon=icon)
        st.caption(text)

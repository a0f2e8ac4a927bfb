"""Learn: a toy draft tree with no model, to see why reach beats the marginal product; and the
guided challenges, each a link into the app with its settings.

The page's state is in its URL (`/Learn?preset=..&factor=..&budget=..&reject=..`): a copied link
reopens it, and a bad value gets a message and the page's default (`taps.studio.link`)."""

import streamlit as st

from app_pages import address, inputs, pair_box
from app_pages import page_style as style
from app_pages.browser_window import scroll_to
from taps.studio import figures
from taps.studio.challenges import CARDS, card_answers
from taps.studio.link import is_learn_link, learn_link_params, parse_learn_link
from taps.studio.toy import (
    PRESETS,
    LearnState,
    acceptance_curve,
    budget_limit,
    build_toy_tree,
    choose,
    descendants,
    node_by_path,
    parse_marginals,
    ranking_table,
    reject_options,
)

state = st.session_state
FIRST = next(iter(PRESETS))
LEARN_CHROME_PX = 265        # presenter mode: the top bar, the knobs and numbers row and the tabs above the tree
THIS_PAGE = "app_pages/4_Learn.py"
PAGE_NAMES = {"Step_through": "Step through", "Race_and_sweep": "Race and sweep", "Learn": "Learn"}
inputs.keep("learn_preset", "learn_marginals", "learn_factor", "learn_budget", "learn_reject")
on_stage = style.presenter()


def use_preset() -> None:
    preset = PRESETS[state["learn_preset"]]
    state["learn_marginals"] = preset.as_text()
    state["learn_factor"] = preset.off_mode_factor
    state["learn_reject"] = 0


def apply_link() -> None:
    """The page's settings from a new link (a link opened, a card followed): a message for each bad
    parameter (`taps.studio.link`)."""
    params = address.arrived()
    if params is None or not is_learn_link(params):
        return
    link, messages = parse_learn_link(params)
    preset = PRESETS[link.preset]
    state["learn_preset"], state["learn_marginals"] = link.preset, preset.as_text()
    state["learn_factor"], state["learn_budget"] = link.factor, link.budget
    state["learn_reject"] = node_by_path(link.tree(), link.reject) or 0 if link.reject else 0
    state["learn_link_messages"] = (learn_link_params(link), messages)


def write_link(tree) -> None:
    """The URL says what the page shows (the preset, not marginals edited by hand)."""
    rejected = state.get("learn_reject", 0)
    link = LearnState(state["learn_preset"], float(state["learn_factor"]), int(state["learn_budget"]),
                      tree.path_text(rejected) if rejected else "")
    params = learn_link_params(link)
    address.show(learn_link_params(link, presenter=on_stage))
    link_params, messages = state.get("learn_link_messages", ({}, []))
    if messages and link_params == params:
        for message in messages:
            notices.warning(message)


apply_link()
state.setdefault("learn_marginals", PRESETS[FIRST].as_text())
state.setdefault("learn_factor", PRESETS[FIRST].off_mode_factor)
INTRO = ("A drafter gives, for each depth, a distribution over a few candidate tokens: its **marginals**. "
         "In this toy the truth is one rule: the marginals are right along the drafter's favourite path, but "
         "once a path has taken a non-favourite token, every deeper token is accepted only "
         "**off-mode factor** × its marginal. **Reach** is the true chance the target accepts a node's whole "
         "path. DDTree verifies the nodes of highest *marginal product*; TAPS those of highest *reach*.")
if not on_stage:                   # presenter mode: the top bar names the page; the intro is the knobs' help
    st.title("Learn: marginals versus path-conditioned reach")
    st.markdown(INTRO)
notices = st.container()           # a link's messages, shown while the page still shows what the link opened


def preset_and_marginals() -> tuple:
    """The preset menu and the marginals box; the tree's marginals and tokens (the last valid ones
    after a bad edit, with a message)."""
    st.selectbox("Preset", list(PRESETS), key="learn_preset", on_change=use_preset)
    st.caption(PRESETS[state["learn_preset"]].description)
    text = st.text_area("Marginals: one line per depth, `token=probability` items", key="learn_marginals",
                        height=150 if on_stage else 210,
                        help="At most 6 depths and 4 candidates per depth, every token of a depth different; a "
                             "depth's probabilities add up to at most 1 (the rest goes to tokens outside the tree).")
    if text != PRESETS[state["learn_preset"]].as_text():
        st.caption("Edited by hand: the page's link names the preset, not these marginals.")
    try:
        marginals, tokens = parse_marginals(text)
        state["learn_last_good"] = (marginals, tokens)
    except ValueError as exc:
        st.error(f"These marginals cannot be a drafter's: {exc}. The figures show the last valid ones.")
        marginals, tokens = state.get("learn_last_good", (PRESETS[FIRST].marginals, PRESETS[FIRST].tokens))
    return marginals, tokens


def knobs(where) -> tuple:
    """Off-mode factor, budget and the rejected prefix, in `where` (three places or one)."""
    factor = where[0].slider("Off-mode factor", min_value=0.0, max_value=1.0, step=0.05, key="learn_factor",
                             help="How much acceptance drops below a non-favourite token (1 = marginals are exact)"
                                  + (f". {INTRO}" if on_stage else ""))
    tree = build_toy_tree(marginals, factor, tokens)
    top = budget_limit(tree)
    state["learn_budget"] = min(state.get("learn_budget", 8), top)
    budget = where[1].slider("Budget (nodes verified)", min_value=1, max_value=top, key="learn_budget")
    options = reject_options(tree)
    if state.get("learn_reject", 0) not in options:
        state["learn_reject"] = 0
    rejected = where[2].selectbox("Suppose the target rejects", options, key="learn_reject",
                                  format_func=lambda v: f"depth {tree.depths[v]}: {tree.path_text(v)}" if v else
                                  "(nothing)")
    return tree, budget, rejected


if on_stage:
    with style.settings_area("Preset and marginals"):
        marginals, tokens = preset_and_marginals()
    row = st.columns([1, 1, 1, 1.3])
    tree, budget, rejected = knobs(row)
    picture = st.container()
else:
    controls, picture = st.columns([1, 2])
    with controls:
        marginals, tokens = preset_and_marginals()
        tree, budget, rejected = knobs([st, st, st])
write_link(tree)
with st.sidebar:                # out of the page's flow: even an empty element there takes a gap's height
    scroll_to("learn_scroll_to", '[data-testid="stMainBlockContainer"]',
                          st.session_state.get("learn_scroll", 0))     # back up to the tree after a card (open_card)

by_marginal, by_reach = choose(tree.path_marginal, budget), choose(tree.reach, budget)
expected = [1 + tree.reach[chosen[1:]].sum() for chosen in (by_marginal, by_reach)]
below = set(descendants(tree, rejected)) if rejected else set()
lost = [len(below & set(chosen.tolist())) for chosen in (by_marginal, by_reach)]
tree_caption = ("Look for: nodes below a non-favourite token keep a high marginal product (left) but a low reach "
                "(right), so TAPS spends those nodes along the favourite path instead.")


def tree_chart() -> None:
    fig = figures.toy_tree_figure(tree, budget, rejected or None)
    if on_stage:                                         # the whole page fits the window: the tree takes what is left
        plot = style.tree_plot(reserve=LEARN_CHROME_PX - style.PRESENTER_CHROME_PX)
        fig.update_layout(height=plot.height, title_text="", margin=dict(t=62, b=112))
    style.chart(fig, "learn_tree_chart")


def curve_chart() -> None:
    fig = figures.toy_curve_figure(acceptance_curve(tree, 30), budget)
    if on_stage:
        fig.update_layout(height=style.tree_plot(reserve=LEARN_CHROME_PX - style.PRESENTER_CHROME_PX).height)
    style.chart(fig, "learn_curve_chart", config={"displayModeBar": False})
    st.caption("Look for: the gap between the lines is what path conditioning buys; it closes as the "
               "off-mode factor goes to 1, where the marginals are the truth.")


def rankings() -> None:
    st.markdown("**The two rankings** (sorted by marginal product)")
    st.dataframe(ranking_table(tree, budget).head(25), key="learn_ranking_table", hide_index=True,
                 height=320 if on_stage else "auto",
                 column_config={"path": st.column_config.TextColumn(width=120),
                                "DDTree picks": st.column_config.CheckboxColumn(width=102),
                                "TAPS picks": st.column_config.CheckboxColumn(width=90),
                                "marginal product": st.column_config.NumberColumn(format="%.4f"),
                                "reach": st.column_config.NumberColumn(format="%.4f")})
    st.caption("Look for: rows DDTree picks but TAPS does not; they sit below a non-favourite token.")


def open_card(params: dict) -> None:
    """A card for this page: its settings, and the page scrolled back up to the toy tree they change
    (the cards sit some 2,500 px below it)."""
    address.follow(params)
    st.session_state["learn_scroll"] = st.session_state.get("learn_scroll", 0) + 1
    st.session_state["learn_card_followed"] = True      # the cards are a fragment: the whole page reruns (_cards)


def card_answer(item, pair, verdict) -> None:
    """The card's answer as the engine gives it on this machine (worked out once per pair, in the
    background: `taps.studio.challenges.CardAnswers`), or a line while it is being worked out."""
    if item.page != "Learn" and pair is None:
        st.markdown("The answer is worked out on the loaded model pair: load one in the sidebar.")
        return
    if verdict is None:
        st.markdown(":material/hourglass_top: Working this answer out on this machine (the engine runs the "
                    "card's settings once, in the background: a few seconds, up to half a minute for a card that "
                    "searches for its round)…")
    elif verdict.answer:
        st.markdown(verdict.answer)
        if not verdict.ok:
            st.caption("On this pair and machine the engine does not bear the card's claim out: "
                       "float kernels differ between CPUs, and a near-tie here fell the other way.")
    else:
        st.markdown("This card cannot be worked out on the loaded pair: " + " ".join(verdict.problems))


def challenge_cards() -> None:
    """The cards; while the engine works their answers out, they redraw every two seconds on their
    own (a fragment), and the page reruns once when the last answer is in."""
    pair = pair_box.loaded_pair()
    waiting = pair is not None and card_answers().pending(pair) > 0
    st.fragment(_cards, run_every=2.0 if waiting else None)(pair, waiting)


def _cards(pair, waiting: bool) -> None:
    if st.session_state.pop("learn_card_followed", False) or (waiting and card_answers().pending(pair) == 0):
        st.rerun()            # a card followed (its settings are the page's), or every answer in: the whole page
    st.markdown("**Guided challenges**: each opens the app with its settings; try it before you peek.")
    for start in range(0, len(CARDS), 2):
        for col, item in zip(st.columns(2), CARDS[start:start + 2]):
            verdict = None if pair is None and item.page != "Learn" else card_answers().get(item, pair)
            params = verdict.params if verdict is not None and verdict.ok else item.params   # where it holds here
            with col.container(border=True):
                st.markdown(f"**{item.title}**")
                st.markdown(item.task)
                with st.container(horizontal=True, gap="small", vertical_alignment="center"):
                    with st.popover("Hint"):
                        st.markdown(item.hint)
                    with st.popover("Answer"):
                        card_answer(item, pair, verdict)
                    label = f"Open in {PAGE_NAMES[item.page]}"
                    if item.page_file == THIS_PAGE:         # a link to the page one is on does not navigate
                        st.button(label, key=f"learn_card_{item.key}", icon=":material/open_in_new:",
                                  on_click=open_card, args=(params,))
                    else:
                        st.page_link(item.page_file, label=label, icon=":material/open_in_new:",
                                     query_params=params)


if on_stage:
    delta = expected[1] - expected[0]
    numbers = f"Expected tokens/round: **DDTree {expected[0]:.2f}**, **TAPS {expected[1]:.2f}** ({delta:+.2f})"
    if rejected:
        numbers += f"  \nRejecting '{tree.path_text(rejected)}' strands DDTree {lost[0]}, TAPS {lost[1]} nodes"
    row[3].markdown(numbers)
    tabs = st.tabs(["Toy tree", "Expected tokens", "Rankings", "Challenges"])
    with tabs[0]:
        tree_chart()
    with tabs[1]:
        curve_chart()
    with tabs[2]:
        rankings()
    with tabs[3]:
        challenge_cards()
else:
    with picture:
        tree_chart()
        st.caption(tree_caption)
    cols = st.columns(4)
    cols[0].metric("Expected tokens/round, DDTree", f"{expected[0]:.2f}")
    cols[1].metric("Expected tokens/round, TAPS", f"{expected[1]:.2f}", delta=f"{expected[1] - expected[0]:+.2f}")
    if rejected:
        cols[2].metric("DDTree nodes made unreachable", lost[0])
        cols[3].metric("TAPS nodes made unreachable", lost[1])
        st.caption(f"Rejecting '{tree.path_text(rejected)}' makes {len(below)} nodes unreachable: any of them in a "
                   "tree is rejected-prefix waste, paid for and never accepted.")
    else:
        st.caption("Pick a prefix under *Suppose the target rejects* to see which nodes it makes unreachable.")
    left, right = st.columns(2)
    with left:
        curve_chart()
    with right:
        rankings()
    challenge_cards()

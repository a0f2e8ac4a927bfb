"""The inputs a page draws: buttons whose action runs once per click, the decode settings as
widgets built from `taps.config` (kept across pages), the prompt picker, and the line that says how
many decode jobs are ahead of this page's."""

from __future__ import annotations

from dataclasses import fields

import streamlit as st

from taps import ModelPair
from taps.config import DecodeConfig, check_value, field_spec
from taps.eval.prompts import LOOK_FOR_WHERE
from taps.flags import range_text

OWN_PROMPT = "(type your own)"
KEPT = "_kept_settings"          # the keys of every setting drawn so far in this browser session


# ---------------------------------------------------------------------------- buttons that act once
class Clicks:
    """A button's clicks, counted by its callback, and how many of them its page has acted on."""

    def __init__(self) -> None:
        self.count = self.handled = 0

    def click(self) -> None:
        # Plain Python, no Streamlit call: any access to st.session_state in a callback is a point
        # where Streamlit stops the callback if another rerun request is pending (the viewport
        # widget's, say), and the click would be lost with it.
        self.count += 1

    def take(self) -> bool:
        """True once for each batch of clicks not acted on yet."""
        if self.handled >= self.count:
            return False
        self.handled = self.count
        return True


def action_button(where, label: str, key: str, **kwargs) -> bool:
    """A button whose action the caller runs exactly once per click. Streamlit calls a button's
    callback once per click, but whether the run's body then sees the button pressed depends on
    what else happens: a rerun request that arrives while the run that handled a click is still
    drawing (the viewport widget reporting a new size, say) makes Streamlit start over with the
    button still pressed (acting again would decode a second round), and a run stopped after its
    callbacks leaves the next one without the press (acting on the press alone would lose the
    click). So the callback counts clicks, in a plain object (a callback that touches
    st.session_state can be stopped there by a pending rerun request, and the click lost with
    it), and this returns True while a counted click is not acted on yet, whatever the button
    returns. (A whole-page rerun request that reaches Streamlit just after a click's can still
    drop the click before any callback runs: the viewport widget, the one thing that asked for
    such reruns unprompted, reruns a fragment instead; `browser_window.viewport`.)
    (Overlapping runs are the other way to lose or double a click: `.streamlit/config.toml` turns
    fast reruns off, and the Step page holds its controller's lock while it steps or draws.)"""
    clicks = st.session_state.setdefault(f"{key}__clicks", Clicks())
    where.button(label, key=key, on_click=clicks.click, **kwargs)
    return clicks.take()


def queue_notice(slot):
    """`on_wait` for a move that waits for the decode service (`taps.studio.serve`): says in `slot`
    how many jobs are ahead of this page's while it waits."""
    def told(ahead: int) -> None:
        if ahead > 0:
            slot.info(f"Waiting for the decoder: {ahead} step{'s' if ahead != 1 else ''} ahead of yours "
                      "(other pages on this server are stepping too).", icon=":material/hourglass_top:")
        else:
            slot.info("Decoding your step…", icon=":material/hourglass_top:")
    return told


# ---------------------------------------------------------------------------- settings that persist
def keep(*keys: str) -> None:
    """Remember widget keys whose values must survive a visit to another page (Streamlit forgets
    the state of a widget that a run does not draw)."""
    st.session_state.setdefault(KEPT, set()).update(keys)


def restore_kept() -> None:
    state = st.session_state
    for key in state.get(KEPT, ()):
        if key in state:
            state[key] = state[key]


def _help(name: str, extra: str = "") -> str:
    spec = field_spec(name)
    lo, hi = spec["min"], spec["max"]
    limits = f" ({range_text(lo, hi)})" if lo is not None or hi is not None else ""
    text = f"{spec['help'][0].upper()}{spec['help'][1:]}{limits}; default {spec['default']}."
    return text + (f" {extra}" if extra else "")


def setting(name: str, key: str, label: str, where=None, default=None, extra_help: str = "", **options):
    """A widget for one decode setting, its default and help from `taps.config`. Numbers are typed
    into boxes with no limits of their own, so a value out of range reaches `DecodeConfig.validate`
    and gets the engine's message instead of being clamped or kept in silence."""
    where = where or st
    spec = field_spec(name)
    state = st.session_state
    state.setdefault(key, spec["default"] if default is None else default)
    keep(key)
    help_text = _help(name, extra_help)
    if spec["choices"] is not None:
        return where.selectbox(label, spec["choices"], key=key, help=help_text, **options)
    if isinstance(state[key], float) or isinstance(spec["default"], float):
        return where.number_input(label, key=key, step=options.pop("step", 0.1), format=options.pop("format", "%.2f"),
                                  help=help_text, **options)
    return where.number_input(label, key=key, step=1, help=help_text, **options)


MAIN_SETTINGS = ("selector", "estimator", "budget", "temperature", "block_size", "max_new_tokens")
LABELS = {"taps_mode": "TAPS mode", "ddtree_mode": "DDTree mode", "lambda_node": "λ node", "lambda_depth": "λ depth",
          "top_k": "Top-K per depth", "score_cap": "Score cap", "pool_factor": "Pool factor"}


def more_settings(prefix: str, shown: tuple[str, ...], per_row: int = 5) -> dict:
    """Widgets for every decode setting a page does not show itself, straight from DecodeConfig's
    fields (a new engine setting appears here by itself). Returns {name: value}."""
    names = [f.name for f in fields(DecodeConfig) if f.name not in shown and f.metadata["flag"]]
    values = {}
    for start in range(0, len(names), per_row):
        cols = st.columns(per_row)
        for col, name in zip(cols, names[start:start + per_row]):
            label = LABELS.get(name, name.replace("_", " ").capitalize())
            options = {"step": 0.001, "format": "%.3f"} if name == "lambda_depth" else {}
            values[name] = setting(name, f"{prefix}_{name}", label, col, **options)
    return values


def build_config(pair: ModelPair | None, **values) -> tuple[DecodeConfig | None, str]:
    """The DecodeConfig of these page values, or (None, the engine's message) when one is out of
    range or the pair cannot run them."""
    try:
        for name, value in values.items():
            check_value(name, value)
        config = DecodeConfig(**values)
        config.validate(pair)
    except ValueError as exc:
        return None, str(exc)
    return config, ""



# ---------------------------------------------------------------------------- prompts
@st.cache_data(show_spinner=False)
def examples() -> list[dict]:
    from taps.eval.prompts import example_prompts

    return example_prompts()


def prompt_picker(prefix: str, height: int, caption: str | None = None) -> str:
    """A prompt box with an example-prompt menu beside it, keyed `<prefix>_prompt` and
    `<prefix>_example`; picking an example fills the box. Returns the prompt text."""
    state = st.session_state
    items = examples()
    prompt_key, example_key = f"{prefix}_prompt", f"{prefix}_example"

    def use_example() -> None:
        chosen = next((e for e in items if e["title"] == state[example_key]), None)
        if chosen is not None:
            state[prompt_key] = chosen["prompt"]

    state.setdefault(prompt_key, items[0]["prompt"])
    state.setdefault(example_key, items[0]["title"])
    keep(prompt_key, example_key)
    left, right = st.columns([1.8, 1])      # the menu wide enough for the longest title at 1280x720
    with right:
        st.selectbox("Example prompt", [OWN_PROMPT] + [e["title"] for e in items], key=example_key,
                     on_change=use_example)
        chosen = next((e for e in items if e["title"] == state[example_key] and e["prompt"] == state[prompt_key]),
                      None)
        if chosen is not None and chosen.get("look_for"):
            where = f" (round {chosen['round']})" if chosen.get("round") else ""
            st.caption(f"**Look for{where}:** {chosen['look_for']} {LOOK_FOR_WHERE}")
        elif caption:
            st.caption(caption)
    with left:
        return st.text_area("Prompt", key=prompt_key, height=height)


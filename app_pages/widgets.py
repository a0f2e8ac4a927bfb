"""Two small browser-side pieces the app needs and Streamlit does not have, as Streamlit custom
components (v2: inline JavaScript, no build step):

- `viewport()`: the browser window's size and the main column's width, reported once and after
  each resize, so the tree figure is laid out for the pixels it will really have;
- `run_text(...)`: the prompt and the generated text, each round's tokens on their own tint;
  clicking a round's piece calls `on_pick(number)`.

Text reaches the page through `textContent` only, never as HTML.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

VIEWPORT_JS = """
export default function(component) {
  const { data, setStateValue } = component;
  const measure = () => {
    const main = document.querySelector('[data-testid="stMainBlockContainer"]');
    const style = main ? getComputedStyle(main) : null;
    const inner = main ? main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) : 0;
    return {width: window.innerWidth, height: window.innerHeight, main: Math.round(inner)};
  };
  const report = () => {
    const now = measure();
    const last = data || {};
    if (Math.abs((last.width || 0) - now.width) > 4 || Math.abs((last.height || 0) - now.height) > 4 ||
        Math.abs((last.main || 0) - now.main) > 16) {
      setStateValue('size', now);
    }
  };
  let timer = null;
  const later = () => { clearTimeout(timer); timer = setTimeout(report, 250); };
  window.addEventListener('resize', later);
  later();
  return () => { clearTimeout(timer); window.removeEventListener('resize', later); };
}
"""

RUN_TEXT_CSS = """
.taps-run-text { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 1.05rem; line-height: 1.7; padding: 0.5rem 0.7rem; border: 1px solid #ccc; border-radius: 6px;
  max-height: 11.5rem; overflow-y: auto; color: #111; background: #fff; }
.taps-run-text .prompt { color: #666; }
.taps-run-text .round { cursor: pointer; border-bottom: 3px solid #444; }
.taps-run-text .round:hover { outline: 2px dashed #0072B2; }
.taps-run-text .t0 { background: #DCEBF7; } .taps-run-text .t1 { background: #FBE8C8; border-bottom-style: dotted; }
.taps-run-text .t2 { background: #D6F0E6; } .taps-run-text .t3 { background: #F3DDEA; border-bottom-style: dotted; }
.taps-run-text .current { outline: 3px solid #0072B2; }
"""

RUN_TEXT_JS = """
export default function(component) {
  const { data, setTriggerValue, parentElement } = component;
  let box = parentElement.querySelector('.taps-run-text');
  if (!box) {
    box = document.createElement('div');
    box.className = 'taps-run-text';
    box.setAttribute('data-testid', 'taps-run-text');
    parentElement.appendChild(box);
  }
  const pieces = [];
  const prompt = document.createElement('span');
  prompt.className = 'prompt';
  prompt.textContent = data.prompt;
  pieces.push(prompt);
  data.spans.forEach((span, i) => {
    const piece = document.createElement('span');
    piece.className = 'round t' + (i % 4) + (span.number === data.current ? ' current' : '');
    piece.textContent = span.text;
    piece.title = 'round ' + span.number + ': ' + span.tau + ' tokens (click to open it)';
    piece.dataset.round = span.number;
    piece.onclick = () => setTriggerValue('pick', span.number);
    pieces.push(piece);
  });
  box.replaceChildren(...pieces);
  const current = box.querySelector('.current');
  if (current && box.scrollHeight > box.clientHeight) { current.scrollIntoView({block: 'nearest'}); }
}
"""

_viewport = st.components.v2.component("taps_viewport", js=VIEWPORT_JS)
_run_text = st.components.v2.component("taps_run_text", css=RUN_TEXT_CSS, js=RUN_TEXT_JS)

DEFAULT_VIEWPORT = {"width": 1280, "height": 720, "main": 0}


def viewport() -> dict:
    """The browser's window size and main-column width in pixels (a 1280x720 guess until the
    browser has reported)."""
    _viewport_reporter()
    return st.session_state.get("viewport_size", DEFAULT_VIEWPORT)


@st.fragment
def _viewport_reporter() -> None:
    """The size report reruns only this fragment, and this fragment reruns the page only when the
    size changed. A report that reran the whole page straight away could lose a click made at the
    same moment: Streamlit drops the pressed buttons of a run that a whole-page rerun request stops
    before its callbacks ran (a resize just as Step is clicked lost the click). A fragment's rerun
    request waits for the run in progress instead, and the page's rerun asked for from here joins
    any click still waiting."""
    state = st.session_state
    result = _viewport(key="taps_viewport", data=state.get("viewport_size"), default={"size": None},
                       on_size_change=lambda: None, height=0)
    size = result.get("size") if hasattr(result, "get") else getattr(result, "size", None)
    if not (isinstance(size, dict) and size.get("width")):
        return
    size = {k: int(size.get(k) or 0) for k in ("width", "height", "main")}
    if size == state.get("viewport_size"):
        return
    state["viewport_size"] = size
    context = get_script_run_ctx()
    if context is not None and context.fragment_ids_this_run:        # only this fragment ran: redraw the page
        st.rerun(scope="app")


def run_text(key: str, prompt: str, spans: list[dict], current: int, on_pick: Callable[[int], None]) -> None:
    """The prompt and each round's text; clicking a round's text calls `on_pick(its number)`."""

    def picked() -> None:
        value = st.session_state[key]
        number = value.get("pick") if hasattr(value, "get") else getattr(value, "pick", None)
        if number:
            on_pick(int(number))

    _run_text(key=key, data={"prompt": prompt, "spans": spans, "current": current}, on_pick_change=picked)

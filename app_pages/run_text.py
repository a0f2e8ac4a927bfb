"""The Step page's run as text, a Streamlit custom component (v2: inline JavaScript, no build step):
the prompt and the generated text, each round's tokens on their own tint; clicking a round's piece
calls `on_pick(number)`. Text reaches the page through `textContent` only, never as HTML.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

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
  // the round on view kept in sight by scrolling the box alone (scrollIntoView would scroll the
  // page too, and take the buttons, counters and tabs off the screen)
  const current = box.querySelector('.current');
  if (current && box.scrollHeight > box.clientHeight) {
    const outer = box.getBoundingClientRect(), inner = current.getBoundingClientRect();
    if (inner.top < outer.top) box.scrollTop += inner.top - outer.top;
    else if (inner.bottom > outer.bottom) box.scrollTop += Math.min(inner.bottom - outer.bottom, inner.top - outer.top);
  }
}
"""

_run_text = st.components.v2.component("taps_run_text", css=RUN_TEXT_CSS, js=RUN_TEXT_JS)


def run_text(key: str, prompt: str, spans: list[dict], current: int, on_pick: Callable[[int], None]) -> None:
    """The prompt and each round's text; clicking a round's text calls `on_pick(its number)`."""

    def picked() -> None:
        value = st.session_state[key]
        number = value.get("pick") if hasattr(value, "get") else getattr(value, "pick", None)
        if number:
            on_pick(int(number))

    _run_text(key=key, data={"prompt": prompt, "spans": spans, "current": current}, on_pick_change=picked)

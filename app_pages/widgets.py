"""Small browser-side pieces the app needs and Streamlit does not have, as Streamlit custom
components (v2: inline JavaScript, no build step):

- `viewport()`: the browser window's size and the main column's width, reported once and after
  each resize, so the tree figure is laid out for the pixels it will really have;
- `run_text(...)`: the prompt and the generated text, each round's tokens on their own tint;
  clicking a round's piece calls `on_pick(number)`;
- `copy_link(...)`: a button that copies the page's address (the replayable link), showing the
  link in a text box to copy by hand where the browser refuses the clipboard;
- `scroll_to(...)`: scroll the page to an element once per new token (a card that changes the figure
  far above it);
- `lecture_keys(...)`: the lecture's keyboard (listening on the whole page; keys typed into a
  text box, a menu or a slider are left alone), its `?` overlay, and autoplay's clock: while
  playing it asks for the next step every `speed` seconds (counted from the previous request, so
  the pace holds while the page redraws) and pauses at any click on the page. It reports the
  browser's reduce-motion setting.

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

COPY_LINK_CSS = """
.taps-copy { display: flex; gap: 0.5rem; align-items: center; flex-wrap: wrap; font-family: inherit; }
.taps-copy button { font: inherit; font-size: 0.95rem; padding: 0.3rem 0.8rem; border-radius: 0.5rem; cursor: pointer;
  border: 1px solid rgba(49, 51, 63, 0.3); background: var(--st-background-color, #fff);
  color: var(--st-text-color, #111); white-space: nowrap; }
.taps-copy button:hover { border-color: #0072B2; color: #0072B2; }
.taps-copy .said { font-size: 0.9rem; color: var(--st-text-color, #333); }
.taps-copy input { font: inherit; font-size: 0.85rem; width: 28rem; max-width: 100%; padding: 0.2rem 0.4rem; }
"""

COPY_LINK_JS = """
export default function(component) {
  const { data, parentElement } = component;
  let box = parentElement.querySelector('.taps-copy');
  if (!box) {
    box = document.createElement('div');
    box.className = 'taps-copy';
    const button = document.createElement('button');
    button.type = 'button';
    button.setAttribute('data-testid', 'taps-copy-link');
    const said = document.createElement('span');
    said.className = 'said';
    said.setAttribute('role', 'status');
    box.append(button, said);
    parentElement.appendChild(box);
  }
  const button = box.querySelector('button'), said = box.querySelector('.said');
  button.textContent = data.label;
  button.title = 'Copy the address of this page: it opens the same run at the same round and view';
  const fallback = (why) => {
    let input = box.querySelector('input');
    if (!input) {
      input = document.createElement('input');
      input.readOnly = true;
      input.setAttribute('aria-label', 'Link to this view');
      box.appendChild(input);
    }
    input.value = window.location.href;
    input.focus();
    input.select();
    said.textContent = why + ' Copy the link from the box:';
  };
  button.onclick = () => {
    const link = window.location.href;
    if (!navigator.clipboard || !window.isSecureContext) {
      fallback('This browser keeps the clipboard closed here.');
      return;
    }
    navigator.clipboard.writeText(link).then(
      () => { said.textContent = 'Copied: ' + link; box.querySelector('input')?.remove(); },
      () => fallback('The browser refused the clipboard.'));
  };
}
"""

LECTURE_KEYS = [("→ / ←", "next / previous round (→ past the last round decodes the next one)"),
                ("↓ / ↑", "next / previous stage (opens Stage by stage)"),
                ("space", "play / pause"), ("Home / End", "first / last round"), ("?", "show or hide this list")]

LECTURE_JS = """
export default function(component) {
  const { data, setTriggerValue, setStateValue } = component;
  const L = window.__tapsLecture = window.__tapsLecture || { count: 0, lastTick: 0, gen: 0 };
  const gen = ++L.gen;
  // one move waits for the page at a time: a key pressed while autoplay's step is on its way
  // replaces that step (a second trigger would overwrite the first before Streamlit saw it), and
  // no autoplay step is sent while a key's move is on its way
  L.pending = false;
  let timer = null;
  const send = (action) => {
    clearTimeout(timer);
    L.pending = true;
    setTriggerValue('action', { action: action, n: ++L.count });
  };
  const typing = (el) => el instanceof Element && !!el.closest(
    'input, textarea, select, [role="slider"], [role="combobox"], [role="listbox"], [contenteditable="true"]');
  const overlay = () => document.getElementById('taps-keys-overlay');
  const toggleOverlay = (show) => {
    let box = overlay();
    if (!box) {
      box = document.createElement('div');
      box.id = 'taps-keys-overlay';
      box.setAttribute('role', 'dialog');
      box.setAttribute('aria-label', 'Keyboard shortcuts');
      box.style.cssText = 'position:fixed;inset:0;z-index:100000;display:none;align-items:center;' +
        'justify-content:center;background:rgba(0,0,0,0.45);';
      const card = document.createElement('div');
      card.style.cssText = 'background:#fff;color:#111;border-radius:10px;padding:1.2rem 1.6rem;' +
        'font:18px/1.6 sans-serif;max-width:36rem;box-shadow:0 6px 30px rgba(0,0,0,0.35);';
      const title = document.createElement('div');
      title.textContent = 'Keys (ignored while typing in a box or on a slider)';
      title.style.cssText = 'font-weight:bold;margin-bottom:0.5rem;';
      card.appendChild(title);
      data.keys.forEach(([key, what]) => {
        const row = document.createElement('div');
        const k = document.createElement('kbd');
        k.textContent = key;
        k.style.cssText = 'display:inline-block;min-width:7.5rem;font-weight:bold;';
        row.append(k, document.createTextNode(what));
        card.appendChild(row);
      });
      const close = document.createElement('div');
      close.textContent = 'Esc or a click closes this.';
      close.style.cssText = 'margin-top:0.6rem;color:#555;font-size:15px;';
      card.appendChild(close);
      box.appendChild(card);
      box.addEventListener('click', () => { box.style.display = 'none'; });
      document.body.appendChild(box);
    }
    const visible = show === undefined ? box.style.display === 'none' : show;
    box.style.display = visible ? 'flex' : 'none';
  };
  const keys = { ArrowRight: 'next', ArrowLeft: 'prev', ArrowDown: 'stage_next', ArrowUp: 'stage_prev',
                 ' ': 'play', Home: 'first', End: 'last' };
  const onKey = (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.isComposing || typing(ev.target) ||
        typing(document.activeElement)) return;
    if (ev.key === '?') { ev.preventDefault(); toggleOverlay(); return; }
    if (ev.key === 'Escape') { toggleOverlay(false); return; }
    const action = keys[ev.key];
    if (!action) return;
    ev.preventDefault();
    ev.stopPropagation();
    if (action === 'play') L.lastTick = performance.now();
    send(action);
  };
  const onPointer = (ev) => {
    if (!data.playing || !(ev.target instanceof Element)) return;
    if (ev.target.closest('.st-key-step_play_toggle')) return;     // the play button toggles by itself
    send('pause');
  };
  if (L.remove) L.remove();
  document.addEventListener('keydown', onKey, true);
  document.addEventListener('pointerdown', onPointer, true);
  if (data.playing) {
    const wait = Math.max(50, data.speed * 1000 - (performance.now() - L.lastTick));
    timer = setTimeout(() => { if (!L.pending) { L.lastTick = performance.now(); send('tick'); } }, wait);
  }
  const reduced = window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches;
  if (data.reduced !== reduced) setStateValue('reduced', reduced);
  L.remove = () => {
    clearTimeout(timer);
    document.removeEventListener('keydown', onKey, true);
    document.removeEventListener('pointerdown', onPointer, true);
  };
  return () => { if (L.gen === gen && L.remove) { L.remove(); L.remove = null; } };
}
"""

SCROLL_JS = """
export default function(component) {
  const { data } = component;
  const L = (window.__tapsScroll = window.__tapsScroll || {});
  if (!data || !data.token || L.done === data.token) return;
  L.done = data.token;
  const go = (tries) => {
    const target = document.querySelector(data.selector);
    if (target) { target.scrollIntoView({block: 'start'}); return; }
    if (tries > 0) setTimeout(() => go(tries - 1), 100);
  };
  setTimeout(() => go(30), 50);
}
"""

# a figure drawn on the server as SVG markup (`taps.studio.figures.light`), put in as it is: no chart
# library, and nothing redrawn while the markup is the same
PICTURE_JS = """
export default function(component) {
  const { data, parentElement } = component;
  let box = parentElement.querySelector('.taps-light-tree');
  if (!box) {
    box = document.createElement('div');
    box.className = 'taps-light-tree';
    box.setAttribute('data-testid', 'taps-light-tree');
    parentElement.appendChild(box);
  }
  if (box.dataset.version !== data.version) {
    box.innerHTML = data.svg;
    box.dataset.version = data.version;
  }
}
"""

_viewport = st.components.v2.component("taps_viewport", js=VIEWPORT_JS)
# in the page itself (no shadow root): the page's fonts, and its title found as a chart's is
_picture = st.components.v2.component("taps_picture", js=PICTURE_JS, isolate_styles=False)
_scroll = st.components.v2.component("taps_scroll_to", js=SCROLL_JS)
_copy_link = st.components.v2.component("taps_copy_link", css=COPY_LINK_CSS, js=COPY_LINK_JS)
_lecture = st.components.v2.component("taps_lecture_keys", js=LECTURE_JS)
_run_text = st.components.v2.component("taps_run_text", css=RUN_TEXT_CSS, js=RUN_TEXT_JS)

DEFAULT_VIEWPORT = {"width": 1280, "height": 720, "main": 0}


def scroll_to(key: str, selector: str, token: int) -> None:
    """Scroll the page to the element `selector` names, once for each new `token` (0: not at all): a
    button that changes what is drawn far above it brings the reader there."""
    _scroll(key=key, data={"selector": selector, "token": int(token)}, height=0)


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


def picture(key: str, svg: str) -> None:
    """SVG markup made on the server (a light tree figure), shown as it is."""
    import hashlib

    _picture(key=key, data={"svg": svg, "version": hashlib.blake2b(svg.encode(), digest_size=8).hexdigest()},
             height="content")


def copy_link(key: str, label: str = "Copy link") -> None:
    """A button copying the page's address (set by the page to a link that replays its view)."""
    _copy_link(key=key, data={"label": label}, height="content")


def lecture_keys(key: str, playing: bool, speed: float, position: str, on_action: Callable[[str], None]) -> bool:
    """The lecture's keyboard and autoplay clock; `on_action(name)` gets next, prev, stage_next,
    stage_prev, play, first, last, tick (autoplay's next step) or pause (a click while playing).
    `position` (the round and stage on view) restarts the clock's wait after each move. Returns
    whether the browser asks for reduced motion (False until it has said)."""
    state = st.session_state

    def acted() -> None:
        value = state[key]
        action = value.get("action") if hasattr(value, "get") else getattr(value, "action", None)
        if isinstance(action, dict) and action.get("action"):
            on_action(str(action["action"]))

    reduced = state.get(f"{key}__reduced")
    result = _lecture(key=key, data={"playing": playing, "speed": float(speed), "position": position,
                                     "keys": LECTURE_KEYS, "reduced": reduced},
                      default={"reduced": None}, on_action_change=acted, on_reduced_change=lambda: None, height=0)
    value = result.get("reduced") if hasattr(result, "get") else getattr(result, "reduced", None)
    if value is not None:
        state[f"{key}__reduced"] = bool(value)
    return bool(state.get(f"{key}__reduced"))

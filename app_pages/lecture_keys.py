"""The lecture's keyboard on the Step page, as a Streamlit custom component (v2: inline JavaScript,
no build step): the keys, their `?` overlay, and autoplay's clock.

`lecture_keys(...)` listens on the whole page (keys typed into a text box, a menu or a slider are
left alone); while playing it asks for the next step every `speed` seconds (counted from the
previous request, so the pace holds while the page redraws) and pauses at any click on the page. It
reports the browser's reduce-motion setting. Text reaches the page through `textContent` only,
never as HTML.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

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

_lecture = st.components.v2.component("taps_lecture_keys", js=LECTURE_JS)


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

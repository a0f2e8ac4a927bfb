"""The browser window, as Streamlit custom components (v2: inline JavaScript, no build step): its size
reported to the server, a scroll of the page to an element, and a button copying its address.

- `viewport()`: the browser window's size and the main column's width, reported once and after
  each resize, so the tree figure is laid out for the pixels it will really have;
- `scroll_to(...)`: scroll the page to an element once per new token (a card that changes the figure
  far above it);
- `copy_link(...)`: a button that copies the page's address (the replayable link), showing the
  link in a text box to copy by hand where the browser refuses the clipboard.

Text reaches the page through `textContent` only, never as HTML.
"""

from __future__ import annotations

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

_viewport = st.components.v2.component("taps_viewport", js=VIEWPORT_JS)
_scroll = st.components.v2.component("taps_scroll_to", js=SCROLL_JS)
_copy_link = st.components.v2.component("taps_copy_link", css=COPY_LINK_CSS, js=COPY_LINK_JS)

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


def copy_link(key: str, label: str = "Copy link") -> None:
    """A button copying the page's address (set by the page to a link that replays its view)."""
    _copy_link(key=key, data={"label": label}, height="content")

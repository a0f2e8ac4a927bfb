"""A figure drawn on the server as SVG markup (`taps.studio.figures.light`: the light tree figure),
put into the page as it is by a Streamlit custom component (v2: inline JavaScript, no build step):
`picture(...)`. No chart library, and nothing redrawn while the markup is the same."""

from __future__ import annotations

import streamlit as st

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

# in the page itself (no shadow root): the page's fonts, and its title found as a chart's is
_picture = st.components.v2.component("taps_picture", js=PICTURE_JS, isolate_styles=False)


def picture(key: str, svg: str) -> None:
    """SVG markup made on the server (a light tree figure), shown as it is."""
    import hashlib

    _picture(key=key, data={"svg": svg, "version": hashlib.blake2b(svg.encode(), digest_size=8).hexdigest()},
             height="content")

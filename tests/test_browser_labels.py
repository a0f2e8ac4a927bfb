"""Labels for the back row, measured in Chromium from the rendered text boxes (not from the layout
code's own estimate): on the shipped pair, the first five rounds of every example at the default
settings, each round's tree drawn at the plot size the Step page gives it in normal mode at
1280x720 and in presenter mode at 1280x720 and 1600x1000. Every accepted-path node (root, accepted
tokens, bonus) is labelled, no two labels overlap, every label lies inside the figure, in
presenter mode at 1600x1000 the label text is at least 18 px; no label touches a node's marker or
the legend, no edge (the thick accepted path and the bonus edge included) runs over a label, and
Plotly's mode bar covers neither the title nor the legend.

The figures are drawn by plotly.js itself (the version the plotly package bundles) in one page,
one after another, rather than through the Streamlit page: the same figure JSON the page sends, at
the same width, in a fraction of the time.
"""

from __future__ import annotations

import json

import pytest
from test_browser import browser  # noqa: F401

pytestmark = pytest.mark.browser

# the plot sizes the Step page's tree figure gets (`tree_plot` in app_pages/page_style.py): the window less the
# sidebar and padding (normal mode) or less the presenter bar, counters and tabs (presenter mode)
SIZES = {"normal 1280x720": (900, 610, False), "presenter 1280x720": (1240, 404, True),
         "presenter 1600x1000": (1560, 684, True)}
ROUNDS = 5

MEASURE = """async ([figure, width, config]) => {
  const div = document.createElement('div');
  div.style.width = width + 'px';
  document.body.appendChild(div);
  await Plotly.newPlot(div, figure.data, figure.layout, config);
  const svg = div.querySelector('svg.main-svg').getBoundingClientRect();
  const labels = [...div.querySelectorAll('.scatterlayer .textpoint text')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, box: [r.left, r.top, r.right, r.bottom],
            font: parseFloat(getComputedStyle(t).fontSize)};
  });
  const markers = [...div.querySelectorAll('.scatterlayer .points path.point')].map(p => {
    const r = p.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  }).filter(b => b[2] - b[0] > 0);
  const lines = [];                  // points along every drawn edge, every 3 px, in screen pixels
  for (const path of div.querySelectorAll('.scatterlayer .js-line')) {
    const length = path.getTotalLength(), matrix = path.getScreenCTM();
    const width = parseFloat(getComputedStyle(path).strokeWidth) || 1;
    for (let at = 0; at <= length; at += 3) {
      const p = path.getPointAtLength(at).matrixTransform(matrix);
      lines.push([p.x, p.y, width / 2]);
    }
  }
  const box = sel => {
    const el = div.querySelector(sel);
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  const parts = {title: box('.gtitle'), subtitle: box('.gtitle-subtitle'), legend: box('.legend'),
                 modebar: box('.modebar')};
  Plotly.purge(div);
  div.remove();
  return {svg: [svg.left, svg.top, svg.right, svg.bottom], labels, markers, lines, parts};
}"""


@pytest.fixture(scope="module")
def shipped_rounds():
    """The first rounds of every example on the shipped pair, at the Step page's default settings,
    sized by the shipped reference profile (what a fresh machine uses)."""
    import taps
    from taps import DecodeSession
    from taps.eval.prompts import example_prompts
    from taps.profiles import shipped_reference

    pair = taps.load_pair(None)
    name, profile, why = shipped_reference(pair)
    assert profile is not None, why
    out = {}
    for example in example_prompts():
        session = DecodeSession(pair, example["prompt"], profile=profile)
        rounds = []
        while len(rounds) < ROUNDS and not session.finished:
            rounds.append(session.step())
        out[example["id"]] = rounds
    return out


@pytest.fixture(scope="module")
def plot_page(browser):  # noqa: F811
    from plotly.offline import get_plotlyjs

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_content(f"<html><body style='margin:0'><script>{get_plotlyjs()}</script></body></html>")
    page.wait_for_function("() => typeof Plotly !== 'undefined'")
    yield page
    page.close()


def path_labels(record, fig) -> list[str]:
    """The label texts the figure gives the accepted path's nodes (root, accepted, bonus), by id."""
    from taps.studio.figures.round import node_path_id, path_ids

    ids = path_ids(record)
    wanted = [ids[0]] + [ids[v] for v in record.accepted]
    wanted.append(node_path_id(record, figures_bonus(record)))
    labels = next(t for t in fig.data if t.name == "token labels")
    by_id = dict(zip(labels.ids, labels.text))
    missing = [key for key in wanted if key not in by_id]
    assert not missing, (record.number, missing)
    return [by_id[key] for key in wanted]


def figures_bonus(record) -> int:
    from taps.studio import figures

    held = figures.bonus_node(record)
    return held if held is not None else len(record.pool_tokens)


def unescape(text: str) -> str:
    import html

    return html.unescape(text)


def overlaps(a, b) -> bool:
    return bool(a and b) and min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


def check_rendered(found: dict, expected: list[str], where: str) -> None:
    labels = found["labels"]
    parts = found.get("parts", {})
    for part in ("title", "subtitle", "legend"):                   # the mode bar covers no title, no legend
        assert not overlaps(parts.get("modebar"), parts.get(part)), (where, part, parts)
    left, top, right, bottom = found["svg"]
    texts = [label["text"] for label in labels]
    for text in expected:
        assert unescape(text) in texts, (where, text, texts)
    for n, label in enumerate(labels):
        x0, y0, x1, y1 = label["box"]
        assert label["text"].strip() and x1 - x0 > 2 and y1 - y0 > 5, (where, label)
        assert left - 1 <= x0 and x1 <= right + 1 and top - 1 <= y0 and y1 <= bottom + 1, (where, label, found["svg"])
        for other in labels[n + 1:]:
            a0, b0, a1, b1 = other["box"]
            overlap = min(x1, a1) - max(x0, a0) > 1 and min(y1, b1) - max(y0, b0) > 1
            assert not overlap, (where, label, other)
        assert not overlaps(label["box"], parts.get("legend")), (where, label, parts)
        for a0, b0, a1, b1 in found["markers"]:                       # clear of every node's marker
            assert not (min(x1, a1) - max(x0, a0) > 1 and min(y1, b1) - max(y0, b0) > 1), (where, label)
        # no edge (the thick accepted path and the bonus edge included) runs over a label's glyphs:
        # the text box less the font's line gap (a line may pass just above or below the letters)
        inset = (y1 - y0) * 0.18
        for x, y, half in found["lines"]:
            inside = x0 + 1 < x < x1 - 1 and y0 + inset < y + half and y - half < y1 - inset
            assert not inside, (where, label, (x, y, half))


def test_rendered_labels_keep_the_accepted_path_and_never_overlap(shipped_rounds, plot_page):
    from taps.studio import figures
    from taps.studio.layout import plot_for

    assert len(shipped_rounds) >= 5
    checked, left_out = 0, 0
    for example, rounds in shipped_rounds.items():
        assert rounds, example
        for record in rounds:
            for size, (width, height, presenter) in SIZES.items():
                plot = plot_for(width, height, presenter=presenter, size="M")
                fig = figures.round_tree_figure(record, plot=plot, prompt=example)
                assert fig.layout.height <= plot.height, (example, record.number, size)
                expected = path_labels(record, fig)
                found = plot_page.evaluate(MEASURE, [json.loads(fig.to_json()), width, figures.PLOT_CONFIG])
                where = f"{example} round {record.number} {size}"
                check_rendered(found, expected, where)
                if size == "presenter 1600x1000":
                    fonts = [label["font"] for label in found["labels"]]
                    heights = [label["box"][3] - label["box"][1] for label in found["labels"]]
                    assert min(fonts) >= 18 and min(heights) >= 18, (where, fonts, heights)
                checked += 1
                left_out += fig.layout.meta["left_out"]
    print(f"{checked} figures measured in Chromium; {left_out} labels left out (never the accepted path's)")

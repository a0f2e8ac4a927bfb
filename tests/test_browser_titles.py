"""Chart titles and subtitles in Chromium at 1280x720 (issue 61, 4.7): the charts a page draws across
its main column (900 px at 1280x720, the sidebar open; the command line's PNGs are as wide) with the
longest titles they get (a profile measured on a long CPU name, at a date and time), drawn by
plotly.js itself: every line of every title, subtitle and subplot title lies inside the figure,
none over another or over the legend."""

from __future__ import annotations

import json

import pytest
from test_browser import browser  # noqa: F401
from test_viz import summary_rows

pytestmark = pytest.mark.browser

WIDTH = 900
PROFILE = ("reference latency profile of taps-code-10m, measured on the Intel(R) Xeon(R) Platinum 8481C CPU @ "
           "2.70GHz (2 cores), 2026-12-07 19:31 UTC")

MEASURE = """async ([figure, width]) => {
  const div = document.createElement('div');
  div.style.width = width + 'px';
  document.body.appendChild(div);
  await Plotly.newPlot(div, figure.data, figure.layout, {displayModeBar: false});
  const svg = div.querySelector('svg.main-svg').getBoundingClientRect();
  const boxes = sel => [...div.querySelectorAll(sel)].map(el => {
    const r = el.getBoundingClientRect();
    return {text: el.textContent, box: [r.left - svg.left, r.top - svg.top, r.right - svg.left, r.bottom - svg.top]};
  }).filter(b => b.box[2] > b.box[0]);
  const found = {width: svg.width, height: svg.height, titles: boxes('.gtitle, .gtitle-subtitle'),
                 annotations: boxes('.annotation-text-g text'), legend: boxes('.legend .bg')};
  div.remove();
  return found;
}"""


def charts() -> dict:
    from taps.studio import figures

    rows = summary_rows()
    series = {"DFlash": [(1, 1.4), (2, 1.2), (4, 1.0)], "TAPS": [(1, 1.8), (2, 1.5), (4, 1.2)]}
    reliability = {"taps/online": [{"predicted": 0.2, "observed": 0.25, "nodes": 10, "bin": "0.1-0.3"}]}
    return {
        "batch sweep": figures.batch_figure(series, {"DFlash": "dflash", "TAPS": "taps/online"},
                                            f"“def binary_search(item…”, modelled on the {PROFILE}"),
        "race": figures.race_figure(rows[:2], PROFILE),
        "sweep": figures.sweep_figure(rows, PROFILE),
        "bench": figures.budget_figure({"ddtree": [{"budget": 4, "tau": 1.5}, {"budget": 8, "tau": 2.0}]}, "tau",
                                       "tau", f"humaneval, 32 prompts, taps-code-10m on the {PROFILE}"),
        "reliability": figures.reliability_figure(reliability, f"8 prompts of the shipped examples, {PROFILE}"),
    }


def overlap(a, b) -> bool:
    return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


def test_no_title_or_subtitle_is_cut_at_1280x720(browser):  # noqa: F811
    from plotly.offline import get_plotlyjs

    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_content(f"<html><body style='margin:0'><script>{get_plotlyjs()}</script></body></html>")
    for name, fig in charts().items():
        found = page.evaluate(MEASURE, [json.loads(fig.to_json()), WIDTH])
        texts = found["titles"] + [a for a in found["annotations"] if "<" not in a["text"]]
        assert any("UTC" in t["text"] for t in texts), (name, texts)          # the end of the long line drawn
        for item in texts:
            left, top, right, bottom = item["box"]
            assert left >= 0 and right <= found["width"] and top >= 0, (name, item)
            assert not any(overlap(item["box"], legend["box"]) for legend in found["legend"]), (name, item)
        lines = [t for t in texts if t in found["titles"]]
        for a, b in zip(lines, lines[1:]):
            assert not overlap(a["box"], b["box"]), (name, a, b)
    page.close()

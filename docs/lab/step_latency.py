"""How long a Step click takes in the browser: click to updated counters, and click to the redrawn
tree, in Chromium at 1280x720, median over a number of clicks.

    python docs/lab/step_latency.py [--clicks 20] [--presenter] [--pair PATH]

Starts `streamlit run app.py` (the shipped pair unless --pair) on a free loopback port. Times are
taken in the page: from the click event to the first animation frame that shows the new token
count, the new round in the tree's title, and then the page's script state back to not running (Streamlit's
running indicator gone). The machine's load average is printed alongside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))   # app_screenshots
from app_screenshots import CHROMIUM_ARGS, SIZE, start  # noqa: E402

ARM = """() => {
  const tokens = () => {
    const m = [...document.querySelectorAll('[data-testid="stMetric"]')].find(e => e.innerText.startsWith('Tokens'));
    return m ? m.querySelector('[data-testid="stMetricValue"]').innerText : null;
  };
  const title = () => {
    const t = document.querySelector('[data-testid="stPlotlyChart"] .gtitle');
    return t ? t.textContent : null;
  };
  const running = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    return !app || app.getAttribute('data-test-script-state') === 'running';
  };
  const before = tokens(), heading = title();
  window.__step = new Promise(resolve => document.addEventListener('click', () => {
    const t0 = performance.now();
    let counters = null, tree = null, idle = null;
    const poll = () => {
      if (counters === null && tokens() !== before) counters = performance.now() - t0;
      if (tree === null && title() !== heading) tree = performance.now() - t0;
      if (tree !== null && idle === null && !running()) idle = performance.now() - t0;
      if ((counters !== null && idle !== null) || performance.now() - t0 > 30000) resolve([counters, tree, idle]);
      else requestAnimationFrame(poll);
    };
    requestAnimationFrame(poll);
  }, {capture: true, once: true}));
}"""


def measure(url: str, clicks: int, presenter: bool) -> tuple[list[float], list[float], list[float]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=SIZE)
        page.set_default_timeout(120_000)
        page.goto(f"{url}/Step_through")
        step = page.get_by_role("button", name="Step", exact=True)
        step.wait_for()
        box = page.locator('input[aria-label="Max new tokens"]')
        box.fill("1000")
        box.press("Enter")
        page.wait_for_timeout(2000)
        if presenter:
            page.locator('label:has-text("Presenter mode")').first.click()
            page.wait_for_timeout(3000)
        counters, trees, idles = [], [], []
        for n in range(clicks + 1):
            page.evaluate(ARM)
            step.click()
            counter, tree, idle = page.evaluate("() => window.__step")
            if n:                                 # the first click starts the run: reported apart
                counters.append(counter)
                trees.append(tree)
                idles.append(idle)
            else:
                print(f"first click (starts the run): counters {counter:.0f} ms, tree {tree:.0f} ms")
            page.wait_for_timeout(600)
        browser.close()
    return counters, trees, idles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument("--presenter", action="store_true")
    parser.add_argument("--pair", default=None)
    args = parser.parse_args()
    process, url = start(args.pair)
    try:
        counters, trees, idles = measure(url, args.clicks, args.presenter)
    finally:
        process.terminate()
        process.wait(timeout=15)
    print(f"{'presenter' if args.presenter else 'normal'} mode, {args.clicks} clicks, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"click to updated counters: median {statistics.median(counters):.0f} ms "
          f"(min {min(counters):.0f}, max {max(counters):.0f})")
    print(f"click to redrawn tree:     median {statistics.median(trees):.0f} ms "
          f"(min {min(trees):.0f}, max {max(trees):.0f})")
    print(f"click to redrawn tree and Streamlit's running indicator gone: median {statistics.median(idles):.0f} ms "
          f"(min {min(idles):.0f}, max {max(idles):.0f})")


if __name__ == "__main__":
    main()

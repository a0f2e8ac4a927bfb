"""Load figures for a class: one app server, N real browser pages pressing Step.

    python scripts/classroom_load.py --pages 6,12,30 --modes link,prompts --paces together,random \
        [--steps 3] [--out results/classroom-load]

For each (pages, mode, pace) it starts `streamlit run app.py` on the shipped pair (or --pair) with
an empty cache and a lecturer password (the app served to a class), opens N pages in one Chromium
(N contexts, 1280x720) on one shared Step-through link (`link`: the merge example, learned
estimator, budget 16) or on N different prompts (`prompts`: the first N HumanEval prompts), and presses Step --steps times on every page, all at one moment
(`together`) or each after a random 0-3 s pause (`random`). It reports per-Step latency (from the
click to the page showing the new round, both read on the page's own clock: median, p95, max),
pages with an error, rounds whose tokens or tau differ from the same link decoded alone in this
process, the server's peak RSS, and the runs the server decoded (its log). Run it on an otherwise
idle machine. Needs Linux (it reads CPU times from /proc and RSS from procps's `ps`), Playwright and
Debian's Chromium (/usr/bin/chromium, as the browser tests; else `taps.studio.export.chromium_path`'s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from serve_class import port_free, wait_healthy  # noqa: E402  (this folder's class server)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SETTINGS = {"estimator": "learned", "budget": "16"}

# on every page: when each round's tree first shows, by the page's clock, and when Step was clicked
# (a mutation observer: a page that polled would itself load the cores the class shares)
WATCH = """(() => {
  window.__seen = {}; window.__clicked = [];
  document.addEventListener('click', e => {
    const b = e.target instanceof Element ? e.target.closest('button') : null;
    if (b && b.innerText.trim() === 'Step') window.__clicked.push(Date.now());
  }, true);
  const look = () => {
    for (const t of document.querySelectorAll('.gtitle')) {
      const m = /Round (\\d+) ·/.exec(t.textContent || '');
      if (m && !(m[1] in window.__seen)) window.__seen[m[1]] = Date.now();
    }
  };
  const start = () => new MutationObserver(look).observe(document.documentElement,
                                                         {childList: true, subtree: true, characterData: true});
  if (document.documentElement) start(); else document.addEventListener('DOMContentLoaded', start);
})();"""
ARM_CLICK = """at => { setTimeout(() => {
  const b = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Step' && !b.disabled);
  if (b) b.click();
}, Math.max(0, at - Date.now())); }"""
COUNTERS = """() => {
  const value = label => {
    const m = [...document.querySelectorAll('[data-testid="stMetric"]')].find(e => e.innerText.includes(label));
    return m ? m.querySelector('[data-testid="stMetricValue"]').innerText.trim() : null;
  };
  const bad = document.querySelectorAll('[data-testid="stException"], [data-testid="stAlertContentError"]');
  return {tokens: value('Tokens'), tau: value('τ this round'), errors: [...bad].map(e => e.innerText.slice(0, 200)),
          cannot: document.body.innerText.includes('Cannot run')};
}"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def app_server(pair: str, cache: Path, log: Path, secrets_file: Path | None = None, script: Path | None = None):
    """`streamlit run app.py` (or `script`) on a loopback port, with its own cache (and, given
    `secrets_file`, that file's lecturer password: the app served to a class); yields (url, process)."""
    port = free_port()
    env = dict(os.environ, TAPS_PAIR=pair, TAPS_CACHE=str(cache), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    secrets = ["--secrets.files", str(secrets_file)] if secrets_file is not None else []
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(script or ROOT / "app.py"), "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
             *secrets],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            try:
                wait_healthy(url, process, 120)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}:\n" + log.read_text()[-3000:]) from None
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, seconds) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def browser_cpu_seconds() -> float:
    """The CPU time every Chromium process on this machine has used so far (the pages' own work:
    parsing, layout, drawing the figures), to set beside the server's."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if "chrom" in (entry / "comm").read_text():
                total += cpu_seconds(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return total


@contextmanager
def sampled(pid: int, out: Path | None):
    """py-spy sampling every thread of the server while the Steps run, as collapsed stacks in `out`
    (nothing when `out` is None)."""
    if out is None:
        yield
        return
    if shutil.which("py-spy") is None:
        raise SystemExit("--profile samples the server with py-spy: pip install py-spy")
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "--nonblocking",
                            "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        yield
    finally:
        spy.send_signal(2)
        spy.wait(timeout=60)


def top_functions(stacks: Path, count: int = 25) -> str:
    """The functions where the sampled server spent its time (own and inclusive share of samples),
    from py-spy's collapsed stacks; idle waits left out."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    idle = ("wait (threading.py", "select (selectors.py", "_worker (concurrent", "get (queue.py", "run_forever",
            "_run_once (asyncio", "epoll", "sleep")
    for line in stacks.read_text().splitlines():
        frames, _, n = line.rpartition(" ")
        if not frames or not n.isdigit():
            continue
        parts = [re.sub(r":\d+\)$", ")", part) for part in frames.split(";")]
        if any(part.startswith(idle) for part in parts[-1:]):
            continue
        total += int(n)
        own[parts[-1]] = own.get(parts[-1], 0) + int(n)
        for part in set(parts):
            inclusive[part] = inclusive.get(part, 0) + int(n)

    def rows(table: dict[str, int]) -> str:
        ranked = sorted(table.items(), key=lambda kv: -kv[1])[:count]
        return "".join(f"| {100 * n / max(total, 1):.1f}% | `{name[:110]}` |\n" for name, n in ranked)

    return (f"{total} busy samples\n\nInclusive (the function or what it called):\n\n| share | function |\n|---:|---|\n"
            + rows(inclusive) + "\nOwn (the function itself):\n\n| share | function |\n|---:|---|\n" + rows(own))


@contextmanager
def class_server(pair: str, cache: Path, folder: Path, replicas: int):
    """scripts/serve_class.py's server (`replicas` processes behind nginx) on free loopback ports,
    with a lecturer password of its own; yields (url, the processes' pids, their logs)."""
    from serve_class import ClassServer

    secrets_file = folder / "secrets.toml"
    secrets_file.write_text('lecturer_password = "classroom-load"\n')
    port = free_port()
    while any(not port_free(port + n) for n in range(replicas + 1)):
        port = free_port()
    logs = folder / f"logs-{port}"
    logs.mkdir()
    server = ClassServer(replicas, port, "127.0.0.1", pair or None, str(cache), logs, secrets_file)
    try:
        url = server.start()
        yield url, server.pids(), [logs / f"app-{port + 1 + n}.log" for n in range(replicas)]
    finally:
        server.stop()


@contextmanager
def served(pair: str, cache: Path, folder: Path, tag: str, replicas: int):
    """One app process (`replicas` 1: `streamlit run app.py`) or the class server; yields (url,
    pids, logs)."""
    if replicas <= 1:
        log = folder / f"server-{tag}.log"
        secrets_file = folder / "secrets.toml"      # a class is served with a lecturer password
        secrets_file.write_text('lecturer_password = "classroom-load"\n')
        with app_server(pair, cache, log, secrets_file) as (url, process):
            yield url, [process.pid], [log]
    else:
        with class_server(pair, cache, folder, replicas) as found:
            yield found


class PeakRss:
    """The peak resident memory of processes (and their children) together, sampled every 0.2 s."""

    def __init__(self, pids: list[int]):
        self.pids, self.peak, self._stop = pids, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        total = 0
        for pid in self.pids:
            try:
                out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(pid), "-p", str(pid)],
                                     capture_output=True, text=True).stdout
                total += sum(int(x) for x in out.split()) * 1024
            except (OSError, ValueError):
                pass
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self._rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, self._rss())


def links(mode: str, count: int) -> list[tuple[str, dict]]:
    """(query, {"example": id} or {"prompt": text}) for each page."""
    if mode == "link":
        query = "&".join(f"{k}={v}" for k, v in {"example": "merge", **SETTINGS}.items())
        return [(query, {"example": "merge"})] * count
    from taps.eval.prompts import humaneval_prompts

    prompts = [item["prompt"] for item in humaneval_prompts(count)]
    settings = "&".join(f"{k}={v}" for k, v in SETTINGS.items())
    return [(f"prompt={quote(p)}&{settings}", {"prompt": p}) for p in prompts]


def solo_rounds(pages: list[tuple[str, dict]], steps: int) -> dict[str, list[tuple[str, str]]]:
    """Each distinct link's (tokens so far, tau) for its first rounds, decoded alone here with the
    profile a fresh machine's app uses and the app's one thread per decode."""
    import torch

    torch.set_num_threads(1)
    from taps import load_pair
    from taps.config import DecodeConfig
    from taps.eval.prompts import example_prompts
    from taps.studio.link import page_defaults, parse_step_link
    from taps.studio.page_profile import page_profile
    from taps.studio.serve import SharedRuns
    from taps.studio.stepper import StepController

    pair = load_pair()
    defaults = page_defaults(max_new_tokens=64, block_size=pair.drafter.block_size)
    out = {}
    for query, given in pages:
        if query in out:
            continue
        params = {k: [v] for k, v in {**given, **SETTINGS}.items()}
        link, _ = parse_step_link(params, example_prompts(), defaults, pair)
        config = DecodeConfig(**link.settings)
        profile = page_profile(pair, config.budget).sizing
        ctrl = StepController(runs=SharedRuns())
        ctrl.advance(pair, link.prompt, config, profile, rounds=steps)
        tokens, rows = 0, []
        for record in ctrl.visible:
            tokens += record.tau
            rows.append((str(tokens), str(record.tau)))
        out[query] = rows
    return out


def scenario(browser, pair: str, count: int, mode: str, pace: str, steps: int, expected: dict, folder: Path,
             profile: Path | None = None, replicas: int = 1) -> dict:
    pages_of = links(mode, count)
    tag = f"{count}-{mode}-{pace}-{replicas}"
    cache = folder / f"cache-{tag}"
    cache.mkdir(parents=True)
    with served(pair, cache, folder, tag, replicas) as (url, pids, logs):
        rss = PeakRss(pids)
        contexts, pages = [], []
        opened = time.time()
        for query, _ in pages_of:
            context = browser.new_context(viewport={"width": 1280, "height": 720})
            context.add_init_script(WATCH)
            page = context.new_page()
            page.set_default_timeout(300_000)
            page.goto(f"{url}/Step_through?{query}", wait_until="commit")
            contexts.append(context)
            pages.append(page)
        opens = []
        for page in pages:
            page.get_by_role("button", name="Step", exact=True).wait_for()
            opens.append(time.time() - opened)
        time.sleep(2.0)
        for page in pages:
            page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
        latencies, errors, differ, page_steps = [], 0, 0, 0
        rng = random.Random(count * 7 + steps)
        cpu_before, browser_before = sum(cpu_seconds(pid) for pid in pids), browser_cpu_seconds()
        spy = sampled(pids[0], profile)
        spy.__enter__()
        for number in range(1, steps + 1):
            now = int(pages[0].evaluate("Date.now()"))
            for page in pages:
                delay = 1500 + (int(rng.uniform(0, 3000)) if pace == "random" else 0)
                page.evaluate(ARM_CLICK, now + delay)
            for page, (query, _) in zip(pages, pages_of):
                if number > len(expected[query]):   # this link's run ended before this round
                    continue
                page.wait_for_function(f"'{number}' in window.__seen", polling=100, timeout=300_000)
                clicked = page.evaluate("window.__clicked")
                seen = page.evaluate(f"window.__seen['{number}']")
                latencies.append((seen - clicked[number - 1]) / 1000 if len(clicked) >= number else float("nan"))
            for page, (query, _) in zip(pages, pages_of):
                page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
                shown = page.evaluate(COUNTERS)
                errors += bool(shown["errors"] or shown["cannot"])
                want = expected[query][number - 1] if number <= len(expected[query]) else None
                differ += want is not None and (shown["tokens"], shown["tau"]) != want
                page_steps += 1
        time.sleep(1.0)                           # reruns a Step set off (the size report, the run text) end
        for page in pages:
            page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
        browser_cpu = browser_cpu_seconds() - browser_before
        spy.__exit__(None, None, None)
        peak = rss.stop()
        for context in contexts:
            context.close()
        text = "".join(log.read_text() for log in logs)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))]
    return {"pages": count, "replicas": replicas, "mode": mode, "pace": pace, "steps": steps, "latency_median_s": statistics.median(latencies),
            "latency_p95_s": p95, "latency_max_s": latencies[-1], "pages_with_errors": errors, "rounds_differing": differ,
            "peak_rss_mb": peak / 2**20, "server_cpu_per_page_step_s": cpu / max(page_steps, 1),
            "browser_cpu_per_page_step_s": browser_cpu / max(page_steps, 1),
            "open_median_s": statistics.median(opens), "open_max_s": max(opens), "runs_opened": len(re.findall(r"link \w+: opened", text)),
            "rounds_decoded": len(re.findall(r"link \w+: decoded round", text))}


def table(rows: list[dict]) -> str:
    head = ("| pages | replicas | link | Steps | open median / max (s) | latency median / p95 / max (s) | server CPU per "
            "page-Step (s) | browsers' CPU per page-Step (s) | pages with errors | rounds differing | runs opened | "
            "rounds decoded | peak RSS (MB) |\n"
            "|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {r['pages']} | {r.get('replicas', 1)} | {'one link' if r['mode'] == 'link' else 'distinct prompts'} | {r['steps']} x {r['pace']} | "
        f"{r['open_median_s']:.1f} / {r['open_max_s']:.1f} | "
        f"{r['latency_median_s']:.2f} / {r['latency_p95_s']:.2f} / {r['latency_max_s']:.2f} | "
        f"{r['server_cpu_per_page_step_s']:.3f} | {r.get('browser_cpu_per_page_step_s', float('nan')):.2f} | "
        f"{r['pages_with_errors']} | "
        f"{r['rounds_differing']} | {r['runs_opened']} | {r['rounds_decoded']} | {r['peak_rss_mb']:.0f} |\n"
        for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", default="6,12,30", help="page counts, comma-separated")
    parser.add_argument("--modes", default="link,prompts", help="link (one shared link) and/or prompts (distinct)")
    parser.add_argument("--paces", default="together,random", help="together and/or random (0-3 s apart)")
    parser.add_argument("--steps", type=int, default=3, help="Steps each page presses")
    parser.add_argument("--pair", default="", help="pair folder (default: the shipped pair)")
    parser.add_argument("--replicas", default="1",
                        help="1 (one `streamlit run app.py`) and/or K (scripts/serve_class.py: K processes behind "
                             "nginx), comma-separated")
    parser.add_argument("--out", help="folder for summary.md and rows.json (default: print only)")
    parser.add_argument("--profile", action="store_true",
                        help="sample the server's threads with py-spy while the Steps run and print where its time went")
    parser.add_argument("--stacks", help="with --profile: keep py-spy's collapsed stacks in this folder")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        parser.error("this load test reads per-process CPU times from /proc and RSS from procps's `ps`: run it on "
                     "Linux")
    from taps.studio.export import chromium_path

    chromium = chromium_path()
    if chromium is None:
        parser.error("no Chromium found: apt-get install chromium, or set BROWSER_PATH to a Chromium or Chrome")
    counts = [int(x) for x in args.pages.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    paces = [p.strip() for p in args.paces.split(",") if p.strip()]
    replica_counts = [int(r) for r in args.replicas.split(",") if r.strip()]
    if set(modes) - {"link", "prompts"} or set(paces) - {"together", "random"} or args.steps < 1:
        parser.error("modes are link and prompts, paces together and random, and --steps at least 1")
    from playwright.sync_api import sync_playwright

    expected = solo_rounds([q for mode in modes for q in links(mode, max(counts))], args.steps)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        for count in counts:
            for mode in modes:
                for pace, replicas in [(p, r) for p in paces for r in replica_counts]:
                    stacks = Path(args.stacks or tmp) / f"stacks-{count}-{mode}-{pace}.txt" if args.profile else None
                    row = scenario(browser, args.pair, count, mode, pace, args.steps, expected, Path(tmp), stacks,
                                   replicas)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    if stacks is not None and stacks.exists():
                        print(f"## Where the server's time went: {count} pages, {mode}, {pace}\n\n"
                              + top_functions(stacks), flush=True)
        browser.close()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report = (f"# Classroom load ({started}, {os.cpu_count()} CPUs)\n\n`python scripts/classroom_load.py "
              f"--pages {args.pages} --modes {args.modes} --paces {args.paces} --steps {args.steps} "
              f"--replicas {args.replicas}`\n\n" + table(rows))
    print(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.md").write_text(report)
        (out / "rows.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A run as one lecture file: a single self-contained HTML page that replays every round and stage
of a Step-through run, with its counters, narration and look-for line, driven by the page's keys
(→ ← rounds, ↓ ↑ stages, space autoplay, Home/End, ?) and autoplay. plotly.js is inlined and the
page loads nothing else, so students open it from a file or a course page, offline, with nothing
installed, any number of them at once.

What it shows is the Step page's own: the figures are `round_tree_figure` and `lesson_figure` (drawn
for a 1280x720 window), the narration `stage_narration`, and the counters `step_numbers`, the
computation `StepController.numbers` makes over the rounds up to the one on view. Modelled speed-ups
are priced on the named profile; measured ones were measured in the original run, on the machine it
ran on, and the file says so. The measured speed-up is shown as the page shows it (`measured_shown`):
a dash before round 5, and a dash with the rough figure greyed when the machine was busy by the
load reading the page judged it by, which the caller passes (`load`; this module reads no load).

    python -m taps.studio.lecture_file --example fib --out fib.html      (decodes with the shipped pair)
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from ..config import DecodeConfig, run_label
from ..record import STAGES, Round
from .layout import Plot, plot_for
from .lesson import STAGE_TITLES, prompt_excerpt, round_text
from .speed import MIN_MEASURED_ROUNDS, MachineLoad, MeasuredShown, measured_shown, profile_name
from .stepper import StepController, step_numbers

FILE_PLOT = plot_for(1240, 430, presenter=True)     # every figure's size: a 1280x720 window less the controls
PACES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)              # autoplay's seconds a step, as on the page
DEFAULT_PACE = 1.0
DIGITS = 5                                          # significant digits a figure's numbers keep in the file
TREE_NOTE = ("The thick path is what the target accepted; diamonds are siblings it rejected; crosses on dotted "
             "edges sat under a rejected prefix and could never be accepted.")
PLACEHOLDER = re.compile(r"%([A-Z_]+)%")      # the page template's slots: %NAME%
KEYS = [("→ / ←", "next / previous round"), ("↓ / ↑", "next / previous stage (opens Stage by stage)"),
        ("space", "play / pause"), ("Home / End", "first / last round"), ("?", "show or hide this list")]


# ---------------------------------------------------------------------------- the counters
def short_profile_label(profile) -> str:
    """A profile in a few words for the modelled counter's label ("2-core reference CPU")."""
    if profile is None:
        return "no profile"
    label = profile.device_label()
    return f"{label} (roofline estimate)" if profile.kind == "roofline" else label


def round_counters(rounds: Sequence[Round], ar_rounds: Sequence[Round] = (), model_profile=None,
                   short_name: str | None = None, load: MachineLoad | None = None) -> list[dict]:
    """For each round, the counters the Step page shows with that round on view: the numbers
    (`step_numbers` over the rounds up to it) and the page's seven metrics as text ("cells"), and
    the line spelling out the two speed-ups. `load`: the machine load the page judged the measured
    speed-up by (`measured_shown`; None for a saved run, as on the page): when it was busy every
    round's measured counter is a dash with the rough figure greyed and why, as on the page."""
    short = short_profile_label(model_profile) if short_name is None else short_name
    named = profile_name(model_profile)
    out = []
    for count in range(1, len(rounds) + 1):
        record, numbers = rounds[count - 1], step_numbers(rounds[:count], ar_rounds, model_profile)
        modelled, measured = numbers.speed.modelled, numbers.speed.measured
        verified_run = sum(r.verified_nodes for r in rounds[:count])
        waste_round = record.waste_nodes / record.verified_nodes if record.verified_nodes else 0.0
        speedup = None if modelled is None or math.isnan(modelled["speedup"]) else float(modelled["speedup"])
        shown = measured_shown(measured, load)
        cells = [
            _cell("tokens", "Tokens", str(numbers.tokens)),
            _cell("tau", "τ this round", str(record.tau)),
            _cell("tau_mean", "τ mean", f"{numbers.tau_mean:.2f}"),
            _cell("verified", "Verified this round", str(record.verified_nodes), f"run {verified_run}",
                  "Draft nodes the target checked this round; below, over the run so far"),
            _cell("waste", "Waste this round", f"{100 * waste_round:.0f}%", f"run {100 * numbers.waste_share:.0f}%",
                  "Verified nodes under a rejected prefix, this round; below, over the run so far"),
            _cell("modelled", f"Modelled ({short})", "—" if speedup is None else f"{speedup:.2f}×",
                  "", "Deterministic: τ × AR step ÷ round time, read from " + named),
            _cell("measured", "Measured speed-up", shown.value, shown.note,
                  "Wall clock, measured in the original run on the machine it ran on: per round, τ × the median "
                  "AR step of this prompt there ÷ the round's time; the median over the rounds so far, with their "
                  f"middle half. Shown after {MIN_MEASURED_ROUNDS} rounds, and greyed when that machine was busy "
                  "as the page showed it"),
        ]
        out.append({
            "tokens": numbers.tokens, "tau_round": numbers.tau_round, "tau_mean": numbers.tau_mean,
            "verified_round": numbers.verified_round, "verified_run": verified_run, "waste_round": waste_round,
            "waste_share": numbers.waste_share, "modelled": speedup,
            "measured": None if measured is None else [measured.median, measured.low, measured.high, measured.count],
            "machine_load": None if load is None else {"load": load.load, "cores": load.cores, "busy": load.busy},
            "cells": cells, "speed_line": _speed_line(modelled, measured, shown, named, load)})
    return out


def _load_words(load: Mapping | None) -> str:
    """The machine load the measured counters were judged by, for the About list ("" when none was
    passed: a saved run, or counters made without one)."""
    if not load:
        return ""
    reading = f"load {load['load']:.1f} on {load['cores']} cores"
    if load["busy"]:
        return (f" The machine it ran on was busy when the file was made ({reading}), so, as on the page, every "
                "measured speed-up is a dash, with its rough figure greyed beside it: measured times are slower and "
                "noisier than on an idle machine. The modelled figures do not change.")
    return f" The machine it ran on was not busy when the file was made ({reading})."


def _cell(key: str, label: str, value: str, delta: str = "", help: str = "") -> dict:
    return {"key": key, "label": label, "value": value, "delta": delta, "help": help}


def _speed_line(modelled: dict | None, measured, shown: MeasuredShown, named: str,
                load: MachineLoad | None = None) -> str:
    """The page's line under the counters, said of the original run: what `shown` (the page's
    `measured_shown`) shows, in the past tense where the page says "this machine"."""
    if modelled is not None and not math.isnan(modelled["speedup"]):
        line = (f"Modelled {modelled['speedup']:.2f}× = τ {modelled['tau']:.2f} × AR step "
                f"{1000 * modelled['ar_step_s']:.2f} ms ÷ round {1000 * modelled['round_s']:.2f} ms, on the {named}.")
    else:
        line = "Modelled: — (no latency profile named for this run)."
    if measured is None:
        return line + " Measured: — (no AR run of this prompt was measured alongside; a saved run's times were " \
                      "measured where it ran)."
    if not shown.shown and load is not None and load.busy and measured.count >= MIN_MEASURED_ROUNDS:
        rounds = f"{measured.count} round{'s' if measured.count != 1 else ''}"
        return (f"{line} Measured: {measured.text(2)} over {rounds}, greyed: the machine it ran on was "
                f"{load.reason()}")
    if not shown.shown:
        return f"{line} {shown.sentence.replace('**', '')}"
    line += (f" Measured {measured.text(2)} (median over {measured.count} rounds, middle half in brackets) "
             "against an AR run of this prompt, both measured in the original run on the machine it ran on, not on "
             "this computer.")
    if measured.wide:
        line += " The rounds' measured speed-ups spread widely: the machine it ran on may have been busy."
    return line


# ---------------------------------------------------------------------------- the figures
def _compact(value):
    """A figure's JSON with every float cut to DIGITS significant digits (sub-pixel positions and
    reaches far below what any label shows)."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items()}
    return value


def _figure_data(fig, templates: dict[str, int]) -> dict:
    """A figure as compact plain data, its template (the same for nearly all) kept once in
    `templates` (JSON text -> index) and named by index."""
    import plotly.io as pio

    from .figures.style import apply_theme

    raw = json.loads(pio.to_json(apply_theme(fig, dark=False), validate=False, pretty=False))
    template = json.dumps(raw["layout"].pop("template", {}), sort_keys=True, separators=(",", ":"))
    raw["t"] = templates.setdefault(template, len(templates))
    return _compact(raw)


def _round_figures(record: Round, prompt: str, config: Mapping, templates: dict[str, int], plot: Plot,
                   color_by: str, max_pool_nodes: int) -> dict:
    from .figures.round import lesson_figure, round_tree_figure, stage_narration

    tree = round_tree_figure(record, color_by, max_pool_nodes, plot, prompt, config)
    return {"tree": _figure_data(tree, templates),
            "stages": [_figure_data(lesson_figure(record, stage, color_by, max_pool_nodes, plot, prompt, config),
                                    templates) for stage in STAGES],
            "narration": [stage_narration(record, stage, config) for stage in STAGES]}


# ---------------------------------------------------------------------------- the file
def settings_words(config: Mapping) -> str:
    """The run's settings in one line: its policy, budget, temperature, token limit, and any other
    setting that differs from the engine's default."""
    defaults = asdict(DecodeConfig())
    main = ("selector", "estimator", "budget", "temperature", "max_new_tokens")
    words = [run_label(config.get("selector", defaults["selector"]), config.get("estimator", "")),
             f"budget {config.get('budget', defaults['budget'])}",
             f"temperature {config.get('temperature', defaults['temperature']):g}",
             f"at most {config.get('max_new_tokens', defaults['max_new_tokens'])} new tokens"]
    words += [f"{name} {value}" for name, value in config.items()
              if name not in main and name in defaults and value != defaults[name]]
    return " · ".join(words)


def example_look_for(prompt: str) -> str:
    """The look-for line of the shipped example whose prompt this is, as the page shows it ("Look for
    (round 1): ..."); "" for any other prompt."""
    from ..eval.prompts import LOOK_FOR_WHERE, example_prompts

    try:
        examples = example_prompts()
    except FileNotFoundError:
        return ""
    chosen = next((e for e in examples if e["prompt"] == prompt and e.get("look_for")), None)
    if chosen is None:
        return ""
    where = f" (round {chosen['round']})" if chosen.get("round") else ""
    return f"Look for{where}: {chosen['look_for']} {LOOK_FOR_WHERE}"


def lecture_html(rounds: Sequence[Round], prompt: str, config: Mapping, counters: Sequence[dict], *,
                 profile_label: str, pair_name: str = "", look_for: str = "", measured: bool = True,
                 exported_at: datetime | None = None, start_round: int = 1, color_by: str = "reach",
                 max_pool_nodes: int = 60, plot: Plot = FILE_PLOT) -> str:
    """The run as one HTML page (plotly.js inline, no network): every round's tree and six stage
    figures, `counters` (one `round_counters` entry per round), the narration, the generated text
    piece by piece, `look_for`, and a player with the page's keys and autoplay. `profile_label`
    names the profile modelled speed-ups were priced on; `measured`: whether the run's measured
    speeds are in the counters (False for a saved run viewed, which has none)."""
    from plotly.offline import get_plotlyjs

    from .figures.style import PLOT_CONFIG

    rounds = list(rounds)
    if not rounds:
        raise ValueError("the run has no rounds yet: take a Step first")
    if len(counters) != len(rounds):
        raise ValueError(f"one counters entry per round is needed: {len(rounds)} rounds, {len(counters)} entries")
    if not 1 <= start_round <= len(rounds):
        raise ValueError(f"start_round must be from 1 to {len(rounds)}, got {start_round!r}")
    when = (exported_at or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    config = dict(config)
    templates: dict[str, int] = {}
    entries = []
    for record, numbers in zip(rounds, counters):
        entry = _round_figures(record, prompt, config, templates, plot, color_by, max_pool_nodes)
        entry.update(number=record.number, tau=record.tau, counters=numbers)
        entries.append(entry)
    tokens = sum(r.tau for r in rounds)
    data = {"rounds": entries, "templates": [json.loads(t) for t in templates],
            "stages": [{"id": s, "title": STAGE_TITLES[s]} for s in STAGES], "treeNote": TREE_NOTE,
            "plot": {"width": plot.width}, "start": start_round, "paces": PACES, "pace": DEFAULT_PACE,
            "plotConfig": dict(PLOT_CONFIG, typesetMath=False, showLink=False, showSendToCloud=False,
                               showEditInChartStudio=False, topojsonURL="", responsive=False)}
    excerpt = prompt_excerpt(prompt, 48)
    settings = settings_words(config)
    what = (f"TAPS Studio lecture file · pair {pair_name or 'unnamed'} · “{excerpt}” · {settings} · modelled on the "
            f"{profile_label} · exported {when}")
    measured_words = ("Measured speed-ups were measured in the original run, on the machine it ran on (τ × the "
                      "median AR step of the same prompt there ÷ each round's time); opening this file measures "
                      "nothing." if measured else
                      "Measured speed-ups: none in this file (the run was a saved run viewed: its times were "
                      "measured where it ran, and no AR run was measured alongside).")
    measured_words += _load_words(counters[0].get("machine_load") if measured else None)
    about = [("What", f"A Step-through run of TAPS Studio saved as one file: {len(rounds)} rounds, {tokens} tokens, "
                      "every round's draft tree and its six stages with the page's counters and narration. It "
                      "needs no server and no network."),
             ("Pair", pair_name or "unnamed"),
             ("Settings", settings),
             ("Modelled speed-ups", f"priced on the {profile_label}: deterministic, τ × AR step ÷ round time."),
             ("Measured speed-ups", measured_words),
             ("Exported", when)]
    title = (f"TAPS lecture · {run_label(config.get('selector', ''), config.get('estimator', ''))} · budget "
             f"{config.get('budget', '')} · “{prompt_excerpt(prompt, 40)}”")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    values = {
        "TITLE": html.escape(title), "ABOUT_LINE": html.escape(what), "COUNT": str(len(rounds)),
        "WIDTH": str(plot.width),
        "PACES": "".join(f'<option value="{p:g}"{" selected" if p == DEFAULT_PACE else ""}>{p:g} s</option>'
                         for p in PACES),
        "COUNTERS": "".join(_counter_html(cell) for cell in counters[0]["cells"]),
        "STAGES": " → ".join(f'<button class="stage-pick" data-stage="{i}">{STAGE_TITLES[s]}</button>'
                             for i, s in enumerate(STAGES)),
        "LOOK_FOR": html.escape(look_for), "TEXT": _text_html(prompt, rounds), "PROMPT": html.escape(prompt),
        "ABOUT": "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in about),
        "SETTINGS": "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
                            for k, v in config.items()),
        "KEYS": "".join(f"<div><kbd>{html.escape(k)}</kbd>{html.escape(v)}</div>" for k, v in KEYS),
        "PLOTLYJS": get_plotlyjs(),
        # inside a script element "</" would end it and "<!--" change how it is read: both escaped
        "DATA": payload.replace("</", "<\\/").replace("<!--", "<\\u0021--"),
    }
    # one pass: what a placeholder is replaced by (a prompt, plotly.js) is never searched again
    return PLACEHOLDER.sub(lambda found: values[found.group(1)], _PAGE)


def _counter_html(cell: dict) -> str:
    return (f'<div class="metric" data-counter="{cell["key"]}" title="{html.escape(cell["help"])}">'
            f'<div class="label">{html.escape(cell["label"])}</div><div class="value">{html.escape(cell["value"])}'
            f'</div><div class="delta">{html.escape(cell["delta"])}</div></div>')


def _text_html(prompt: str, rounds: Sequence[Round]) -> str:
    pieces = [f'<span class="prompt">{html.escape(prompt)}</span>']
    for n, record in enumerate(rounds):
        pieces.append(f'<span class="piece t{n % 4}" data-round="{record.number}" title="round {record.number}: '
                      f'{record.tau} tokens (click to open it)">{html.escape(round_text(record))}</span>')
    return "".join(pieces)


# ---------------------------------------------------------------------------- from the Step page
def controller_lecture(ctrl: StepController, pair_name: str, model_profile=None, short_name: str | None = None,
                       look_for: str | None = None, *, load: MachineLoad | None, **options) -> str:
    """The lecture file of the run a Step-through controller has on view: the rounds shown so far,
    opening at the round on view. A live run's AR baseline is first decoded up to the run's tokens
    (the controller's own `catch_up_later`, waited for), so the measured counters are those the page
    shows once it has caught up. `load`: the machine load the page judged its measured speed-up by
    (`machine_load()` read where the page drew its counters), required so that the file says what
    the page said: a dash and the greyed rough figure when busy; a saved run ignores it."""
    for _ in range(3):                      # a catch-up already under way may stop short of the run's end
        catching_up = ctrl.catch_up_later(delay_s=0.0)
        if catching_up is None:
            break
        catching_up.join()
    with ctrl.lock:
        rounds, prompt, config, view = list(ctrl.visible), ctrl.prompt_text, ctrl.config, ctrl.view
        baseline = ctrl.baseline if ctrl.live else None
        ar_rounds = list(baseline.session.rounds) if baseline is not None and rounds else []
    counters = round_counters(rounds, ar_rounds, model_profile, short_name, load if baseline is not None else None)
    return lecture_html(rounds, prompt, config, counters, profile_label=profile_name(model_profile),
                        pair_name=pair_name, look_for=example_look_for(prompt) if look_for is None else look_for,
                        measured=bool(ar_rounds), start_round=min(max(view, 1), len(rounds)) if rounds else 1,
                        **options)


# ---------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    from ..config import add_config_flags, config_from_args
    from ..eval.prompts import example_by_id
    from .app_state import load_pair_from_source
    from .page_profile import page_profile
    from .speed import machine_load

    parser = argparse.ArgumentParser(prog="python -m taps.studio.lecture_file", description=(
        "Decode a prompt as Step through does (its default settings, 64 new tokens) and write the run as one "
        "self-contained HTML lecture file (plotly.js inline, no network)."))
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--example", default="fib", help="a shipped example's id (default: fib)")
    source.add_argument("--prompt", help="a prompt's text instead of an example")
    parser.add_argument("--rounds", type=int, default=None, help="rounds to decode at most (default: to the end)")
    parser.add_argument("--pair", default="", help="pair folder or hub id (default: the shipped pair)")
    parser.add_argument("--device", default="cpu", help="auto | cpu | cuda (default: cpu)")
    parser.add_argument("--profile-id", default="", help="the latency profile trees are sized and speed-ups "
                                                         "modelled from (default: the app's: this machine's, else "
                                                         "the shipped reference of the pair)")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    add_config_flags(parser)
    parser.set_defaults(max_new_tokens=64)
    args = parser.parse_args(argv)
    try:
        prompt = args.prompt if args.prompt is not None else example_by_id(args.example)["prompt"]
        pair = load_pair_from_source(args.pair, args.device)
        config = config_from_args(args)
        found = page_profile(pair, config.budget, link_id=args.profile_id or None)
        if args.profile_id and found.sizing_id != args.profile_id:
            raise ValueError(found.link_problem)
        profile = found.sizing
        if profile is None and config.uses_profile:
            raise ValueError(found.why_none)
        ctrl = StepController()
        ctrl.advance(pair, prompt, config, profile, args.rounds)
        page = controller_lecture(ctrl, pair.name, profile, load=machine_load())   # as a page would judge it now
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(page, encoding="utf-8")
    print(f"wrote {args.out}: {len(ctrl.visible)} rounds, {sum(r.tau for r in ctrl.visible)} tokens, "
          f"{len(page.encode('utf-8')) / 1e6:.1f} MB")
    return 0


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="TAPS Studio (taps.studio.lecture_file)">
<title>%TITLE%</title>
<style>
:root { --ink: #111; --muted: #555; --line: #d0d0d0; --accent: #0072B2; --pill: #eef1f4; }
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
body { font-family: "Source Sans Pro", Arial, sans-serif; color: var(--ink); background: #fff;
  display: flex; flex-direction: column; min-width: 1280px; }
#about-line { font-size: 14px; color: var(--muted); padding: 4px 20px 0; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; display: flex; gap: 8px; align-items: center; }
#about-line span { overflow: hidden; text-overflow: ellipsis; }
#bar { display: flex; align-items: center; gap: 8px; padding: 6px 20px; flex-wrap: nowrap; }
#where { font-size: 22px; font-weight: 700; min-width: 180px; white-space: nowrap; }
button, select { font: inherit; font-size: 16px; color: var(--ink); background: #fff; border: 1px solid #bbb;
  border-radius: 7px; padding: 5px 11px; cursor: pointer; white-space: nowrap; }
button:hover:not(:disabled) { border-color: var(--accent); color: var(--accent); }
button:disabled { color: #aaa; cursor: default; }
button.primary { background: var(--accent); color: #fff; border-color: var(--accent); }
button.primary:hover:not(:disabled) { color: #fff; background: #005a8c; }
.tabs { display: flex; gap: 0; margin: 0 6px; }
.tabs button { border-radius: 0; border-width: 0 0 3px; border-color: transparent; padding: 5px 10px; }
.tabs button[aria-selected="true"] { border-color: var(--accent); color: var(--accent); font-weight: 700; }
#slider { flex: 1; min-width: 120px; accent-color: var(--accent); }
#counters { display: flex; gap: 4px; padding: 0 20px; }
.metric { flex: 1 1 0; min-width: 0; }
.metric[data-counter="modelled"], .metric[data-counter="measured"] { flex-grow: 1.7; }
.metric[data-counter="verified"], .metric[data-counter="waste"] { flex-grow: 1.2; }
.metric .label { font-size: 15px; color: #333; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.metric .value { font-size: 30px; line-height: 1.15; }
.metric .delta { display: inline-block; font-size: 13px; color: #444; background: var(--pill); border-radius: 5px;
  padding: 0 6px; min-height: 1.3em; }
.metric .delta:empty { visibility: hidden; }
#stagebar { display: flex; align-items: center; gap: 8px; padding: 4px 20px; min-height: 38px; font-size: 16px; }
#stagebar .stage-pick { border: 0; padding: 2px 4px; }
#stagebar .stage-pick.on { font-weight: 700; color: var(--accent); text-decoration: underline; }
#tree-note { color: var(--muted); font-size: 15px; }
#figure { width: %WIDTH%px; margin: 0 auto; flex: none; }
#panel { flex: 1; min-height: 0; overflow-y: auto; padding: 4px 20px 16px; font-size: 17px; }
#panel p { margin: 4px 0; }
#narration { font-weight: 600; }
#notice:empty, #look-for:empty { display: none; }
#notice { color: #8a4b00; }
#look-for { background: #fff8e1; border-left: 4px solid #E69F00; padding: 2px 8px; }
#speed-line { color: #333; font-size: 15px; }
#text { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 16px; line-height: 1.7; padding: 6px 10px; border: 1px solid #ccc; border-radius: 6px;
  max-height: 12rem; overflow-y: auto; margin: 6px 0; }
#text .prompt { color: #666; }
#text .piece { cursor: pointer; border-bottom: 3px solid #444; }
#text .piece:hover { outline: 2px dashed var(--accent); }
#text .t0 { background: #DCEBF7; } #text .t1 { background: #FBE8C8; border-bottom-style: dotted; }
#text .t2 { background: #D6F0E6; } #text .t3 { background: #F3DDEA; border-bottom-style: dotted; }
#text .later { opacity: 0.45; }
#text .current { outline: 3px solid var(--accent); }
#about dt { font-weight: 700; margin-top: 6px; }
#about dd { margin: 0 0 0 1rem; }
#about pre { white-space: pre-wrap; background: #f6f6f6; padding: 6px 10px; border-radius: 6px; }
#about table { border-collapse: collapse; font-size: 15px; }
#about td { border-bottom: 1px solid #eee; padding: 1px 12px 1px 0; }
.overlay { position: fixed; inset: 0; z-index: 10; display: none; align-items: center; justify-content: center;
  background: rgba(0,0,0,0.45); }
.overlay.open { display: flex; }
.card { background: #fff; border-radius: 10px; padding: 1.2rem 1.6rem; font-size: 18px; line-height: 1.6;
  max-width: 40rem; box-shadow: 0 6px 30px rgba(0,0,0,0.35); }
.card kbd { display: inline-block; min-width: 7.5rem; font-weight: 700; font-family: inherit; }
.card .hint { color: var(--muted); font-size: 15px; margin-top: 0.6rem; }
</style>
<script>%PLOTLYJS%</script>
</head>
<body>
<div id="about-line"><span>%ABOUT_LINE%</span><button id="about-button" title="What this file holds">About</button>
</div>
<div id="bar">
  <div id="where" aria-live="polite">Round <span id="round-number">1</span> of %COUNT%</div>
  <div class="tabs" role="tablist">
    <button role="tab" id="tab-tree" aria-selected="true">Draft tree</button>
    <button role="tab" id="tab-stage" aria-selected="false">Stage by stage</button>
  </div>
  <button id="back" title="Previous round (←)">◀ Back</button>
  <button id="forward" title="Next round (→)">Forward ▶</button>
  <button id="play" class="primary"
    title="Autoplay (space): rounds, or in Stage by stage the stages of each round; other clicks pause">▶ Play</button>
  <select id="pace" title="Autoplay's pace: seconds a round (or a stage)" aria-label="Seconds a step">%PACES%</select>
  <input id="slider" type="range" min="1" max="%COUNT%" value="1" aria-label="Round">
  <button id="keys-button" title="The keys (?)">? Keys</button>
</div>
<div id="counters">%COUNTERS%</div>
<div id="stagebar">
  <span id="tree-note"></span>
  <span id="stage-controls" hidden>
    <button id="stage-prev" title="Previous stage (↑)">◀ Previous stage</button>
    %STAGES%
    <button id="stage-next" class="primary"
      title="Next stage (↓; past the last stage: the next round)">Next stage ▶</button>
  </span>
</div>
<div id="figure"></div>
<div id="panel">
  <p id="notice"></p>
  <p id="narration"></p>
  <p id="look-for">%LOOK_FOR%</p>
  <p id="speed-line"></p>
  <div id="text" aria-label="The generated text, one piece per round">%TEXT%</div>
  <section id="about"><h3>About this file</h3><dl>%ABOUT%
  <dt>Prompt</dt><dd><pre>%PROMPT%</pre></dd>
  <dt>Every setting</dt><dd><table>%SETTINGS%</table></dd></dl></section>
</div>
<div id="keys-overlay" class="overlay" role="dialog" aria-label="Keyboard shortcuts"><div class="card">
  <div><b>Keys</b></div>%KEYS%<div class="hint">Esc or a click closes this. The address keeps the round and
  view (#round=3&amp;view=pool), so a link to this file can open at a round; editing it moves there.</div></div></div>
<script id="lecture-data" type="application/json">%DATA%</script>
<script>
(function () {
  'use strict';
  var DATA = JSON.parse(document.getElementById('lecture-data').textContent);
  var N = DATA.rounds.length, LAST = DATA.stages.length - 1;
  var S = { round: DATA.start - 1, stage: 0, stageRound: -1, view: 'tree', playing: false, timer: null,
            pace: DATA.pace, notice: '' };
  var $ = function (id) { return document.getElementById(id); };
  var clone = function (x) { return typeof structuredClone === 'function' ? structuredClone(x)
                                                                           : JSON.parse(JSON.stringify(x)); };
  var pieces = Array.prototype.slice.call(document.querySelectorAll('#text .piece'));

  // the stage on view: a round not walked yet opens at the first stage (Draft), as on the page
  function stageFor() {
    if (S.stageRound !== S.round) { S.stage = 0; S.stageRound = S.round; }
    return S.stage;
  }
  function atEnd() { return S.round === N - 1 && (S.view !== 'stage' || stageFor() === LAST); }
  function stageMove(delta) {
    if (S.view !== 'stage') { S.view = 'stage'; stageFor(); return; }
    var next = stageFor() + delta;
    if (next >= 0 && next <= LAST) { S.stage = next; return; }
    if (delta > 0 && S.round < N - 1) { S.round += 1; S.stage = 0; S.stageRound = S.round; }
    else if (delta < 0 && S.round > 0) { S.round -= 1; S.stage = LAST; S.stageRound = S.round; }
  }
  function act(name) {
    S.notice = '';
    if (name === 'play') {
      if (!S.playing && atEnd()) { S.notice = 'This is the end of the run: Home goes back to round 1.'; }
      else { S.playing = !S.playing; }
    } else if (name === 'tick') {
      if (!S.playing) return;
      if (atEnd()) { S.playing = false; S.notice = 'Autoplay stopped at the end of the run.'; }
      else if (S.view === 'stage') { stageMove(1); }
      else { S.round += 1; }
    } else if (name === 'next') { S.round = Math.min(S.round + 1, N - 1); }
    else if (name === 'prev') { S.round = Math.max(S.round - 1, 0); }
    else if (name === 'first') { S.round = 0; }
    else if (name === 'last') { S.round = N - 1; }
    else if (name === 'stage_next') { stageMove(1); }
    else if (name === 'stage_prev') { stageMove(-1); }
    render();
  }
  function setView(view) { S.view = view; if (view === 'stage') stageFor(); render(); }

  function render() {
    var r = DATA.rounds[S.round], stage = stageFor(), onStage = S.view === 'stage';
    var figure = onStage ? r.stages[stage] : r.tree;
    var layout = clone(figure.layout);
    layout.template = DATA.templates[figure.t];
    layout.width = DATA.plot.width;
    layout.autosize = false;
    // a new plot each time: Plotly.react keeps a colour bar of the figure before when the next one has
    // it elsewhere (the draft stage's beside the tree's)
    Plotly.newPlot($('figure'), clone(figure.data), layout, DATA.plotConfig);
    $('round-number').textContent = r.number;
    $('where').title = onStage ? 'Stage ' + (stage + 1) + ' of 6: ' + DATA.stages[stage].title : 'Draft tree';
    $('tab-tree').setAttribute('aria-selected', String(!onStage));
    $('tab-stage').setAttribute('aria-selected', String(onStage));
    $('back').disabled = S.round === 0;
    $('forward').disabled = S.round === N - 1;
    $('play').textContent = S.playing ? '⏸ Pause' : '▶ Play';
    $('slider').value = String(S.round + 1);
    r.counters.cells.forEach(function (cell) {
      var box = document.querySelector('[data-counter="' + cell.key + '"]');
      box.querySelector('.label').textContent = cell.label;
      box.querySelector('.value').textContent = cell.value;
      box.querySelector('.delta').textContent = cell.delta;
      box.title = cell.help;
    });
    $('tree-note').textContent = onStage ? '' : DATA.treeNote;
    $('stage-controls').hidden = !onStage;
    $('stage-prev').disabled = onStage && S.round === 0 && stage === 0;
    $('stage-next').disabled = onStage && S.round === N - 1 && stage === LAST;
    document.querySelectorAll('.stage-pick').forEach(function (b) {
      b.classList.toggle('on', Number(b.dataset.stage) === stage);
    });
    $('narration').textContent = onStage ? 'Stage ' + (stage + 1) + ' of 6, ' + DATA.stages[stage].title + ': ' +
                                           r.narration[stage] : '';
    $('notice').textContent = S.notice;
    $('speed-line').textContent = r.counters.speed_line;
    pieces.forEach(function (piece) {
      var n = Number(piece.dataset.round);
      piece.classList.toggle('current', n === r.number);
      piece.classList.toggle('later', n > r.number);
    });
    var current = document.querySelector('#text .current'), box = $('text');
    if (current && box.scrollHeight > box.clientHeight) {
      box.scrollTop = Math.max(0, current.offsetTop - box.offsetTop - box.clientHeight / 2);
    }
    try {
      history.replaceState(null, '', '#round=' + r.number + '&view=' + (onStage ? DATA.stages[stage].id : 'tree'));
    } catch (e) { /* some browsers refuse to rewrite a file's address: the view still works */ }
    clearTimeout(S.timer);
    if (S.playing) S.timer = setTimeout(function () { act('tick'); }, S.pace * 1000);
    window.tapsLecture.state = { round: r.number, view: S.view, stage: onStage ? DATA.stages[stage].id : null,
                                 playing: S.playing, rounds: N, notice: S.notice };
  }

  // the address's #round=N&view=V, read on opening and whenever it changes (a link followed, the
  // address edited): a round outside 1..N opens the nearest one, and the notice says so
  function fromAddress() {
    var params = {}, notes = [];
    location.hash.replace(/^#/, '').split('&').forEach(function (part) {
      var kv = part.split('=');
      if (kv.length === 2) {
        try { params[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1]); } catch (e) { /* kept as it is */ }
      }
    });
    if (params.round !== undefined) {
      var asked = params.round.trim();
      if (!/^[-+]?\\d+$/.test(asked)) {
        notes.push('The address asks for round “' + asked + '”, which is not a round number: showing round ' +
                   (S.round + 1) + '.');
      } else {
        var number = parseInt(asked, 10), kept = Math.min(Math.max(number, 1), N);
        if (kept !== number) {
          notes.push('The address asks for round ' + number + ', but this file holds rounds 1 to ' + N +
                     ': showing round ' + kept + '.');
        }
        S.round = kept - 1;
      }
    }
    var stage = DATA.stages.map(function (s) { return s.id; }).indexOf(params.view);
    if (stage >= 0) { S.view = 'stage'; S.stage = stage; S.stageRound = S.round; }
    else if (params.view === 'tree') { S.view = 'tree'; }
    else if (params.view !== undefined) {
      notes.push('The address asks for view “' + params.view + '”, which this file does not know: it shows tree ' +
                 'or a stage (' + DATA.stages.map(function (s) { return s.id; }).join(', ') + ').');
    }
    S.notice = notes.join(' ');
  }

  function toggle(id, show) {
    var box = $(id), open = show === undefined ? !box.classList.contains('open') : show;
    box.classList.toggle('open', open);
  }
  var KEYS = { ArrowRight: 'next', ArrowLeft: 'prev', ArrowDown: 'stage_next', ArrowUp: 'stage_prev', ' ': 'play',
               Home: 'first', End: 'last' };
  document.addEventListener('keydown', function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.isComposing) return;
    if (ev.target instanceof Element && ev.target.closest('select, textarea, input[type="text"]')) return;
    if (ev.key === '?') { ev.preventDefault(); toggle('keys-overlay'); return; }
    if (ev.key === 'Escape') { toggle('keys-overlay', false); return; }
    var action = KEYS[ev.key];
    if (!action) return;
    ev.preventDefault();
    act(action);
  }, true);
  // any click pauses autoplay, except on Play itself and the pace menu (as on the page)
  document.addEventListener('pointerdown', function (ev) {
    if (!S.playing || !(ev.target instanceof Element) || ev.target.closest('#play, #pace')) return;
    S.playing = false;
    render();
  }, true);
  var click = function (id, fn) {
    $(id).addEventListener('click', function (ev) { ev.currentTarget.blur(); fn(); });
  };
  click('back', function () { act('prev'); });
  click('forward', function () { act('next'); });
  click('play', function () { act('play'); });
  click('stage-prev', function () { act('stage_prev'); });
  click('stage-next', function () { act('stage_next'); });
  click('tab-tree', function () { setView('tree'); });
  click('tab-stage', function () { setView('stage'); });
  click('keys-button', function () { toggle('keys-overlay', true); });
  click('about-button', function () { $('about').scrollIntoView({ behavior: 'smooth' }); });
  $('keys-overlay').addEventListener('click', function () { toggle('keys-overlay', false); });
  document.querySelectorAll('.stage-pick').forEach(function (b) {
    b.addEventListener('click', function () {
      b.blur(); S.view = 'stage'; S.stage = Number(b.dataset.stage); S.stageRound = S.round; S.notice = ''; render();
    });
  });
  pieces.forEach(function (piece) {
    piece.addEventListener('click', function () {
      S.round = Number(piece.dataset.round) - 1; S.notice = ''; render();
    });
  });
  $('pace').addEventListener('change', function (ev) { S.pace = Number(ev.target.value); ev.target.blur(); render(); });
  $('slider').addEventListener('input', function (ev) { S.round = Number(ev.target.value) - 1; render(); });
  // the page rewrites the address itself with replaceState, which fires no hashchange: this is a
  // change from outside (a link to another round followed, #round= edited), so it stops autoplay
  window.addEventListener('hashchange', function () { S.playing = false; fromAddress(); render(); });
  window.tapsLecture = { state: {}, act: act };
  fromAddress();
  render();
})();
</script>
</body>
</html>
"""


if __name__ == "__main__":
    sys.exit(main())

"""The lecture file (`taps.studio.lecture_file`): a short run of the shipped pair, decoded by the Step
page's controller, written as one HTML page that loads nothing from the network, holds every round
(its tree, six stages, narration and text) and shows, round by round, the counters the page's own
`StepController.numbers` gives with that round on view, the measured speed-up judged by the machine
load the page judged it by (a dash and the rough figure greyed when busy). The browser half (keys,
autoplay, file:// with the network off, #round= followed) is tests/test_lecture_export.py."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timezone

import pytest
from plotly.offline import get_plotlyjs

from taps.config import DecodeConfig
from taps.eval.prompts import example_by_id
from taps.profiles import shipped_reference
from taps.record import STAGES
from taps.studio.app_state import load_pair_from_source
from taps.studio.figures import stage_narration
from taps.studio.lecture_file import (
    controller_lecture,
    example_look_for,
    lecture_html,
    main,
    round_counters,
)
from taps.studio.lesson import round_text
from taps.studio.speed import MIN_MEASURED_ROUNDS, MachineLoad, measured_shown
from taps.studio.stepper import StepController, step_numbers

EXPORTED = datetime(2026, 12, 5, 9, 30, tzinfo=timezone.utc)
IDLE, BUSY = MachineLoad(load=0.1, cores=2), MachineLoad(load=7.5, cores=2)     # 0.05 and 3.75 a core


def lecture_data(page: str) -> dict:
    found = re.findall(r'<script id="lecture-data" type="application/json">(.*?)</script>', page, re.S)
    assert len(found) == 1
    return json.loads(found[0])


def page_cells(numbers, record, verified_run: int) -> dict:
    """The Step page's seven metrics as it formats them (app_pages/1_Step_through.py, `counters`)."""
    modelled, shown = numbers.speed.modelled, measured_shown(numbers.speed.measured)
    waste = record.waste_nodes / record.verified_nodes if record.verified_nodes else 0.0
    return {"tokens": (str(numbers.tokens), ""), "tau": (str(record.tau), ""),
            "tau_mean": (f"{numbers.tau_mean:.2f}", ""),
            "verified": (str(record.verified_nodes), f"run {verified_run}"),
            "waste": (f"{100 * waste:.0f}%", f"run {100 * numbers.waste_share:.0f}%"),
            "modelled": ("—" if modelled is None else f"{modelled['speedup']:.2f}×", ""),
            "measured": (shown.value, shown.note)}


@pytest.fixture(scope="module")
def shipped():
    return load_pair_from_source("", "cpu")          # the shipped pair, loaded as the app loads it


@pytest.fixture(scope="module")
def run(shipped):
    """The fib example at the page's settings (16 new tokens: a few rounds), on view at round 2."""
    _, profile, why = shipped_reference(shipped)
    assert profile is not None, why
    ctrl = StepController()
    ctrl.advance(shipped, example_by_id("fib")["prompt"], DecodeConfig(max_new_tokens=16), profile, None)
    assert len(ctrl.visible) >= 3
    ctrl.show(2)
    page = controller_lecture(ctrl, shipped.name, profile, exported_at=EXPORTED, load=IDLE)
    return ctrl, profile, page


def test_the_file_loads_nothing_from_the_network(run):
    _, _, page = run
    assert page.count(get_plotlyjs()) == 1                            # plotly.js inline, once
    ours = page.replace(get_plotlyjs(), "")
    assert "http://" not in ours and "https://" not in ours           # no address at all outside plotly.js
    for loader in (r'src\s*=\s*["\']?\s*(https?:)?//', r'<link[^>]+href\s*=\s*["\']?\s*(https?:)?//',
                   r'url\(\s*["\']?\s*(https?:)?//', r"@import", r"<iframe", r"fetch\(", r"XMLHttpRequest"):
        assert not re.search(loader, ours, re.I), loader
    assert not re.search(r'<script[^>]+src=', page, re.I)             # every script is inline
    data = lecture_data(page)
    assert data["plotConfig"]["typesetMath"] is False                 # plotly never reaches for MathJax


def test_every_round_and_stage_is_in_the_file(run):
    ctrl, _, page = run
    data = lecture_data(page)
    rounds = ctrl.visible
    assert [r["number"] for r in data["rounds"]] == [r.number for r in rounds]
    assert data["start"] == 2                                         # opens at the round the page had on view
    config = ctrl.config
    for entry, record in zip(data["rounds"], rounds):
        assert f"Round {record.number}</b>" in entry["tree"]["layout"]["title"]["text"]
        assert len(entry["stages"]) == len(STAGES)
        for n, (figure, stage) in enumerate(zip(entry["stages"], STAGES)):
            assert figure["layout"]["title"]["text"].startswith(f"<b>Round {record.number} · {n + 1} of 6")
            assert entry["narration"][n] == stage_narration(record, stage, config)
        assert f'data-round="{record.number}"' in page
        assert f'tokens (click to open it)">{html.escape(round_text(record))}</span>' in page
    assert "Look for (round 1): " in page and html.escape(example_look_for(ctrl.prompt_text)) in page
    for words in ("taps-code-10m", "2026-12-05 09:30 UTC", "measured in the original run",
                  "reference latency profile of taps-code-10m"):
        assert words in page, words


def test_the_counters_are_the_pages(run):
    ctrl, profile, page = run
    data = lecture_data(page)
    rounds = ctrl.visible
    assert all(entry["counters"]["measured"] is not None for entry in data["rounds"])    # a live run: measured
    assert len(ctrl.baseline.session.rounds) >= sum(r.tau for r in rounds)    # against its whole AR baseline
    for n, entry in enumerate(data["rounds"], start=1):
        ctrl.show(n)
        numbers = ctrl.numbers(profile)                               # what the page shows at round n
        counters = entry["counters"]
        assert counters["tokens"] == numbers.tokens
        assert counters["tau_round"] == numbers.tau_round == rounds[n - 1].tau
        assert counters["tau_mean"] == numbers.tau_mean
        assert counters["verified_round"] == numbers.verified_round
        assert counters["waste_share"] == numbers.waste_share
        assert counters["modelled"] == numbers.speed.modelled["speedup"]
        measured = numbers.speed.measured
        assert counters["measured"] == [measured.median, measured.low, measured.high, measured.count]
        shown = {cell["key"]: (cell["value"], cell["delta"]) for cell in counters["cells"]}
        assert shown == page_cells(numbers, rounds[n - 1], sum(r.verified_nodes for r in rounds[:n]))
    ctrl.show(2)


def test_a_saved_run_has_no_measured_speed(run):
    ctrl, profile, _ = run
    rounds = ctrl.visible
    counters = round_counters(rounds, [], profile, "reference CPU")
    assert [c["measured"] for c in counters] == [None] * len(rounds)
    assert counters[-1]["cells"][-1]["value"] == "—"
    saved = StepController()                                          # the same run saved and viewed on the page
    saved.load(ctrl.run_file("taps-code-10m"))
    for n in range(1, len(rounds) + 1):
        saved.show(n)
        assert step_numbers(rounds[:n], [], profile) == saved.numbers(profile)
    page = lecture_html(rounds, ctrl.prompt_text, ctrl.config, counters, profile_label="a profile", measured=False)
    assert "Measured speed-ups: none in this file" in page


def test_text_that_looks_like_markup_stays_text(run):
    ctrl, profile, _ = run
    rounds = ctrl.visible[:1]
    prompt = 'x = "</script><script>alert(1)</script> <!-- %DATA% %PLOTLYJS%"\n'
    page = lecture_html(rounds, prompt, ctrl.config, round_counters(rounds, [], profile), profile_label="p",
                        look_for="<b>bold</b>")
    assert "<script>alert(1)" not in page and "<b>bold</b>" not in page
    assert page.count(get_plotlyjs()) == 1
    assert lecture_data(page)["rounds"][0]["number"] == 1
    with pytest.raises(ValueError, match="no rounds"):
        lecture_html([], prompt, ctrl.config, [], profile_label="p")
    with pytest.raises(ValueError, match="one counters entry per round"):
        lecture_html(rounds, prompt, ctrl.config, [], profile_label="p")


def test_the_command_line_writes_a_file(tmp_path, capsys):
    out = tmp_path / "fib.html"
    assert main(["--example", "fib", "--rounds", "1", "--out", str(out)]) == 0
    data = lecture_data(out.read_text(encoding="utf-8"))
    assert len(data["rounds"]) == 1 and "wrote" in capsys.readouterr().out
    assert main(["--example", "nope", "--out", str(out)]) == 2
    assert "unknown example 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- measured, as the page shows it
def measured_cell(entry: dict) -> tuple[str, str]:
    cell = next(c for c in entry["counters"]["cells"] if c["key"] == "measured")
    return cell["value"], cell["delta"]


def first_counter(page: str, key: str) -> str:
    """The value a counter shows in the HTML before any script runs."""
    found = re.findall(rf'data-counter="{key}"[^>]*><div class="label">[^<]*</div><div class="value">([^<]*)</div>',
                       page)
    assert len(found) == 1
    return html.unescape(found[0])


@pytest.fixture(scope="module")
def long_run(shipped):
    """The fib example to 32 new tokens (more than MIN_MEASURED_ROUNDS rounds), exported as the page
    exports it on a busy machine and on an idle one."""
    _, profile, why = shipped_reference(shipped)
    assert profile is not None, why
    ctrl = StepController()
    ctrl.advance(shipped, example_by_id("fib")["prompt"], DecodeConfig(max_new_tokens=32), profile, None)
    assert len(ctrl.visible) > MIN_MEASURED_ROUNDS
    pages = {name: controller_lecture(ctrl, shipped.name, profile, exported_at=EXPORTED, load=load)
             for name, load in (("busy", BUSY), ("idle", IDLE))}
    return ctrl, profile, pages


def test_a_busy_machine_greys_the_measured_speed_up_as_the_page_does(long_run):
    ctrl, profile, pages = long_run
    assert BUSY.busy and not IDLE.busy
    page = pages["busy"]
    data, greyed = lecture_data(page), 0
    for n, entry in enumerate(data["rounds"], start=1):
        ctrl.show(n)
        measured = ctrl.numbers(profile).speed.measured
        on_page = measured_shown(measured, BUSY)                      # what the live page shows, busy, at round n
        assert measured_cell(entry) == (on_page.value, on_page.note) and on_page.value == "—"
        line = entry["counters"]["speed_line"]
        assert not re.search(r"Measured \d", line), line             # never headlined as a plain value
        if measured.count >= MIN_MEASURED_ROUNDS:
            greyed += 1
            assert on_page.note == f"{measured.median:.2f}× rough: machine busy"
            assert BUSY.reason() in on_page.sentence                   # the page's reason, said of that machine
            assert (f"Measured: {measured.text(2)} over {measured.count} rounds, greyed: the machine it ran on was "
                    f"{BUSY.reason()}") in line
        else:
            assert on_page.note == f"from round {MIN_MEASURED_ROUNDS}"
            assert on_page.sentence.replace("**", "") in line
    assert greyed >= 1
    assert all(e["counters"].get("machine_load") == {"load": 7.5, "cores": 2, "busy": True} for e in data["rounds"])
    assert first_counter(page, "measured") == "—"
    text = html.unescape(page.replace(get_plotlyjs(), ""))
    assert not re.search(r"Measured \d", text)                       # nowhere "Measured 1.14×": only "Measured: …"
    assert "The machine it ran on was busy when the file was made (load 7.5 on 2 cores)" in text


def test_an_idle_machine_headlines_the_measured_speed_up_with_its_middle_half(long_run):
    ctrl, profile, pages = long_run
    data, headlined = lecture_data(pages["idle"]), 0
    for n, entry in enumerate(data["rounds"], start=1):
        ctrl.show(n)
        measured = ctrl.numbers(profile).speed.measured
        on_page = measured_shown(measured, IDLE)
        assert measured_cell(entry) == (on_page.value, on_page.note)
        line = entry["counters"]["speed_line"]
        if measured.count >= MIN_MEASURED_ROUNDS:
            headlined += 1
            assert on_page.shown and on_page.value == f"{measured.median:.2f}×"
            assert on_page.note == f"{measured.low:.2f}–{measured.high:.2f}× middle half"
            assert (f"Measured {measured.text(2)} (median over {measured.count} rounds, middle half in brackets)"
                    in line)
            assert "greyed" not in line and "rough" not in on_page.note
        else:
            assert on_page.value == "—" and on_page.note == f"from round {MIN_MEASURED_ROUNDS}"
    assert headlined >= 1
    assert "The machine it ran on was not busy when the file was made (load 0.1 on 2 cores)" in \
        html.unescape(pages["idle"])


def test_the_load_is_the_callers_to_pass(run):
    ctrl, profile, _ = run
    with pytest.raises(TypeError, match="load"):                      # no silent default: the page passes its own
        controller_lecture(ctrl, "taps-code-10m", profile)
    saved = StepController()                                          # a saved run: no load to judge, as on the page
    saved.load(ctrl.run_file("taps-code-10m"))
    page = controller_lecture(saved, "taps-code-10m", profile, load=BUSY, exported_at=EXPORTED)
    data = lecture_data(page)
    assert {entry["counters"]["machine_load"] for entry in data["rounds"]} == {None}
    assert {measured_cell(entry) for entry in data["rounds"]} == {("—", "")}
    assert "when the file was made" not in html.unescape(page)


def test_the_address_round_is_followed_on_opening_and_when_it_changes(run):
    _, _, page = run
    script = page.split('<script id="lecture-data"', 1)[1].split("</script>", 2)[1]
    reads = script.split("function fromAddress()", 1)[1].split("\n  }\n", 1)[0]
    assert "location.hash" in reads
    assert re.search(r"addEventListener\('hashchange', function \(\) \{[^}]*fromAddress\(\);\s*render\(\);",
                     script)                                          # an edited #round= moves the file there
    assert script.rstrip().endswith("fromAddress();\n  render();\n})();")   # and it is read on opening
    assert "Math.min(Math.max(number, 1), N)" in reads and "but this file holds rounds 1 to " in reads
    assert "S.notice = notes.join(' ')" in reads                     # out of range: the nearest round, said

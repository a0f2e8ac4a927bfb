"""The speed guard (scripts/speed_guard.sh, scripts/speed_guard.py; docs/benchmarks.md, "Speed guard").

The slow test runs the guard for real, small: HEAD as the baseline against a copy of HEAD whose
drafter pass sleeps, and checks that the guard fails and names the draft stage and DFlash's and
DDTree's speed-ups. The fast tests check the verdict on made-up rows: the same runs on both sides
pass, a slower drafter fails on its stage and speed-up but not on AR, one slow AR pair does not fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DELAY_S = 0.05   # per drafter pass: far above the limits, so load on a shared machine cannot hide it
ANCHOR = "        hidden = embeds.to(self.compute)\n        n, d = hidden.shape\n"


def _guard_module():
    spec = importlib.util.spec_from_file_location("speed_guard", ROOT / "scripts" / "speed_guard.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _rows(ar_ms: float, draft_ms: float, verify_ms: float = 60.0, prompts: int = 3) -> list[dict]:
    """Bench rows of one run: AR and DFlash@8 / DDTree@8 on `prompts` prompts of 32 tokens, plus a
    prompt that stops at once (left out by the guard)."""
    rows = []
    for n in range(prompts):
        rows.append({"prompt_id": f"p{n}", "selector": "ar", "estimator": "none", "budget": 1, "mode": "",
                     "new_tokens": 32, "rounds": 32, "time_s": 32 * ar_ms / 1000, "verify_time_share": 1.0})
        for selector, tau in (("dflash", 2.5), ("ddtree", 3.0)):
            rounds = int(32 / tau)
            round_ms = draft_ms + verify_ms
            rows.append({"prompt_id": f"p{n}", "selector": selector, "estimator": "marginal", "budget": 8,
                         "mode": "budget" if selector == "ddtree" else "", "new_tokens": 32, "rounds": rounds,
                         "time_s": rounds * round_ms / 1000, "draft_time_share": draft_ms / round_ms,
                         "verify_time_share": verify_ms / round_ms})
    rows.append({"prompt_id": "short", "selector": "ar", "estimator": "none", "budget": 1, "mode": "",
                 "new_tokens": 1, "rounds": 1, "time_s": 5.0, "verify_time_share": 1.0})
    rows.append({"prompt_id": "short", "selector": "dflash", "estimator": "marginal", "budget": 8, "mode": "",
                 "new_tokens": 1, "rounds": 1, "time_s": 0.001, "draft_time_share": 0.5, "verify_time_share": 0.5})
    return rows


def _folder(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _verdict(tmp_path, base_rows, cand_rows, capsys, *options: str) -> tuple[int, str]:
    guard, here = _guard_module(), Path(tempfile.mkdtemp(dir=tmp_path))
    base = [_folder(here, f"b{n}", rows) for n, rows in enumerate(base_rows)]
    cand = [_folder(here, f"c{n}", rows) for n, rows in enumerate(cand_rows)]
    code = guard.main(["--baseline", *map(str, base), "--candidate", *map(str, cand), "--selectors", "dflash,ddtree",
                       *options])
    return code, capsys.readouterr().out


def _failed(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.rstrip().endswith("FAIL")]


def test_the_same_runs_on_both_sides_pass(tmp_path, capsys):
    runs = [_rows(30.0, 8.0), _rows(33.0, 9.0)]
    code, out = _verdict(tmp_path, runs, runs, capsys)
    assert code == 0 and not _failed(out) and "speed guard: ok (7 checks, 2 runs a side)" in out


def test_a_slower_drafter_fails_on_the_draft_stage_and_the_speedups(tmp_path, capsys):
    base = [_rows(30.0, 8.0), _rows(31.0, 8.0)]
    cand = [_rows(30.0, 18.0), _rows(31.0, 18.0)]       # 10 ms more per draft, AR unchanged
    code, out = _verdict(tmp_path, base, cand, capsys)
    failed = _failed(out)
    assert code == 1
    assert any(line.startswith("DFlash best speed-up") for line in failed)
    assert any(line.startswith("DDTree best speed-up") for line in failed)
    assert any(line.startswith("DDTree@8 draft stage") for line in failed)
    assert not any("verify" in line or line.startswith("AR") for line in failed)
    # the draft stage fails in every pairing of runs (firm); DFlash's speed-up only between the medians
    assert out.splitlines()[-1].startswith("speed guard: FAIL (4 of 7 checks): DFlash@8 draft stage")


def test_ar_fails_only_when_both_alternated_pairs_are_slower(tmp_path, capsys):
    base = [_rows(30.0, 8.0), _rows(30.0, 8.0)]
    # one pair 60% slower (a burst of load: every stage slower alike), the other as fast: passes
    code, out = _verdict(tmp_path, base, [_rows(48.0, 12.8, 96.0), _rows(30.0, 8.0)], capsys)
    assert code == 0, out
    code, out = _verdict(tmp_path, base, [_rows(40.0, 8.0), _rows(40.0, 8.0)], capsys)   # both 33% slower
    assert code == 1 and [line.split()[0] for line in _failed(out)] == ["AR"]


@pytest.mark.slow
def test_the_guard_catches_a_sleep_in_the_drafter(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git repository (the guard checks the baseline out as a worktree)")
    copy = tmp_path / "slowed"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(copy), "HEAD"], check=True)
    try:
        drafter = copy / "taps" / "fast_drafter.py"
        text = drafter.read_text()
        assert text.count(ANCHOR) == 1, "FastDrafter.block changed: move the injected sleep"
        drafter.write_text(text.replace(ANCHOR, f"        __import__('time').sleep({DELAY_S})\n" + ANCHOR))
        # one torch thread: in the slow suite another pytest-xdist worker may keep the other core busy
        env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("SPEED_GUARD_BASELINE", None)
        start = time.monotonic()
        done = subprocess.run(["bash", str(ROOT / "scripts" / "speed_guard.sh"), "--baseline", "HEAD",
                               "--candidate", str(copy), "--limit", "4", "--max-new-tokens", "32",
                               "--budgets", "8", "--selectors", "ar,dflash,ddtree"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        elapsed = time.monotonic() - start
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(copy)], check=False)
    out = done.stdout
    print(out, done.stderr[-2000:], f"guard run: {elapsed:.0f} s", sep="\n")
    assert done.returncode == 1, f"expected the guard to fail (exit 1), got {done.returncode}:\n{out}{done.stderr}"
    failed = _failed(out)
    assert any("draft stage" in line for line in failed), out
    assert any(line.startswith("DFlash best speed-up") for line in failed), out
    assert any(line.startswith("DDTree best speed-up") for line in failed), out
    assert out.splitlines()[-2].startswith("speed guard: FAIL"), out


def test_a_failure_that_one_pairing_shows_is_decided_by_a_third_pair(tmp_path, capsys):
    base = [_rows(30.0, 8.0), _rows(30.0, 8.0)]
    cand = [_rows(30.0, 8.0), _rows(30.0, 14.0)]         # the second candidate run drafts slower (noise)
    code, out = _verdict(tmp_path, base, cand, capsys, "--confirm")
    assert code == 3 and out.splitlines()[-1].startswith("speed guard: not conclusive"), out
    code, out = _verdict(tmp_path, base, cand, capsys)   # without --confirm, the medians decide
    assert code == 1, out
    code, out = _verdict(tmp_path, [*base, _rows(30.0, 8.0)], [*cand, _rows(30.0, 8.0)], capsys)
    assert code == 0 and "3 runs a side" in out, out     # the median of three leaves the slow run out

"""Round records, metrics and the command line on a tiny pair."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taps import DecodeSession, Round
from taps.__main__ import main
from taps.eval.metrics import nodes_frame, rounds_frame, summarize


def test_round_accounting(tiny_pair):
    s = DecodeSession(tiny_pair, "def g(y):", selector="ddtree", budget=16, max_new_tokens=20, stop_at_eos=False)
    for r in s.run():
        status = np.array(r.status)
        assert status[0] == "root"
        assert r.verified_nodes == len(r.selected) - 1 <= 16
        assert r.waste_nodes == (status == "waste").sum()
        assert r.rejected_siblings == (status == "rejected").sum()
        assert len(r.accepted) == (status == "accepted").sum()
        assert r.tau == len(r.committed_tokens)
        # accepted nodes form a chain from the root, and the bonus is the target's next token
        parent = 0
        for node in r.accepted:
            assert r.pool_parents[node] == parent
            parent = node
        for node in np.flatnonzero(status != "unselected")[1:]:
            assert r.target_prob[node] is not None
        assert set(r.timings) == {"draft", "pool", "estimate", "select", "verify", "commit"}
    assert sum(r.tau for r in s.rounds) == 20


def test_round_json_round_trip(tiny_pair):
    s = DecodeSession(tiny_pair, "x = 1", selector="taps", estimator="online", budget=8, max_new_tokens=6)
    r = s.step()
    again = Round.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r


def test_frames_and_summary(tiny_pair):
    s = DecodeSession(tiny_pair, "x = 1", selector="taps", budget=8, max_new_tokens=10, stop_at_eos=False)
    rounds = s.run()
    frame = rounds_frame(rounds)
    assert len(frame) == len(rounds) and frame["tau"].sum() == 10
    assert frame["round"].tolist() == list(range(1, len(rounds) + 1))     # counted as people count
    summary = summarize(rounds)
    assert summary.new_tokens == 10 and summary.tokens_per_s > 0
    assert abs(sum(summary.stage_shares.values()) - 1) < 1e-9
    nodes = nodes_frame(rounds[0])
    assert len(nodes) == len(rounds[0].pool_tokens)


def test_cli_generate(tiny_pair_dir, capsys):
    assert main(["generate", "--pair", str(tiny_pair_dir), "--selector", "ddtree", "--budget", "8",
                 "--prompt", "def fib(n):", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "tau" in out and "tokens/s" in out


def test_cli_compare_writes_rows(tiny_pair_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "import os"}\n')
    out = tmp_path / "rows"
    assert main(["compare", "--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--selectors",
                 "ar,dflash,ddtree,taps,oracle", "--budgets", "4,8", "--max-new-tokens", "8",
                 "--dtype", "float64", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    rows = json.loads((out / "compare.json").read_text())
    # per prompt: ar + dflash x2 + ddtree x2 + taps x (3 estimators: marginal, online and, with the tiny
    # pair's path selector, selector; x 2 budgets) + oracle x2
    assert len(rows) == 2 * (1 + 2 + 2 + 6 + 2)
    need = {"prompt_id", "selector", "estimator", "budget", "token_ids", "text", "tau", "tokens_per_s",
            "speedup_vs_ar", "waste_share", "verified_nodes", "rounds"}
    for row in rows:
        assert need <= row.keys()
        assert row["lossless"]
    assert "lossless" in table


def test_cli_compare_out_is_a_folder(tiny_pair_dir, tmp_path, capsys):
    """`taps compare --out DIR` makes DIR and writes the per-run rows to DIR/compare.json, saying
    where (a rerun replaces it, and says so); an --out that ends in .json or names a file is refused
    before any run, with one line saying --out is a folder and what goes in it, and nothing is
    written or overwritten."""
    args = ["compare", "--pair", str(tiny_pair_dir), "--prompt", "def f():", "--selectors", "ddtree",
            "--budgets", "4", "--max-new-tokens", "3", "--dtype", "float64"]
    out = tmp_path / "runs" / "cmp"
    assert main([*args, "--out", str(out)]) == 0
    rows = json.loads((out / "compare.json").read_text())
    assert [r["selector"] for r in rows] == ["ar", "ddtree"] and all(r["lossless"] for r in rows)
    assert f"# wrote 2 rows to {out / 'compare.json'}\n" in capsys.readouterr().out
    assert main([*args, "--out", str(out)]) == 0
    assert "(replacing the one there)" in capsys.readouterr().out and sorted(p.name for p in out.iterdir()) == [
        "compare.json"]
    kept = tmp_path / "rows"
    kept.write_text("mine")
    for given in (tmp_path / "rows.json", kept):
        with pytest.raises(SystemExit) as exit:
            main([*args, "--out", str(given)])
        assert exit.value.code == 2
        captured = capsys.readouterr()
        error = [line for line in captured.err.splitlines() if "error:" in line]
        assert len(error) == 1
        assert "--out is a folder: this command writes compare.json (the per-run rows) in it;" in error[0]
        assert "tau" not in captured.out                      # refused before any run
    assert kept.read_text() == "mine" and not (tmp_path / "rows.json").exists()


def test_cli_headroom_prints_recall_per_depth(tiny_pair_dir, tmp_path, capsys):
    """`taps headroom`: per depth, the rounds counted and recall@1 <= @4 <= @16, the candidate_recall
    of the same runs; a selector that drafts nothing is refused."""
    from taps import DecodeSession, load_pair
    from taps.config import DecodeConfig
    from taps.eval.metrics import candidate_recall

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n{"id": "b", "prompt": "import os"}\n')
    assert main(["headroom", "--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--selector", "ddtree",
                 "--budget", "8", "--max-new-tokens", "12", "--depths", "3"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [int(r[0]) for r in rows] == [1, 2, 3]
    pair = load_pair(tiny_pair_dir)                  # as the command loads it
    session = DecodeSession(pair, "def f():", DecodeConfig(selector="ddtree", budget=8, max_new_tokens=12))
    session.run()
    other = DecodeSession(pair, "import os", DecodeConfig(selector="ddtree", budget=8, max_new_tokens=12))
    other.run()
    mine = [candidate_recall(s.rounds, s.tokens, depths=3, ks=(1, 4, 16)) for s in (session, other)]
    for d, row in enumerate(rows):
        assert int(row[1]) == mine[0][d]["rounds"] + mine[1][d]["rounds"]
        shares = [float(cell.strip().rstrip("%")) for cell in row[2:]]
        assert shares == sorted(shares) and 0 <= shares[0] and shares[-1] <= 100
    assert main(["headroom", "--pair", str(tiny_pair_dir), "--selector", "ar", "--limit", "1"]) == 2
    assert "choose a selector that drafts" in capsys.readouterr().err


def test_cli_reports_bad_input(tiny_pair_dir, capsys):
    assert main(["generate", "--pair", str(tiny_pair_dir), "--budget", "0", "--prompt", "x"]) == 2
    assert "budget must be" in capsys.readouterr().err
    assert main(["generate", "--pair", "/no/such/pair", "--prompt", "x"]) == 2
    assert "not found" in capsys.readouterr().err


def test_select_share_counts_pool_estimate_and_select(tiny_pair):
    from taps.eval.runner import Job, run_prompt
    from taps.session import DecodeConfig

    rows = run_prompt(tiny_pair, {"id": "p", "prompt": "def f(x):"}, [Job("taps", "online", 16)],
                      DecodeConfig(max_new_tokens=12, stop_at_eos=False))
    row = rows[-1].as_dict()
    parts = row["pool_time_share"] + row["estimate_time_share"] + row["select_time_share"]
    assert abs(row["select_share"] - parts) < 1e-9 and row["pool_time_share"] > 0


def test_stop_rules_cut_at_eos_then_length_then_context():
    from taps.config import DecodeConfig
    from taps.stopping import apply_stop_rules

    cfg = DecodeConfig(max_new_tokens=10, stop_at_eos=True)
    kept, why = apply_stop_rules([5, 0, 7], cfg, generated=2, total=20, eos_ids={0}, max_context=100)
    assert (kept, why) == ([5, 0], "end of text")
    kept, why = apply_stop_rules([5, 6, 7], cfg, generated=8, total=20, eos_ids={0}, max_context=100)
    assert (kept, why) == ([5, 6], "max new tokens")
    kept, why = apply_stop_rules([5, 6, 7], cfg, generated=0, total=98, eos_ids={0}, max_context=100)
    assert (kept, why) == ([5, 6], "context length")
    kept, why = apply_stop_rules([5, 0, 7], DecodeConfig(max_new_tokens=10, stop_at_eos=False), generated=0,
                                 total=20, eos_ids={0}, max_context=100)
    assert (kept, why) == ([5, 0, 7], None)

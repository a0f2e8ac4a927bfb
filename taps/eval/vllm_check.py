"""Conformance with the field's serving engine: the same prompts decoded by vLLM (its CPU build, in
its own virtualenv) and by this engine, side by side in one run.

    python -m taps.eval.vllm_check [--suite humaneval] [--limit 8] [--max-new-tokens 64]
        [--vllm-python .venv-vllm/bin/python] [--budgets 16,32] [--out DIR]     # DIR/vllm_check.md

Set-up of vLLM's virtualenv and what the figures mean: docs/vllm.md. Per method: tokens equal to
this engine's AR, mean acceptance length (1 + accepted draft tokens per draft, vLLM's definition;
ours the same over rounds), the share of drafts whose position d was accepted, tokens/s and its
ratio over each engine's own plain decoding and over ours. vLLM runs plain decoding and DFlash
(twice: as shipped, and with its drafter's context keys normed per layer, the fix docs/vllm.md
shows); vLLM 0.32's CPU build has no DFlash2 method, and its DSpark needs a DSpark checkpoint.
Greedy, EOS ignored, batch 1, float32 drafting on both sides (vLLM drafts in the pair's dtype).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..flags import add_out_flag, out_file
from ..policies import AR, DDTREE, DFLASH, TAPS

WORKER = Path(__file__).with_name("vllm_worker.py")
VLLM_PLAIN, VLLM_DFLASH = "plain", DFLASH.name           # the worker's methods: vLLM without and with DFlash
DEFAULT_PYTHON = Path(".venv-vllm") / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
TABLE_FILE = "vllm_check.md"          # what --out DIR holds: the table, as printed
SETUP = ("python3 -m venv .venv-vllm && .venv-vllm/bin/pip install -r requirements-vllm.txt && "
         ".venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec (docs/vllm.md)")


class VllmMissing(RuntimeError):
    """vLLM's virtualenv is not there or cannot import vLLM; the message says how to set it up."""


def check_vllm(python: Path) -> str:
    """vLLM's version in that virtualenv, or VllmMissing saying how to install it."""
    python = Path(os.path.abspath(python))        # absolute, not resolved: a venv's python is a link
    if not python.exists():
        raise VllmMissing(f"vLLM is not installed: no Python at {python}. Set it up with: {SETUP}; "
                          "or pass --vllm-python")
    found = subprocess.run([str(python), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir())
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no message"])[-1]
        raise VllmMissing(f"{python} cannot import vLLM ({last}). Set it up with: {SETUP}")
    return found.stdout.strip()


def run_vllm(python: Path, pair: Path, method: str, prompts: list[list[int]], max_tokens: int,
             spec_tokens: int, per_layer_k_norm: bool = False) -> dict:
    """One method in a fresh vLLM process (`vllm_worker.py`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        job = {"out": str(out), "pair": str(Path(pair).resolve()), "method": method, "prompts": prompts,
               "speculative_method": method if method != VLLM_PLAIN else None,
               "max_tokens": max_tokens, "spec_tokens": spec_tokens, "per_layer_k_norm": per_layer_k_norm}
        done = subprocess.run([str(python), str(WORKER)], input=json.dumps(job), capture_output=True, text=True,
                              cwd=tmp)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"vLLM ({method}) failed:\n" + "\n".join(done.stderr.strip().splitlines()[-15:]))
        return json.loads(out.read_text())


def acceptance(accepted_per_draft: list[int], spec_tokens: int) -> tuple[float, list[float]]:
    """(mean acceptance length, share of drafts whose position d, 1..spec_tokens, was accepted) from
    the accepted draft tokens of each draft (or round)."""
    if not accepted_per_draft:
        return 0.0, [0.0] * spec_tokens
    drafts = len(accepted_per_draft)
    per_position = [sum(1 for a in accepted_per_draft if a > d) / drafts for d in range(spec_tokens)]
    return 1 + sum(accepted_per_draft) / drafts, per_position


def vllm_acceptance(result: dict, spec_tokens: int) -> tuple[float, list[float]]:
    drafts = result.get("drafts") or 0
    if not drafts:
        return 0.0, [0.0] * spec_tokens
    per_pos = list(result.get("per_position") or [0] * spec_tokens)
    return 1 + (result.get("accepted") or 0) / drafts, [x / drafts for x in per_pos[:spec_tokens]]


def ours(pair, prompts: list[list[int]], selector: str, budget: int, max_tokens: int, profile=None) -> dict:
    """Our engine on the same token ids: per prompt the generated ids, seconds and each round's
    accepted draft tokens (a warm-up decode first)."""
    from ..config import DecodeConfig
    from ..session import DecodeSession

    def config(b: int):
        return DecodeConfig(max_new_tokens=max_tokens, stop_at_eos=False).with_run(selector, budget=b)

    DecodeSession(pair, prompts[0], config(budget), profile=profile).run()
    rows, accepted = [], []
    for ids in prompts:
        session = DecodeSession(pair, ids, config(budget), profile=profile)
        began = time.perf_counter()
        session.run()
        rows.append({"ids": list(session.generated), "seconds": time.perf_counter() - began})
        accepted += [len(r.accepted) for r in session.rounds]
    return {"rows": rows, "accepted_per_round": accepted}


def rate(result: dict) -> float:
    rows = result["rows"]
    return sum(len(r["ids"]) for r in rows) / max(sum(r["seconds"] for r in rows), 1e-9)


def table(entries: list[dict], reference: list[list[int]], spec_tokens: int, shown_positions: int = 5) -> str:
    """The markdown table: one row per (engine, method)."""
    head = ["engine", "method", "tokens = our AR", "mean acceptance length",
            *[f"acc@{d + 1}" for d in range(shown_positions)], "tok/s", "÷ own AR", "÷ our AR"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ar = {e["engine"]: rate(e["result"]) for e in entries if e["method"] == "plain (AR)"}
    for e in entries:
        same = sum(r["ids"] == ref for r, ref in zip(e["result"]["rows"], reference))
        length, per_pos = e.get("acceptance", (None, None))
        tps = rate(e["result"])
        cells = [e["engine"], e["method"], f"{same}/{len(reference)}", "-" if not length else f"{length:.2f}",
                 *(["-"] * shown_positions if not per_pos else [f"{p:.2f}" for p in per_pos[:shown_positions]]),
                 f"{tps:.0f}", f"{tps / ar[e['engine']]:.2f}x", f"{tps / ar['ours']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m taps.eval.vllm_check", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="pair folder (default: the shipped pair)")
    parser.add_argument("--suite", default="humaneval", help="humaneval or examples (default humaneval: held out)")
    parser.add_argument("--prompt-file", default=None, help="a JSONL or text file of prompts instead of --suite")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--spec-tokens", type=int, default=15, help="vLLM's num_speculative_tokens; our DFlash budget")
    parser.add_argument("--budgets", default="16,32", help="DDTree and TAPS budgets of ours (comma-separated)")
    parser.add_argument("--vllm-python", default=str(DEFAULT_PYTHON), help=f"vLLM's Python (default {DEFAULT_PYTHON})")
    add_out_flag(parser, f"{TABLE_FILE} (the table, as printed)", "without --out it is only printed")
    return parser


def main(argv: list[str] | None = None) -> int:
    from .prompts import suite_prompts

    args = build_parser().parse_args(argv)
    try:
        args.vllm_python = os.path.abspath(args.vllm_python)
        version = check_vllm(Path(args.vllm_python))
        target = out_file(args.out, TABLE_FILE)
    except (VllmMissing, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .. import load_pair
    from ..pair import default_pair_path
    from ..profiles import shipped_reference

    pair_dir = Path(args.pair) if args.pair else default_pair_path()
    pair = load_pair(pair_dir, device="cpu", drafter_precision="same")
    _, prompt_list = suite_prompts(args.suite, args.prompt_file)
    prompts = [pair.encode_prompt(p["prompt"]) for p in prompt_list[: args.limit]]
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    profile = shipped_reference(pair)[1]
    entries = []
    print(f"vLLM {version} and this engine, {len(prompts)} prompts of {args.suite}, {args.max_new_tokens} tokens, "
          f"greedy, EOS ignored, batch 1, float32; vLLM eager on the CPU", file=sys.stderr)
    for method, name, fix in ((VLLM_PLAIN, "plain (AR)", False), (VLLM_DFLASH, "DFlash", False),
                              (VLLM_DFLASH, "DFlash, context keys normed per layer", True)):
        print(f"  vLLM: {name} ...", file=sys.stderr)
        result = run_vllm(Path(args.vllm_python), pair_dir, method, prompts, args.max_new_tokens, args.spec_tokens, fix)
        entry = {"engine": "vLLM", "method": name, "result": result}
        if method == VLLM_DFLASH:
            entry["acceptance"] = vllm_acceptance(result, args.spec_tokens)
        entries.append(entry)
    ours_runs = [(AR.name, 1, "plain (AR)"), (DFLASH.name, args.spec_tokens, DFLASH.label)]
    ours_runs += [(DDTREE.name, b, f"{DDTREE.label}@{b}") for b in budgets]
    ours_runs += [(TAPS.name, b, f"{TAPS.label}@{b}") for b in budgets]
    for selector, budget, name in ours_runs:
        print(f"  ours: {name} ...", file=sys.stderr)
        result = ours(pair, prompts, selector, budget, args.max_new_tokens, profile=profile)
        entry = {"engine": "ours", "method": name, "result": result}
        if selector != AR.name:
            entry["acceptance"] = acceptance(result["accepted_per_round"], args.spec_tokens)
        entries.append(entry)
    reference = [r["ids"] for r in next(e for e in entries if e["engine"] == "ours" and e["method"] == "plain (AR)")
                 ["result"]["rows"]]
    text = table(entries, reference, args.spec_tokens)
    print(text)
    if target is not None:
        target.write_text(text + "\n", encoding="utf-8")
        print(f"wrote the table to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A drafter run's checkpoint, mid-training, as a pair with its target, and the tau it gets.

    python scripts/drafter_snapshot.py runs/pair2b                       # 8 HumanEval prompts
    python scripts/drafter_snapshot.py runs/pair2b --prompts 32 --out /tmp/snap

Writes a pair folder (`--out`: the run's target linked, the checkpoint's drafter saved, no scorer)
and decodes the first `--prompts` HumanEval prompts (128 tokens, T=0, end of text ignored) with
DFlash and DDTree at the given budgets; prints the mean tau (tokens per target pass) of each, with
the checkpoint's step and last held-out agreement. Lossless decoding makes the text the target's
own, so tau depends only on the drafter and the budget, not on the machine: the figures compare
across runs and machines. The issue's aim for a shipped pair is a DFlash tau of at least 3.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from dataclasses import fields
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transformers import AutoConfig, AutoTokenizer  # noqa: E402

from taps import DecodeSession, load_pair  # noqa: E402
from taps.drafter import DFlashDrafter  # noqa: E402
from taps.eval.prompts import suite_prompts  # noqa: E402
from taps.train.drafter import DrafterConfig, model_config  # noqa: E402


def export(run: Path, out: Path) -> dict:
    """The checkpoint's drafter as `out`/drafter, next to a link to the run's target; returns the
    checkpoint's step and evaluations."""
    state = torch.load(run / "drafter_ckpt" / "ckpt.pt", map_location="cpu", weights_only=False)
    dc = DrafterConfig(**{f.name: state["drafter_config"][f.name] for f in fields(DrafterConfig)})
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        (out / "target").symlink_to((run / "target").resolve())
    except OSError:                       # Windows without Developer Mode may not make links: a copy
        shutil.copytree(run / "target", out / "target")
    target_config = AutoConfig.from_pretrained(run / "target")
    tokenizer = AutoTokenizer.from_pretrained(run / "target")
    drafter = DFlashDrafter(model_config(dc, target_config, tokenizer.mask_token_id))
    drafter.load_state_dict(state["model"])
    drafter.save_pretrained(out / "drafter")
    return {"step": state["step"], "evals": state["evals"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder with target/ and drafter_ckpt/ckpt.pt")
    parser.add_argument("--out", type=Path, default=Path("/tmp/drafter-snapshot"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--configs", default="dflash@16,ddtree@16,ddtree@32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    info = export(args.run, args.out)
    last = info["evals"][-1] if info["evals"] else None
    print(f"checkpoint step {info['step']}" + (
        f"; held-out at step {last['step']}: loss {last['val_loss']:.3f}, top-1 agreement "
        + " ".join(f"{a:.2f}" for a in last["top1_agreement"][:6]) if last else ""), flush=True)
    pair = load_pair(args.out)
    _, prompts = suite_prompts("humaneval")
    results = {}
    for item in args.configs.split(","):
        selector, budget = item.split("@")
        taus = []
        for prompt in prompts[: args.prompts]:
            session = DecodeSession(pair, prompt["prompt"], selector=selector, budget=int(budget), max_new_tokens=128,
                                    stop_at_eos=False)
            session.run()
            taus.append(len(session.generated) / len(session.rounds))
        results[item] = round(statistics.mean(taus), 3)
        print(f"{item}: tau {statistics.mean(taus):.2f} (per prompt {' '.join(f'{t:.2f}' for t in taus)})", flush=True)
    print(json.dumps({"step": info["step"], "prompts": args.prompts, "tau": results}))


if __name__ == "__main__":
    main()

"""Stage 5: package a trained run folder as a shippable pair under assets/models/<name>/.

Copies the target (weights, config, tokenizer), the drafter, the scorer and the DFlash2 path
selector (when the run has one) with their training logs, writes `pair.json`, and checks that the
result loads with `taps.load_pair`.

    python -m taps.train package --out runs/pair --name taps-code-10m
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from taps.pair import ASSETS

PARTS = {
    "target": ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "training_log.json",
               "unloop_log.json"],
    "drafter": ["config.json", "model.safetensors", "training_log.json"],
    "scorer": ["config.json", "model.safetensors", "training_log.json"],
    "selector": ["config.json", "model.safetensors", "training_log.json"],
}
OPTIONAL = ("scorer", "selector")


def package(run: Path, dest: Path, name: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    manifest = {"name": name}
    for part, files in PARTS.items():
        src = run / part
        if not src.is_dir():
            if part in OPTIONAL:
                continue
            raise FileNotFoundError(f"{src} is missing: run the {part} stage first")
        (dest / part).mkdir(exist_ok=True)
        for f in files:
            if (src / f).exists():
                shutil.copy2(src / f, dest / part / f)
        manifest[part] = part
    (dest / "pair.json").write_text(json.dumps(manifest, indent=2) + "\n")
    from taps.pair import load_pair

    pair = load_pair(dest, device="cpu")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"packaged {name} at {dest} ({size / 1e6:.1f} MB): {pair.describe()}")
    return dest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="the run folder to package")
    parser.add_argument("--name", default="taps-code-10m")
    parser.add_argument("--dest", type=Path, default=None, help="default assets/models/NAME")


def main(args: argparse.Namespace) -> None:
    package(Path(args.out), args.dest or ASSETS / args.name, args.name)

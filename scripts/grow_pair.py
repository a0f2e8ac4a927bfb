"""A pair whose target is grown to more layers without changing what it computes (taps.train.grow).

The grown target decodes exactly the tokens the original does, and the pair's drafter (and
scorer) read the same hidden states through remapped `target_layer_ids`, so every selector's tau
is the original pair's: only the cost of a target forward changes. That isolates what the
target's depth alone does to the speed-up of tree decoding over AR (results/target-depth/):

    python scripts/grow_pair.py PAIR --layers 10 --dest /tmp/grown-10
    python -m taps.bench --suite humaneval --limit 32 --budgets 16,32 ... --pair /tmp/grown-10

A grown pair is a measuring device, not a pair to ship: its new layers add cost and nothing else
until the target stage trains them (`python -m taps.train target --init-from ...`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from taps.train.grow import grow_state, layer_map  # noqa: E402


def parts(pair: Path) -> tuple[dict[str, Path], str]:
    """The pair's part folders that exist, and its name (from pair.json, else the folder's)."""
    manifest = pair / "pair.json"
    names = json.loads(manifest.read_text()) if manifest.is_file() else {}
    found = {part: pair / names.get(part, part) for part in ("target", "drafter", "scorer")}
    missing = [p for p in ("target", "drafter") if not (found[p] / "config.json").is_file()]
    if missing:
        raise SystemExit(f"{pair}: no {' or '.join(missing)} folder with a config.json")
    return {k: v for k, v in found.items() if (v / "config.json").is_file()}, names.get("name", pair.name)


def grow_pair(pair: Path, layers: int, dest: Path) -> dict[int, int]:
    from safetensors.torch import load_file, save_file

    found, name = parts(pair)
    config = json.loads((found["target"] / "config.json").read_text())
    n_from = int(config["num_hidden_layers"])
    try:
        mapping = layer_map(n_from, layers)
    except ValueError as err:
        raise SystemExit(f"--layers {layers}: {err}") from None
    if dest.exists():
        raise SystemExit(f"{dest} exists; choose a new --dest")
    shutil.copytree(found["target"], dest / "target")
    state = grow_state(load_file(str(found["target"] / "model.safetensors")), n_from, layers)
    save_file({k: v.contiguous() for k, v in state.items()}, str(dest / "target" / "model.safetensors"),
              metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    if "layer_types" in config:
        config["layer_types"] = [config["layer_types"][0]] * layers
    (dest / "target" / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    shutil.copytree(found["drafter"], dest / "drafter")
    dconfig = json.loads((dest / "drafter" / "config.json").read_text())
    ids = dconfig["dflash_config"]["target_layer_ids"]
    dconfig["dflash_config"]["target_layer_ids"] = [mapping[i] for i in ids]
    dconfig["num_target_layers"] = layers
    (dest / "drafter" / "config.json").write_text(json.dumps(dconfig, indent=2) + "\n")
    if "scorer" in found:
        shutil.copytree(found["scorer"], dest / "scorer")
    manifest = {"name": f"{name}-grown{layers}", "target": "target", "drafter": "drafter"}
    if "scorer" in found:
        manifest["scorer"] = "scorer"
    (dest / "pair.json").write_text(json.dumps(manifest) + "\n")
    return mapping


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair", type=Path, help="a pair folder (pair.json, or target/ and drafter/)")
    ap.add_argument("--layers", type=int, required=True, help="the grown target's depth")
    ap.add_argument("--dest", type=Path, required=True, help="a new folder for the grown pair")
    args = ap.parse_args()
    mapping = grow_pair(args.pair, args.layers, args.dest)
    print(f"wrote {args.dest}: target layers {len(mapping)} -> {args.layers}, trained layer -> index {mapping}")


if __name__ == "__main__":
    main()

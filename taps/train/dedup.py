"""Exact and near-duplicate detection for source files (MinHash + LSH, numpy only).

* exact: sha1 of the normalised text (``\\r\\n`` -> ``\\n``, trailing blanks of every line and
  leading/trailing blank lines removed).
* near: each file becomes the set of its word 5-gram shingles (words: identifiers, numbers and
  single punctuation characters), hashed to 64 bits. A MinHash signature of ``BANDS * ROWS``
  values is cut into ``BANDS`` bands; files sharing a band are candidates, and a candidate counts
  as a near-duplicate only if the exact Jaccard similarity of the two shingle sets is at least
  ``threshold``. With 20 bands of 6 rows a pair at Jaccard 0.8 becomes a candidate with
  probability 0.998, a pair at 0.5 with 0.27 (then rejected by the exact check).

``deduplicate(texts, protected)`` walks the files in the given order and keeps a file unless it
duplicates a file kept before it. Protected files (the validation split) are always kept and come
first. Everything is seeded, so the result depends only on the texts and their order.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

WORD_RE = re.compile(r"\w+|[^\w\s]")
SHINGLE = 5
BANDS, ROWS = 20, 6
SEED = 20240610
_MIX = np.uint64(0x9E3779B97F4A7C15)


def normalise(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def exact_key(text: str) -> str:
    return hashlib.sha1(normalise(text).encode("utf-8")).hexdigest()


@dataclass
class Verdict:
    kept: bool
    reason: str = ""        # "exact" or "near" when dropped
    of: int = -1            # index of the kept file it duplicates
    jaccard: float = 1.0


class _Shingler:
    """Word ids in first-seen order, each mapped to a seeded random 64-bit value."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.values = np.zeros(0, dtype=np.uint64)
        self.rng = np.random.default_rng(SEED)

    def shingles(self, text: str) -> np.ndarray:
        vocab = self.vocab
        ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in WORD_RE.findall(text)), dtype=np.int64)
        if len(vocab) > len(self.values):
            grow = max(len(vocab) - len(self.values), 1 << 16)
            self.values = np.concatenate([self.values, self.rng.integers(0, 2**63, size=grow, dtype=np.uint64) * 2 + 1])
        n = len(ids) - SHINGLE + 1
        if n <= 0:
            return np.zeros(0, dtype=np.uint64)
        v = self.values[ids]
        h = v[:n].copy()
        for j in range(1, SHINGLE):
            h = h * _MIX + v[j:n + j]   # wraps modulo 2**64 by design
        return np.unique(h)


def _signature(sh: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min over shingles of the top 32 bits of a*h + b (mod 2**64), one value per (a, b)."""
    out = np.empty(len(a), dtype=np.uint64)
    step = max(1, (1 << 22) // max(len(sh), 1))
    for i in range(0, len(a), step):
        mixed = sh[None, :] * a[i:i + step, None] + b[i:i + step, None]
        out[i:i + step] = (mixed >> np.uint64(32)).min(axis=1)
    return out


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    if not len(x) or not len(y):
        return 0.0
    inter = len(np.intersect1d(x, y, assume_unique=True))
    return inter / (len(x) + len(y) - inter)


def deduplicate(texts: list[str], protected: int = 0, threshold: float = 0.8) -> list[Verdict]:
    """One verdict per text, walking them in order; the first ``protected`` texts are always kept."""
    rng = np.random.default_rng(SEED + 1)
    a = rng.integers(0, 2**63, size=BANDS * ROWS, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=BANDS * ROWS, dtype=np.uint64)
    shingler = _Shingler()
    exact: dict[str, int] = {}
    buckets: list[dict[bytes, list[int]]] = [{} for _ in range(BANDS)]
    kept_shingles: dict[int, np.ndarray] = {}
    verdicts: list[Verdict] = []
    with np.errstate(over="ignore"):
        for i, text in enumerate(texts):
            key = exact_key(text)
            if i >= protected and key in exact:
                verdicts.append(Verdict(False, "exact", exact[key]))
                continue
            sh = shingler.shingles(text)
            keys: list[bytes] = []
            best = Verdict(True)
            if len(sh):
                sig = _signature(sh, a, b)
                keys = [sig[k * ROWS:(k + 1) * ROWS].tobytes() for k in range(BANDS)]
                if i >= protected:
                    seen: set[int] = set()
                    for band, k in zip(buckets, keys):
                        for j in band.get(k, ()):
                            if j in seen:
                                continue
                            seen.add(j)
                            sim = jaccard(sh, kept_shingles[j])
                            if sim >= threshold and (best.kept or sim > best.jaccard):
                                best = Verdict(False, "near", j, sim)
            if not best.kept:
                verdicts.append(best)
                continue
            exact.setdefault(key, i)
            if keys:
                kept_shingles[i] = sh
                for band, k in zip(buckets, keys):
                    band.setdefault(k, []).append(i)
            verdicts.append(Verdict(True))
    return verdicts

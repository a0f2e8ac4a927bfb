"""The shipped pair: it loads offline, fits together, and every selector is lossless on it.

`TAPS_CANDIDATE_PAIR=FOLDER` runs the same checks on a pair that is not shipped yet (a packaged run,
`python -m taps.train package --dest FOLDER`), so that it can be shown lossless before it replaces
the shipped one; only the shipped pair's name and model card are not checked then:

    TAPS_CANDIDATE_PAIR=/tmp/taps-code-6m python -m pytest -q -m slow tests/test_shipped_pair.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from taps import DecodeSession, greedy_continuation, load_pair
from taps.pair import default_pair_path
from taps.policies import policy

EXAMPLES = Path(__file__).resolve().parent.parent / "assets" / "examples" / "prompts.jsonl"
CANDIDATE = os.environ.get("TAPS_CANDIDATE_PAIR", "").strip()


@pytest.fixture(scope="module")
def shipped():
    path = Path(CANDIDATE) if CANDIDATE else default_pair_path()
    assert path is not None, "the shipped pair is missing from assets/models"
    assert (path / "pair.json").exists(), f"{path} holds no pair.json"
    return load_pair(path, device="cpu", dtype="float64")


def test_shipped_pair_is_complete(shipped):
    info = shipped.describe()
    assert shipped.drafter is not None and shipped.scorer is not None
    assert info["block_size"] == 16 and shipped.mask_token_id == 1
    if CANDIDATE:
        return
    assert info["name"] == "taps-code-10m"
    card = default_pair_path() / "MODEL_CARD.md"
    assert card.exists() and "BENCH_PLACEHOLDER" not in card.read_text()


def test_shipped_pair_greedy_is_lossless(shipped):
    prompt = "def quicksort(xs):\n    "
    ids = shipped.tokenizer.encode(prompt, add_special_tokens=False)
    reference = greedy_continuation(shipped, ids, 40)
    taus = {}
    for selector, estimator in [("dflash", "marginal"), ("ddtree", "marginal"), ("taps", "learned"),
                                ("taps", "online")]:
        s = DecodeSession(shipped, prompt, selector=selector, estimator=estimator, budget=32, max_new_tokens=40,
                          stop_at_eos=False)
        s.run()
        assert s.generated == reference, (selector, estimator)
        taus[selector] = sum(r.tau for r in s.rounds) / len(s.rounds)
    # the trained drafter does get accepted (DDTree's tree does not depend on timing; TAPS's cost mode does)
    assert taus["ddtree"] > 1.5


@pytest.mark.slow
@pytest.mark.parametrize("part, budget", [(0, 1), (1, 8), (2, 64)])
def test_shipped_pair_lossless_every_selector(shipped, part, budget):
    """Every example prompt once, each at one of the three budgets (a third of the prompts per budget)."""
    prompts = [json.loads(line)["prompt"] for line in EXAMPLES.read_text().splitlines() if line.strip()]
    for prompt in prompts[part::3]:
        ids = shipped.tokenizer.encode(prompt, add_special_tokens=False)
        reference = greedy_continuation(shipped, ids, 64)
        for selector, estimator in [("dflash", "marginal"), ("ddtree", "marginal"), ("taps", "marginal"),
                                    ("taps", "online"), ("taps", "learned"), ("oracle", "marginal"),
                                    ("dflash2", "marginal")]:
            if not policy(selector).runs_on(shipped):      # a candidate pair without a DFlash2 path selector
                continue
            for mode in (("cost", "reach", "utility") if selector == "taps" else ("cost",)):
                s = DecodeSession(shipped, prompt, selector=selector, estimator=estimator, budget=budget,
                                  max_new_tokens=64, stop_at_eos=False, taps_mode=mode,
                                  oracle_tokens=reference if selector == "oracle" else None)
                s.run()
                assert s.generated == reference, (prompt[:20], selector, estimator, mode, budget)

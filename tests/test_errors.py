"""Bad input gets a clear message and leaves the session usable."""

from __future__ import annotations

import json

import pytest
import torch

from taps import DecodeSession, PairError, load_pair
from taps.drafter import DFlashDrafter, drafter_config


@pytest.fixture()
def session(tiny_pair):
    return DecodeSession(tiny_pair, "def f(x):", selector="taps", budget=8, max_new_tokens=12)


@pytest.mark.parametrize("prompt, message", [("", "empty"), ("   \n", "empty"), ([], "empty"),
                                             ("x" * 400, "longer than the model's context")])
def test_bad_prompts(tiny_pair, session, prompt, message):
    with pytest.raises(ValueError, match=message):
        DecodeSession(tiny_pair, prompt)
    first = session.step()
    with pytest.raises(ValueError, match=message):
        session.reset(prompt)
    assert session.rounds == [first]          # nothing lost
    session.step()                            # and still usable


@pytest.mark.parametrize("overrides, message", [
    ({"budget": 0}, "budget must be"), ({"budget": 5000}, "budget must be"), ({"budget": 2.5}, "budget must be"),
    ({"temperature": -0.1}, "temperature must be"), ({"temperature": 99}, "temperature must be"),
    ({"temperature": float("nan")}, "temperature must be"),
    ({"selector": "beam"}, "unknown selector"), ({"estimator": "magic"}, "unknown estimator"),
    ({"taps_mode": "fast"}, "unknown TAPS mode"), ({"block_size": 1}, "block_size"),
    ({"block_size": 99}, "block_size"), ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"score_cap": -1}, "score_cap"),
    ({"selector": "oracle", "temperature": 0.5}, "greedy"),
    ({"selector": "taps", "estimator": "learned"}, "scorer"),
])
def test_bad_settings(tiny_pair, session, overrides, message):
    with pytest.raises(ValueError, match=message):
        DecodeSession(tiny_pair, "abc", **overrides)
    with pytest.raises(ValueError, match=message):
        session.reset(**overrides)
    assert session.config.budget == 8 and session.config.selector == "taps"
    assert session.step().verified_nodes <= 8


def test_step_after_finish_is_clear(tiny_pair):
    s = DecodeSession(tiny_pair, "ab", selector="ar", max_new_tokens=2, stop_at_eos=False)
    s.run()
    with pytest.raises(RuntimeError, match="finished"):
        s.step()
    s.reset()
    assert s.step().tau == 1


def test_generation_stops_at_context_end(tiny_pair):
    prompt = [5] * (tiny_pair.max_context - 6)
    s = DecodeSession(tiny_pair, prompt, selector="ddtree", budget=16, max_new_tokens=100, stop_at_eos=False)
    s.run()
    assert s.stop_reason == "context length"
    assert len(s.tokens) <= tiny_pair.max_context


def test_missing_pair_files(tmp_path):
    with pytest.raises(PairError, match="not found"):
        load_pair(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PairError, match="not a model pair"):
        load_pair(tmp_path / "empty")


def test_missing_drafter_weights(tiny_pair_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_pair_dir, broken)
    (broken / "drafter" / "model.safetensors").unlink()
    with pytest.raises(PairError, match="drafter"):
        load_pair(broken)


def test_mismatched_drafter(tiny_pair_dir, tiny_pair, tmp_path):
    import shutil

    bad = tmp_path / "mismatch"
    shutil.copytree(tiny_pair_dir, bad)
    config = tiny_pair.target.config
    wide = config.__class__(**{**config.to_dict(), "hidden_size": 64, "head_dim": 16})
    DFlashDrafter(drafter_config(wide, num_layers=2, block_size=8)).save_pretrained(bad / "drafter")
    with pytest.raises(PairError, match="hidden size"):
        load_pair(bad)
    deep = drafter_config(config, num_layers=2, block_size=8, target_layer_ids=[1, 9])
    DFlashDrafter(deep).save_pretrained(bad / "drafter")
    with pytest.raises(PairError, match="layers"):
        load_pair(bad)


def test_drafter_without_mask_token(tiny_pair_dir, tmp_path):
    import shutil

    bad = tmp_path / "nomask"
    shutil.copytree(tiny_pair_dir, bad)
    cfg_path = bad / "drafter" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dflash_config"].pop("mask_token_id")
    cfg_path.write_text(json.dumps(cfg))
    tok_cfg = bad / "target" / "tokenizer_config.json"
    tok = json.loads(tok_cfg.read_text())
    tok.pop("mask_token", None)
    tok_cfg.write_text(json.dumps(tok))
    with pytest.raises(PairError, match="mask token"):
        load_pair(bad)


def test_cuda_requested_without_gpu(tiny_pair_dir):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(PairError, match="no CUDA GPU"):
        load_pair(tiny_pair_dir, device="cuda")

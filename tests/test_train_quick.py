"""Quick training pipeline: ``python -m taps.train tokenizer --quick`` then ``target --quick``.

Checks the outputs load with transformers, the tokenizer round-trips source exactly, the
train/val split is stable and disjoint, HumanEval prompts stay out of the training text, and an
interrupted target run resumes from its checkpoint.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from taps.train import data

REPO = Path(__file__).resolve().parents[1]


def run_stage(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "taps.train", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pair")
    run_stage("tokenizer", "--quick", "--out", str(out))
    stdout = run_stage("target", "--quick", "--out", str(out))
    assert "quick check ok" in stdout
    return out


def test_outputs_exist(run_dir: Path) -> None:
    for rel in ["tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                "target/config.json", "target/model.safetensors", "target/training_log.json",
                "target/tokenizer.json", "target_ckpt/ckpt.pt", "data/train.npy", "data/val.npy"]:
        assert (run_dir / rel).is_file(), rel
    log = json.loads((run_dir / "target" / "training_log.json").read_text())
    assert log["steps"] == 30 and log["stopped_by"] == "max_steps"
    assert math.isfinite(log["final_train_loss"]) and math.isfinite(log["final_val_loss"])
    assert log["history"][-1]["loss"] < log["history"][0]["loss"]


def test_tokenizer_loads_and_round_trips(run_dir: Path) -> None:
    from transformers import AutoTokenizer

    for folder in ("tokenizer", "target"):
        tok = AutoTokenizer.from_pretrained(run_dir / folder)
        assert tok.mask_token == "<|mask|>" and tok.mask_token_id == 1
        assert tok.eos_token_id == 0 and tok.pad_token_id == 0 and tok.bos_token_id is None
    samples = ["def f(x):\n\treturn x\n", "s = 'naïve ✓ 日本語 🐍'\r\n", "  \n\n   ", "<|mask|>"]
    samples += data.read_corpus("val")[:3]
    for text in samples:
        assert tok.decode(tok.encode(text, verbose=False)) == text
    assert tok.encode("<|mask|>") == [1]


def test_target_loads(run_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run_dir / "target")
    tok = AutoTokenizer.from_pretrained(run_dir / "target")
    assert model.config.model_type == "qwen3" and model.config.eos_token_id == 0
    ids = torch.tensor([tok.encode("def add(a, b):\n    return")])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()


def test_token_stream_cache(run_dir: Path) -> None:
    stream = np.load(run_dir / "data" / "train.npy")
    meta = json.loads((run_dir / "data" / "train.json").read_text())
    assert stream.dtype == np.int32 and stream.size == meta["tokens"]
    assert stream[-1] == 0 and int((stream == 0).sum()) == meta["files"]


def test_split_is_stable_and_disjoint() -> None:
    train, val = data.corpus_files("train"), data.corpus_files("val")
    assert train == data.corpus_files("train") and val == data.corpus_files("val")
    assert not set(train) & set(val)
    assert 0.01 < len(val) / (len(train) + len(val)) < 0.06
    root = data.stdlib_root()
    assert all(data.split_of(p.relative_to(root).as_posix()) == "val" for p in val)
    for p in train + val:
        rel = p.relative_to(root)
        assert "site-packages" not in rel.parts and "test" not in rel.parts[:-1]
        assert not rel.name.startswith("test_")


def test_no_humaneval_prompt_in_training_text() -> None:
    prompts = data.humaneval_prompts()
    assert len(prompts) == 164 and prompts[0]["id"] == "HumanEval/0"
    texts = data.read_corpus("train")
    for p in prompts:
        assert not any(p["prompt"] in text for text in texts), p["id"]


def test_resume(run_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(run_dir / "tokenizer", tmp_path / "tokenizer")
    run_stage("target", "--quick", "--out", str(tmp_path), "--minutes", "0.0005")
    first = json.loads((tmp_path / "target" / "training_log.json").read_text())
    assert first["stopped_by"] == "minutes" and first["steps"] < 30
    stdout = run_stage("target", "--quick", "--out", str(tmp_path))
    assert "resumed from" in stdout
    log = json.loads((tmp_path / "target" / "training_log.json").read_text())
    assert log["steps"] == 30 and log["resumed_at_steps"] == [first["steps"]]
    # same data windows and optimizer state; CPU float results may differ in the last bits
    reference = json.loads((run_dir / "target" / "training_log.json").read_text())
    assert abs(log["final_val_loss"] - reference["final_val_loss"]) < 0.05

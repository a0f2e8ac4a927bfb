"""Quick training pipeline: ``python -m taps.train tokenizer --quick`` then ``target --quick``.

Checks the outputs load with transformers, the tokenizer round-trips source exactly, the
train/val split is stable and disjoint, HumanEval prompts stay out of the training text, an
interrupted target run resumes from its checkpoint, SIGTERM pauses a run that the same command
resumes, bits per byte divide by the val text's bytes, and the deduplication drops exact and near
copies. The ``slow`` test builds the stdlib+libs corpus (~20 s) and checks its splits.
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
from conftest import needs_humaneval

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


@pytest.mark.slow
def test_outputs_exist(run_dir: Path) -> None:
    for rel in ["tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                "target/config.json", "target/model.safetensors", "target/training_log.json",
                "target/tokenizer.json", "target_ckpt/ckpt.pt", "data/train.npy", "data/val.npy"]:
        assert (run_dir / rel).is_file(), rel
    log = json.loads((run_dir / "target" / "training_log.json").read_text())
    assert log["steps"] == 30 and log["stopped_by"] == "max_steps"
    assert math.isfinite(log["final_train_loss"]) and math.isfinite(log["final_val_loss"])
    assert log["history"][-1]["loss"] < log["history"][0]["loss"]


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_token_stream_cache(run_dir: Path) -> None:
    stream = np.load(run_dir / "data" / "train.npy")
    meta = json.loads((run_dir / "data" / "train.json").read_text())
    assert stream.dtype == np.int32 and stream.size == meta["tokens"]
    assert stream[-1] == 0 and int((stream == 0).sum()) == meta["files"]


@needs_humaneval
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


@needs_humaneval
def test_no_humaneval_prompt_in_training_text() -> None:
    prompts = data.humaneval_prompts()
    assert len(prompts) == 164 and prompts[0]["id"] == "HumanEval/0"
    texts = data.read_corpus("train")
    for p in prompts:
        assert not any(p["prompt"] in text for text in texts), p["id"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_bits_per_byte_denominator(run_dir: Path) -> None:
    """The byte length of every val token adds up to the UTF-8 bytes of the val text."""
    from transformers import AutoTokenizer

    from taps.train.target import token_byte_lengths

    tok = AutoTokenizer.from_pretrained(run_dir / "tokenizer")
    stream = np.load(run_dir / "data" / "val.npy")
    meta = json.loads((run_dir / "data" / "val.json").read_text())
    assert int(token_byte_lengths(tok)[stream].sum()) == meta["bytes"] == data.split_bytes("val", max_files=40)
    log = json.loads((run_dir / "target" / "training_log.json").read_text())
    assert 0 < log["final_val_bpb"] < 16 and log["evals"][-1]["val_bpb"] == log["final_val_bpb"]


@pytest.mark.slow
def test_sigterm_pauses_and_resumes(run_dir: Path, tmp_path: Path) -> None:
    """SIGTERM checkpoints at the next step and exits 75; the same command resumes there. The
    signal is sent once the progress bar shows a step done."""
    import re
    import signal

    shutil.copytree(run_dir / "tokenizer", tmp_path / "tokenizer")
    cmd = [sys.executable, "-m", "taps.train", "target", "--quick", "--out", str(tmp_path), "--max-steps", "100000",
           "--log-every", "1", "--eval-every", "100000"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:                           # tqdm's carriage returns end lines here too
        if re.search(r"target: .*\| [1-9][0-9]*/100000 steps", line):
            proc.send_signal(signal.SIGTERM)
            break
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 75, out
    assert "paused at step" in out
    paused = int(out.split("paused at step ")[1].split()[0])
    assert (tmp_path / "target_ckpt" / "ckpt.pt").is_file()
    stdout = run_stage("target", "--quick", "--out", str(tmp_path), "--max-steps", str(paused + 3),
                       "--log-every", "1", "--eval-every", "100000")
    assert f"resumed from {tmp_path / 'target_ckpt' / 'ckpt.pt'} at step {paused}" in stdout
    log = json.loads((tmp_path / "target" / "training_log.json").read_text())
    assert log["steps"] == paused + 3 and log["resumed_at_steps"] == [paused]


def test_dedup_exact_near_and_protected() -> None:
    from taps.train import dedup

    base = "\n".join(f"def f{i}(x, y):\n    return x * {i} + y - {i * 7} if x else y // {i + 1}" for i in range(60))
    near = base.replace("def f3(", "def g3(").replace("def f40(", "def h40(")
    other = "\n".join(f"class C{i}:\n    value = '{i}' * {i}" for i in range(60))
    texts = [base, base.replace("\n", "   \r\n") + "\n\n", near, other, base]
    verdicts = dedup.deduplicate(texts, protected=1)
    assert [v.kept for v in verdicts] == [True, False, False, True, False]
    assert verdicts[1].reason == "exact" and verdicts[1].of == 0
    assert verdicts[2].reason == "near" and verdicts[2].of == 0 and verdicts[2].jaccard >= 0.8
    # a protected (validation) file is kept even when it duplicates another protected file
    assert all(v.kept for v in dedup.deduplicate([base, base], protected=2))


@pytest.mark.slow
def test_stdlib_libs_corpus_keeps_the_val_split() -> None:
    """stdlib+libs: the same val files as stdlib; no training file duplicates a val file or holds
    a HumanEval prompt; library files are train only, without test code."""
    from taps.train import dedup

    assert data.corpus_files("val", "stdlib+libs") == data.corpus_files("val")
    records = data.corpus_records("train", "stdlib+libs")
    assert {r.source for r in records} == {"stdlib", *data.LIBRARIES}
    val_keys = {dedup.exact_key(t) for t in data.read_corpus("val")}
    prompts = [p["prompt"] for p in data.humaneval_prompts()]
    for r in records:
        assert dedup.exact_key(r.text) not in val_keys, r.rel
        assert not any(p in r.text for p in prompts), r.rel
        if r.source != "stdlib":
            parts = Path(r.rel).parts
            assert not set(parts[:-1]) & data.LIB_EXCLUDED_DIRS and not parts[-1].startswith("test_"), r.rel


def test_step_clock_counts_steps_not_pauses() -> None:
    """`--schedule time` reads training time from StepClock: a step stretched by a pause (SIGSTOP to
    measure speed) counts as a typical step, a busy machine's slower steps count in full."""
    from taps.train.common import StepClock

    now = [0.0]
    clock = StepClock(elapsed=60.0, clock=lambda: now[0])

    def step(took: float) -> float:
        clock.start()
        now[0] += took
        return clock.stop()

    for _ in range(12):
        step(1.0)
    assert clock.elapsed == pytest.approx(72.0)
    now[0] += 500.0                                     # between steps (evaluation, checkpoint): not counted
    assert step(600.0) == pytest.approx(73.0)           # paused mid-step: counted as the median step
    assert clock.paused_s == pytest.approx(599.0) and clock.last == pytest.approx(1.0)
    assert step(3.0) == pytest.approx(76.0)             # three times slower (a busy machine): counted
    early = StepClock(clock=lambda: now[0])
    early.start()
    now[0] += 50.0
    assert early.stop() == pytest.approx(50.0)          # no typical step known yet: counted as it is


def test_progress_rate_counts_training_time(capsys) -> None:
    """Given a stage's training time, the progress bar's rate is per second of it: a run that was
    paused (wall time passing, training time not) shows its real rate, not a collapsed one; the
    ETA is bounded by the time budget."""
    from taps.train.common import Progress

    progress = Progress(1000, "drafter", budget_s=3600)
    progress.update(100, elapsed=60.0)
    progress.t0 -= 1200                                   # twenty minutes of wall time, paused
    progress.update(160, elapsed=90.0, extra="loss 2.0")
    progress.close()
    line = capsys.readouterr().out
    assert "160/1000 steps, 2.00 step/s | 1.5 min | eta 7.0 min | loss 2.0" in line
    progress = Progress(1000, "drafter", budget_s=200)
    progress.update(100, elapsed=60.0)
    assert progress.postfix(160, 90.0) == "2.00 step/s | 1.5 min | eta 1.8 min"


# ------------------------------------------------------------------------------ unloop (unlikelihood)
def test_repeat_mask_marks_tokens_that_complete_a_seen_ngram() -> None:
    import torch

    from taps.train.unloop import repeat_mask

    seq = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 9], [1, 2, 3, 4, 5, 6, 7, 8]])
    # n=2: (5,6) ends at 1, again at 4; (6,7) ends at 2, again at 5; (7,5) ends at 3, again at 6
    assert repeat_mask(seq, 0, 2).tolist() == [[0, 0, 0, 0, 1, 1, 1, 0], [0] * 8]
    assert repeat_mask(seq, 5, 2).tolist()[0] == [0, 0, 0, 0, 0, 1, 1, 0]      # only from `start` on
    assert repeat_mask(seq, 0, 3).tolist()[0] == [0, 0, 0, 0, 0, 1, 1, 0]      # (5,6,7) at 5, (6,7,5) at 6


def test_distinct_words_averages_over_texts() -> None:
    from taps.train.unloop import distinct_words

    # a fixed-length continuation with under 4 words is one run of symbols: it counts as all repeats
    assert distinct_words(["a b c d a b c d", "a b c d e", "too short"]) == pytest.approx((4 / 5 + 1 + 0) / 3)
    assert distinct_words(["EEEEEEEE"]) == 0.0
    assert distinct_words([]) is None


def test_unlikelihood_step_lowers_the_repeated_tokens_probability() -> None:
    """One gradient step on the loss lowers the probability of every masked token and leaves the
    loss at zero when nothing is masked."""
    import torch

    from taps.train.unloop import unlikelihood_loss

    torch.manual_seed(0)
    logits = torch.randn(1, 5, 11, requires_grad=True)
    seq = torch.tensor([[1, 2, 3, 2, 3, 4]])
    mask = torch.tensor([[0, 0, 0, 0, 1, 0]], dtype=torch.bool)          # the second "3"
    prob = lambda lg: lg.softmax(-1)[0, 3, 3].item()                     # noqa: E731  (predicts seq[4])
    before = prob(logits)
    loss = unlikelihood_loss(logits, seq, mask)
    assert loss.item() == pytest.approx(-math.log(1 - before), rel=1e-5)
    loss.backward()
    with torch.no_grad():
        after = prob(logits - 1.0 * logits.grad)
    assert after < before
    assert logits.grad[0, :3].abs().sum() == 0 and logits.grad[0, 4].abs().sum() == 0
    assert unlikelihood_loss(logits, seq, torch.zeros_like(mask)).item() == 0.0


@pytest.mark.parametrize("option, value, message", [
    ("--steps", "0", "--steps must be at least 1, got 0"),
    ("--alpha", "-0.5", "--alpha must be from 0.0 to 100.0, got -0.5"),
    ("--ngram", "1", "--ngram must be at least 2, got 1"),
    ("--warmup-steps", "-3", "--warmup-steps must be at least 0, got -3"),
    ("--lr", "0", "--lr must be from 1e-08 to 1.0, got 0.0"),
])
def test_unloop_refuses_out_of_range_options(tmp_path: Path, option: str, value: str, message: str, capsys) -> None:
    """An out-of-range option is refused with its name and range, as one line and exit status 2,
    before anything is read or moved (the command's own entry point, in this process)."""
    from taps.train.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["unloop", "--out", str(tmp_path), option, value])
    assert exit_.value.code == 2 and capsys.readouterr().err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_unloop_stage_fine_tunes_the_target_and_keeps_the_original(run_dir: Path, tmp_path: Path) -> None:
    """`unloop --quick` on a quick target run: the target moves to target_mle/, the fine-tuned one
    takes its place with its log (before/after measurements), and a second run starts again from
    target_mle (never from its own output)."""
    from transformers import AutoModelForCausalLM

    for part in ("tokenizer", "target", "target_ckpt", "data"):
        shutil.copytree(run_dir / part, tmp_path / part)
    stdout = run_stage("unloop", "--quick", "--out", str(tmp_path))
    assert "continuing the target stage's optimizer state" in stdout and "quick check ok" in stdout
    for rel in ["target_mle/model.safetensors", "target/model.safetensors", "target/tokenizer.json",
                "target/training_log.json", "target/unloop_log.json", "unloop_ckpt/ckpt.pt"]:
        assert (tmp_path / rel).is_file(), rel
    log = json.loads((tmp_path / "target" / "unloop_log.json").read_text())
    assert log["steps"] == 12 and len(log["history"]) == 12
    for when in ("before", "after"):
        share = log[when]["distinct4_words"]                      # None: no text of 4 words (a tiny model)
        assert math.isfinite(log[when]["val_bpb"]) and (share is None or 0 <= share <= 1)
    original = AutoModelForCausalLM.from_pretrained(run_dir / "target").state_dict()
    kept = AutoModelForCausalLM.from_pretrained(tmp_path / "target_mle").state_dict()
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "target").state_dict()
    assert all(np.array_equal(original[k].numpy(), kept[k].numpy()) for k in original)
    assert any(not np.array_equal(original[k].numpy(), tuned[k].numpy()) for k in original)
    again = run_stage("unloop", "--quick", "--out", str(tmp_path), "--no-resume", "--warmup-steps", "0")
    assert "moved" not in again and "continuing the target stage's optimizer state" in again
    second = json.loads((tmp_path / "target" / "unloop_log.json").read_text())
    assert second["before"] == log["before"]                       # measured on target_mle again


def test_trim_heap_hands_freed_pages_back():
    """The scorer stage trims the heap before each sequence (taps.train.common.trim_heap): on glibc
    the call runs, and after a freed burst of small blocks the process is no larger than before it."""
    import platform

    from taps.train.common import trim_heap

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e6

    assert trim_heap()
    before = rss_mb()
    blocks = [bytearray(64 * 1024) for _ in range(4000)]     # 256 MB below the mmap threshold
    kept = [bytes(16) for _ in range(4000)]                   # small objects left between them
    del blocks
    assert trim_heap()
    assert rss_mb() - before < 64, "the freed 256 MB stayed in the process"
    assert len(kept) == 4000


@pytest.mark.slow
def test_init_from_grows_the_trained_target_without_changing_it(run_dir: Path, tmp_path: Path) -> None:
    """--init-from a 2-layer quick target into a 4-layer run: the grown model's first evaluation
    is the trained model's own last one, the log says where each trained layer went, and the run
    trains on from there."""
    shutil.copytree(run_dir / "tokenizer", tmp_path / "tokenizer")
    stdout = run_stage("target", "--quick", "--out", str(tmp_path), "--num-hidden-layers", "4",
                       "--init-from", str(run_dir / "target"), "--max-steps", "30", "--lr", "1e-3")
    assert "2 trained layers, grown to 4" in stdout
    trained = json.loads((run_dir / "target" / "training_log.json").read_text())
    log = json.loads((tmp_path / "target" / "training_log.json").read_text())
    assert log["init"]["layers_from"] == 2 and log["init"]["layer_map"] == {"0": 0, "1": 3}
    assert abs(log["init"]["val_loss"] - trained["final_val_loss"]) < 1e-5
    assert log["model_config"]["num_hidden_layers"] == 4 and log["steps"] == 30


@pytest.mark.parametrize("option, value, message", [
    ("--init-from", "no/such/folder", "no trained target there"),
    ("--hidden-size", "96", "another shape: hidden_size 64 (the run has 96)"),
    ("--num-hidden-layers", "1", "a model can grow, not shrink"),
])
@pytest.mark.slow
def test_init_from_refuses_a_target_that_does_not_fit(run_dir: Path, tmp_path: Path, option: str, value: str,
                                                      message: str) -> None:
    shutil.copytree(run_dir / "tokenizer", tmp_path / "tokenizer")
    args = ["--init-from", str(run_dir / "target"), option, value]
    if option == "--hidden-size":
        args += ["--num-attention-heads", "3"]
    proc = subprocess.run([sys.executable, "-m", "taps.train", "target", "--quick", "--out", str(tmp_path), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr + proc.stdout
    assert not (tmp_path / "target").exists()

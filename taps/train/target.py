"""Stage 2: the target model, a small Qwen3-architecture causal LM trained from scratch.

Trains on random windows of the tokenized train split (``data.token_stream``), AdamW with linear
warmup and cosine decay to 10% of the peak learning rate. The run stops at ``--max-steps`` or after
``--minutes`` of training, whichever comes first. The time budget counts only the training steps
themselves (not evaluation, checkpoints or start-up), summed over resumes. By default the
schedule follows ``--max-steps`` (deterministic for a seed); ``--schedule time`` decays by
whichever of steps or time runs out first, so a slowed-down run on a shared machine still ends
at the low learning rate (data order stays seeded, the learning rates then depend on timing).

Validation covers the whole validation split (``--eval-windows 0``, the default): the split's
token stream, preceded by one ``<|endoftext|>``, cut into consecutive windows of ``--seq-len``
tokens, so every token (each file's closing ``<|endoftext|>`` included) is predicted once. It is
reported as nats per token and as bits per byte (total nats / ln 2 / UTF-8 bytes of the split's
text), which does not depend on the tokenizer.

Checkpoints (model, optimizer, step, RNG states) go to ``OUT/target_ckpt/ckpt.pt`` every few
minutes and an interrupted run resumes from there. SIGTERM or SIGINT (Ctrl-C) pauses a run: it
finishes the current step (an evaluation in progress is abandoned), saves a checkpoint and exits
with status 75; the same command run again resumes where it stopped. The finished model is saved
with ``save_pretrained`` to ``OUT/target/``, together with the tokenizer and ``training_log.json``.

    python -m taps.train target --out runs/pair --minutes 55
    python -m taps.train target --out runs/pair --minutes 55 --schedule time --max-steps 1400
    python -m taps.train target --out runs/pair2 --corpus stdlib+libs --num-hidden-layers 8 ...
    python -m taps.train target --out /tmp/q --quick     # seconds; fails unless the loss drops
    python -m taps.train target --out runs/pair5 --num-hidden-layers 12 --init-from assets/wip/taps-code-6m-target ...
                                                         # a deeper target grown from a trained one
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Threads that sleep instead of spinning at OpenMP barriers: on a small shared CPU machine this
# keeps training ~2.5x faster while another process is busy, at little cost when idle. Only takes
# effect if torch is not imported yet (the command-line path).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F

from taps.train import data
from taps.train.common import (
    StepClock,
    acquire_lock,
    add_config_arguments,
    apply_arguments,
    check_loss_dropped,
    cosine_lr,
    load_checkpoint,
    release_lock,
    save_checkpoint,
    weighted_split,
)
from taps.train.grow import load_init


@dataclass
class ModelConfig:
    vocab_size: int = 4096  # overwritten by the tokenizer's size
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True


@dataclass
class TrainConfig:
    corpus: str = "stdlib"
    max_files: int | None = None  # only the first N files of each split (quick mode)
    seq_len: int = 512
    batch_size: int = 16
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 200
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    max_steps: int = 700  # ~25 min on 2 idle CPU cores, ~55 min shared with one other job
    minutes: float = 60.0  # wall-clock budget for training, summed over resumes
    schedule: str = "steps"  # "steps": cosine over max_steps (deterministic); "time": whichever
    #                          of steps or the time budget runs out first drives the decay
    seed: int = 1337
    stdlib_weight: float = 1.0  # sampling weight of a stdlib token against a library token (stdlib+libs)
    log_every: int = 10
    eval_every: int = 100
    eval_windows: int = 0  # 0: the whole validation split; N: only its first N windows
    ckpt_minutes: float = 5.0
    threads: int = 0  # torch threads; 0: every core this process may use (1 with --quick)
    init_from: str = ""  # a trained target folder to start from, grown to this depth if shallower (taps.train.grow)


QUICK_MODEL = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=32, max_position_embeddings=256)
QUICK_TRAIN = dict(max_files=40, seq_len=128, batch_size=8, lr=3e-3, warmup_steps=5, max_steps=30,
                   minutes=5.0, log_every=5, eval_every=15, eval_windows=8)


# ------------------------------------------------------------------------------------------------
# model, schedule, batches

def build_model(mc: ModelConfig):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=mc.vocab_size,
        hidden_size=mc.hidden_size,
        intermediate_size=mc.intermediate_size,
        num_hidden_layers=mc.num_hidden_layers,
        num_attention_heads=mc.num_attention_heads,
        num_key_value_heads=mc.num_key_value_heads,
        head_dim=mc.head_dim,
        max_position_embeddings=mc.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": mc.rope_theta},
        tie_word_embeddings=mc.tie_word_embeddings,
        eos_token_id=0,
        pad_token_id=0,
        bos_token_id=None,
        dtype="float32",
        attn_implementation="sdpa",
    )
    return Qwen3ForCausalLM(config)


def lr_at(step: int, tc: TrainConfig, elapsed: float = 0.0) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr`` at ``max_steps``
    (with ``schedule="time"``: at ``max_steps`` or at the end of the time budget, if sooner)."""
    fraction = min(1.0, elapsed / (tc.minutes * 60)) if tc.schedule == "time" else 0.0
    return cosine_lr(step, tc.lr, tc.warmup_steps, tc.max_steps, tc.min_lr_ratio, fraction)


def make_optimizer(model: torch.nn.Module, tc: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (and the embedding), none on norms."""
    return torch.optim.AdamW(weighted_split(model, tc.weight_decay), lr=tc.lr, betas=(tc.beta1, tc.beta2))


def windows(stream: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets for windows of ``seq_len + 1`` tokens at ``starts``."""
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    chunk = torch.from_numpy(stream[idx].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


def stdlib_prefix(meta_path: Path, tc: TrainConfig) -> int:
    """Tokens of the stdlib files at the head of the train stream (the stream lists the stdlib
    first), with their end-of-file tokens; 0 when every file is stdlib or no weighting is asked."""
    if tc.stdlib_weight == 1.0:
        return 0
    sources = json.loads(meta_path.read_text()).get("sources", {})
    if set(sources) <= {"stdlib"}:
        return 0
    if next(iter(sources)) != "stdlib":
        raise SystemExit("stdlib_weight needs the stdlib files at the head of the train stream")
    std = sources["stdlib"]
    print(f"sampling stdlib tokens with weight {tc.stdlib_weight} ({std['tokens'] + std['files']:,} stdlib tokens)")
    return std["tokens"] + std["files"]


def sample_starts(rng: np.random.Generator, n: int, stdlib_tokens: int, tc: TrainConfig) -> np.ndarray:
    """Window starts for one batch: uniform over the train stream, or with ``stdlib_weight`` != 1
    the stdlib head ``[0, stdlib_tokens)`` drawn with that weight per token (windows stay inside
    one part)."""
    span = tc.seq_len + 1
    if not stdlib_tokens:
        return rng.integers(0, n - span, size=tc.batch_size)
    w = tc.stdlib_weight * stdlib_tokens
    p_stdlib = w / (w + (n - stdlib_tokens))
    pick = rng.random(tc.batch_size) < p_stdlib
    return np.where(pick, rng.integers(0, stdlib_tokens - span, size=tc.batch_size),
                    rng.integers(stdlib_tokens, n - span, size=tc.batch_size))


def loss_on(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def token_byte_lengths(tokenizer) -> np.ndarray:
    """UTF-8 bytes that each token id stands for (0 for special tokens). In a byte-level BPE every
    character of a token's string stands for exactly one byte."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    vocab = backend.get_vocab(with_added_tokens=True)
    special = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
    lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for token, i in vocab.items():
        lengths[i] = 0 if token in special else len(token)
    return lengths


@torch.no_grad()
def evaluate(model: torch.nn.Module, stream: np.ndarray, eot_id: int, token_bytes: np.ndarray, tc: TrainConfig,
             stop=lambda: False) -> dict[str, float] | None:
    """Loss over ``[<|endoftext|>] + stream`` cut into consecutive windows of ``seq_len`` tokens
    (all of them, or the first ``eval_windows``): nats per token and bits per byte. None if
    ``stop()`` turns true on the way."""
    seq = np.concatenate([np.array([eot_id], dtype=stream.dtype), stream])
    n = len(seq) - 1  # tokens predicted
    starts = np.arange(0, n, tc.seq_len)
    if tc.eval_windows:
        starts = starts[:tc.eval_windows]
    full = starts[starts + tc.seq_len <= n]
    batches = [(full[i:i + tc.batch_size], tc.seq_len) for i in range(0, len(full), tc.batch_size)]
    batches += [(starts[-1:], n - int(starts[-1]))] if len(starts) > len(full) else []
    was_training = model.training
    model.eval()
    nats, tokens, n_bytes = 0.0, 0, 0
    try:
        for batch, length in batches:
            if stop():
                return None
            x, y = windows(seq, batch, length)
            logits = model(input_ids=x, use_cache=False).logits
            nats += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1),
                                    reduction="sum").item()
            tokens += y.numel()
            n_bytes += int(token_bytes[y.numpy()].sum())
    finally:
        model.train(was_training)
    return {"val_loss": nats / tokens, "val_bpb": nats / math.log(2) / max(n_bytes, 1),
            "val_tokens": tokens, "val_bytes": n_bytes}


# ------------------------------------------------------------------------------------------------
# training

PAUSED_EXIT = 75  # EX_TEMPFAIL: paused by a signal; run the same command again to resume


def train(out: Path, tokenizer_dir: Path, mc: ModelConfig, tc: TrainConfig, resume: bool = True,
          quick: bool = False) -> dict[str, Any]:
    from transformers import AutoTokenizer

    # all cores, but one thread for the tiny quick model (its ops are too small to split)
    torch.set_num_threads(tc.threads or (1 if quick else len(os.sched_getaffinity(0))))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    mc.vocab_size = len(tokenizer)
    max_pos = mc.max_position_embeddings
    if tc.seq_len > max_pos:
        raise ValueError(f"seq_len {tc.seq_len} exceeds max_position_embeddings {max_pos}")

    # data: cached token streams; validation over the whole split
    train_stream = data.token_stream(tokenizer, "train", out / "data", tc.corpus, tc.max_files)
    val_stream = data.token_stream(tokenizer, "val", out / "data", tc.corpus, tc.max_files)
    if len(val_stream) <= tc.seq_len + 1 or len(train_stream) <= tc.seq_len + 1:
        raise ValueError("corpus too small for seq_len")
    stdlib_tokens = stdlib_prefix(out / "data" / "train.json", tc)
    if stdlib_tokens and train_stream[stdlib_tokens - 1] != tokenizer.convert_tokens_to_ids(data.EOT_TOKEN):
        raise SystemExit("the stdlib head of the train stream does not end at a file boundary")
    eot_id = tokenizer.convert_tokens_to_ids(data.EOT_TOKEN)
    token_bytes = token_byte_lengths(tokenizer)
    val_bytes = data.split_bytes("val", tc.corpus, tc.max_files)
    if int(token_bytes[val_stream].sum()) != val_bytes:
        print(f"warning: val tokens stand for {int(token_bytes[val_stream].sum()):,} bytes, the text has "
              f"{val_bytes:,}: bits per byte will be off")
    n_windows = -(-len(val_stream) // tc.seq_len)
    shown = f"{min(tc.eval_windows, n_windows)} of {n_windows}" if tc.eval_windows else f"all {n_windows}"
    print(f"data: {tc.corpus}: train {len(train_stream):,} tokens, val {len(val_stream):,} tokens "
          f"= {val_bytes:,} bytes ({val_bytes / len(val_stream):.3f} bytes/token); "
          f"evaluating {shown} val windows of {tc.seq_len}")

    # model, optimizer, RNGs
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    model = build_model(mc)
    model.train()
    optimizer = make_optimizer(model, tc)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {asdict(mc)}")
    print(f"torch threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")

    step, tokens_seen, elapsed = 0, 0, 0.0
    init: dict[str, Any] | None = None
    history: list[dict[str, float]] = []
    evals: list[dict[str, float]] = []
    step_losses: list[float] = []
    resumes: list[int] = []
    ckpt_path = out / "target_ckpt" / "ckpt.pt"
    lock = ckpt_path.with_name("LOCK")
    acquire_lock(lock)
    ckpt = load_checkpoint(ckpt_path) if resume else None
    if ckpt is not None:
        if ckpt["model_config"] != asdict(mc):
            raise SystemExit(f"checkpoint {ckpt_path} has a different model config; use --no-resume")
        for key in ("seq_len", "batch_size", "seed", "corpus"):
            if ckpt["train_config"].get(key, "stdlib") != getattr(tc, key):
                raise SystemExit(f"checkpoint {ckpt_path} has {key}={ckpt['train_config'].get(key)}; "
                                 f"use --no-resume or the same value")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["torch_rng"])
        rng.bit_generator.state = ckpt["numpy_rng"]
        step, tokens_seen, elapsed = ckpt["step"], ckpt["tokens_seen"], ckpt["elapsed"]
        history, evals, step_losses = ckpt["history"], ckpt["evals"], ckpt["step_losses"]
        resumes = ckpt["resumes"] + [step]
        init = ckpt.get("init")
        print(f"resumed from {ckpt_path} at step {step} ({elapsed / 60:.1f} min trained)")
    elif tc.init_from:
        init = load_init(model, Path(tc.init_from))
        print(f"started from {init['from']}: {init['layers_from']} trained layers, grown to {init['layers_to']} "
              f"(new layers after {init['inserted_after']}; trained layer -> index {init['layer_map']})")

    def state() -> dict[str, Any]:
        return {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": rng.bit_generator.state,
            "step": step, "tokens_seen": tokens_seen, "elapsed": elapsed,
            "history": history, "evals": evals, "step_losses": step_losses, "resumes": resumes,
            "model_config": asdict(mc), "train_config": asdict(tc), "init": init,
        }

    # SIGTERM / Ctrl-C: checkpoint at the next step boundary, then exit with PAUSED_EXIT
    interrupted: int | None = None  # the signal number; the handler only records it (no I/O)

    def on_signal(signum, frame) -> None:
        nonlocal interrupted
        interrupted = signum

    def pause() -> None:
        for s, handler in old_handlers.items():
            signal.signal(s, handler)
        save_checkpoint(ckpt_path, state())
        release_lock(lock)
        print(f"\n{signal.Signals(interrupted).name}: paused at step {step} ({elapsed / 60:.1f} min trained); "
              f"checkpoint saved to {ckpt_path}; run the same command again to resume", flush=True)
        raise SystemExit(PAUSED_EXIT)

    def run_eval() -> dict[str, float] | None:
        t0 = time.time()
        result = evaluate(model, val_stream, eot_id, token_bytes, tc, stop=lambda: interrupted is not None)
        if result is not None:
            result = {"step": step, **result, "eval_s": round(time.time() - t0, 1)}
        return result

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    if init is not None and step == 0 and "val_bpb" not in init:
        start = run_eval()   # the grown model before any step: the trained model's own figure
        if start is not None:
            init.update(val_loss=start["val_loss"], val_bpb=start["val_bpb"])
            print(f"eval  step     0 | val loss {start['val_loss']:.4f} nats/token | "
                  f"{start['val_bpb']:.4f} bits/byte (as started)", flush=True)

    budget = tc.minutes * 60
    tokens_per_step = tc.batch_size * tc.seq_len
    t_session, elapsed_session = time.time(), elapsed  # wall vs training time since start-up, for the ETA
    t_ckpt = time.time()
    clock = StepClock(elapsed)         # training steps only; a pause (SIGSTOP) does not eat the schedule
    train_log, tokens_log, losses_log = 0.0, 0, []
    stopped_by = "max_steps"
    while step < tc.max_steps:
        if elapsed >= budget:
            stopped_by = "minutes"
            break
        if interrupted is not None:
            pause()

        clock.start()
        lr = lr_at(step, tc, elapsed)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = sample_starts(rng, len(train_stream), stdlib_tokens, tc)
        x, y = windows(train_stream, starts, tc.seq_len)
        loss = loss_on(model, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        step_losses.append(loss.item())
        step += 1
        tokens_seen += tokens_per_step
        elapsed = clock.stop()
        train_log += clock.last
        tokens_log += tokens_per_step
        losses_log.append(step_losses[-1])

        if step % tc.log_every == 0 or step == tc.max_steps:
            tok_s = tokens_log / max(train_log, 1e-9)
            steps_left_s = (tc.max_steps - step) * tokens_per_step / max(tok_s, 1e-9)
            eta = min(steps_left_s, max(0.0, budget - elapsed))
            # wall clock per second of training in this session (evaluations, checkpoints), less
            # its pauses (SIGSTOP while a benchmark runs), which would otherwise push the end out
            overhead = (time.time() - t_session - clock.paused_s) / max(elapsed - elapsed_session, 1e-9)
            ends = time.strftime("%H:%M", time.localtime(time.time() + eta * overhead))
            mean_loss = sum(losses_log) / len(losses_log)
            history.append({"step": step, "loss": mean_loss, "lr": lr, "tok_s": tok_s,
                            "train_min": round(elapsed / 60, 2)})
            print(f"step {step:5d}/{tc.max_steps} | loss {mean_loss:.4f} | lr {lr:.2e} | "
                  f"{tok_s:7.0f} tok/s | {elapsed / 60:5.1f} min | eta {eta / 60:5.1f} min (ends ~{ends})",
                  flush=True)
            train_log, tokens_log, losses_log = 0.0, 0, []

        if step % tc.eval_every == 0 and step < tc.max_steps and elapsed < budget:
            result = run_eval()
            if result is not None:
                evals.append(result)
                print(f"eval  step {step:5d} | val loss {result['val_loss']:.4f} nats/token | "
                      f"{result['val_bpb']:.4f} bits/byte | {result['eval_s']:.0f} s", flush=True)

        if time.time() - t_ckpt >= tc.ckpt_minutes * 60 and interrupted is None:
            save_checkpoint(ckpt_path, state())
            t_ckpt = time.time()
            print(f"checkpoint step {step} -> {ckpt_path}", flush=True)

    # final evaluation, checkpoint and export
    final = run_eval()
    if final is None:
        pause()
    for s, handler in old_handlers.items():
        signal.signal(s, handler)
    if not evals or evals[-1]["step"] != step:
        evals.append(final)
    else:
        evals[-1] = final
    save_checkpoint(ckpt_path, state())
    tail = step_losses[-min(20, len(step_losses)):] or [float("nan")]
    train_loss = sum(tail) / len(tail)
    val_loss, val_bpb = final["val_loss"], final["val_bpb"]
    print(f"done: {step} steps ({stopped_by}), {tokens_seen:,} tokens, {elapsed / 60:.1f} min of training, "
          f"train loss {train_loss:.4f}, val loss {val_loss:.4f} nats/token = {val_bpb:.4f} bits/byte", flush=True)

    target_dir = out / "target"
    model.generation_config.eos_token_id = 0
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = None
    model.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    log = {
        "model_config": asdict(mc),
        "train_config": asdict(tc),
        "parameters": n_params,
        "data": {"corpus": tc.corpus, "train_tokens": int(len(train_stream)), "val_tokens": int(len(val_stream)),
                 "val_bytes": val_bytes, "val_bytes_per_token": val_bytes / len(val_stream)},
        "steps": step,
        "stopped_by": stopped_by,
        "tokens_seen": tokens_seen,
        "epochs": tokens_seen / len(train_stream),
        "wall_time_s": round(elapsed, 1),  # training steps only (no evaluation, checkpoints, start-up)
        "paused_s": round(clock.paused_s, 1),  # this session's pauses (SIGSTOP) left out of it
        "tokens_per_s": tokens_seen / max(elapsed, 1e-9),
        "final_train_loss": train_loss,
        "final_val_loss": val_loss,
        "final_val_bpb": val_bpb,
        "val_scope": "all windows" if not tc.eval_windows else f"first {tc.eval_windows} windows",
        "resumed_at_steps": resumes,
        "init": init,
        "evals": evals,
        "history": history,
        "torch_threads": torch.get_num_threads(),
    }
    (target_dir / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(f"saved {target_dir}")
    release_lock(lock)  # a crash leaves a stale lock, which the next run ignores (dead pid)

    if quick and len(step_losses) < 10:
        print(f"quick check skipped: only {len(step_losses)} steps so far")
    elif quick:
        check_loss_dropped(step_losses, "target")
    return log


# ------------------------------------------------------------------------------------------------
# command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder (reads OUT/tokenizer)")
    parser.add_argument("--tokenizer", type=Path, default=None, help="default OUT/tokenizer")
    parser.add_argument("--quick", action="store_true", help="tiny model, ~30 steps, asserts loss drops")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                        help="continue from OUT/target_ckpt if present (default on)")
    add_config_arguments(parser, TrainConfig, choices={"corpus": data.CORPORA})
    add_config_arguments(parser, ModelConfig, skip=("vocab_size", "tie_word_embeddings"))


def main(args: argparse.Namespace) -> None:
    mc = ModelConfig(**(QUICK_MODEL if args.quick else {}))
    tc = TrainConfig(**(QUICK_TRAIN if args.quick else {}))
    apply_arguments(args, tc, mc)
    tokenizer_dir = args.tokenizer or Path(args.out) / "tokenizer"
    train(Path(args.out), tokenizer_dir, mc, tc, resume=args.resume, quick=args.quick)

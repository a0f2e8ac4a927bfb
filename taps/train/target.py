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
    python -m taps.train target --out runs/pair5 --num-hidden-layers 12 --init-from TRAINED_TARGET ...
                                                         # a deeper target grown from a trained one

``--init-from`` takes a trained target folder (the earlier pairs' targets were restored from git
history; docs/training-history.md says how).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from taps.train import data
from taps.train.common import (
    Checkpointer,
    Progress,
    StepClock,
    TrainError,
    add_config_arguments,
    apply_arguments,
    check_loss_dropped,
    cosine_lr,
    usable_cores,
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
    max_steps: int = 700  # the schedule's length in steps (and its end, with --schedule steps)
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
        raise TrainError("stdlib_weight needs the stdlib files at the head of the train stream")
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

@dataclass
class TargetData:
    """The token streams a run trains and validates on, and what bits per byte divide by."""
    train_stream: np.ndarray
    val_stream: np.ndarray
    stdlib_tokens: int         # the stdlib head of the train stream (0: no weighting)
    eot_id: int
    token_bytes: np.ndarray    # UTF-8 bytes per token id
    val_bytes: int             # UTF-8 bytes of the validation split's text


def load_data(out: Path, tokenizer, tc: TrainConfig) -> TargetData:
    """The cached token streams of the corpus' splits, checked and described in one line."""
    train_stream = data.token_stream(tokenizer, "train", out / "data", tc.corpus, tc.max_files)
    val_stream = data.token_stream(tokenizer, "val", out / "data", tc.corpus, tc.max_files)
    if len(val_stream) <= tc.seq_len + 1 or len(train_stream) <= tc.seq_len + 1:
        raise ValueError("corpus too small for seq_len")
    stdlib_tokens = stdlib_prefix(out / "data" / "train.json", tc)
    eot_id = tokenizer.convert_tokens_to_ids(data.EOT_TOKEN)
    if stdlib_tokens and train_stream[stdlib_tokens - 1] != eot_id:
        raise TrainError("the stdlib head of the train stream does not end at a file boundary")
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
    return TargetData(train_stream, val_stream, stdlib_tokens, eot_id, token_bytes, val_bytes)


@dataclass
class TargetRun:
    """What the training loop moves along and a checkpoint keeps (with the model, the optimizer
    and the random generators' states)."""
    step: int = 0
    tokens_seen: int = 0
    elapsed: float = 0.0                                   # training time, summed over resumes
    history: list[dict[str, float]] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)
    resumes: list[int] = field(default_factory=list)      # the steps a run resumed at
    init: dict[str, Any] | None = None                     # what --init-from did (load_init)


def checkpoint_state(model, optimizer, rng: np.random.Generator, run: TargetRun, mc: ModelConfig,
                     tc: TrainConfig) -> dict[str, Any]:
    return {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(), "numpy_rng": rng.bit_generator.state,
        "step": run.step, "tokens_seen": run.tokens_seen, "elapsed": run.elapsed,
        "history": run.history, "evals": run.evals, "step_losses": run.step_losses, "resumes": run.resumes,
        "model_config": asdict(mc), "train_config": asdict(tc), "init": run.init,
    }


def resume_or_start(ckpt: Checkpointer, resume: bool, model, optimizer, rng: np.random.Generator,
                    mc: ModelConfig, tc: TrainConfig) -> TargetRun:
    """Restore the checkpoint (when resuming and there is one, made with the same model and data
    settings), else start from `--init-from`'s trained target if given, else from scratch."""
    saved = ckpt.load() if resume else None
    if saved is None:
        if not tc.init_from:
            return TargetRun()
        init = load_init(model, Path(tc.init_from))
        print(f"started from {init['from']}: {init['layers_from']} trained layers, grown to {init['layers_to']} "
              f"(new layers after {init['inserted_after']}; trained layer -> index {init['layer_map']})")
        return TargetRun(init=init)
    if saved["model_config"] != asdict(mc):
        raise TrainError(f"checkpoint {ckpt.path} has a different model config; use --no-resume")
    for key in ("seq_len", "batch_size", "seed", "corpus"):
        if saved["train_config"].get(key, "stdlib") != getattr(tc, key):
            raise TrainError(f"checkpoint {ckpt.path} has {key}={saved['train_config'].get(key)}; "
                             f"use --no-resume or the same value")
    ckpt.restore(saved, model, optimizer, rng)
    run = TargetRun(saved["step"], saved["tokens_seen"], saved["elapsed"], saved["history"], saved["evals"],
                    saved["step_losses"], saved["resumes"] + [saved["step"]], saved.get("init"))
    print(f"resumed from {ckpt.path} at step {run.step} ({run.elapsed / 60:.1f} min trained)")
    return run


def train_step(model, optimizer, rng: np.random.Generator, run: TargetRun, td: TargetData, tc: TrainConfig) -> float:
    """One optimizer step on a batch of random train windows, at the schedule's learning rate;
    returns that learning rate and appends the loss to `run.step_losses`."""
    lr = lr_at(run.step, tc, run.elapsed)
    for group in optimizer.param_groups:
        group["lr"] = lr
    x, y = windows(td.train_stream, sample_starts(rng, len(td.train_stream), td.stdlib_tokens, tc), tc.seq_len)
    loss = loss_on(model, x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    optimizer.step()
    run.step_losses.append(loss.item())
    return lr


def timed_eval(model, td: TargetData, tc: TrainConfig, step: int, ckpt: Checkpointer) -> dict[str, float] | None:
    """`evaluate` with the step and its duration; None when a pause is asked for on the way."""
    t0 = time.time()
    result = evaluate(model, td.val_stream, td.eot_id, td.token_bytes, tc, stop=lambda: ckpt.stop_requested)
    if result is not None:
        result = {"step": step, **result, "eval_s": round(time.time() - t0, 1)}
    return result


class LogWindow:
    """The steps since the last log line: their training time, tokens and losses, and when the
    run's wall-clock end is likely (the session's evaluations and checkpoints included, its
    pauses left out)."""

    def __init__(self, elapsed: float):
        self.t_session, self.elapsed_session = time.time(), elapsed
        self.train_s, self.tokens, self.losses = 0.0, 0, []

    def add(self, took: float, tokens: int, loss: float) -> None:
        self.train_s += took
        self.tokens += tokens
        self.losses.append(loss)

    def entry(self, step: int, lr: float, run: TargetRun, clock: StepClock, tc: TrainConfig) -> tuple[dict, str]:
        """The history entry of these steps and the progress bar's postfix; starts a new window."""
        tok_s = self.tokens / max(self.train_s, 1e-9)
        steps_left_s = (tc.max_steps - step) * tc.batch_size * tc.seq_len / max(tok_s, 1e-9)
        eta = min(steps_left_s, max(0.0, tc.minutes * 60 - run.elapsed))
        # wall clock per second of training in this session (evaluations, checkpoints), less
        # its pauses (SIGSTOP while a benchmark runs), which would otherwise push the end out
        overhead = (time.time() - self.t_session - clock.paused_s) / max(run.elapsed - self.elapsed_session, 1e-9)
        ends = time.strftime("%H:%M", time.localtime(time.time() + eta * overhead))
        mean_loss = sum(self.losses) / len(self.losses)
        self.train_s, self.tokens, self.losses = 0.0, 0, []
        entry = {"step": step, "loss": mean_loss, "lr": lr, "tok_s": tok_s, "train_min": round(run.elapsed / 60, 2)}
        return entry, f"loss {mean_loss:.4f} | lr {lr:.2e} | {tok_s:.0f} tok/s | ends ~{ends}"


def eval_line(result: dict[str, float]) -> str:
    return (f"eval  step {result['step']:5d} | val loss {result['val_loss']:.4f} nats/token | "
            f"{result['val_bpb']:.4f} bits/byte | {result['eval_s']:.0f} s")


def train_loop(model, optimizer, rng: np.random.Generator, run: TargetRun, td: TargetData, ckpt: Checkpointer,
               state, tc: TrainConfig) -> tuple[str, StepClock]:
    """Steps until `max_steps` or the time budget (returns which, and the step clock), evaluating
    every `eval_every` steps and checkpointing every few minutes; pauses (`Checkpointer.pause`) at
    the step boundary after SIGTERM or SIGINT."""
    budget = tc.minutes * 60
    tokens_per_step = tc.batch_size * tc.seq_len
    clock = StepClock(run.elapsed)     # training steps only; a pause (SIGSTOP) does not eat the schedule
    window = LogWindow(run.elapsed)
    progress = Progress(tc.max_steps, "target", budget_s=budget)
    progress.update(run.step, elapsed=run.elapsed)
    while run.step < tc.max_steps:
        if run.elapsed >= budget:
            progress.close()
            return "minutes", clock
        if ckpt.stop_requested:
            progress.close()
            ckpt.pause(state(), f"step {run.step} ({run.elapsed / 60:.1f} min trained)")
        clock.start()
        lr = train_step(model, optimizer, rng, run, td, tc)
        run.step += 1
        run.tokens_seen += tokens_per_step
        run.elapsed = clock.stop()
        window.add(clock.last, tokens_per_step, run.step_losses[-1])
        if run.step % tc.log_every == 0 or run.step == tc.max_steps:
            entry, postfix = window.entry(run.step, lr, run, clock, tc)
            run.history.append(entry)
            progress.update(run.step, elapsed=run.elapsed, extra=postfix)
        if run.step % tc.eval_every == 0 and run.step < tc.max_steps and run.elapsed < budget:
            result = timed_eval(model, td, tc, run.step, ckpt)
            if result is not None:
                run.evals.append(result)
                progress.write(eval_line(result))
        if ckpt.maybe_save(state):
            progress.write(f"checkpoint step {run.step} -> {ckpt.path}")
    progress.close()
    return "max_steps", clock


def evaluate_start(model, run: TargetRun, td: TargetData, tc: TrainConfig, ckpt: Checkpointer) -> None:
    """A model grown from a trained one, before any step: the trained model's own figure, kept in
    `run.init`."""
    if run.init is None or run.step != 0 or "val_bpb" in run.init:
        return
    start = timed_eval(model, td, tc, 0, ckpt)
    if start is not None:
        run.init.update(val_loss=start["val_loss"], val_bpb=start["val_bpb"])
        print(f"eval  step     0 | val loss {start['val_loss']:.4f} nats/token | "
              f"{start['val_bpb']:.4f} bits/byte (as started)", flush=True)


def training_log(run: TargetRun, td: TargetData, stopped_by: str, clock: StepClock, n_params: int,
                 mc: ModelConfig, tc: TrainConfig) -> dict[str, Any]:
    """What `training_log.json` holds."""
    final = run.evals[-1]
    return {
        "model_config": asdict(mc),
        "train_config": asdict(tc),
        "parameters": n_params,
        "data": {"corpus": tc.corpus, "train_tokens": int(len(td.train_stream)),
                 "val_tokens": int(len(td.val_stream)), "val_bytes": td.val_bytes,
                 "val_bytes_per_token": td.val_bytes / len(td.val_stream)},
        "steps": run.step,
        "stopped_by": stopped_by,
        "tokens_seen": run.tokens_seen,
        "epochs": run.tokens_seen / len(td.train_stream),
        "wall_time_s": round(run.elapsed, 1),  # training steps only (no evaluation, checkpoints, start-up)
        "paused_s": round(clock.paused_s, 1),  # this session's pauses (SIGSTOP) left out of it
        "tokens_per_s": run.tokens_seen / max(run.elapsed, 1e-9),
        "final_train_loss": final_train_loss(run),
        "final_val_loss": final["val_loss"],
        "final_val_bpb": final["val_bpb"],
        "val_scope": "all windows" if not tc.eval_windows else f"first {tc.eval_windows} windows",
        "resumed_at_steps": run.resumes,
        "init": run.init,
        "evals": run.evals,
        "history": run.history,
        "torch_threads": torch.get_num_threads(),
    }


def final_train_loss(run: TargetRun) -> float:
    """The mean loss of the last 20 steps."""
    tail = run.step_losses[-min(20, len(run.step_losses)):] or [float("nan")]
    return sum(tail) / len(tail)


def export(target_dir: Path, model, tokenizer, log: dict[str, Any]) -> None:
    """The trained model (`save_pretrained`), its tokenizer and `training_log.json`."""
    model.generation_config.eos_token_id = 0
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = None
    model.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    (target_dir / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(f"saved {target_dir}")


def train(out: Path, tokenizer_dir: Path, mc: ModelConfig, tc: TrainConfig, resume: bool = True,
          quick: bool = False) -> dict[str, Any]:
    from transformers import AutoTokenizer

    # all cores, but one thread for the tiny quick model (its ops are too small to split)
    torch.set_num_threads(tc.threads or (1 if quick else usable_cores()))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    mc.vocab_size = len(tokenizer)
    if tc.seq_len > mc.max_position_embeddings:
        raise ValueError(f"seq_len {tc.seq_len} exceeds max_position_embeddings {mc.max_position_embeddings}")
    td = load_data(out, tokenizer, tc)

    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    model = build_model(mc)
    model.train()
    optimizer = make_optimizer(model, tc)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {asdict(mc)}")
    print(f"torch threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")

    ckpt = Checkpointer(out / "target_ckpt" / "ckpt.pt", tc.ckpt_minutes)
    with ckpt.guard():   # one run per folder; SIGTERM / Ctrl-C: checkpoint at the next step boundary, exit
        run = resume_or_start(ckpt, resume, model, optimizer, rng, mc, tc)
        state = lambda: checkpoint_state(model, optimizer, rng, run, mc, tc)
        evaluate_start(model, run, td, tc, ckpt)
        stopped_by, clock = train_loop(model, optimizer, rng, run, td, ckpt, state, tc)
        final = timed_eval(model, td, tc, run.step, ckpt)
        if final is None:
            ckpt.pause(state(), f"step {run.step} ({run.elapsed / 60:.1f} min trained)")
        ckpt.restore_signals()
        if not run.evals or run.evals[-1]["step"] != run.step:
            run.evals.append(final)
        else:
            run.evals[-1] = final
        ckpt.save(state())
        print(f"done: {run.step} steps ({stopped_by}), {run.tokens_seen:,} tokens, {run.elapsed / 60:.1f} min of "
              f"training, train loss {final_train_loss(run):.4f}, val loss {final['val_loss']:.4f} nats/token = "
              f"{final['val_bpb']:.4f} bits/byte", flush=True)
        log = training_log(run, td, stopped_by, clock, n_params, mc, tc)
        export(out / "target", model, tokenizer, log)

    if quick and len(run.step_losses) < 10:
        print(f"quick check skipped: only {len(run.step_losses)} steps so far")
    elif quick:
        check_loss_dropped(run.step_losses, "target")
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

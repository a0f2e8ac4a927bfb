"""Stage 2b: teach the target not to loop (sequence-level unlikelihood fine-tuning).

A small LM trained by maximum likelihood alone decodes greedily into loops ("The value is a
string, the value of the value of the ..."). Following Welleck et al., "Neural text generation
with unlikelihood training" (ICLR 2020), each step of this stage adds to the usual next-token loss
on corpus windows a penalty on the model's *own* greedy continuations of corpus prefixes: a token
that completes an n-gram of tokens already in its sequence (`--ngram`, 8 by default: a repeated
phrase or line, not the short token patterns that code repeats legitimately) is a negative
candidate, and the loss is -log(1 - p(token)), weighted by `--alpha`: a larger alpha removes more
of the loops and costs more validation loss. What the defaults did to the earlier targets is in
docs/training-history.md ("A target that loops less: the unloop stage").

The stage reads the maximum-likelihood target from OUT/target_mle (on its first run it moves
OUT/target there), continues from that run's optimizer state (OUT/target_ckpt/ckpt.pt, when
present: a fresh AdamW's first steps jolt a trained model), and writes the fine-tuned model to
OUT/target, so the later stages read it as before; running it again starts from OUT/target_mle,
never from its own output. It checkpoints to OUT/unloop_ckpt/ and resumes from there. Before and
after, it measures the validation split's bits per byte and the distinct-4-gram share of words in
greedy continuations of validation prompts, and writes them to OUT/target/unloop_log.json.

    python -m taps.train unloop --out runs/pair2
    python -m taps.train unloop --out /tmp/q --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from taps.flags import spec
from taps.train import data
from taps.train import target as base
from taps.train.common import (
    Checkpointer,
    Progress,
    StepClock,
    TrainError,
    add_config_arguments,
    apply_arguments,
    check_loss_dropped,
    load_checkpoint,
    usable_cores,
)
from taps.train.drafter import continue_batch


# What each option may be (taps.flags.spec): a step count of 0, a negative weight or an n-gram of
# one token is refused before any work starts.
@dataclass
class UnloopConfig:
    steps: int = spec(300, "fine-tuning steps", 1)
    lr: float = spec(1e-4, "learning rate, constant after warmup", 1e-8, 1.0)
    warmup_steps: int = spec(20, "linear warmup steps", 0)
    alpha: float = spec(0.2, "weight of the unlikelihood loss against the next-token loss", 0.0, 100.0)
    ngram: int = spec(8, "a token completing an n-gram of tokens already in its sequence is penalised", 2)
    prefix_len: int = spec(32, "corpus prefix of each greedy continuation", 1)
    gen_len: int = spec(96, "greedy tokens per continuation", 2)
    ul_batch: int = spec(16, "continuations per step", 1)
    mle_batch: int = spec(8, "corpus windows per step (of the target's own training length)", 1)
    grad_clip: float = spec(1.0, "gradient norm clip", 1e-6)
    eval_prompts: int = spec(48, "validation prompts for the distinct-4-gram share (64 tokens each)", 1)
    eval_gen: int = spec(128, "greedy tokens per validation prompt", 8)
    seed: int = 7
    ckpt_minutes: float = spec(2.0, "minutes between checkpoints", 0.0)
    eval_windows: int = spec(0, "validation windows for bits per byte (0: the whole split)", 0)

QUICK = dict(steps=12, prefix_len=8, gen_len=24, ul_batch=4, mle_batch=2, eval_prompts=8, eval_gen=96,
             eval_windows=4, warmup_steps=2, lr=1e-3, alpha=1.0, ngram=2)


def repeat_mask(seq: torch.Tensor, start: int, n: int) -> torch.Tensor:
    """True where the token at position t >= `start` completes an n-gram of tokens that already
    ended at an earlier position of its row."""
    mask = torch.zeros(seq.shape, dtype=torch.bool)
    for b, row in enumerate(seq.tolist()):
        seen: set[tuple] = set()
        for t in range(n - 1, len(row)):
            gram = tuple(row[t - n + 1:t + 1])
            if t >= start and gram in seen:
                mask[b, t] = True
            seen.add(gram)
    return mask


def unlikelihood_loss(logits: torch.Tensor, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of -log(1 - p) over the masked tokens of `seq`, p the probability `logits` (the model's
    outputs on seq[:, :-1]) gave them; 0 when none is masked."""
    logp = F.log_softmax(logits.float(), -1).gather(-1, seq[:, 1:, None])[..., 0]
    m = mask[:, 1:].to(logp.dtype)
    return -(torch.log(torch.clamp(1 - logp.exp(), min=1e-5)) * m).sum() / m.sum().clamp(min=1)


def distinct_words(texts: list[str], n: int = 4) -> float | None:
    """Mean over texts of distinct n-grams / n-grams of whitespace-separated words; a text with
    fewer than n words (a barely trained model may loop inside one long "word") counts as 0
    (`taps.eval.metrics.word_share`). None when there are no texts."""
    from taps.eval.metrics import word_share

    return float(np.mean([word_share(text, n) for text in texts])) if texts else None


def measure(model, tokenizer, val_stream: np.ndarray, tc: base.TrainConfig, uc: UnloopConfig) -> dict:
    """Validation bits per byte and the distinct-4-gram share of words in greedy continuations of
    `eval_prompts` validation windows of 64 tokens (evenly spaced over the split)."""
    eot = tokenizer.convert_tokens_to_ids(data.EOT_TOKEN)
    model.eval()
    with torch.no_grad():
        plen = min(64, tc.seq_len // 2)
        starts = np.linspace(0, len(val_stream) - plen - 1, uc.eval_prompts).astype(int)
        prompts = torch.from_numpy(np.stack([val_stream[s:s + plen] for s in starts]).astype(np.int64))
        out = continue_batch(model, prompts, uc.eval_gen)[:, plen:]
        texts = [tokenizer.decode(row) for row in out.tolist()]
        ev = base.evaluate(model, val_stream, eot, base.token_byte_lengths(tokenizer),
                           base.TrainConfig(seq_len=tc.seq_len, batch_size=8, eval_windows=uc.eval_windows))
    model.train()
    return {"val_loss": ev["val_loss"], "val_bpb": ev["val_bpb"], "distinct4_words": distinct_words(texts),
            "eval_prompts": uc.eval_prompts, "eval_gen": uc.eval_gen}


def _share(measured: dict) -> str:
    share = measured["distinct4_words"]
    return "-" if share is None else f"{share:.3f}"


def load_mle_target(out: Path):
    """The maximum-likelihood target in OUT/target_mle (moved there from OUT/target on the first
    run): its folder, tokenizer, model and the target stage's TrainConfig (defaults where its log
    is missing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, dest = out / "target_mle", out / "target"
    if not (source / "config.json").exists():
        if not (dest / "config.json").exists():
            raise FileNotFoundError(f"no target in {dest}: run the target stage first")
        shutil.move(str(dest), str(source))
        print(f"moved the maximum-likelihood target {dest} -> {source}")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, attn_implementation="sdpa")
    log_path = source / "training_log.json"
    trained = json.loads(log_path.read_text())["train_config"] if log_path.exists() else {}
    tc = base.TrainConfig(**{k: v for k, v in trained.items() if k in base.TrainConfig.__dataclass_fields__})
    return source, tokenizer, model, tc


@dataclass
class UnloopRun:
    """What the fine-tuning loop moves along and a checkpoint keeps."""
    step: int = 0
    elapsed: float = 0.0
    history: list = field(default_factory=list)
    before: dict | None = None


def resume_or_start(ckpt: Checkpointer, resume: bool, out: Path, model, optimizer, rng: np.random.Generator,
                    uc: UnloopConfig) -> UnloopRun:
    """Restore this stage's checkpoint when resuming one; else carry on the target stage's optimizer
    state when its checkpoint holds these very weights."""
    state = ckpt.load() if resume else None
    if state is not None:
        if state["config"] != asdict(uc):
            raise TrainError(f"checkpoint {ckpt.path} has other settings; use --no-resume or the same ones")
        ckpt.restore(state, model, optimizer, rng)
        print(f"resumed from {ckpt.path} at step {state['step']}")
        return UnloopRun(state["step"], state["elapsed"], state["history"], state["before"])
    mle_ckpt = load_checkpoint(out / "target_ckpt" / "ckpt.pt")
    if mle_ckpt is not None and all(torch.equal(v, mle_ckpt["model"][k]) for k, v in model.state_dict().items()
                                    if k in mle_ckpt["model"]):
        optimizer.load_state_dict(mle_ckpt["optimizer"])
        print("continuing the target stage's optimizer state")
    else:
        print("no matching target checkpoint: a fresh optimizer state")
    return UnloopRun()


def train_step(model, optimizer, rng: np.random.Generator, step: int, train_stream: np.ndarray,
               stdlib_tokens: int, tc: base.TrainConfig, uc: UnloopConfig) -> dict:
    """One step: greedy continuations of corpus prefixes (unlikelihood on their repeated n-grams)
    plus next-token loss on corpus windows. Returns the step's history entry."""
    for group in optimizer.param_groups:
        group["lr"] = uc.lr * min(1.0, (step + 1) / max(1, uc.warmup_steps))
    prefix_cfg = base.TrainConfig(**{**asdict(tc), "seq_len": uc.prefix_len + uc.gen_len, "batch_size": uc.ul_batch})
    mle_cfg = base.TrainConfig(**{**asdict(tc), "batch_size": uc.mle_batch})
    starts = base.sample_starts(rng, len(train_stream), stdlib_tokens, prefix_cfg)
    prefixes = torch.from_numpy(np.stack([train_stream[s:s + uc.prefix_len] for s in starts]).astype(np.int64))
    model.eval()
    with torch.no_grad():
        seq = continue_batch(model, prefixes, uc.gen_len).clone()  # an inference tensor: a plain copy
    model.train()
    mask = repeat_mask(seq, uc.prefix_len, uc.ngram)
    ul = unlikelihood_loss(model(input_ids=seq[:, :-1], use_cache=False).logits, seq, mask)
    x, y = base.windows(train_stream, base.sample_starts(rng, len(train_stream), stdlib_tokens, mle_cfg),
                        tc.seq_len)
    mle = base.loss_on(model, x, y)
    loss = mle + uc.alpha * ul
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), uc.grad_clip)
    optimizer.step()
    return {"step": step + 1, "mle": round(mle.item(), 4), "ul": round(ul.item(), 4),
            "repeated": round(mask[:, uc.prefix_len:].float().mean().item(), 4)}


def save_unlooped(out: Path, source: Path, model, tokenizer, log: dict) -> Path:
    """Write the fine-tuned target, with the target stage's training log and this stage's, to
    OUT/target (built beside it, then moved into place)."""
    dest, tmp = out / "target", out / "target.unloop.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if (source / "training_log.json").exists():
        shutil.copy2(source / "training_log.json", tmp / "training_log.json")
    (tmp / "unloop_log.json").write_text(json.dumps(log, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    print(f"saved {dest}")
    return dest


def train(out: Path, uc: UnloopConfig, resume: bool, quick: bool) -> dict:
    torch.set_num_threads(1 if quick else usable_cores())
    source, tokenizer, model, tc = load_mle_target(out)
    train_stream = data.token_stream(tokenizer, "train", out / "data", tc.corpus, tc.max_files)
    val_stream = data.token_stream(tokenizer, "val", out / "data", tc.corpus, tc.max_files)
    stdlib_tokens = base.stdlib_prefix(out / "data" / "train.json", tc)

    optimizer = base.make_optimizer(model, tc)
    ckpt = Checkpointer(out / "unloop_ckpt" / "ckpt.pt", uc.ckpt_minutes)
    rng = np.random.default_rng(uc.seed)
    torch.manual_seed(uc.seed)
    run = resume_or_start(ckpt, resume, out, model, optimizer, rng, uc)
    if run.before is None:
        run.before = measure(model, tokenizer, val_stream, tc, uc)
        print(f"before: val {run.before['val_bpb']:.4f} bits/byte, distinct 4-grams of words "
              f"{_share(run.before)} ({uc.eval_prompts} val prompts, {uc.eval_gen} greedy tokens)")

    def snapshot():
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": run.step,
                "elapsed": run.elapsed, "history": run.history, "before": run.before, "config": asdict(uc),
                "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    model.train()
    progress = Progress(uc.steps, "unloop")
    progress.update(run.step, elapsed=run.elapsed)
    clock = StepClock(run.elapsed)
    while run.step < uc.steps:
        clock.start()
        entry = train_step(model, optimizer, rng, run.step, train_stream, stdlib_tokens, tc, uc)
        run.step += 1
        run.elapsed = clock.stop()
        run.history.append(entry)
        progress.update(run.step, elapsed=run.elapsed, extra=f"mle {entry['mle']:.3f} ul {entry['ul']:.3f} "
                                                             f"repeated {entry['repeated']:.2f}")
        ckpt.maybe_save(snapshot)
    progress.close()
    ckpt.save(snapshot())
    after = measure(model, tokenizer, val_stream, tc, uc)
    print(f"after {run.step} steps ({run.elapsed / 60:.1f} min): val {after['val_bpb']:.4f} bits/byte "
          f"(was {run.before['val_bpb']:.4f}), distinct 4-grams of words {_share(after)} (was {_share(run.before)})")
    log = {"config": asdict(uc), "steps": run.step, "wall_time_s": round(run.elapsed, 1),
           "paused_s": round(clock.paused_s, 1), "before": run.before, "after": after, "history": run.history}
    save_unlooped(out, source, model, tokenizer, log)
    if quick:
        check_loss_dropped([h["ul"] for h in run.history], "unlikelihood")
    return log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder with target/ (or target_mle/) and data/")
    parser.add_argument("--quick", action="store_true", help="a few small steps on a --quick run folder")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    add_config_arguments(parser, UnloopConfig)


def main(args: argparse.Namespace) -> None:
    uc = UnloopConfig(**(QUICK if args.quick else {}))
    apply_arguments(args, uc)
    train(Path(args.out), uc, args.resume, args.quick)

"""Stage: DFlash2's path selector (`taps.path_selector`) for a trained drafter, drafter and target frozen.

1. Blocks: at random anchors of the drafter stage's regenerated sequences (OUT/drafter_data: corpus
   prompts continued greedily by the target, the data the scorer stage draws its pools from), the
   drafter drafts a block from the true context as a session drafts it (the pair's drafter
   precision). Per block position t = 1..H: the drafter's top-K candidates and their log-probs, its
   hidden state, and the label: the target's token at t (the sequence's own next token: the
   target's greedy choice), with the token before it (the anchor at t = 1) as the predecessor.
2. Training: A, B and H only, by the K-way cross-entropy of softmax(S_t(prev, .)) over the unary
   top-K, prev the target's token at t-1 (teacher forcing: along an accepted prefix the walk's
   previous token is exactly that), the target's token added as a (K+1)-th candidate where the
   top-K misses it. Position t weighs exp(-(t-1)/gamma), as in the drafter's own loss (a chain's
   early positions decide how much of it is accepted; gamma 0: all alike). A tenth of the training
   sequences (`dev_share`) is held back: every `eval_every` steps the loss on their blocks is
   measured and the weights of the best such step are kept (the selector's per-token codebooks
   memorise a few thousand blocks quickly).
3. Report on held-out blocks (the validation split's sequences): the loss, how often the selector's
   pick at t (given the true token at t-1) is the target's token against how often the drafter's
   argmax is (DFlash's pick), how often the two picks agree, and the chain's tokens per round,
   1 + its accepted prefix, for the free walk against DFlash's argmax chain at depths 4, 8 and H.

    python -m taps.train path_selector --out RUN                 # RUN/target, RUN/drafter, RUN/drafter_data
    python -m taps.train path_selector --out RUN --target PAIR/target --drafter PAIR/drafter
    python -m taps.train path_selector --out /tmp/q --quick      # a handful of blocks, asserts the loss drops

Writes OUT/selector/ (config.json, model.safetensors, training_log.json), which a pair folder holds
as selector/; the drafted blocks are kept in OUT/selector_data/ for a rerun on the same weights.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from taps.drafter import context_features
from taps.fast_drafter import DraftContext, fast_drafter
from taps.flags import spec
from taps.path_selector import PathSelector, PathSelectorConfig
from taps.train.common import Progress, StepClock, add_config_arguments, apply_arguments, check_loss_dropped, cosine_lr
from taps.train.scorer import anchor_range, load_pair_parts, weights_fingerprint


@dataclass
class PathSelectorTrainConfig:
    rank: int = spec(64, "selector_rank r of the codebooks A, B and the gate H", 1, 1024)
    top_k: int = spec(16, "selector_top_k: the drafter's candidates per position (DFlash2's 16)", 2, 256)
    train_sequences: int = spec(2048, "regenerated training sequences drafted from", 1)
    val_sequences: int = spec(64, "held-out sequences (the validation split's)", 1)
    anchors_per_sequence: int = spec(8, "blocks drafted per sequence", 1)
    anchor_span: int = spec(128, "anchors within this many tokens after the prompt (0: anywhere)", 0)
    dev_share: float = spec(0.1, "share of the training sequences held back to pick the best step", 0.0, 0.5)
    gamma: float = spec(7.0, "position t weighs exp(-(t-1)/gamma) in the loss (0: every position alike)", 0.0)
    eval_every: int = spec(100, "steps between losses on the held-back sequences", 1)
    lr: float = spec(1e-3, "peak learning rate", 0.0)
    weight_decay: float = spec(0.01, "AdamW weight decay", 0.0)
    warmup_steps: int = spec(50, "linear warm-up steps", 0)
    max_steps: int = spec(2000, "optimizer steps at most", 1)
    minutes: float = spec(3.0, "training time at most (the steps' own time)", 0.0)
    batch_blocks: int = spec(64, "blocks per step", 1)
    init_std: float = spec(0.005, "initial N(0, std) of A, B and H (small: the walk starts as DFlash's argmax)",
                           0.0)
    seed: int = 13
    log_every: int = 50


QUICK_TRAIN = dict(train_sequences=6, val_sequences=2, anchors_per_sequence=4, max_steps=40, warmup_steps=3,
                   batch_blocks=8, log_every=10, minutes=1.0, lr=1e-2, dev_share=0.0, eval_every=10)


@dataclass
class Blocks:
    """Drafted blocks, H positions each: what the selector trains and is judged on."""

    candidates: torch.Tensor    # [N, H, K] the drafter's top-K token ids, best first
    unary: torch.Tensor         # [N, H, K] their drafter log-probs
    label: torch.Tensor         # [N, H] the target's token at each position
    label_unary: torch.Tensor   # [N, H] its drafter log-prob
    label_index: torch.Tensor   # [N, H] its index among the candidates, -1 where the top-K misses it
    prev: torch.Tensor          # [N, H] the target's token before it (the anchor at position 1)
    hidden: torch.Tensor        # [N, H, d] the drafter's hidden state at each position
    sequence: torch.Tensor      # [N] which sequence each block was drafted from

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def take(self, rows) -> "Blocks":
        return Blocks(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))


@torch.inference_mode()
def collect_blocks(pair, seqs: np.ndarray, prompt_len: int, tc: PathSelectorTrainConfig, count: int,
                   rng: np.random.Generator, label: str) -> Blocks:
    """Blocks drafted at `anchors_per_sequence` random anchors of each of `count` sequences."""
    drafter, target, device = pair.drafter, pair.target, pair.device
    depth = drafter.block_size - 1
    parts: dict[str, list[torch.Tensor]] = {f: [] for f in Blocks.__dataclass_fields__}
    progress = Progress(count, f"blocks ({label})", unit="sequence")
    progress.update(0)
    for n, row in enumerate(rng.permutation(len(seqs))[:count]):
        seq = torch.as_tensor(seqs[row].astype(np.int64), device=device).view(1, -1)
        features = context_features(target(input_ids=seq, output_hidden_states=True, use_cache=False).hidden_states,
                                    drafter.target_layer_ids)
        low, high = anchor_range(seq.shape[1], prompt_len, tc.anchor_span)
        high = min(high, seq.shape[1] - depth)              # every position of the block has its label
        anchors = rng.choice(np.arange(low, high), size=min(tc.anchors_per_sequence, high - low), replace=False)
        for p in np.sort(anchors).tolist():
            context = DraftContext(fast_drafter(pair), pair.mask_token_id)
            context.add(features[0, :p])
            hidden = context.draft(int(seq[0, p]), depth, pair.embed)
            logp = torch.log_softmax(context.logits(hidden).float(), dim=-1)
            values, ids = logp.topk(tc.top_k, dim=-1)
            truth = seq[0, p + 1:p + 1 + depth]
            hits = ids == truth[:, None]
            parts["candidates"].append(ids.cpu())
            parts["unary"].append(values.cpu())
            parts["label"].append(truth.cpu())
            parts["label_unary"].append(logp.gather(1, truth[:, None])[:, 0].cpu())
            parts["label_index"].append(torch.where(hits.any(1), hits.float().argmax(1), -1).cpu())
            parts["prev"].append(seq[0, p:p + depth].cpu())
            parts["hidden"].append(hidden.float().cpu())
            parts["sequence"].append(torch.tensor(int(row)))
        progress.update(n + 1)
    progress.close()
    return Blocks(*(torch.stack(parts[f]) for f in Blocks.__dataclass_fields__))


def selector_scores(selector: PathSelector, blocks: Blocks, prev: torch.Tensor | None = None) -> torch.Tensor:
    """S_t(prev, c) [N, H, K+1] over each position's candidates and the target's token after them
    (-inf where the candidates hold it already); `prev` defaults to the target's tokens (teacher forcing)."""
    prev = blocks.prev if prev is None else prev
    gate = selector.gate(blocks.hidden)                                          # [N, H, r]
    a = selector.predecessor_codebook[prev] * gate                               # [N, H, r]
    every = torch.cat([blocks.candidates, blocks.label[..., None]], -1)          # [N, H, K+1]
    pair = (selector.successor_codebook[every] @ a[..., None])[..., 0]
    unary = torch.cat([blocks.unary, blocks.label_unary[..., None]], -1)
    extra = torch.where(blocks.label_index < 0, 0.0, float("-inf"))[..., None]
    return unary + pair + torch.cat([torch.zeros_like(blocks.unary), extra], -1)


def position_weights(depth: int, gamma: float) -> torch.Tensor:
    """[depth] exp(-(t-1)/gamma) for t = 1..depth, normalised to mean 1 (all ones when gamma is 0)."""
    w = torch.exp(-torch.arange(depth, dtype=torch.float32) / gamma) if gamma > 0 else torch.ones(depth)
    return w / w.mean()


def selector_loss(selector: PathSelector, blocks: Blocks, gamma: float = 0.0) -> torch.Tensor:
    """The K-way cross-entropy of the target's token, averaged over blocks and positions, position t
    weighted by `position_weights`."""
    scores = selector_scores(selector, blocks)
    k = blocks.candidates.shape[-1]
    target = torch.where(blocks.label_index < 0, k, blocks.label_index)
    ce = torch.nn.functional.cross_entropy(scores.flatten(0, 1), target.flatten(), reduction="none")
    return (ce.view(target.shape) * position_weights(target.shape[1], gamma)).mean()


@torch.no_grad()
def evaluate(selector: PathSelector, blocks: Blocks, gamma: float = 0.0) -> dict:
    """Held-out figures of the selector against the drafter's argmax (DFlash's chain): the loss (as
    trained, with `gamma`), top-1 and agreement per position, and the chain's tokens per round."""
    k = blocks.candidates.shape[-1]
    scores = selector_scores(selector, blocks)[..., :k]
    pick = scores.argmax(-1)                                                     # teacher forced
    walked = _free_walk(selector, blocks)
    truth_at = blocks.label_index
    depth = blocks.label.shape[1]
    result = {"loss": float(selector_loss(selector, blocks, gamma)),
              "top1_selector": float((pick == truth_at).float().mean()),
              "top1_drafter": float((truth_at == 0).float().mean()),
              "agreement_with_drafter_argmax": float((pick == 0).float().mean()),
              "candidate_recall": float((truth_at >= 0).float().mean()),
              "top1_selector_by_position": (pick == truth_at).float().mean(0).tolist(),
              "top1_drafter_by_position": (truth_at == 0).float().mean(0).tolist(),
              "tau": {}}
    for budget in sorted({4, 8, depth}):
        if budget > depth:
            continue
        result["tau"][str(budget)] = {"selector": _tau(walked[:, :budget] == blocks.label[:, :budget]),
                                      "drafter": _tau(blocks.candidates[:, :budget, 0] == blocks.label[:, :budget])}
    return result


def _free_walk(selector: PathSelector, blocks: Blocks) -> torch.Tensor:
    """[N, H] the chains the greedy walk takes from each block's anchor (its own previous pick)."""
    n, depth, _ = blocks.candidates.shape
    gate = selector.gate(blocks.hidden)
    prev = blocks.prev[:, 0]
    out = torch.empty(n, depth, dtype=torch.long)
    for t in range(depth):
        cands = blocks.candidates[:, t]
        scores = blocks.unary[:, t] + selector.pair_scores(prev, gate[:, t], cands)
        prev = cands.gather(1, scores.argmax(-1, keepdim=True))[:, 0]
        out[:, t] = prev
    return out


def _tau(correct: torch.Tensor) -> float:
    """Mean tokens per round of chains whose per-position hits are `correct` [N, B]: 1 + the accepted prefix."""
    return float(1 + correct.long().cumprod(1).sum(1).float().mean())


def blocks_file(out: Path, tc: PathSelectorTrainConfig, fingerprint: str) -> Path:
    shape = f"{tc.top_k}-{tc.train_sequences}x{tc.anchors_per_sequence}-{tc.val_sequences}-span{tc.anchor_span}"
    return out / "selector_data" / f"blocks-{shape}-seed{tc.seed}-{fingerprint}.pt"


def load_or_collect(out: Path, pair, tc: PathSelectorTrainConfig, rng: np.random.Generator,
                    drafter_path: str | None) -> tuple[Blocks, Blocks]:
    data_dir = out / "drafter_data"
    if not (data_dir / "train.npy").exists() or not (data_dir / "val.npy").exists():
        raise FileNotFoundError(f"no regenerated sequences in {data_dir} (train.npy, val.npy): run the drafter "
                                f"stage first, or put the sequences it regenerated there")
    logs = [out / "drafter" / "training_log.json"]
    logs += [Path(drafter_path) / "training_log.json"] if drafter_path else []
    log = next((p for p in logs if p.is_file()), None)
    prompt_len = json.loads(log.read_text())["train_config"]["prompt_len"] if log else 64
    path = blocks_file(out, tc, weights_fingerprint(pair.target, pair.drafter))
    if path.exists():
        saved = torch.load(path, weights_only=False)
        print(f"loaded {len(saved['train'])} + {len(saved['val'])} blocks from {path}")
        return saved["train"], saved["val"]
    train = collect_blocks(pair, np.load(data_dir / "train.npy"), prompt_len, tc, tc.train_sequences, rng, "train")
    val = collect_blocks(pair, np.load(data_dir / "val.npy"), prompt_len, tc, tc.val_sequences, rng, "val")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"train": train, "val": val}, path)
    return train, val


def train_step(selector: PathSelector, optimizer, blocks: Blocks, rng: np.random.Generator, step: int,
               tc: PathSelectorTrainConfig, time_fraction: float = 0.0) -> float:
    """One AdamW step on `batch_blocks` random blocks; returns its loss."""
    for group in optimizer.param_groups:
        group["lr"] = cosine_lr(step, tc.lr, tc.warmup_steps, tc.max_steps, 0.1, time_fraction)
    batch = blocks.take(torch.as_tensor(rng.integers(0, len(blocks), tc.batch_blocks)))
    loss = selector_loss(selector, batch, tc.gamma)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(selector.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def split_by_sequence(blocks: Blocks, share: float, rng: np.random.Generator) -> tuple[Blocks, Blocks | None]:
    """(training blocks, the blocks of a `share` of their sequences held back), or (blocks, None)."""
    sequences = np.unique(blocks.sequence.numpy())
    held = rng.choice(sequences, size=int(round(share * len(sequences))), replace=False)
    if len(held) == 0 or len(held) == len(sequences):
        return blocks, None
    back = torch.as_tensor(np.isin(blocks.sequence.numpy(), held))
    return blocks.take(~back), blocks.take(back)


def train(out: Path, tc: PathSelectorTrainConfig, target_path: str | None, drafter_path: str | None,
          quick: bool) -> dict:
    torch.set_num_threads(1)
    pair = load_pair_parts(out, target_path, drafter_path)
    rng = np.random.default_rng(tc.seed)
    t0 = time.time()
    all_train, val_blocks = load_or_collect(out, pair, tc, rng, drafter_path)
    collect_s = time.time() - t0
    train_blocks, dev_blocks = split_by_sequence(all_train, tc.dev_share, np.random.default_rng(tc.seed + 1))
    rng = np.random.default_rng(tc.seed + 2)       # the batches: the same whether the blocks were drafted or loaded
    torch.manual_seed(tc.seed)
    config = PathSelectorConfig(vocab_size=int(pair.target.config.vocab_size),
                                hidden_size=int(pair.drafter.config.hidden_size), selector_rank=tc.rank,
                                selector_top_k=tc.top_k)
    selector = PathSelector(config, init_std=tc.init_std)
    params = sum(p.numel() for p in selector.parameters())
    print(f"path selector: {params / 1e3:.0f}k parameters (rank {tc.rank}, top-{tc.top_k}); "
          f"{len(train_blocks)} training blocks, {0 if dev_blocks is None else len(dev_blocks)} held back to pick "
          f"the step, {len(val_blocks)} held-out blocks")
    before = evaluate(selector.eval(), val_blocks, tc.gamma)
    optimizer = torch.optim.AdamW(selector.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    progress = Progress(tc.max_steps, "path selector", budget_s=tc.minutes * 60)
    progress.update(0, elapsed=0.0)
    clock, losses, history, step, elapsed = StepClock(), [], [], 0, 0.0
    best = (float("inf"), 0, None)                 # (held-back loss, step, weights)
    while step < tc.max_steps and elapsed < tc.minutes * 60:
        selector.train()
        clock.start()
        losses.append(train_step(selector, optimizer, train_blocks, rng, step, tc, elapsed / (tc.minutes * 60)))
        step += 1
        elapsed = clock.stop()
        if step % tc.log_every == 0:
            history.append({"step": step, "loss": float(np.mean(losses[-tc.log_every:]))})
            progress.update(step, elapsed=elapsed, extra=f"loss {history[-1]['loss']:.4f}")
        if dev_blocks is not None and (step % tc.eval_every == 0 or step == tc.max_steps):
            with torch.no_grad():
                dev = float(selector_loss(selector.eval(), dev_blocks, tc.gamma))
            history.append({"step": step, "held_back_loss": dev})
            if dev < best[0]:
                best = (dev, step, {k: v.detach().clone() for k, v in selector.state_dict().items()})
    progress.close()
    if best[2] is not None:
        selector.load_state_dict(best[2])
    selector.eval()
    after = evaluate(selector, val_blocks, tc.gamma)
    selector.save_pretrained(out / "selector")
    log = {"train_config": asdict(tc), "selector_config": asdict(config), "parameters": params, "steps": step,
           "kept_step": best[1] if best[2] is not None else step,
           "held_back_loss": best[0] if best[2] is not None else None,
           "wall_time_s": round(elapsed, 1), "collect_s": round(collect_s, 1), "train_blocks": len(train_blocks),
           "held_back_blocks": 0 if dev_blocks is None else len(dev_blocks), "val_blocks": len(val_blocks),
           "final_train_loss": float(np.mean(losses[-tc.log_every:])),
           "held_out_before": before, "held_out": after, "history": history}
    (out / "selector" / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(report(log))
    print(f"saved {out / 'selector'}")
    if quick:
        check_loss_dropped(losses, "path selector")
    return log


def report(log: dict) -> str:
    """A few lines of held-out figures from a training log."""
    before, after = log["held_out_before"], log["held_out"]
    taus = ", ".join(f"depth {b}: {v['selector']:.3f} / {v['drafter']:.3f}" for b, v in after["tau"].items())
    return (f"done: {log['steps']} steps in {log['wall_time_s'] / 60:.1f} min (kept step {log['kept_step']}), final "
            f"training loss {log['final_train_loss']:.4f}; held-out loss {before['loss']:.4f} -> {after['loss']:.4f}\n"
            f"  held-out top-1 (the target's token, given the true token before it): selector "
            f"{after['top1_selector']:.4f}, drafter argmax {after['top1_drafter']:.4f}; the selector keeps the "
            f"drafter's argmax at {after['agreement_with_drafter_argmax']:.4f} of positions; candidate recall "
            f"{after['candidate_recall']:.4f}\n"
            f"  held-out tokens per round of the chain, walk / DFlash argmax: {taus}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder with drafter_data/ (and target/, drafter/)")
    parser.add_argument("--target", default=None, help="target folder or hub id (default OUT/target)")
    parser.add_argument("--drafter", default=None, help="drafter folder or hub id (default OUT/drafter)")
    parser.add_argument("--quick", action="store_true", help="a handful of blocks, ~40 steps, asserts the loss drops")
    add_config_arguments(parser, PathSelectorTrainConfig)


def main(args: argparse.Namespace) -> None:
    tc = PathSelectorTrainConfig(**(QUICK_TRAIN if args.quick else {}))
    apply_arguments(args, tc)
    train(Path(args.out), tc, args.target, args.drafter, args.quick)

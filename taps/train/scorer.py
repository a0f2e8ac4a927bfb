"""Stage 4: the TAPS path-conditioned scorer, trained on pools the target verified in full.

1. Traces: at random positions of target-regenerated sequences (the drafter stage's data), the
   drafter drafts a block from the true context; a pool is verified by the target in one tree
   forward. The label of each edge is the target's softmax probability of the child at the parent
   (or, `--label greedy`, whether the child is the target's argmax there).
   `--pool paths` (default): the pool TAPS scores at run time, the pool_factor x budget best nodes
   by marginal path score, for the largest budget (256 nodes). Those pools are nested (the heap
   pops in order), so the first pool_factor x B nodes are the run-time pool of every smaller budget
   B, scored with the features that pool gives (a parent's child count among them).
   `--pool candidate`: the authors' beam pool (top-K lattice, beam, cap; hundreds of nodes).
2. Train `TapsScorer` with per-parent KL(target || q) + 0.5 x BCE between predicted and target
   reach, over the run-time pools of every budget.
3. Report on held-out traces (validation-split prompts): calibration, predicted reach against
   observed greedy acceptance (reliability table and ECE), and the held-out tau of the reach rule
   at each budget on its run-time pool; each next to the marginal product's (DDTree's choice).

    python -m taps.train scorer --out runs/pair
    python -m taps.train scorer --out /tmp/q --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from taps.drafter import context_features
from taps.estimate import normalise_siblings, reach_from_edges
from taps.fast_drafter import DraftContext, fast_drafter
from taps.flags import spec
from taps.pool import Lattice, candidate_pool, top_paths
from taps.scorer import ScorerConfig, ScorerTables, TapsScorer, pool_features, scorer_loss
from taps.train.common import (
    Checkpointer,
    Progress,
    StepClock,
    add_config_arguments,
    apply_arguments,
    check_loss_dropped,
    cosine_lr,
    trim_heap,
    usable_cores,
)
from taps.tree import DraftTree
from taps.verify import target_body, target_forward, trim_cache

BUDGETS = (8, 16, 32, 64)      # the budgets the scorer trains for and is judged at (the bench's)


# The options this stage's sampling and pools read carry their limits (taps.flags.spec): a value
# outside them is refused before any work starts.
@dataclass
class ScorerTrainConfig:
    train_traces: int = spec(1500, "pools verified for training", 1)
    val_traces: int = spec(200, "held-out pools", 1)
    anchors_per_sequence: int = spec(6, "pools drafted per regenerated sequence", 1)
    anchor_span: int = spec(128, "anchors within this many tokens after the prompt, as the app and the bench "
                                 "decode (0: anywhere in the sequence)", 0)
    pool: str = "paths"            # paths: TAPS's run-time pools; candidate: the authors' beam pool
    pool_factor: int = spec(4, "paths: run-time pools of pool_factor x budget nodes (DecodeConfig's)", 1)
    top_k: int = 64
    beam_width: int = 48
    pool_cap: int = 768
    label: str = "prob"            # prob: target softmax probability; greedy: 1 if the target's argmax
    bce_weight: float = spec(0.5, "weight of the reach BCE beside the per-parent KL", 0.0)
    bce_focus: float = spec(0.0, "> 0: weight each node's reach BCE by min(1, max(predicted, target reach) / "
                                 "this) (the reach range the size choice reads)", 0.0, 1.0)
    sibling: int = spec(0, "1: the scorer also reads sibling competition (the marginal mass a parent's pool "
                           "children hold, each child's share of it; a lever under test)", 0, 1)
    use_hidden: int = spec(1, "1: the scorer reads the drafter's hidden state at each depth; 0: it does not "
                              "(an ablation)", 0, 1)
    lr: float = 2e-3
    warmup_steps: int = 50
    max_steps: int = 1500
    minutes: float = 12.0
    schedule: str = "steps"        # "time": the cosine also ends when the time budget does
    batch_pools: int = 8
    seed: int = 11
    log_every: int = 25
    ckpt_minutes: float = 3.0


QUICK_TRAIN = dict(train_traces=24, val_traces=8, anchors_per_sequence=4, top_k=8, beam_width=6, pool_cap=40,
                   pool_factor=1,
                   max_steps=40, minutes=2.0, batch_pools=4, warmup_steps=3, log_every=10, lr=5e-3)


@dataclass
class Trace:
    pool: DraftTree
    lattice: Lattice            # statistics and drafter hidden states (tokens kept for the pool)
    edge_prob: np.ndarray       # [E] target probability of each pool node's token at its parent
    edge_greedy: np.ndarray     # [E] 1 where that token is the target's argmax at the parent
    nested: bool = False        # a `paths` pool: its first N nodes are the run-time pool of N nodes
    position: int = -1          # the anchor: tokens of context before the drafted block

    def sub_pool(self, nodes: int | None = None) -> tuple[DraftTree, np.ndarray, np.ndarray]:
        """The run-time pool of `nodes` draft nodes (a nested pool's first ones; the whole pool
        when None or not nested) with its edges' labels."""
        if nodes is None or not self.nested or nodes >= self.pool.size:
            return self.pool, self.edge_prob, self.edge_greedy
        return self.pool.subtree(np.arange(nodes + 1)), self.edge_prob[:nodes], self.edge_greedy[:nodes]


def pool_sizes(tc: "ScorerTrainConfig") -> list[int]:
    """The run-time pool sizes the scorer trains and is judged on (one per budget)."""
    return [tc.pool_factor * b for b in BUDGETS] if tc.pool == "paths" else [tc.pool_cap]


def weights_fingerprint(*models: torch.nn.Module) -> str:
    """A digest of the models' weights: traces collected with other weights are not reused."""
    digest = hashlib.sha256()
    for model in models:
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def load_pair_parts(out: Path, target_path: str | None, drafter_path: str | None):
    from taps.pair import load_pair

    return load_pair(None, target=target_path or str(out / "target"), drafter=drafter_path or str(out / "drafter"),
                     device="auto", dtype="float32")


def anchor_range(length: int, prompt_len: int, span: int) -> tuple[int, int]:
    """Anchors p in [low, high): the block is drafted from root token seq[p] after context seq[:p],
    from the prompt's last token on, within `span` tokens of it (0: to the sequence's end)."""
    high = length - 2 if span <= 0 else min(length - 2, prompt_len - 1 + span)
    return prompt_len - 1, high


@torch.inference_mode()
def collect_traces(pair, seqs: np.ndarray, prompt_len: int, count: int, tc: ScorerTrainConfig,
                   rng: np.random.Generator, label: str, temperature: float = 0.0) -> list[Trace]:
    """Verify whole candidate pools at random positions of the given sequences. At `temperature`
    T > 0 the lattice is the drafter's at T (as a session at T drafts it) and `edge_prob` is the
    target's probability at T."""
    drafter, target, device = pair.drafter, pair.target, pair.device
    block = drafter.block_size
    traces: list[Trace] = []
    progress = Progress(count, f"traces ({label})", unit="pool")
    progress.update(0)
    order = rng.permutation(len(seqs))
    for row in order:
        if len(traces) >= count:
            break
        trim_heap()              # the last sequence's temporaries, freed, give their pages back
        seq = torch.as_tensor(seqs[row].astype(np.int64), device=device).view(1, -1)
        length = seq.shape[1]
        hs = target(input_ids=seq, output_hidden_states=True, use_cache=False).hidden_states
        features = context_features(hs, drafter.target_layer_ids)
        low, high = anchor_range(length, prompt_len, tc.anchor_span)
        anchors = np.sort(rng.choice(np.arange(low, high), size=min(tc.anchors_per_sequence, high - low),
                                     replace=False))
        cache = DynamicCache(config=target.config)
        cached = 0
        for p in anchors:
            p = int(p)
            # target cache over seq[:p]
            target_body(target, cache, seq[:, cached:p], torch.arange(cached, p, device=device).view(1, -1),
                        None, None)
            cached = p
            # drafter block at p from the true context, drafted as at run time (the pair's drafter precision)
            context = DraftContext(fast_drafter(pair), pair.mask_token_id)
            context.add(features[0, :p])
            depth = min(block - 1, target.config.max_position_embeddings - p - 1)
            hidden = context.draft(int(seq[0, p]), depth, pair.embed)
            lattice = Lattice.from_logits(context.logits(hidden), tc.top_k, hidden=hidden.float().cpu(),
                                          temperature=temperature)
            if tc.pool == "paths":
                pool = top_paths(int(seq[0, p]), lattice, max(pool_sizes(tc)), tc.top_k)
            else:
                pool = candidate_pool(int(seq[0, p]), lattice, tc.top_k, tc.beam_width, tc.pool_cap)
            ids_t, pos, mask = pool.verify_inputs(p, p, pair.dtype, device)
            logits, _ = target_forward(target, cache, ids_t, pos, mask, None)
            trim_cache(cache, p)         # drop the pool from the cache again
            probs = torch.softmax(logits.float() / (temperature if temperature > 0 else 1.0), dim=-1)
            parents = torch.as_tensor(pool.parents[1:], device=device)
            children = torch.as_tensor(pool.tokens[1:], device=device)
            edge_prob = probs[parents, children].double().cpu().numpy()
            edge_greedy = (logits.argmax(-1)[parents] == children).double().cpu().numpy()
            lattice.hidden = lattice.hidden.cpu()
            lattice.drop_full()
            traces.append(Trace(pool, lattice, edge_prob, edge_greedy, nested=tc.pool == "paths", position=p))
            progress.update(len(traces))
            if len(traces) >= count:
                break
    progress.close()
    return traces


def reliability(pred: np.ndarray, observed: np.ndarray, bins: int = 10) -> tuple[list[dict], float]:
    """Reliability table over equal-width bins of predicted reach, and the ECE."""
    edges = np.linspace(0, 1, bins + 1)
    table, ece = [], 0.0
    which = np.clip(np.digitize(pred, edges[1:-1]), 0, bins - 1)
    for b in range(bins):
        sel = which == b
        if not sel.any():
            continue
        mean_pred, mean_obs = float(pred[sel].mean()), float(observed[sel].mean())
        table.append({"bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}", "nodes": int(sel.sum()),
                      "predicted": mean_pred, "observed": mean_obs})
        ece += sel.mean() * abs(mean_pred - mean_obs)
    return table, float(ece)


def trace_reach(traces: list[Trace], tables: ScorerTables | None,
                nodes: int | None = None) -> list[tuple[np.ndarray, ...]]:
    """Per trace (its run-time pool of `nodes` nodes, or the whole pool): predicted reach of every
    pool node (the scorer's tables, or the marginal product when None), observed greedy acceptance
    (1 on the target's greedy path, 0 elsewhere) and the marginal reach."""
    out = []
    for t in traces:
        pool, _, greedy = t.sub_pool(nodes)
        marginal_q = np.concatenate([[1.0], np.exp(pool.marginal_logprob[1:])])
        q = marginal_q if tables is None else normalise_siblings(pool.parents, tables.edge_probs(pool, t.lattice))
        out.append((reach_from_edges(pool.parents, q), reach_from_edges(pool.parents, np.concatenate([[1.0], greedy])),
                    reach_from_edges(pool.parents, marginal_q)))
    return out


def budget_acceptance(reaches: list[tuple[np.ndarray, ...]], budgets=BUDGETS, pool_factor: int = 4) -> dict[str, float]:
    """Mean tokens per round (accepted draft nodes + the target's own token) when the `budget`
    nodes of highest predicted reach are verified: the held-out tau of the reach rule at each budget.

    Each entry is (predicted reach, observed acceptance[, marginal reach]). With a marginal reach the
    choice is made, as TAPS makes it at run time, among the pool_factor x budget nodes of highest
    marginal reach (a prefix-closed pool). The accepted nodes form one chain, so a prefix-closed
    selection accepts the chain's nodes it holds; the root's 1 counts the target's own token."""
    from taps.selectors import top_by_reach

    result = {}
    for budget in budgets:
        accepted = []
        for pred, observed, *marginal in reaches:
            count = budget
            if marginal:
                pool = top_by_reach(marginal[0], pool_factor * budget)
                pred = np.where(np.isin(np.arange(len(pred)), pool), pred, -1.0)
                count = min(budget, len(pool) - 1)
            accepted.append(float(observed[top_by_reach(pred, count)].sum()))
        result[str(budget)] = float(np.mean(accepted)) if accepted else 0.0
    return result


def tau_line(learned: dict, marginal: dict) -> str:
    """One line: the held-out tau of the reach rule per budget, learned scorer against marginal product."""
    if "tau_by_budget" not in learned:
        return "held-out tau by budget: not in this log"
    return ("held-out tau of the reach rule (the top-B nodes by predicted reach), learned / marginal: "
            + ", ".join(f"B={b} {learned['tau_by_budget'][b]:.2f} / {marginal['tau_by_budget'][b]:.2f}"
                        for b in learned["tau_by_budget"]))


class ForwardTables:
    """`ScorerTables.edge_probs` through the network's own forward: for a scorer whose features the
    folded tables do not compute (a lever under test), at the cost of a torch forward per pool."""

    def __init__(self, scorer: TapsScorer, embed):
        self.scorer, self.embed = scorer, embed

    @torch.no_grad()
    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        edge_logq, _ = self.scorer(pool_features(pool, lattice, self.scorer.config.sibling),
                                   torch.as_tensor(lattice.hidden).float(), self.embed)
        return np.concatenate([[1.0], edge_logq.double().exp().numpy()])


def calibration(traces: list[Trace], scorer: TapsScorer | None, embed, pool_factor: int = 4) -> dict:
    """Predicted reach (scorer, or marginal product when None) vs observed greedy acceptance: the
    reliability table and ECE over all draft nodes, and the held-out tau of the reach rule per budget."""
    tables = None
    if scorer is not None:     # folded once, used per budget
        tables = ForwardTables(scorer, embed) if scorer.config.sibling else ScorerTables(scorer, embed)
    reaches = trace_reach(traces, tables)
    pred = np.concatenate([r[0][1:] for r in reaches]) if reaches else np.zeros(0)
    obs = np.concatenate([r[1][1:] for r in reaches]) if reaches else np.zeros(0)
    table, ece = reliability(pred, obs)
    if traces and all(t.nested for t in traces):    # each budget on its own run-time pool
        tau = {str(b): budget_acceptance(trace_reach(traces, tables, pool_factor * b), (b,), pool_factor)[str(b)]
               for b in BUDGETS}
    else:                                            # within one big pool, restricted as at run time
        tau = budget_acceptance(reaches, BUDGETS, pool_factor)
    return {"ece": ece, "table": table, "nodes": int(len(pred)),
            "mean_predicted": float(pred.mean()) if len(pred) else 0.0,
            "mean_observed": float(obs.mean()) if len(obs) else 0.0,
            "tau_by_budget": tau}


def trace_file_name(tc: ScorerTrainConfig) -> str:
    """The saved traces' file name: the pool's kind and shape, and the anchor span."""
    shape = (f"paths-{max(pool_sizes(tc))}-{tc.top_k}" if tc.pool == "paths"
             else f"{tc.top_k}-{tc.beam_width}-{tc.pool_cap}")
    shape += f"-span{tc.anchor_span}" if tc.anchor_span > 0 else ""
    return f"traces-{shape}.pt"


def saved_traces(trace_file: Path, fingerprint: str, tc: ScorerTrainConfig) -> dict | None:
    """The traces saved in `trace_file`, if collected with these weights and as many as asked for
    (or fewer training traces that record the sequences they came from: `load_or_collect_traces`
    adds the rest from the sequences after those)."""
    saved = torch.load(trace_file, weights_only=False) if trace_file.exists() else None
    if saved is not None and saved.get("fingerprint") != fingerprint:
        print(f"{trace_file} was collected with other target or drafter weights: collecting again")
        return None
    if saved is not None and len(saved["val"]) < tc.val_traces:
        print(f"{trace_file} holds fewer held-out traces than asked for: collecting again")
        return None
    if saved is not None and len(saved["train"]) < tc.train_traces and not saved.get("train_rows"):
        print(f"{trace_file} holds fewer traces than asked for: collecting again")
        return None
    return saved


def load_or_collect_traces(out: Path, pair, tc: ScorerTrainConfig, rng: np.random.Generator,
                           fingerprint: str) -> tuple[list[Trace], list[Trace]]:
    """Train and held-out traces: read back from OUT/scorer_data when they fit, else collected on
    the drafter stage's regenerated sequences and saved there."""
    data_dir = out / "drafter_data"
    if not (data_dir / "train.npy").exists():
        raise FileNotFoundError(f"no regenerated sequences in {data_dir}: run the drafter stage first")
    log_path = out / "drafter" / "training_log.json"
    prompt_len = json.loads(log_path.read_text())["train_config"]["prompt_len"] if log_path.exists() else 64
    trace_file = out / "scorer_data" / trace_file_name(tc)
    saved = saved_traces(trace_file, fingerprint, tc)
    train_seqs = np.load(data_dir / "train.npy")
    if saved is not None and len(saved["train"]) < tc.train_traces:
        # more training pools than were collected: the rest from the sequences after those used
        rows = int(saved["train_rows"])
        if rows >= len(train_seqs):
            raise FileNotFoundError(f"{trace_file} used all {rows} regenerated sequences; regenerate more "
                                    f"(the drafter stage's --regen-sequences) for more training pools")
        more = collect_traces(pair, train_seqs[rows:], prompt_len, tc.train_traces - len(saved["train"]), tc,
                              np.random.default_rng(tc.seed + rows), "train, more")
        saved = {**saved, "train": saved["train"] + more, "train_rows": len(train_seqs)}
        torch.save(saved, trace_file)
    if saved is not None:
        train_traces, val_traces = saved["train"][:tc.train_traces], saved["val"][:tc.val_traces]
        print(f"loaded {len(train_traces)} + {len(val_traces)} traces from {trace_file}")
        return train_traces, val_traces
    train_traces = collect_traces(pair, train_seqs, prompt_len, tc.train_traces, tc, rng, "train")
    val_traces = collect_traces(pair, np.load(data_dir / "val.npy"), prompt_len, tc.val_traces, tc, rng, "val")
    trace_file.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"train": train_traces, "val": val_traces, "fingerprint": fingerprint,
                "train_rows": len(train_seqs)}, trace_file)
    return train_traces, val_traces


def training_examples(traces: list[Trace], tc: ScorerTrainConfig) -> list[tuple]:
    """One training example per trace and run-time pool size: the features that pool gives, the
    drafter's hidden states, its labels."""
    examples = []
    for t in traces:
        for nodes in pool_sizes(tc):
            pool, prob, greedy = t.sub_pool(nodes)
            examples.append((pool_features(pool, t.lattice, bool(tc.sibling)), t.lattice.hidden,
                             torch.as_tensor(prob if tc.label == "prob" else greedy, dtype=torch.float32)))
            if pool is t.pool:
                break
    return examples


def resume_or_start(ckpt: Checkpointer, resume: bool, scorer, optimizer, rng: np.random.Generator,
                    fingerprint: str) -> tuple[int, float, list]:
    """(step, training time, history): the checkpoint's, when resuming one trained on these pools."""
    state = ckpt.load() if resume else None
    if state is not None and state.get("traces") != fingerprint:
        # a checkpoint of a scorer trained on another drafter's (or target's) pools: resuming it
        # would skip training (its step count may be spent) and ship a scorer of other pools
        print(f"{ckpt.path} was trained on pools of other target or drafter weights: training afresh")
        state = None
    if state is None:
        return 0, 0.0, []
    ckpt.restore(state, scorer, optimizer, rng)
    print(f"resumed from {ckpt.path} at step {state['step']}")
    return state["step"], state["elapsed"], state["history"]


def train_step(scorer, optimizer, embed, examples: list[tuple], rng: np.random.Generator, step: int,
               elapsed: float, tc: ScorerTrainConfig) -> float:
    """One optimizer step on `batch_pools` random examples; returns its loss."""
    for group in optimizer.param_groups:
        group["lr"] = cosine_lr(step, tc.lr, tc.warmup_steps, tc.max_steps, 0.1,
                                elapsed / (tc.minutes * 60) if tc.schedule == "time" else 0.0)
    batch = rng.integers(0, len(examples), size=tc.batch_pools)
    loss = 0.0
    for i in batch:
        feats, hidden, label = examples[i]
        edge_logq, other_logq = scorer(feats, hidden, embed)
        pool_loss, _ = scorer_loss(edge_logq, other_logq, feats, label, tc.bce_weight, tc.bce_focus)
        loss = loss + pool_loss / len(batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(scorer.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def print_calibration(step: int, elapsed: float, learned: dict, marginal: dict) -> None:
    print(f"done: {step} steps, {elapsed / 60:.1f} min. Held-out calibration (predicted reach vs observed "
          f"greedy acceptance): ECE learned {learned['ece']:.4f}, marginal {marginal['ece']:.4f}")
    for row in learned["table"]:
        print(f"  reach {row['bin']}: {row['nodes']:6d} nodes, predicted {row['predicted']:.3f}, "
              f"observed {row['observed']:.3f}")
    print("  " + tau_line(learned, marginal))


def train(out: Path, tc: ScorerTrainConfig, target_path: str | None, drafter_path: str | None,
          resume: bool, quick: bool) -> dict:
    torch.set_num_threads(1 if quick else usable_cores())
    pair = load_pair_parts(out, target_path, drafter_path)
    # the scorer trains on the CPU (it is small), whatever device the target collects traces on
    embed = torch.nn.Embedding.from_pretrained(pair.target.get_input_embeddings().weight.detach().float().cpu())
    rng = np.random.default_rng(tc.seed)
    fingerprint = weights_fingerprint(pair.target, pair.drafter)
    t0 = time.time()
    train_traces, val_traces = load_or_collect_traces(out, pair, tc, rng, fingerprint)
    trace_s = time.time() - t0
    examples = training_examples(train_traces, tc)

    torch.manual_seed(tc.seed)
    scorer = TapsScorer(ScorerConfig(model_dim=pair.target.config.hidden_size,
                                     max_depth=pair.drafter.block_size, sibling=bool(tc.sibling))).train()
    if not tc.use_hidden:         # the ablation: the hidden state's projection fixed at zero (its bias stays)
        scorer.hidden_proj.weight.data.zero_()
        scorer.hidden_proj.weight.requires_grad_(False)
    n_params = sum(p.numel() for p in scorer.parameters())
    print(f"scorer: {n_params / 1e3:.0f}k parameters; {len(train_traces)} train pools "
          f"({sum(t.pool.size for t in train_traces):,} edges), {len(val_traces)} held-out pools")
    optimizer = torch.optim.AdamW(scorer.parameters(), lr=tc.lr, weight_decay=0.01)
    ckpt = Checkpointer(out / "scorer_ckpt" / "ckpt.pt", tc.ckpt_minutes)
    step, elapsed, history = resume_or_start(ckpt, resume, scorer, optimizer, rng, fingerprint)

    def snapshot():
        return {"model": scorer.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "elapsed": elapsed, "history": history, "numpy_rng": rng.bit_generator.state,
                "traces": fingerprint}

    progress = Progress(tc.max_steps, "scorer", budget_s=tc.minutes * 60)
    progress.update(step, elapsed=elapsed)
    clock = StepClock(elapsed)         # training steps only; a pause (SIGSTOP) does not eat the schedule
    losses = []
    while step < tc.max_steps and elapsed < tc.minutes * 60:
        clock.start()
        losses.append(train_step(scorer, optimizer, embed, examples, rng, step, elapsed, tc))
        step += 1
        elapsed = clock.stop()
        if step % tc.log_every == 0:
            history.append({"step": step, "loss": float(np.mean(losses[-tc.log_every:]))})
            progress.update(step, elapsed=elapsed, extra=f"loss {history[-1]['loss']:.4f}")
        ckpt.maybe_save(snapshot)
    progress.close()
    ckpt.save(snapshot())
    scorer.eval()
    learned = calibration(val_traces, scorer, embed, tc.pool_factor)
    marginal = calibration(val_traces, None, embed, tc.pool_factor)
    print_calibration(step, elapsed, learned, marginal)
    scorer.save_pretrained(out / "scorer")
    log = {"train_config": asdict(tc), "parameters": n_params, "steps": step, "wall_time_s": round(elapsed, 1),
           "paused_s": round(clock.paused_s, 1), "trace_s": round(trace_s, 1), "train_pools": len(train_traces),
           "val_pools": len(val_traces),
           "calibration_learned": learned, "calibration_marginal": marginal, "history": history}
    (out / "scorer" / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(f"saved {out / 'scorer'}")
    if quick:
        check_loss_dropped(losses, "scorer")
    return log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder with target/, drafter/, drafter_data/")
    parser.add_argument("--target", default=None, help="target folder or hub id (default OUT/target)")
    parser.add_argument("--drafter", default=None, help="drafter folder or hub id (default OUT/drafter)")
    parser.add_argument("--quick", action="store_true", help="a few small pools, ~40 steps, asserts the loss drops")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    add_config_arguments(parser, ScorerTrainConfig, choices={"pool": ("paths", "candidate")})


def main(args: argparse.Namespace) -> None:
    tc = ScorerTrainConfig(**(QUICK_TRAIN if args.quick else {}))
    apply_arguments(args, tc)
    train(Path(args.out), tc, args.target, args.drafter, args.resume, args.quick)

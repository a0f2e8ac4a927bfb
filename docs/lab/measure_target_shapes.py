"""Measure candidate target shapes for the next pair: speed on CPU and bits per byte after a short run.

For each shape (layers x hidden, Qwen3, head dim 64):

  (a) training tokens/s on the training threads (from the short run's log: training steps only),
  (b) AR decoding tokens/s on ONE thread: random-init weights, a 128-token prompt, then 128
      single-token forwards with a DynamicCache and an argmax each (like taps.session.sample_continuation),
  (c) t_verify(16)/t_AR and t_verify(32)/t_AR on ONE thread: after ~200 cached tokens, one forward
      of 17 (33) tree tokens with the tree attention mask against one forward of a single token,
  (d) validation bits per byte over the whole stdlib val split after the same short training time
      (python -m taps.train target --schedule time), on the given tokenizer and corpus.

The speeds (b, c) run first for every shape, in one process, interleaved over repeats; the
training runs (d) then run one after the other. A shape whose run folder already holds
target/training_log.json is not trained again. Output: a markdown table and a JSON file.

    python docs/lab/measure_target_shapes.py --run runs/pair2 --work runs/shapes --minutes 6.5 \
        --results results/target-shapes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from taps.train.target import ModelConfig, build_model  # noqa: E402

# name: (layers, hidden, MLP, query heads, KV heads)
SHAPES = {
    "6x256": (6, 256, 768, 4, 2),
    "8x256": (8, 256, 768, 4, 2),
    "10x256": (10, 256, 768, 4, 2),
    "8x320": (8, 320, 960, 5, 1),
    "6x384": (6, 384, 1152, 6, 3),
}


def model_config(name: str, vocab: int, context: int) -> ModelConfig:
    layers, hidden, mlp, heads, kv = SHAPES[name]
    return ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, head_dim=64,
                       max_position_embeddings=context)


def crop(cache, length: int) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


@torch.inference_mode()
def speed(name: str, vocab: int, context: int, repeats: int, gen_tokens: int = 128) -> dict:
    """(b) and (c) on the current thread count (the caller sets one thread)."""
    from transformers import DynamicCache

    from taps.tree import DraftTree
    from taps.verify import target_forward

    torch.manual_seed(0)
    model = build_model(model_config(name, vocab, context)).eval()
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)

    def ar_run() -> float:
        cache = DynamicCache(config=model.config)
        ids = torch.randint(2, vocab, (1, 128), generator=g)
        pos = torch.arange(128).view(1, -1)
        t0 = time.perf_counter()
        for _ in range(gen_tokens):
            logits, _ = target_forward(model, cache, ids, pos, None, None)
            token = int(torch.argmax(logits[-1]))
            nxt = int(pos[0, -1]) + 1
            ids, pos = torch.tensor([[token]]), torch.tensor([[nxt]])
        return gen_tokens / (time.perf_counter() - t0)

    ctx = 200
    cache = DynamicCache(config=model.config)
    target_forward(model, cache, torch.randint(2, vocab, (1, ctx), generator=g), torch.arange(ctx).view(1, -1),
                   None, None)
    layers = [1, model.config.num_hidden_layers // 2, model.config.num_hidden_layers - 1]

    def one_step() -> None:
        target_forward(model, cache, torch.tensor([[5]]), torch.tensor([[ctx]]), None, None)
        crop(cache, ctx)

    def tree_inputs(m: int):
        tree = DraftTree(tokens=torch.randint(2, vocab, (m + 1,), generator=g).numpy(), parents=np.arange(-1, m),
                         depths=np.arange(m + 1), ranks=np.zeros(m + 1, dtype=np.int64),
                         marginal_logprob=np.zeros(m + 1), path_logprob=np.zeros(m + 1), reach=np.ones(m + 1))
        return tree.verify_inputs(ctx, ctx, torch.float32, torch.device("cpu"))

    trees = {m: tree_inputs(m) for m in (16, 32)}

    def verify(m: int) -> None:
        ids, pos, mask = trees[m]
        target_forward(model, cache, ids, pos, mask, layers)
        crop(cache, ctx)

    def timed(fn, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    ar_run()  # warm-up
    for fn in (one_step, lambda: verify(16), lambda: verify(32)):
        fn()
    ar, t1, t16, t32 = [], [], [], []
    for _ in range(repeats):  # interleaved, so that a busy moment hits all of them alike
        ar.append(ar_run())
        t1.append(timed(one_step, 20))
        t16.append(timed(lambda: verify(16), 10))
        t32.append(timed(lambda: verify(32), 10))
    m1, m16, m32 = statistics.median(t1), statistics.median(t16), statistics.median(t32)
    return {"params": params, "ar_tok_s": statistics.median(ar), "ar_tok_s_best": max(ar),
            "t_step_ms": m1 * 1e3, "t_verify16_ms": m16 * 1e3, "t_verify32_ms": m32 * 1e3,
            "verify16_over_ar": m16 / m1, "verify32_over_ar": m32 / m1}


def train_short(name: str, args: argparse.Namespace) -> dict:
    """(d): a short time-scheduled run into WORK/<name>, reusing the run's tokenizer and token cache."""
    out = Path(args.work) / name
    log_path = out / "target" / "training_log.json"
    if log_path.exists():
        return json.loads(log_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    run = Path(args.run).resolve()
    if not (out / "data").exists():
        (out / "data").symlink_to(run / "data", target_is_directory=True)
    layers, hidden, mlp, heads, kv = SHAPES[name]
    cmd = [sys.executable, "-m", "taps.train", "target", "--out", str(out), "--tokenizer", str(run / "tokenizer"),
           "--corpus", args.corpus, "--schedule", "time", "--minutes", str(args.minutes), "--max-steps", "1000000",
           "--warmup-steps", str(args.warmup), "--lr", str(args.lr), "--batch-size", str(args.batch_size),
           "--seq-len", str(args.seq_len), "--eval-every", "1000000", "--log-every", "20", "--ckpt-minutes", "1000",
           "--num-hidden-layers", str(layers), "--hidden-size", str(hidden), "--intermediate-size", str(mlp),
           "--num-attention-heads", str(heads), "--num-key-value-heads", str(kv), "--head-dim", "64",
           "--max-position-embeddings", str(args.context)]
    print(" ".join(cmd), flush=True)
    with open(out / "train.log", "w") as log:
        subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    return json.loads(log_path.read_text())


REFERENCE_AR = 184.1  # the shipped 6x256 target's AR tokens/s in the model card's benchmark


def table(rows: dict, minutes: float) -> str:
    """One row per shape. 'bench AR' projects (b) onto the model card's benchmark conditions:
    184.1 tokens/s (the shipped 6x256 there) times this shape's AR speed over 6x256's, both here."""
    base = rows.get("6x256", {}).get("speed", {}).get("ar_tok_s")
    lines = ["| shape | params | (a) train tok/s, 2 threads | (b) AR tok/s, 1 thread | AR vs 6x256 | bench AR (proj.) | "
             "AR step ms | (c) verify16 / AR | verify32 / AR | steps | tokens seen | (d) val nats/token | "
             "(d) val bits/byte |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        rel = r["speed"]["ar_tok_s"] / base if base else float("nan")
        s, t = r["speed"], r.get("train")
        train_cols = (f"{t['tokens_per_s']:,.0f} | ", f"{t['steps']} | {t['tokens_seen'] / 1e6:.2f} M | "
                      f"{t['final_val_loss']:.3f} | **{t['final_val_bpb']:.3f}** |") if t else ("– | ", "– | – | – | – |")
        lines.append(f"| {name} | {s['params'] / 1e6:.2f} M | {train_cols[0]}{s['ar_tok_s']:.0f} | "
                     f"{rel:.2f} | {REFERENCE_AR * rel:.0f} | {s['t_step_ms']:.2f} | {s['verify16_over_ar']:.2f} | {s['verify32_over_ar']:.2f} | "
                     f"{train_cols[1]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="runs/pair2", help="folder with tokenizer/ and data/ (the token cache)")
    parser.add_argument("--work", default="runs/shapes", help="one run folder per shape goes here")
    parser.add_argument("--results", default="results/target-shapes")
    parser.add_argument("--shapes", default="6x256,8x256,10x256,8x320", help=f"from {list(SHAPES)}")
    parser.add_argument("--speed-only", default="6x384", help="shapes measured for speed only")
    parser.add_argument("--corpus", default="stdlib+libs")
    parser.add_argument("--minutes", type=float, default=6.5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats within one speed measurement")
    parser.add_argument("--rounds", type=int, default=3, help="speed measurements per shape (the table shows medians)")
    parser.add_argument("--no-train", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(Path(args.run) / "tokenizer"))
    trained = [s for s in args.shapes.split(",") if s]
    names = trained + [s for s in args.speed_only.split(",") if s and s not in trained]
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.rounds):  # every shape once per round, so that a busy spell spreads over all
        for name in names:
            samples[name].append(speed(name, vocab, args.context, args.repeats))
            s = samples[name][-1]
            print(f"round {r + 1}: {name}: {s['params'] / 1e6:.2f}M params, AR {s['ar_tok_s']:.0f} tok/s, "
                  f"step {s['t_step_ms']:.2f} ms, verify16/AR {s['verify16_over_ar']:.2f}, "
                  f"verify32/AR {s['verify32_over_ar']:.2f}", flush=True)
    for name in names:
        median = {k: statistics.median(x[k] for x in samples[name]) for k in samples[name][0]}
        rows[name] = {"shape": SHAPES[name], "speed": median, "speed_rounds": samples[name]}
    torch.set_num_threads(threads)
    if not args.no_train:
        for name in trained:
            t0 = time.time()
            log = train_short(name, args)
            rows[name]["train"] = {k: log[k] for k in ("steps", "tokens_seen", "tokens_per_s", "final_val_loss",
                                                       "final_val_bpb", "wall_time_s", "parameters")}
            print(f"{name}: {log['steps']} steps, {log['tokens_per_s']:.0f} tok/s, val {log['final_val_loss']:.4f} "
                  f"nats/token = {log['final_val_bpb']:.4f} bits/byte ({(time.time() - t0) / 60:.1f} min)", flush=True)

    meta = {"when": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "args": vars(args), "vocab": vocab}
    (results / "shapes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(table(rows, args.minutes))


if __name__ == "__main__":
    main()

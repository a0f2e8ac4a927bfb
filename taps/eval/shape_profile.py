"""Shape profiles: what a round costs for a public target's SHAPE on this device, measured.

    python -m taps.eval.shape_profile --model qwen3-8b --device cuda --dtype bfloat16 \
        --contexts 512,2048 --max-nodes 256 --out DIR [--copy-to assets/profiles]
    python -m taps.eval.shape_profile --model qwen3-8b --dry-run --out DIR     # tiny, CPU, float32

Builds a randomly initialised target at the published shape (`taps.published`), at full depth,
its weights made directly on the device in the given precision (no CPU copy), and a random DFlash
b16 drafter at the published drafter shape; then, after a random context of each length, times
with the engine's own functions (`taps.verify.target_body`, `taps.tree.DraftTree.verify_inputs`,
`taps.fast_drafter`):
- an AR step: one token after the context, its logits, the cache trimmed back;
- verify(m) for every size of `taps.cost_model.default_sizes(max_nodes)`: a tree of m nodes (at
  most 15 deep, as a 16-token block allows) with its tree-shaped additive mask, the target's layers
  keeping the drafter's feature layers, the logits of every row (what a greedy walk reads), the
  cache trimmed back;
- the drafter pass: a 16-token block after the context, its logits through the target's head.
Every timed call is warmed up first; sizes are interleaved in every repeat so a burst of load hits
them alike; CUDA events time each call on a GPU (one synchronize per call). Random weights make
the COSTS of the shape (the same matrices, attention and launches as the real checkpoint), never
its acceptance: the app's what-if pairs these costs with the acceptance of the pair it runs.

Writes to --out, as it goes: one profile JSON per (model, context) in the app's profile schema
(`taps.cost_model.LatencyProfile`, kind "measured-shape", id `<device>-<model>-<dtype>-ctx<c>`),
measurements.json (every sample), and summary.md (AR ms/token, verify(16/64/256), the draft pass,
and the roofline estimate's error against each, `taps.roofline.estimate_error`). With --copy-to,
each profile is also copied there once all of a model's contexts are measured.

--dry-run: the published shapes divided down (widths / 32, 2 target layers, 1 drafter layer, a
4,096-token vocabulary) on the CPU in float32, a few repeats: under a minute, for checking the
script, never for figures (its profiles say "dry run" in their id, model name and source).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from .. import published, roofline
from ..cost_model import LatencyProfile, default_sizes, monotone_fit, reference_profiles
from ..flags import add_out_flag
from ..policies import AR

KIND = "measured-shape"
BLOCK = 16                       # DFlash b16: the block the drafter drafts, the depth a tree can reach + 1
DRY_DIVISOR = 32
DRY_VOCAB = 4096
REPORT_SIZES = (16, 64, 256)


class ShapeProfileError(ValueError):
    """Bad settings or a device that cannot hold the shape: a message that says what to change."""


# ---------------------------------------------------------------------------- the pair at a published shape
def shape_configs(model: str, dry_run: bool = False):
    """(target config, drafter config) at the published shape of `model`; with `dry_run`, the widths
    divided by 32, 2 target layers, 1 drafter layer and a small vocabulary (GQA 4:1 and heads x
    head_dim != hidden kept)."""
    if not dry_run:
        return published.target_config(model), published.drafter_config(model)
    full = published.TARGETS[model]
    small = {"hidden_size": full["hidden_size"] // DRY_DIVISOR,
             "intermediate_size": full["intermediate_size"] // DRY_DIVISOR,
             "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": DRY_VOCAB,
             "eos_token_id": DRY_VOCAB - 2}
    target = published.target_config(model, num_layers=2, **small)
    drafter = published.drafter_config(model, num_layers=1, target_layers=2,
                                       **{k: v for k, v in small.items() if k != "eos_token_id"})
    drafter.dflash_config = {**drafter.dflash_config, "mask_token_id": DRY_VOCAB - 1}
    return target, drafter


@contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_pair(model: str, device: torch.device, dtype: torch.dtype, dry_run: bool = False, seed: int = 0):
    """A `taps.pair.ModelPair` of random weights at `model`'s published shape (target at full depth,
    sdpa attention as `load_pair` loads it, and its DFlash drafter), made directly on `device`."""
    import os

    from transformers import Qwen3ForCausalLM

    from ..drafter import DFlashDrafter
    from ..linear import pack_linears
    from ..pair import ModelPair

    target_config, drafter_config = shape_configs(model, dry_run)
    torch.manual_seed(seed)
    with torch.device(device):
        target = Qwen3ForCausalLM._from_config(target_config, dtype=dtype, attn_implementation="sdpa")
        with _default_dtype(dtype):
            drafter = DFlashDrafter(drafter_config)
    target.eval()
    drafter.eval()
    if device.type == "cpu" and dtype == torch.float32 and os.environ.get("TAPS_TARGET_GEMM", "onednn") != "default":
        pack_linears(target)         # as load_pair does on the CPU (taps.linear)
    return ModelPair(target=target, tokenizer=None, drafter=drafter, scorer=None, name=f"{model}-shape",
                     device=device, dtype=dtype, drafter_precision="same")


def tree_of(size: int, vocab: int, gen: torch.Generator):
    """A draft tree of `size` nodes at most BLOCK - 1 deep: ceil(size / 15) branches from the root,
    each a chain (node i's parent is node i - width), random tokens."""
    from ..tree import DraftTree

    width = max(1, math.ceil(size / (BLOCK - 1)))
    parents = np.array([-1] + [i - width if i > width else 0 for i in range(1, size + 1)], dtype=np.int64)
    depths = np.zeros(size + 1, dtype=np.int64)
    for i in range(1, size + 1):
        depths[i] = depths[parents[i]] + 1
    tokens = torch.randint(0, vocab, (size + 1,), generator=gen).numpy()
    return DraftTree(tokens=tokens, parents=parents, depths=depths, ranks=np.zeros(size + 1, dtype=np.int64),
                     marginal_logprob=np.zeros(size + 1), path_logprob=np.zeros(size + 1), reach=np.ones(size + 1))


# ---------------------------------------------------------------------------- timing
def _timer(device: torch.device):
    """A function that runs fn() and returns its seconds: CUDA events on a GPU (one synchronize, at
    the end event), the wall clock elsewhere."""
    if device.type == "cuda":
        def timed(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return timed

    def wall(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return wall


def _calls(pair, context: int, sizes: list[int], gen: torch.Generator) -> dict:
    """The timed calls after a random `context`-token context: AR.name, ("verify", m) per size, "draft"."""
    from transformers import DynamicCache

    from ..fast_drafter import DraftContext, fast_drafter
    from ..verify import target_body, trim_cache

    target, device, vocab = pair.target, pair.device, pair.target.config.vocab_size
    head = target.get_output_embeddings()
    cache = DynamicCache(config=target.config)
    ids = torch.randint(0, vocab, (1, context + 1), generator=gen).to(device)
    target_body(target, cache, ids[:, :context], torch.arange(context, device=device).view(1, -1), None, None)
    root, root_pos = ids[:, context:], torch.tensor([[context]], device=device)

    def ar():
        hidden, _ = target_body(target, cache, root, root_pos, None, None)
        head(hidden[-1:])
        trim_cache(cache, context)

    def verify_call(tree):
        def run():
            m_ids, m_pos, mask = tree.verify_inputs(context, context, pair.dtype, device)
            hidden, _ = target_body(target, cache, m_ids, m_pos, mask if tree.size else None, pair.feature_layers)
            head(hidden)             # every row's logits: what the greedy walk reads
            trim_cache(cache, context)
        return run

    draft_context = DraftContext(fast_drafter(pair), pair.mask_token_id)
    width = len(pair.feature_layers) * target.config.hidden_size
    draft_context.add(torch.randn(context, width, generator=gen).to(device=device, dtype=pair.dtype))

    def draft():
        draft_context.logits(draft_context.draft(int(root[0, 0]), BLOCK - 1, pair.embed))

    calls = {AR.name: ar, "draft": draft}
    calls.update({("verify", m): verify_call(tree_of(m, vocab, gen)) for m in sizes})
    return calls


@torch.inference_mode()
def measure_context(pair, context: int, sizes: list[int], repeats: int, warmup: int = 2) -> dict:
    """Seconds of every timed call at `context`: {name: [sample, ...]}, interleaved repeats."""
    gen = torch.Generator().manual_seed(context)
    calls = _calls(pair, context, sizes, gen)
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    timed = _timer(pair.device)
    samples: dict = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            samples[name].append(timed(fn))
    return samples


def _stats(values: list[float]) -> dict:
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median_s": float(median), "q1_s": float(q1), "q3_s": float(q3), "min_s": float(min(values)),
            "max_s": float(max(values)), "spread": float((q3 - q1) / median) if median > 0 else 0.0}


# ---------------------------------------------------------------------------- the profile
def device_words(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"CPU, {threads} thread{'s' if threads != 1 else ''}"


def profile_id(device_name: str, model: str, dtype: str, context: int, dry_run: bool = False) -> str:
    """`h200-qwen3-8b-bfloat16-ctx2048`: the roofline device a name matches, else the name in lower case."""
    device = roofline.device_for(device_name) or "-".join(
        "".join(c if c.isalnum() else " " for c in device_name.lower()).split())
    return f"{device}-{model}{'-tiny' if dry_run else ''}-{dtype}-ctx{context}"


def make_profile(pair, model: str, context: int, sizes: list[int], samples: dict, repeats: int,
                 dry_run: bool = False) -> tuple[str, LatencyProfile]:
    """(id, profile) from one context's samples. Per-round host costs (pool, estimate, select,
    commit) are not part of a shape: they are the reference CPU's, from the roofline data file
    (as the roofline estimates use them), added to the measured drafter pass and AR step."""
    host = roofline.load_data()["host_s"]
    dtype = str(pair.dtype).replace("torch.", "")
    device_name = device_words(pair.device)
    pid = profile_id(device_name, model, dtype, context, dry_run)
    medians = [_stats(samples[("verify", m)])["median_s"] for m in sizes]
    spread = [_stats(samples[("verify", m)])["spread"] for m in sizes]
    draft_s, ar_s = _stats(samples["draft"])["median_s"], _stats(samples[AR.name])["median_s"]
    name = published.TARGETS[model]["hub_id"].split("/")[-1]
    shape = roofline.model_shape(pair.target.config, f"tiny {name}" if dry_run else name)
    drafter_layers = pair.drafter.config.num_hidden_layers
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    source = (f"measured{' (DRY RUN: tiny shapes, not figures)' if dry_run else ''} on the {device_name} by "
              f"`python -m taps.eval.shape_profile` on {when}: a randomly initialised {shape['name']}-shaped target "
              f"({shape['layers']} layers, {dtype}) and DFlash b{BLOCK} drafter ({drafter_layers} "
              f"layer{'s' if drafter_layers != 1 else ''}), "
              f"context {context}, medians of {repeats} interleaved repeats; per-round host costs (pool, estimate, "
              "select, commit) are the reference CPU's (assets/profiles/roofline.json host_s)")
    profile = LatencyProfile(
        sizes=list(sizes), verify_s=monotone_fit(medians), draft_s=draft_s, device=pair.device.type, pair="",
        context_length=context, overhead_s={p: draft_s + float(c) for p, c in host.items() if p != AR.name},
        ar_step_s=ar_s + float(host.get(AR.name, 0.0)), raw_verify_s=medians, spread=spread,
        key={"shape_profile": pid, "model": model, "device_name": device_name, "dtype": dtype, "context": context,
             "dry_run": dry_run, "torch": torch.__version__, "transformers": _transformers_version(),
             "drafter_layers": drafter_layers, "block_size": BLOCK},
        measured_at=when, repeats=repeats, source=source, kind=KIND, device_name=device_name, dtype=dtype,
        model=shape)
    return pid, profile


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


# ---------------------------------------------------------------------------- the summary
def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


def _at(profile: LatencyProfile, size: int) -> str:
    """verify(size) in ms with its spread, or "-" when the profile stops short of it."""
    if size not in profile.sizes:
        return "-"
    i = profile.sizes.index(size)
    raw = profile.raw_verify_s or profile.verify_s
    spread = f" (±{50 * profile.spread[i]:.0f}%)" if profile.spread else ""
    return f"{_ms(raw[i])}{spread}"


def error_rows(profile: LatencyProfile) -> tuple[str, list[dict]]:
    """(roofline device, rows of `roofline.estimate_error`) for a shape profile, or (why not, [])."""
    try:
        drafter = shape_configs(profile.key["model"], True)[1] if profile.key.get("dry_run") else None
        device = roofline.device_for(profile.device_label())
        if device is None:
            return f"no roofline device matches {profile.device_label()!r}", []
        return device, roofline.estimate_error(profile, device, drafter_config=drafter)
    except (KeyError, ValueError) as exc:
        return f"no roofline comparison ({exc})", []


def summary_text(profiles: dict[str, LatencyProfile]) -> str:
    """summary.md: the measured figures per (model, context), then the roofline estimate's error."""
    first = next(iter(profiles.values()))
    lines = [f"# Shape profiles: {first.device_label()}, {first.dtype}", "",
             "Randomly initialised targets at the published shapes (full depth) and DFlash b16 drafters, timed with "
             "the engine's own functions (`python -m taps.eval.shape_profile`). Medians of interleaved repeats; "
             "± is half the interquartile range. AR = one token after the context (its logits included); "
             "verify(m) = a tree of m nodes with its tree mask, every row's logits; draft = a 16-token block.", "",
             *(["**DRY RUN**: tiny shapes (widths / 32, 2 target layers) on the CPU, for checking the script; "
                "these are no figures.", ""] if any(p.key.get("dry_run") for p in profiles.values()) else []),
             "| profile | target | context | AR ms/token | verify(16) ms | verify(64) ms | verify(256) ms | draft ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for pid, p in profiles.items():
        lines.append(f"| {pid} | {p.model.get('name', '?')} | {p.context_length} | {_ms(p.ar_step_s)} | "
                     + " | ".join(_at(p, m) for m in REPORT_SIZES) + f" | {_ms(p.draft_s)} |")
    lines += ["", "## The roofline estimate against these measurements", "",
              "error = estimate / measured - 1 (negative: the roofline is optimistic). The estimate is "
              "`taps.roofline` at the same shape and context with the data file's constants for the device "
              f"({roofline.FORMULA}).", "",
              "| profile | roofline device | AR | verify(16) | verify(64) | verify(256) | draft |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for pid, p in profiles.items():
        device, rows = error_rows(p)
        if not rows:
            lines.append(f"| {pid} | {device} | - | - | - | - | - |")
            continue
        by = {(r["what"], r["size"]): r for r in rows}
        cells = [by.get((AR.name, None)), *(by.get(("verify", m)) for m in REPORT_SIZES), by.get(("draft", None))]
        lines.append(f"| {pid} | {device} | " + " | ".join(
            "-" if r is None else f"{_ms(r['estimate_s'])} ms ({100 * r['error']:+.0f}%)" for r in cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, pid: str, profile: LatencyProfile, samples: dict) -> None:
    """Save one profile, add its samples to measurements.json and rewrite summary.md from every
    shape profile in `out` (so two runs into one folder, one per model, share one summary)."""
    out.mkdir(parents=True, exist_ok=True)
    profile.save(out / f"{pid}.json")
    path = out / "measurements.json"
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything[pid] = {("verify" if isinstance(k, tuple) else k) + (f"({k[1]})" if isinstance(k, tuple) else ""):
                       {**_stats(v), "samples_s": v} for k, v in samples.items()}
    path.write_text(json.dumps(everything, indent=1))
    found = {name: p for name, p in reference_profiles(folder=out).items() if p.kind == KIND}
    (out / "summary.md").write_text(summary_text(found))


# ---------------------------------------------------------------------------- the command
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m taps.eval.shape_profile",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-8b", help=f"comma-separated: {', '.join(published.TARGETS)}")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda (a dry run: cpu)")
    ap.add_argument("--dtype", default=None, help="bfloat16 | float16 | float32 (default: bfloat16 on CUDA, "
                                                  "float32 on the CPU and in a dry run)")
    ap.add_argument("--contexts", default="512,2048", help="comma-separated context lengths")
    ap.add_argument("--max-nodes", type=int, default=256, help="the largest tree timed (1 to 1024)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per call (default 7; 3 in a dry run)")
    add_out_flag(ap, "a profile JSON per model and context, measurements.json and summary.md", required=True)
    ap.add_argument("--copy-to", default=None, help="also copy each model's profiles here once all its contexts "
                                                    "are measured (e.g. assets/profiles); refused in a dry run")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU in float32 (checks the script)")
    return ap


def _parse(argv):
    return build_parser().parse_args(argv)


def _settings(args) -> dict:
    """Checked settings: models, device, dtype, contexts, sizes, repeats; a ShapeProfileError otherwise."""
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    unknown = [m for m in models if m not in published.TARGETS]
    if not models or unknown:
        raise ShapeProfileError(f"unknown --model {', '.join(unknown) or '(none)'}: choose from "
                                f"{', '.join(published.TARGETS)}")
    try:
        contexts = [int(c) for c in args.contexts.split(",") if c.strip()]
    except ValueError:
        raise ShapeProfileError(f"--contexts must be whole numbers separated by commas, got {args.contexts!r}"
                                ) from None
    if not contexts or min(contexts) < 1:
        raise ShapeProfileError(f"--contexts must be 1 or more, got {args.contexts!r}")
    if not 1 <= args.max_nodes <= 1024:
        raise ShapeProfileError(f"--max-nodes must be from 1 to 1024, got {args.max_nodes}")
    limit = min(published.TARGETS[m]["max_position_embeddings"] for m in models)
    if max(contexts) + args.max_nodes + BLOCK > limit:
        raise ShapeProfileError(f"a {max(contexts)}-token context and {args.max_nodes} nodes do not fit the "
                                f"target's {limit} positions: lower --contexts or --max-nodes")
    repeats = args.repeats if args.repeats is not None else (3 if args.dry_run else 7)
    if not 1 <= repeats <= 100:
        raise ShapeProfileError(f"--repeats must be from 1 to 100, got {repeats}")
    if args.dry_run:
        if args.copy_to:
            raise ShapeProfileError("--copy-to is refused with --dry-run: tiny shapes are no figures for assets/")
        device, dtype = torch.device("cpu"), torch.float32
    else:
        if args.device not in ("auto", "cpu", "cuda") and not args.device.startswith("cuda:"):
            raise ShapeProfileError(f"--device must be auto, cpu or cuda, got {args.device!r}")
        device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                              "cpu" if args.device == "auto" else args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ShapeProfileError(f"--device cuda, but torch {torch.__version__} sees no CUDA GPU")
        name = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
        dtype = getattr(torch, name, None)
        if name not in ("bfloat16", "float16", "float32") or dtype is None:
            raise ShapeProfileError(f"--dtype must be bfloat16, float16 or float32, got {name!r}")
    return {"models": models, "device": device, "dtype": dtype, "contexts": contexts,
            "sizes": default_sizes(args.max_nodes), "repeats": repeats}


def _out_of_memory(model: str, what: str) -> ShapeProfileError:
    return ShapeProfileError(
        f"the GPU ran out of memory {what} for the {model} shape: lower --max-nodes or --contexts, profile a "
        f"smaller --model (qwen3-4b), or free the GPU (nvidia-smi lists what holds its memory)")


def run_model(model: str, settings: dict, out: Path, dry_run: bool, say) -> list[Path]:
    """Build one model's pair, measure each context, write as it goes; the saved profiles' paths."""
    device, dtype = settings["device"], settings["dtype"]
    t0 = time.perf_counter()
    try:
        pair = build_pair(model, device, dtype, dry_run)
    except torch.OutOfMemoryError:
        raise _out_of_memory(model, "making the weights") from None
    params = sum(p.numel() for p in pair.target.parameters())
    say(f"# {model}{' (dry run, tiny)' if dry_run else ''}: {params / 1e9:.2f}B target parameters, "
        f"{pair.target.config.num_hidden_layers} layers, {str(dtype).replace('torch.', '')} on "
        f"{device_words(device)}; made in {time.perf_counter() - t0:.1f}s")
    saved = []
    for context in settings["contexts"]:
        t0 = time.perf_counter()
        try:
            samples = measure_context(pair, context, settings["sizes"], settings["repeats"])
        except torch.OutOfMemoryError:
            raise _out_of_memory(model, f"timing trees of up to {max(settings['sizes'])} nodes after "
                                        f"{context} tokens") from None
        pid, profile = make_profile(pair, model, context, settings["sizes"], samples, settings["repeats"], dry_run)
        write_outputs(out, pid, profile, samples)
        saved.append(out / f"{pid}.json")
        say(f"{pid}: AR {_ms(profile.ar_step_s)} ms, verify(16/64/256) "
            f"{' / '.join(_at(profile, m) for m in REPORT_SIZES)} ms, draft {_ms(profile.draft_s)} ms "
            f"({time.perf_counter() - t0:.1f}s)")
    del pair
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return saved


def main(argv=None) -> int:
    args = _parse(argv)

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        settings = _settings(args)
        out = Path(args.out)
        for model in settings["models"]:
            saved = run_model(model, settings, out, args.dry_run, say)
            if args.copy_to:
                Path(args.copy_to).mkdir(parents=True, exist_ok=True)
                for path in saved:
                    shutil.copy2(path, Path(args.copy_to) / path.name)
                say(f"# copied {', '.join(p.name for p in saved)} to {args.copy_to}")
    except ShapeProfileError as exc:
        print(f"shape_profile: {exc}", file=sys.stderr)
        return 2
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

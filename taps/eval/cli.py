"""Command line: `python -m taps generate|compare|headroom ...` (`taps` once installed); the bench is
`python -m taps.bench` (a sweep, or batches of requests with --batch). A flag means the same thing,
with the same default, in every command that takes it (`add_prompt_arguments`, `add_selectors_argument`,
`BUDGETS`, the decode settings of `taps.config`); `--out` is an output folder in every command that
writes files, each with its own default (`taps.flags.add_out_flag`).

generate  decode one prompt with one selector and print the text and each round's tau,
          verified nodes and rejected-prefix waste.
compare   run AR and every selector x estimator x budget over prompts, side by side in one
          process, and print one table (tau, tokens/s, speed-up vs AR, waste, selection share);
          with --out DIR, also the per-run rows as DIR/compare.json.
headroom  decode a suite's prompts with one selector and print, per draft depth, how often the
          target's token was the drafter's top 1 and how often among its top 4 and top 16
          (`taps.eval.metrics.candidate_recall` on the rounds' own drafts): what a path selector
          or a tree can take beyond an argmax chain.

--chat    (every command) format each prompt with the tokenizer's chat template, as one user message with
          thinking disabled (`taps.chat`): how public DFlash drafters were trained. A pair whose
          tokenizer has no template (the shipped pair) gets a one-line message.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..chat import chat_prompt_ids
from ..config import add_config_flags, config_from_args
from ..flags import add_out_flag, out_file
from ..policies import AR, names, policy


def _csv(kind):
    def parse(text: str):
        return [kind(x.strip()) for x in text.split(",") if x.strip()]
    return parse


def add_pair_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", help="pair folder (default: the shipped pair under assets/models)")
    p.add_argument("--target", help="target model folder or hub id (overrides the pair's)")
    p.add_argument("--drafter", help="drafter folder or hub id (overrides the pair's)")
    p.add_argument("--scorer", help="TAPS scorer folder (overrides the pair's)")
    p.add_argument("--path-selector", help="DFlash2 path selector folder (overrides the pair's selector/, which "
                                           "--drafter drops: it was trained for the pair's own drafter)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: float32 on CPU, "
                                                  "bfloat16 on CUDA)")
    p.add_argument("--drafter-precision", default="auto", choices=("auto", "same", "int8", "bfloat16"),
                   help="the drafter's inference precision (the target always runs as loaded): auto (int8 for a "
                        "float32 pair on the CPU, else same), same as the pair, int8 (dynamic quantization, CPU) "
                        "or bfloat16")


def add_chat_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat", action="store_true",
                   help="format prompts with the tokenizer's chat template (one user message, thinking disabled), "
                        "as public DFlash drafters were trained; needs a tokenizer with a chat template")


def add_decode_arguments(p: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """Every DecodeConfig setting as a flag (defaults, limits and help from taps.config), and --profile."""
    add_config_flags(p, exclude=exclude)
    p.add_argument("--profile", help="latency profile JSON (from `python -m taps.profile`); "
                                     "without one, the saved profile, measured now when none fits")


def decode_config(args, **extra):
    return config_from_args(args, **extra)


def load_from_args(args):
    from ..pair import load_pair

    return load_pair(args.pair, target=args.target, drafter=args.drafter, scorer=args.scorer,
                     selector=getattr(args, "path_selector", None), device=args.device, dtype=args.dtype,
                     drafter_precision=args.drafter_precision)


def load_profile(args, pair=None, configs=()):
    """The --profile file; without one, when any of `configs` sizes trees from a profile, the saved
    profile of `pair` here, measured now (and said so) when none fits."""
    if getattr(args, "profile", None):
        from ..cost_model import LatencyProfile

        return LatencyProfile.load(args.profile)
    sized = [c.budget for c in configs if c.uses_profile]
    if pair is None or not sized:
        return None
    from .measure import profile_for

    return profile_for(pair, max_nodes=max(sized))


def cmd_generate(args) -> int:
    from ..reference import greedy_continuation
    from ..session import DecodeSession
    from .metrics import summarize

    pair = load_from_args(args)
    config = decode_config(args)
    prompt = chat_prompt_ids(pair.tokenizer, args.prompt, name=pair.name) if args.chat else args.prompt
    oracle = None
    if config.policy.hindsight:
        oracle = greedy_continuation(pair, pair.encode_prompt(prompt), args.max_new_tokens)
    profile = load_profile(args, pair, [config])
    session = DecodeSession(pair, prompt, config, profile=profile, oracle_tokens=oracle)
    print(f"# pair {pair.name} on {pair.device}; selector {config.policy.run_label(args.estimator)}, "
          f"budget {args.budget}" + (f"; chat prompt ({len(session.prompt_ids)} tokens, thinking disabled)"
                                     if args.chat else ""))
    print(f"{'round':>5} {'tau':>4} {'verified':>8} {'waste':>6} {'ms':>8}  committed")
    for r in session.run():
        text = pair.tokenizer.decode(r.committed_tokens)
        print(f"{r.number:>5} {r.tau:>4} {r.verified_nodes:>8} {r.waste_nodes:>6} {1000 * r.time_s:>8.1f}  {text!r}")
    s = summarize(session.rounds)
    print(f"# {s.new_tokens} tokens in {s.rounds} rounds: tau {s.tau:.2f}, {s.tokens_per_s:.1f} tokens/s, "
          f"waste {100 * s.waste_share:.1f}%, stop: {session.stop_reason}")
    print((pair.tokenizer.decode(session.prompt_ids) if args.chat else args.prompt) + session.text)
    if getattr(args, "check", False) or getattr(args, "strict", False):
        from .runner import run_verdict

        ar = DecodeSession(pair, session.prompt_ids, config.with_run(AR.name), profile=profile)
        ar.run()
        verdict = run_verdict(pair, session, ar, profile, strict=getattr(args, "strict", False))
        print(f"# same as AR: {verdict.text}" + ("" if verdict.same else f"\n# {verdict.detail}"))
    return 0


COMPARE_FILE = "compare.json"           # what `taps compare --out DIR` writes in DIR


def cmd_compare(args) -> int:
    from tqdm import tqdm

    from .prompts import chat_format, read_prompts
    from .runner import aggregate, format_table, plan_jobs, run_prompt, warm_up

    if args.prompt_file:
        prompts = read_prompts(args.prompt_file)
    elif args.prompt:
        prompts = [{"id": "prompt", "prompt": args.prompt}]
    else:
        raise ValueError("give --prompt or --prompt-file")
    for name in args.selectors or ():
        policy(name)              # a clear message for an unknown name
    pair = load_from_args(args)
    if args.chat:
        prompts = chat_format(prompts, pair.tokenizer, pair.name)
    config = decode_config(args)
    from ..estimate import estimators_for

    estimators = args.estimators or estimators_for(pair)
    selectors = args.selectors or [name for name in names() if policy(name).runs_on(pair)]
    jobs = plan_jobs(selectors, args.budgets, estimators)
    for job in jobs:   # validate every setting before spending time
        job.settings(config).validate(pair)
    target = out_file(args.out, COMPARE_FILE)
    warm_up(pair, config)
    profile = load_profile(args, pair, [job.settings(config) for job in jobs])
    rows = []
    with tqdm(total=len(prompts) * (len(jobs) + 1), unit="run", leave=False) as bar:
        for prompt in prompts:
            def tick(row, prompt=prompt):
                bar.set_postfix_str(f"{prompt['id']} {row.label}")
                bar.update()
            rows += [{**row.as_dict(), "chat": bool(args.chat)}
                     for row in run_prompt(pair, prompt, jobs, config, profile=profile, on_result=tick,
                                           strict=getattr(args, "strict", False))]
    summary = aggregate(rows)
    print(f"# pair {pair.name} on {pair.device}, {len(prompts)} {'chat ' if args.chat else ''}prompt(s), "
          f"T={args.temperature}, {args.max_new_tokens} new tokens")
    print(format_table(summary))
    if target is not None:
        replaced = target.exists()
        with open(target, "w") as fh:
            json.dump(rows, fh, indent=1)
        print(f"# wrote {len(rows)} rows to {target}" + (" (replacing the one there)" if replaced else ""))
    return 0


def suite_setup(args):
    """(suite name, its first --limit prompts, the pair, the decode settings) of a suite command."""
    from .prompts import suite_prompts

    check_limit(args.limit)
    for name, least in (("batch", 1), ("depths", 1), ("repeats", 1)):
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        if not value and name == "batch" or any(v < least for v in (value if isinstance(value, list) else [value])):
            raise ValueError(f"--{name} must be {'sizes' if name == 'batch' else 'a whole number'} of at least "
                             f"{least}, got {value}")
    suite, prompts = suite_prompts(args.suite, args.prompt_file)
    return suite, prompts[: args.limit] if args.limit else prompts, load_from_args(args), decode_config(args)


BUDGETS = [8, 16, 32, 64, 128]          # --budgets: every budget a command compares, when none is given


def add_prompt_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt-file", "--prompts", dest="prompt_file", metavar="FILE",
                   help="a JSONL file, one {\"id\": ..., \"prompt\": ...} per line, or text with prompts "
                        "separated by a line of ---; instead of --suite (--prompts: the bench's old name for it)")


def add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    """The prompts a suite command decodes: a suite or a file, and how many of them."""
    from .prompts import SUITES

    p.add_argument("--suite", choices=SUITES, default="humaneval", help="the prompts (default humaneval: held out)")
    add_prompt_file_argument(p)
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="the first N prompts (at least 1; default: all of them)")


def add_selectors_argument(p: argparse.ArgumentParser, also: str = "") -> None:
    p.add_argument("--selectors", type=_csv(str), default=None,
                   help="comma-separated; AR always runs alongside, as the baseline of every speed-up (default: "
                        f"every registered policy the pair can run{also})")


def add_budgets_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budgets", type=_csv(int), default=list(BUDGETS),
                   help=f"comma-separated: each selector runs at each (default {','.join(map(str, BUDGETS))})")


def add_estimators_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--estimators", type=_csv(str), default=None,
                   help="TAPS's estimators, comma-separated (default: marginal,online, plus learned when the pair "
                        "has a scorer and selector when it has DFlash2's path selector)")


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be a whole number of at least 1, got {limit}")


def cmd_headroom(args) -> int:
    from ..record import DRAFT_TOP_K
    from ..session import DecodeSession
    from .metrics import candidate_recall

    suite, prompts, pair, config = suite_setup(args)
    config.validate(pair)
    if not config.policy.needs_drafter:
        raise ValueError("the headroom is the drafter's: choose a selector that drafts")
    profile = load_profile(args, pair, [config])
    ks = tuple(sorted({1, 4, DRAFT_TOP_K}))
    rounds = []
    for item in prompts:
        session = DecodeSession(pair, item["prompt"], config, profile=profile)
        session.run()
        rounds.append((session.rounds, session.tokens))
    depths = args.depths
    per = [candidate_recall(r, tokens, depths=depths, ks=ks) for r, tokens in rounds]
    print(f"# pair {pair.name}, {len(prompts)} {suite} prompts, {config.selector} at budget {config.budget}, "
          f"T={config.temperature}, {config.max_new_tokens} new tokens: the target's token among the drafter's "
          "top k at each draft depth, over every round")
    print("| depth | rounds | " + " | ".join(f"recall@{k}" for k in ks) + " |")
    print("|---:|---:|" + "---:|" * len(ks))
    for d in range(depths):
        seen = sum(p[d]["rounds"] for p in per)
        cells = []
        for k in ks:
            hits = sum((p[d][f"recall@{k}"] or 0) * p[d]["rounds"] for p in per)
            cells.append(f"{100 * hits / seen:.0f}%" if seen else "–")
        print(f"| {d + 1} | {seen} | " + " | ".join(cells) + " |")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m taps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt, round by round")
    add_pair_arguments(gen)
    add_decode_arguments(gen)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--check", action="store_true", help="also decode with AR and print the lossless verdict")
    gen.add_argument("--strict", action="store_true", help="--check, and rerun a low-precision near-tie in float32")
    add_chat_argument(gen)
    gen.set_defaults(func=cmd_generate)
    cmp = sub.add_parser("compare", help="every selector x budget side by side, AR alongside")
    add_pair_arguments(cmp)
    add_decode_arguments(cmp, exclude=("selector", "estimator", "budget"))
    cmp.add_argument("--prompt")
    add_prompt_file_argument(cmp)
    add_chat_argument(cmp)
    add_selectors_argument(cmp)
    add_estimators_argument(cmp)
    add_budgets_argument(cmp)
    add_out_flag(cmp, f"{COMPARE_FILE} (the per-run rows)", "without --out the table is only printed")
    cmp.add_argument("--strict", action="store_true", help="rerun a run that left AR's tokens at a low-precision "
                                                            "near-tie in float32 (a float32 copy of the pair)")
    cmp.set_defaults(func=cmd_compare)
    room = sub.add_parser("headroom", help="per draft depth, the target's token among the drafter's top 1/4/16")
    add_pair_arguments(room)
    add_decode_arguments(room)
    add_prompt_arguments(room)
    room.add_argument("--depths", type=int, default=5, help="draft depths to report")
    room.set_defaults(func=cmd_headroom)
    return parser


def run_command(func, args) -> int:
    """Run a command; a clear one-line error (exit status 2) for bad input instead of a traceback."""
    try:
        return func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())

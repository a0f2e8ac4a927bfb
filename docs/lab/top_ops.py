"""torch.profiler's top operators (self CPU time) over DDTree@16 rounds of the example prompts.

Runs against the checkout in the current directory, so the same file profiles an older engine too:
    cd /tmp/taps-before && python /path/to/this/checkout/docs/lab/top_ops.py
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from taps import DecodeSession, load_pair  # noqa: E402


def run(pair, prompts) -> int:
    rounds = 0
    for prompt in prompts:
        session = DecodeSession(pair, prompt, selector="ddtree", budget=16, max_new_tokens=64, stop_at_eos=False)
        while not session.finished:
            session.step()
            rounds += 1
    return rounds


def main() -> None:
    pair = load_pair()
    prompts = [json.loads(line)["prompt"] for line in open("assets/examples/prompts.jsonl") if line.strip()]
    run(pair, prompts[:2])                       # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        rounds = run(pair, prompts)
    print(f"# {os.getcwd()}: {rounds} rounds of ddtree@16, {torch.get_num_threads()} threads")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))


if __name__ == "__main__":
    main()

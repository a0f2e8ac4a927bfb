"""The vLLM side of `python -m taps.eval.vllm_check`: run in vLLM's own virtualenv as a script (it
imports vLLM, torch and the standard library only, never `taps`), one decoding method per process.

    .venv-vllm/bin/python taps/eval/vllm_worker.py < job.json

The job (JSON on stdin): {"out": result file, "pair": folder, "method": a name for the result,
"speculative_method": vLLM's (e.g. DFlash's) or none for plain decoding, "prompts": [[token ids],
...], "max_tokens": n, "spec_tokens": 15, "per_layer_k_norm": false}. The engine runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), greedy, EOS ignored, float32, eager, one prompt at a time (batch
1, as our engine decodes), each prompt timed (after one warm-up decode). `per_layer_k_norm` replaces
vLLM's grouped RMSNorm of the drafter's context keys with one RMSNorm per layer, each with its own
layer's k_norm weight (docs/vllm.md: on the CPU, vLLM 0.32's grouped kernel applies the first layer's
weight to every layer). The result: per prompt the generated ids and seconds; with DFlash the
drafts, accepted tokens and accepted tokens per draft position from `llm.get_metrics()`.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Run as a script, this folder would be first on the path and its profile.py would shadow the
# standard library's (which torch imports): the worker sees vLLM's packages only.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(os.path.dirname(__file__))]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def per_layer_k_norm() -> None:
    """Norm each layer's context keys with that layer's k_norm weight (plain torch RMSNorm)."""
    import torch
    from vllm.model_executor.models import qwen3_dflash

    def normalize(self, all_k: torch.Tensor) -> torch.Tensor:      # [L, num_ctx, nkv, hd]
        weight = self._k_norm_weights.view(all_k.shape[0], 1, 1, -1).to(all_k.dtype)
        variance = all_k.float().pow(2).mean(-1, keepdim=True)
        return (all_k.float() * torch.rsqrt(variance + self._rms_norm_eps)).to(all_k.dtype) * weight

    qwen3_dflash.DFlashQwen3Model._normalize_context_k = normalize


def metric_values(llm) -> dict:
    found = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            found[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", None)
    return found


def main() -> int:
    job = json.loads(sys.stdin.read())
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    if job.get("per_layer_k_norm"):
        per_layer_k_norm()
    pair = job["pair"]
    options = dict(model=f"{pair}/target", tokenizer=f"{pair}/target", dtype="float32", max_model_len=1024,
                   enforce_eager=True, enable_prefix_caching=False, disable_log_stats=False)
    if job.get("speculative_method"):               # vLLM's method name ("dflash"), else plain decoding
        options["speculative_config"] = {"method": job["speculative_method"], "model": f"{pair}/drafter",
                                         "num_speculative_tokens": job.get("spec_tokens", 15)}
    llm = LLM(**options)
    params = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"], ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=job["prompts"][0])], params, use_tqdm=False)     # warm-up
    before = metric_values(llm)
    rows = []
    for ids in job["prompts"]:
        began = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0]
        rows.append({"ids": list(out.outputs[0].token_ids), "seconds": time.perf_counter() - began})
    after = metric_values(llm)

    def delta(name):
        a, b = after.get(name), before.get(name)
        if isinstance(a, list):
            return [x - (b[i] if b else 0) for i, x in enumerate(a)]
        return None if a is None else a - (b or 0)

    result = {"method": job["method"], "vllm": __import__("vllm").__version__, "rows": rows,
              "drafts": delta("vllm:spec_decode_num_drafts"),
              "accepted": delta("vllm:spec_decode_num_accepted_tokens"),
              "per_position": delta("vllm:spec_decode_num_accepted_tokens_per_pos")}
    with open(job["out"], "w", encoding="utf-8") as fh:      # not stdout: vLLM logs there
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

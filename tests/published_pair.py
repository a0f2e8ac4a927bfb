"""A random-weight pair at the published Qwen3 widths, written to a folder that `taps.load_pair` reads.

The target is transformers' `Qwen3ForCausalLM` from `taps.published.target_config` (Qwen3-4B:
hidden 2560, 32 query / 8 key-value heads of 128, so heads x head_dim = 4096 != hidden and GQA 4:1,
intermediate 9728, vocabulary 151,936, tied embeddings) at a reduced depth; the drafter our
`DFlashDrafter` from `taps.published.drafter_config` (block 16, mask id 151,669) at a reduced depth;
a random `TapsScorer` at model_dim 2560 so the learned estimator runs, and a random DFlash2 path
selector (top-16, rank 32, over the 151,936-token vocabulary) so the dflash2 policy runs. The tokenizer is the shipped
pair's (4,096 tokens): the mask id lies outside it, as Qwen3's 151,669 lies outside Qwen3's tokenizer.

Weights are N(0, std) with the embedding's and the layers' deviations chosen apart: with tied
embeddings a random layer stack that adds little to the residual stream makes the target repeat its
input token; layers that dominate the residual give a varied continuation.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen3ForCausalLM
from transformers.initialization import no_init_weights

from taps import published
from taps.drafter import DFlashDrafter
from taps.pair import default_pair_path
from taps.path_selector import PathSelector, PathSelectorConfig
from taps.scorer import ScorerConfig, TapsScorer


def _normal(module: torch.nn.Module, std: float, generator: torch.Generator, skip=()) -> None:
    """Every matrix of `module` (but those named in `skip`) to N(0, std), drawn from `generator`."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2 and name not in skip:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)


def build_published_pair(folder: Path, name: str = "qwen3-4b", target_layers: int = 2, drafter_layers: int = 1,
                         target_layer_ids: list[int] | None = None, intermediate_size: int | None = None,
                         seed: int = 0, embed_std: float = 0.03, layer_std: float = 0.05) -> Path:
    """Write target/ (model + tokenizer), drafter/, scorer/, selector/ and pair.json under `folder`; return it.
    `target_layer_ids` default to every target layer; `intermediate_size` to the published one."""
    generator = torch.Generator().manual_seed(seed)
    sizes = {} if intermediate_size is None else {"intermediate_size": intermediate_size}
    config = published.target_config(name, target_layers, pad_token_id=None, bos_token_id=None, **sizes)
    ids = list(range(target_layers)) if target_layer_ids is None else list(target_layer_ids)
    dflash = {"target_layer_ids": ids, "mask_token_id": published.QWEN3_MASK_TOKEN_ID}
    drafter_config = published.drafter_config(name, drafter_layers, target_layers, dflash_config=dflash, **sizes)
    folder.mkdir(parents=True, exist_ok=True)

    with no_init_weights():            # every matrix is drawn below; norms start at one as usual
        target = Qwen3ForCausalLM(config)
    target.tie_weights()
    if target.get_output_embeddings().weight is not target.get_input_embeddings().weight:
        raise RuntimeError("the target's lm_head is not tied to its embedding, as Qwen3-4B's is")
    _normal(target, layer_std, generator, skip=("model.embed_tokens.weight", "lm_head.weight"))
    _normal(target.get_input_embeddings(), embed_std, generator)
    target.save_pretrained(folder / "target")
    del target
    tokenizer = AutoTokenizer.from_pretrained(default_pair_path() / "target")
    tokenizer.save_pretrained(folder / "target")
    gc.collect()                       # the target's 2.4 GB before the drafter's are drawn

    drafter = DFlashDrafter(drafter_config)
    _normal(drafter, layer_std, generator)
    drafter.save_pretrained(folder / "drafter")
    del drafter
    gc.collect()

    scorer = TapsScorer(ScorerConfig(model_dim=config.hidden_size, max_depth=drafter_config.block_size))
    _normal(scorer, 0.3, generator)
    scorer.save_pretrained(folder / "scorer")
    selector = PathSelector(PathSelectorConfig(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                                               selector_rank=32), init_std=0.0)
    _normal(selector, 0.2, generator)
    selector.save_pretrained(folder / "selector")
    (folder / "pair.json").write_text(json.dumps({"name": f"random-{name}-widths", "target": "target",
                                                  "drafter": "drafter", "scorer": "scorer", "selector": "selector"}))
    return folder

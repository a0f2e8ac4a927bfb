"""The published configurations of public checkpoints this engine runs, as data.

Qwen3-4B and Qwen3-8B (the targets) and z-lab's DFlash b16 drafters for them, from their
`config.json` and `generation_config.json` on the Hugging Face hub (public facts, copied here as
numbers so that tests and shape profiles need no download); and DFlash2's four extra settings as
the public DFlash2 release describes them (`DFLASH2`: 16 candidates, rank 256 at 27B, two taps,
groups of 16 channels), for DFlash2 drafter configs at these widths (`dflash2_drafter_config`).
`target_config` / `drafter_config` build transformers configs at these shapes, optionally at a
reduced depth, for conformance tests (meta-device modules at full size, random pairs at the
published widths) and for GPU shape profiles (`taps.eval.shape_profile`).
"""

from __future__ import annotations

from transformers import Qwen3Config

QWEN3_VOCAB = 151_936
QWEN3_MASK_TOKEN_ID = 151_669        # DFlash's mask id: outside the tokenizer's 151,669 tokens
QWEN3_EOS = 151_645                  # <|im_end|> (config.json)
QWEN3_GENERATION_EOS = [151_645, 151_643]   # generation_config.json adds <|endoftext|>
DFLASH_TARGET_LAYER_IDS = [1, 9, 17, 25, 33]

TARGETS: dict[str, dict] = {
    "qwen3-4b": {"hub_id": "Qwen/Qwen3-4B", "hidden_size": 2560, "intermediate_size": 9728,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "vocab_size": QWEN3_VOCAB, "max_position_embeddings": 40_960, "rope_theta": 1_000_000.0,
                 "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "eos_token_id": QWEN3_EOS},
    "qwen3-8b": {"hub_id": "Qwen/Qwen3-8B", "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "vocab_size": QWEN3_VOCAB, "max_position_embeddings": 40_960, "rope_theta": 1_000_000.0,
                 "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "eos_token_id": QWEN3_EOS},
}

# z-lab's DFlash b16 drafters: 5 layers at the target's widths, no embedding or lm_head of their own
DRAFTERS: dict[str, dict] = {
    "qwen3-4b": {"hub_id": "z-lab/Qwen3-4B-DFlash-b16", "num_hidden_layers": 5, "block_size": 16,
                 "num_target_layers": 36, "target_layer_ids": DFLASH_TARGET_LAYER_IDS,
                 "mask_token_id": QWEN3_MASK_TOKEN_ID},
    "qwen3-8b": {"hub_id": "z-lab/Qwen3-8B-DFlash-b16", "num_hidden_layers": 5, "block_size": 16,
                 "num_target_layers": 36, "target_layer_ids": DFLASH_TARGET_LAYER_IDS,
                 "mask_token_id": QWEN3_MASK_TOKEN_ID},
}

# DFlash2 (architecture "DFlash2DraftModel", `taps.dflash2`): the settings it adds to a DFlash config
DFLASH2: dict[str, int] = {"selector_top_k": 16, "selector_rank": 256, "conv_kernel_size": 2, "conv_group_size": 16}

# the 8B drafter's model.safetensors: 2,097,259,104 bytes in bfloat16 = 2 x 1,048,626,432 + its header
DRAFTER_8B_PARAMS = 1_048_626_432
DRAFTER_8B_FILE_BYTES = 2_097_259_104


def _check(name: str) -> None:
    if name not in TARGETS:
        raise ValueError(f"unknown published model '{name}': choose one of {', '.join(TARGETS)}")


def target_config(name: str, num_layers: int | None = None, **overrides) -> Qwen3Config:
    """The published target config of `name` ("qwen3-4b", "qwen3-8b"), at `num_layers` when given."""
    _check(name)
    values = {k: v for k, v in TARGETS[name].items() if k not in ("hub_id", "rope_theta")}
    values["rope_parameters"] = {"rope_type": "default", "rope_theta": TARGETS[name]["rope_theta"]}
    if num_layers is not None:
        values["num_hidden_layers"] = num_layers
    values.update(overrides)
    return Qwen3Config(architectures=["Qwen3ForCausalLM"], **values)


def _spread(num_layers: int, count: int) -> list[int]:
    """`count` target layer ids spread over `num_layers` (DFlash's rule where it fits, which needs
    at least 4 layers and gives distinct ids; else evenly from the first to the last layer), always in range."""
    from .drafter import default_target_layer_ids

    if num_layers >= 4:
        ids = default_target_layer_ids(num_layers, count)
        if len(set(ids)) == len(ids):
            return ids
    count = min(count, num_layers)
    if count == 1:
        return [num_layers // 2]
    return sorted({round(i * (num_layers - 1) / (count - 1)) for i in range(count)})


def drafter_config(name: str, num_layers: int | None = None, target_layers: int | None = None,
                   **overrides) -> Qwen3Config:
    """The published DFlash b16 drafter config for target `name`. With `target_layers` (a reduced
    target depth) the layer ids are spread over that depth instead of the published [1, 9, 17, 25, 33]."""
    _check(name)
    d = DRAFTERS[name]
    target = target_config(name, target_layers)
    n = d["num_hidden_layers"] if num_layers is None else num_layers
    ids = d["target_layer_ids"] if target_layers is None else _spread(target_layers, min(n, 5))
    values = {k: v for k, v in target.to_dict().items()
              if k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                       "vocab_size", "max_position_embeddings", "rope_parameters", "rms_norm_eps")}
    values.update(num_hidden_layers=n, block_size=d["block_size"], num_target_layers=target.num_hidden_layers,
                  dflash_config={"target_layer_ids": list(ids), "mask_token_id": d["mask_token_id"]},
                  architectures=["DFlashDraftModel"])
    values.update(overrides)
    return Qwen3Config(**values)


def dflash2_drafter_config(name: str, num_layers: int | None = None, target_layers: int | None = None,
                           **overrides) -> Qwen3Config:
    """A DFlash2 drafter config at the widths of `name`'s DFlash drafter (`drafter_config`), with
    DFlash2's published settings (`DFLASH2`) at the top level; `overrides` replace any field."""
    values = {**DFLASH2, "architectures": ["DFlash2DraftModel"], **overrides}
    return drafter_config(name, num_layers, target_layers, **values)

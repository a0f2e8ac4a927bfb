"""A deeper target from a trained one, computing exactly the same function at the start.

The target stage's `--init-from FOLDER` starts a run from a trained target. When FOLDER's model
has fewer layers than the run's `--num-hidden-layers`, the missing layers are inserted between
the trained ones, spread evenly (`insertion_points`). Each new layer is a copy of the trained layer
before it with its two residual writes zeroed (`self_attn.o_proj` and `mlp.down_proj`), so it
adds nothing to the residual stream: the grown model's logits, and the hidden state after every
trained layer, equal the original's. Training then starts from the trained model's text instead of
from scratch, and the copied query/key/value and MLP-input weights give the new layers' residual
writes a useful gradient from the first step.

Why a deeper target at all: on a CPU an AR step of this 6 x 256 target is bound by per-call
overhead and by reading its weights, while a tree's verify pass reads them once for every node,
so a deeper target gives tree decoding more to gain over AR (results/target-depth/README.md:
at equal tau, the taps-code-6m drafter's DDTree@16 goes from 2.03x over AR with 6 layers to 2.07x,
2.23x and 2.46x with 8, 10 and 12, as AR slows from 194 to 114 tokens/s).

The drafter reads the target's hidden states by layer index; `layer_map` says where each trained
layer sits in the grown model (a drafter trained on the original reads `--target-layers` mapped
through it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")   # a layer's two writes to the residual
SAME_CONFIG = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "max_position_embeddings", "tie_word_embeddings")


def insertion_points(n_from: int, n_to: int) -> list[int]:
    """For each new layer, the trained layer (0-based) it follows, spread evenly over the trained
    ones but never after the last (6 -> 10: after layers 1, 2, 3 and 4): the last trained layer
    stays last, since `transformers` hands the last layer's output on after the final norm, and a
    drafter that reads it keeps reading the same state."""
    if n_to < n_from or n_from < 1 or (n_to > n_from and n_from < 2):
        raise ValueError(f"cannot grow {n_from} layers to {n_to}")
    extra = n_to - n_from
    return [min(n_from - 2, (k + 1) * n_from // (extra + 1)) for k in range(extra)]


def layer_map(n_from: int, n_to: int) -> dict[int, int]:
    """Trained layer index -> its index in the grown model."""
    after = insertion_points(n_from, n_to)
    mapping, index = {}, 0
    for j in range(n_from):
        mapping[j] = index
        index += 1 + after.count(j)
    return mapping


def grow_state(state: dict[str, torch.Tensor], n_from: int, n_to: int) -> dict[str, torch.Tensor]:
    """A state dict of `n_from` decoder layers grown to `n_to` (see the module's docstring)."""
    after = insertion_points(n_from, n_to)
    mapping = layer_map(n_from, n_to)
    grown: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = LAYER.match(key)
        if m is None:
            grown[key] = value
            continue
        j, rest = int(m.group(1)), m.group(2)
        grown[f"model.layers.{mapping[j]}.{rest}"] = value
        for k in range(after.count(j)):
            grown[f"model.layers.{mapping[j] + 1 + k}.{rest}"] = (
                torch.zeros_like(value) if rest in ZEROED else value.clone())
    return grown


def load_init(model: torch.nn.Module, folder: Path) -> dict:
    """Load the trained target in `folder` into `model` (a Qwen3ForCausalLM of the run's shape),
    grown to the model's depth if it has fewer layers. Returns what was done, for the training log.
    Refuses, with the reason, a folder that is missing or holds another shape."""
    from safetensors.torch import load_file

    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise FileNotFoundError(f"--init-from {folder}: no trained target there (config.json and model.safetensors)")
    config = json.loads(config_path.read_text())
    ours = model.config
    wrong = [f"{k} {config.get(k)} (the run has {getattr(ours, k)})" for k in SAME_CONFIG
             if config.get(k) != getattr(ours, k)]
    n_from, n_to = int(config["num_hidden_layers"]), int(ours.num_hidden_layers)
    if n_from > n_to:
        wrong.append(f"num_hidden_layers {n_from} (the run has {n_to}: a model can grow, not shrink)")
    if wrong:
        raise ValueError(f"--init-from {folder}: another shape: " + "; ".join(wrong))
    state = grow_state(load_file(str(weights)), n_from, n_to)
    if ours.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (ours.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"--init-from {folder}: weights do not fit the model "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    if ours.tie_word_embeddings:
        model.tie_weights()
    return {"from": str(folder), "layers_from": n_from, "layers_to": n_to,
            "inserted_after": insertion_points(n_from, n_to),
            "layer_map": {str(k): v for k, v in layer_map(n_from, n_to).items()}}

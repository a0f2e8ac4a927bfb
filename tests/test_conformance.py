"""Conformance at the published shapes, on the CPU (issue 35).

(a) On the meta device, at full published size: the Qwen3-4B/8B targets (transformers) and our
    DFlash drafter for each have the public checkpoints' parameter names, shapes and counts; the
    8B drafter's parameter count and the byte count of its published weights file agree exactly.
(b) A random pair at the Qwen3-4B widths (hidden 2560, 32/8 heads of 128: heads x head_dim = 4096
    != hidden, GQA 4:1; vocabulary 151,936; mask id 151,669 outside the tokenizer; tied embeddings),
    reduced depth, saved and loaded through `load_pair`: every selector and estimator decodes AR's
    tokens at T=0 and T=0.8, and trees that plant the target's own continuation among random
    siblings are accepted deep (tau >= 4 a round) with the KV cache and the drafter's context equal
    to a fresh prefill of the committed sequence after every compaction.
(c) The fused drafter (`FastDrafter`, through `DraftContext`) and `DFlashDrafter` against a plain
    float64 re-implementation of the published DFlash forward at the 4B widths, two layers.

(b) and (c) build multi-GB models: slow suite, built once per module.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen3ForCausalLM

from taps import published
from taps.drafter import DFlashDrafter
from taps.fast_drafter import DraftContext, FastDrafter
from taps.roofline import load_data, model_shape

NAMES = ("qwen3-4b", "qwen3-8b")
HEAD_DIM = 128


# ------------------------------------------------------------------------------ (a) on meta
@pytest.fixture(scope="module")
def meta_models():
    """Full-size targets and drafters on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        return {name: (Qwen3ForCausalLM(published.target_config(name)), DFlashDrafter(published.drafter_config(name)))
                for name in NAMES}


def _layer_shapes(hidden: int, intermediate: int) -> dict[str, tuple[int, ...]]:
    """One decoder layer's parameters as the public Qwen3 / DFlash checkpoints name and shape them."""
    q, kv = 32 * HEAD_DIM, 8 * HEAD_DIM
    return {"self_attn.q_proj.weight": (q, hidden), "self_attn.k_proj.weight": (kv, hidden),
            "self_attn.v_proj.weight": (kv, hidden), "self_attn.o_proj.weight": (hidden, q),
            "self_attn.q_norm.weight": (HEAD_DIM,), "self_attn.k_norm.weight": (HEAD_DIM,),
            "mlp.gate_proj.weight": (intermediate, hidden), "mlp.up_proj.weight": (intermediate, hidden),
            "mlp.down_proj.weight": (hidden, intermediate), "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,)}


@pytest.mark.parametrize("name", NAMES)
def test_published_target_names_shapes_and_counts(meta_models, name):
    target, _ = meta_models[name]
    spec = published.TARGETS[name]
    hidden, layers = spec["hidden_size"], spec["num_hidden_layers"]
    expected = {f"model.layers.{i}.{key}": shape for i in range(layers)
                for key, shape in _layer_shapes(hidden, spec["intermediate_size"]).items()}
    expected.update({"model.embed_tokens.weight": (published.QWEN3_VOCAB, hidden), "model.norm.weight": (hidden,)})
    if not spec["tie_word_embeddings"]:
        expected["lm_head.weight"] = (published.QWEN3_VOCAB, hidden)
    got = {n: tuple(p.shape) for n, p in target.named_parameters()}      # a tied head is listed once
    assert got == expected
    tied = target.get_output_embeddings().weight is target.get_input_embeddings().weight
    assert tied == spec["tie_word_embeddings"]
    assert (32 * HEAD_DIM != hidden) == (name == "qwen3-4b")    # 4B: the attention width is not the hidden size
    # the roofline's shape data (assets/profiles/roofline.json) is this model: its params count
    # every matrix (norm weights aside), ours too
    shape = load_data()["models"][name]
    assert model_shape(target.config, shape["name"])["params"] == shape["params"]
    for key, field in (("hidden", "hidden_size"), ("layers", "num_hidden_layers"), ("heads", "num_attention_heads"),
                       ("kv_heads", "num_key_value_heads"), ("head_dim", "head_dim"), ("vocab", "vocab_size"),
                       ("intermediate", "intermediate_size"), ("tied", "tie_word_embeddings")):
        assert shape[key] == spec[field], key
    matrices = sum(p.numel() for p in target.parameters() if p.dim() == 2)
    norms = layers * (2 * hidden + 2 * HEAD_DIM) + hidden
    assert matrices == shape["params"]
    assert sum(p.numel() for p in target.parameters()) == shape["params"] + norms


@pytest.mark.parametrize("name", NAMES)
def test_published_drafter_names_and_shapes(meta_models, name):
    _, drafter = meta_models[name]
    spec, dspec = published.TARGETS[name], published.DRAFTERS[name]
    hidden = spec["hidden_size"]
    expected = {f"layers.{i}.{key}": shape for i in range(dspec["num_hidden_layers"])
                for key, shape in _layer_shapes(hidden, spec["intermediate_size"]).items()}
    expected.update({"norm.weight": (hidden,), "hidden_norm.weight": (hidden,),
                     "fc.weight": (hidden, len(published.DFLASH_TARGET_LAYER_IDS) * hidden)})
    got = {n: tuple(p.shape) for n, p in drafter.named_parameters()}
    assert got == expected                              # no embedding, no lm_head of its own
    saved = {k for k in drafter.state_dict() if "rotary_emb" not in k}    # what save_pretrained writes
    assert saved == set(expected)
    assert drafter.target_layer_ids == published.DFLASH_TARGET_LAYER_IDS == [1, 9, 17, 25, 33]
    assert drafter.mask_token_id == published.QWEN3_MASK_TOKEN_ID
    assert drafter.block_size == dspec["block_size"] == 16
    assert drafter.config.num_target_layers == spec["num_hidden_layers"]


def _safetensors_bytes(state: dict[str, torch.Tensor], dtype_name: str = "BF16", itemsize: int = 2) -> int:
    """The size of a safetensors file holding `state` (shapes only): the 8-byte header length,
    the JSON header (as transformers writes it: metadata {"format": "pt"}, tensors in name order,
    padded with spaces to a multiple of 8) and the data."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key in sorted(state):
        size = state[key].numel() * itemsize
        header[key] = {"dtype": dtype_name, "shape": list(state[key].shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"))
    return 8 + -(-len(text) // 8) * 8 + offset


def test_8b_drafter_count_matches_its_weights_file(meta_models):
    _, drafter = meta_models["qwen3-8b"]
    count = sum(p.numel() for p in drafter.parameters())
    assert count == published.DRAFTER_8B_PARAMS == 1_048_626_432
    header = published.DRAFTER_8B_FILE_BYTES - 2 * count      # bfloat16: 2 bytes a parameter
    assert 0 < header < 64 * 1024
    state = {k: v for k, v in drafter.state_dict().items() if "rotary_emb" not in k}
    assert _safetensors_bytes(state) == published.DRAFTER_8B_FILE_BYTES == 2_097_259_104


def test_fused_drafter_builds_and_drafts_at_full_size_on_meta(meta_models):
    _, drafter = meta_models["qwen3-4b"]
    hidden = published.TARGETS["qwen3-4b"]["hidden_size"]
    with torch.device("meta"):
        head = torch.nn.Linear(hidden, published.QWEN3_VOCAB, bias=False)
        context = DraftContext(FastDrafter(drafter, head), published.QWEN3_MASK_TOKEN_ID)
        context.add(torch.empty(20, 5 * hidden))
        out = context.draft(7, drafter.block_size - 1, torch.nn.Embedding(published.QWEN3_VOCAB, hidden))
        assert tuple(out.shape) == (drafter.block_size - 1, hidden)
        assert tuple(context.logits(out).shape) == (drafter.block_size - 1, published.QWEN3_VOCAB)

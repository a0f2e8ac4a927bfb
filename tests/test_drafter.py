"""The drafter module: public DFlash names, save/load round trip, incremental cache."""

from __future__ import annotations

import torch

from taps.drafter import DFlashDrafter, default_target_layer_ids, drafter_config

PUBLIC_LAYER_KEYS = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}


def test_state_dict_uses_public_dflash_names(tiny_pair):
    drafter = tiny_pair.drafter
    keys = set(drafter.state_dict())
    keys = {k for k in keys if "rotary_emb" not in k}
    expected = {"norm.weight", "fc.weight", "hidden_norm.weight"}
    for i in range(drafter.config.num_hidden_layers):
        expected |= {f"layers.{i}.{k}" for k in PUBLIC_LAYER_KEYS}
    assert keys == expected
    assert drafter.config.dflash_config["target_layer_ids"] == drafter.target_layer_ids
    assert drafter.config.block_size == drafter.block_size


def test_layer_ids_follow_the_spec():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]   # Qwen3-8B with a 5-layer drafter
    assert default_target_layer_ids(6, 1) == [3]


def test_save_load_round_trip(tiny_pair, tmp_path):
    drafter = tiny_pair.drafter
    drafter.save_pretrained(tmp_path / "d")
    again = DFlashDrafter.from_pretrained(tmp_path / "d", dtype=torch.float64)
    for (k, a), (_, b) in zip(sorted(drafter.state_dict().items()), sorted(again.state_dict().items())):
        torch.testing.assert_close(a.cpu(), b.cpu(), msg=k)


def test_incremental_cache_equals_full_context(tiny_pair):
    """Drafting after two cache extensions equals drafting with the whole context at once."""
    drafter = tiny_pair.drafter
    d = drafter.config.hidden_size * len(drafter.target_layer_ids)
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(1, 10, d, generator=gen, dtype=torch.float64).to(tiny_pair.device)
    block = torch.randn(1, 5, drafter.config.hidden_size, generator=gen, dtype=torch.float64).to(tiny_pair.device)
    a = drafter.new_cache()
    drafter.extend_cache(a, features[:, :4])
    drafter.extend_cache(a, features[:, 4:])
    b = drafter.new_cache()
    drafter.extend_cache(b, features)
    torch.testing.assert_close(drafter.draft_block(a, block), drafter.draft_block(b, block))


def test_public_config_fields(tmp_path, tiny_pair):
    cfg = drafter_config(tiny_pair.target.config, num_layers=3, block_size=16, mask_token_id=1)
    DFlashDrafter(cfg).save_pretrained(tmp_path / "d")
    import json

    raw = json.loads((tmp_path / "d" / "config.json").read_text())
    assert raw["block_size"] == 16 and raw["num_target_layers"] == 4
    assert raw["dflash_config"]["mask_token_id"] == 1
    assert len(raw["dflash_config"]["target_layer_ids"]) == 3


def test_fused_inference_drafter_equals_the_module(tiny_pair):
    """FastDrafter (fused weights, in-place context buffers) computes what DFlashDrafter computes:
    the context arriving in pieces, a block after it, in float64 (the module's RMSNorm rounds
    through float32, and float kernels differ between CPUs: hence the tolerance)."""
    from taps.fast_drafter import DraftContext, FastDrafter

    pair = tiny_pair
    drafter = pair.drafter
    gen = torch.Generator().manual_seed(3)
    feats = torch.randn(1, 23, len(drafter.target_layer_ids) * drafter.config.hidden_size, generator=gen,
                        dtype=torch.float64).to(pair.device)
    cache = drafter.new_cache()
    drafter.extend_cache(cache, feats[:, :17])
    drafter.extend_cache(cache, feats[:, 17:])
    block = torch.tensor([[7] + [pair.mask_token_id] * 5], device=pair.device)
    expected = drafter.draft_block(cache, pair.embed(block))[0, 1:]
    context = DraftContext(FastDrafter(drafter, pair.target.get_output_embeddings()), pair.mask_token_id)
    context.add(feats[0, :17])
    context.draft(9, 3, pair.embed)                 # a draft in between leaves nothing behind
    context.add(feats[0, 17:])
    got = context.draft(7, 5, pair.embed)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(context.logits(got), pair.lm_head(expected).float(), rtol=1e-5, atol=1e-5)


def test_int8_drafter_is_close_and_refused_where_it_cannot_run(tiny_pair, tiny_pair_f32):
    import pytest

    from taps.fast_drafter import DraftContext, FastDrafter

    pair = tiny_pair_f32
    if pair.device.type != "cpu":
        pytest.skip("int8 drafting runs on the CPU")
    gen = torch.Generator().manual_seed(4)
    feats = torch.randn(12, len(pair.drafter.target_layer_ids) * pair.drafter.config.hidden_size, generator=gen)
    hidden = {}
    for precision in ("same", "int8"):
        context = DraftContext(FastDrafter(pair.drafter, pair.target.get_output_embeddings(), precision), 1)
        context.add(feats)
        hidden[precision] = context.draft(7, 5, pair.embed)
    assert torch.nn.functional.cosine_similarity(hidden["same"], hidden["int8"], dim=-1).min() > 0.98
    with pytest.raises(ValueError, match="float32 pair on the CPU"):
        FastDrafter(tiny_pair.drafter, tiny_pair.target.get_output_embeddings(), "int8")   # float64

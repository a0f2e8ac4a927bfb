"""taps.train.grow: a deeper target that computes exactly what the trained one did."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from taps.train.grow import grow_state, insertion_points, layer_map


def qwen3(layers: int, seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                         tie_word_embeddings=True, dtype="float64", attn_implementation="eager")
    model = Qwen3ForCausalLM(config).double().eval()
    with torch.no_grad():   # larger weights than the default init, so that every layer matters
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("n_from, n_to", [(3, 3), (3, 5), (2, 7), (6, 10), (6, 12)])
def test_grown_model_computes_the_same_logits_and_trained_layer_states(n_from: int, n_to: int) -> None:
    small, big = qwen3(n_from), qwen3(n_to, seed=1)
    big.load_state_dict(grow_state(small.state_dict(), n_from, n_to))
    big.tie_weights()
    ids = torch.randint(2, 50, (2, 20))
    with torch.no_grad():
        a = small(ids, output_hidden_states=True)
        b = big(ids, output_hidden_states=True)
    assert torch.equal(a.logits, b.logits)
    for j, i in layer_map(n_from, n_to).items():
        assert torch.equal(a.hidden_states[j + 1], b.hidden_states[i + 1])
    # the new layers are copies of their neighbour with zeroed residual writes, not random
    new = sorted(set(range(n_to)) - set(layer_map(n_from, n_to).values()))
    for i in new:
        assert big.model.layers[i].self_attn.o_proj.weight.abs().sum() == 0
        assert big.model.layers[i].mlp.down_proj.weight.abs().sum() == 0
        assert big.model.layers[i].self_attn.q_proj.weight.abs().sum() > 0


def test_grown_model_still_learns_in_its_new_layers() -> None:
    small, big = qwen3(2), qwen3(4, seed=1)
    big.load_state_dict(grow_state(small.state_dict(), 2, 4))
    big.train()
    ids = torch.randint(2, 50, (2, 16))
    big(ids, labels=ids).loss.backward()
    for i in sorted(set(range(4)) - set(layer_map(2, 4).values())):
        assert big.model.layers[i].self_attn.o_proj.weight.grad.abs().sum() > 0
        assert big.model.layers[i].mlp.down_proj.weight.grad.abs().sum() > 0


def test_insertion_points_spread_and_refuse_shrinking() -> None:
    assert insertion_points(6, 10) == [1, 2, 3, 4]
    assert insertion_points(6, 12) == [0, 1, 2, 3, 4, 4]
    assert insertion_points(2, 4) == [0, 0]
    assert layer_map(6, 10) == {0: 0, 1: 1, 2: 3, 3: 5, 4: 7, 5: 9}
    for n_from, n_to in ((6, 4), (1, 2)):
        with pytest.raises(ValueError):
            insertion_points(n_from, n_to)


def test_a_grown_pair_decodes_the_same_tokens_and_trees(tiny_pair_dir, tiny_pair, tmp_path) -> None:
    """scripts/grow_pair.py: the grown target with the remapped drafter gives every selector the
    original pair's tokens, round by round (the same tau), and the greedy reference is unchanged."""
    import importlib.util
    from pathlib import Path

    from taps import DecodeSession, greedy_continuation, load_pair

    path = Path(__file__).resolve().parents[1] / "scripts" / "grow_pair.py"
    spec = importlib.util.spec_from_file_location("grow_pair", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mapping = module.grow_pair(tiny_pair_dir, 7, tmp_path / "grown")
    grown = load_pair(tmp_path / "grown", device=str(tiny_pair.device), dtype="float64")
    assert grown.target.config.num_hidden_layers == 7
    assert grown.feature_layers == [mapping[i] for i in tiny_pair.feature_layers]
    prompt = [5, 17, 33, 9, 41, 12, 60, 7]
    reference = greedy_continuation(tiny_pair, prompt, 20)
    assert greedy_continuation(grown, prompt, 20) == reference
    for selector, estimator in (("dflash", "marginal"), ("ddtree", "marginal"), ("taps", "online")):
        runs = []
        for pair in (tiny_pair, grown):
            session = DecodeSession(pair, prompt, selector=selector, estimator=estimator, budget=16,
                                    max_new_tokens=20, stop_at_eos=False)
            session.run()
            runs.append((session.generated, [r.tau for r in session.rounds]))
        assert runs[0] == runs[1] and runs[0][0] == reference, selector
    with pytest.raises(SystemExit, match="exists"):
        module.grow_pair(tiny_pair_dir, 7, tmp_path / "grown")
    with pytest.raises(SystemExit, match="--layers 3"):
        module.grow_pair(tiny_pair_dir, 3, tmp_path / "shrunk")

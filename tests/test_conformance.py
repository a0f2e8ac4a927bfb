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

import gc
import json
import math

import numpy as np
import pytest
import torch
from conftest import fixed_profile
from published_pair import build_published_pair
from transformers import DynamicCache, Qwen3ForCausalLM

from taps import DecodeSession, greedy_continuation, load_pair, published, sample_continuation
from taps.config import ESTIMATORS
from taps.drafter import DFlashDrafter
from taps.fast_drafter import DraftContext, FastDrafter, fast_drafter
from taps.policies import AR, DDTREE, DFLASH, DFLASH2, ORACLE, TAPS, Policy, policy, register, unregister
from taps.roofline import load_data, model_shape
from taps.selectors import Selector
from taps.tree import DraftTree
from taps.verify import HeadRows, compact_cache, prefill, target_body, walk

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


# ------------------------------------------------------- (c) the drafter against the published forward
CONTEXT, BLOCK = 20, 16


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float, in_float32: bool = False) -> torch.Tensor:
    """RMSNorm; `in_float32` as transformers' Qwen3RMSNorm computes it (in float32 whatever the
    dtype, so a float64 model normalises to float32 rounding: the public DFlash module and our
    DFlashDrafter use it; the fused drafter normalises in the model's dtype)."""
    if in_float32:
        x32 = x.to(torch.float32)
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _rotary(positions: torch.Tensor, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, head_dim] of Qwen3's default rotary embedding. The angles are float32 products,
    as transformers' Qwen3RotaryEmbedding (which the published DFlash forward uses) computes them,
    whatever the model's dtype."""
    inv_freq = 1.0 / theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().double(), angles.sin().double()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [n, heads, head_dim]: each half-pair (i, i + head_dim/2) turned by its angle."""
    half = HEAD_DIM // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + turned * sin[:, None, :]


def published_forward(weights: dict[str, torch.Tensor], config, features: torch.Tensor,
                      block: torch.Tensor, norms_in_float32: bool = False) -> torch.Tensor:
    """The DFlash drafter's forward as published, written out plainly: context features [c, F] ->
    fc -> hidden_norm; per layer, queries from the block (after input_layernorm), keys and values
    from [context ; block] through the same projections (the context without input_layernorm),
    q_norm / k_norm per head, rotary at absolute positions (context 0..c-1, block c..c+n-1),
    attention over all c + n positions without a causal mask, 4 query heads per key/value head,
    o_proj and the residual, the gated MLP and its residual; the final norm. Hidden states [n, d].
    `norms_in_float32`: every RMSNorm as Qwen3RMSNorm computes it (see `_rms`)."""
    eps, heads, kv_heads = config.rms_norm_eps, config.num_attention_heads, config.num_key_value_heads
    theta = config.rope_parameters["rope_theta"]
    c, n = features.shape[0], block.shape[0]

    def _rms(x, weight, eps):
        return _norm(x, weight, eps, norms_in_float32)

    context = _rms(features @ weights["fc.weight"].T, weights["hidden_norm.weight"], eps)
    cos, sin = _rotary(torch.arange(c + n), theta)
    hidden = block
    for i in range(config.num_hidden_layers):
        w = {k.split(f"layers.{i}.", 1)[1]: v for k, v in weights.items() if k.startswith(f"layers.{i}.")}
        x = _rms(hidden, w["input_layernorm.weight"], eps)
        q = _rms((x @ w["self_attn.q_proj.weight"].T).view(n, heads, HEAD_DIM), w["self_attn.q_norm.weight"], eps)
        both = torch.cat([context, x])
        k = _rms((both @ w["self_attn.k_proj.weight"].T).view(c + n, kv_heads, HEAD_DIM),
                 w["self_attn.k_norm.weight"], eps)
        v = (both @ w["self_attn.v_proj.weight"].T).view(c + n, kv_heads, HEAD_DIM)
        q, k = _rotate(q, cos[c:], sin[c:]), _rotate(k, cos, sin)
        out = torch.empty(n, heads, HEAD_DIM, dtype=block.dtype)
        for h in range(heads):
            g = h // (heads // kv_heads)
            scores = q[:, h] @ k[:, g].T / math.sqrt(HEAD_DIM)
            out[:, h] = torch.softmax(scores, dim=-1) @ v[:, g]
        hidden = hidden + out.reshape(n, heads * HEAD_DIM) @ w["self_attn.o_proj.weight"].T
        x = _rms(hidden, w["post_attention_layernorm.weight"], eps)
        gate, up = x @ w["mlp.gate_proj.weight"].T, x @ w["mlp.up_proj.weight"].T
        hidden = hidden + (gate * torch.sigmoid(gate) * up) @ w["mlp.down_proj.weight"].T
    return _rms(hidden, weights["norm.weight"], eps)


@pytest.fixture
def drafter64():
    """A two-layer drafter at the Qwen3-4B widths (published config, float64), random weights with
    every norm weight away from one (so a permuted or skipped norm shows), and its inputs. Built
    per test (one test uses it) so its 2 GB are freed before the pair of (b) is built."""
    config = published.drafter_config("qwen3-4b", num_layers=2)
    torch.manual_seed(0)
    drafter = DFlashDrafter(config).to(torch.float64).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.03)
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    hidden = config.hidden_size
    features = torch.randn(CONTEXT, len(drafter.target_layer_ids) * hidden, generator=generator, dtype=torch.float64)
    table = torch.randn(8, hidden, generator=generator, dtype=torch.float64)   # row 0: the mask's embedding
    mask = drafter.mask_token_id

    def embed(ids: torch.Tensor) -> torch.Tensor:
        return table[torch.where(ids == mask, 0, 1 + ids % 7)]

    yield drafter, features, embed
    del drafter
    gc.collect()


def _block(drafter, embed, root: int) -> torch.Tensor:
    return embed(torch.tensor([root] + [drafter.mask_token_id] * (BLOCK - 1)))


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    error = (got - want).abs().max().item()
    assert error <= 1e-8 * want.abs().max().item(), f"{what}: max abs error {error:.3g}"


@pytest.mark.slow
def test_fused_drafter_matches_the_published_forward(drafter64):
    drafter, features, embed = drafter64
    weights = {k: v for k, v in drafter.state_dict().items() if "rotary_emb" not in k}
    assert drafter.config.num_attention_heads * HEAD_DIM != drafter.config.hidden_size    # 4096 != 2560
    fast = FastDrafter(drafter, torch.nn.Linear(drafter.config.hidden_size, 8, dtype=torch.float64))
    with torch.no_grad():
        want = published_forward(weights, drafter.config, features, _block(drafter, embed, 3))
        # the context and the block in one pass (the features projected in the same call)
        context = DraftContext(fast, drafter.mask_token_id)
        context.add(features)
        _close(context.draft(3, BLOCK - 1, embed), want[1:], "fused, one pass")
        # the context in two parts: a first draft after 12 positions, whose block's keys/values
        # sit where the next 8 context positions go and must be overwritten by them
        context = DraftContext(fast, drafter.mask_token_id)
        context.add(features[:12])
        early = published_forward(weights, drafter.config, features[:12], _block(drafter, embed, 5))
        _close(context.draft(5, BLOCK - 1, embed), early[1:], "fused, after 12 positions")
        context.add(features[12:])
        _close(context.draft(3, BLOCK - 1, embed), want[1:], "fused, after 12 + 8 positions")
        # the training module (DFlashDrafter itself, built like the public one from transformers'
        # Qwen3RMSNorm, which normalises in float32), every row of the block
        want32 = published_forward(weights, drafter.config, features, _block(drafter, embed, 3), norms_in_float32=True)
        cache = drafter.new_cache()
        drafter.extend_cache(cache, features[None])
        _close(drafter.draft_block(cache, _block(drafter, embed, 3)[None])[0], want32, "DFlashDrafter")


# ------------------------------------------------------------ (b) a random pair at the 4B widths
PROMPT = "def fibonacci(n):\n    return"
NEW = 4                    # tokens per selector decode: a random drafter accepts nothing, so one a round
DEPTHS = (4, 6, 3, 5)      # the planted continuation's depth, round by round: tau = depth + 1
PLANTED = sum(DEPTHS) + len(DEPTHS)
T_SAMPLE, SEED = 0.8, 1234
VOCAB = published.QWEN3_VOCAB


@pytest.fixture(scope="module")
def pair4b(tmp_path_factory):
    """Built, saved and loaded through load_pair (CPU, float32). The drafter runs at the pair's own
    precision ("same"): int8's per-call activation scales would make the drafter's context depend
    on how its rows were batched, and the context check below compares batchings."""
    folder = build_published_pair(tmp_path_factory.mktemp("published") / "qwen3-4b-widths")
    pair = load_pair(folder, device="cpu", dtype="float32", drafter_precision="same")
    yield pair
    from taps import estimate
    from taps import fast_drafter as fused

    fused._BUILT.clear()            # the fused drafter and the scorer's tables hold GBs of this pair
    estimate._TABLES.clear()
    del pair
    gc.collect()


@pytest.fixture(scope="module")
def references(pair4b):
    """The prompt's ids and AR's continuations: greedy, and sampled at T_SAMPLE with SEED."""
    ids = pair4b.encode_prompt(PROMPT)
    return (ids, greedy_continuation(pair4b, ids, PLANTED),
            sample_continuation(pair4b, ids, PLANTED, T_SAMPLE, SEED))


@pytest.mark.slow
def test_random_pair_has_the_published_widths(pair4b, references):
    config, drafter = pair4b.target.config, pair4b.drafter
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
            config.intermediate_size) == (2560, 32, 8, 128, 9728)
    assert config.num_attention_heads * config.head_dim != config.hidden_size
    assert config.vocab_size == VOCAB and config.tie_word_embeddings
    assert pair4b.target.get_output_embeddings().weight is pair4b.target.get_input_embeddings().weight
    assert pair4b.mask_token_id == published.QWEN3_MASK_TOKEN_ID > len(pair4b.tokenizer)   # outside the tokenizer
    assert drafter.block_size == 16 and drafter.config.num_attention_heads == 32
    assert tuple(drafter.fc.weight.shape) == (2560, len(drafter.target_layer_ids) * 2560)
    assert pair4b.scorer is not None and pair4b.scorer.config.model_dim == 2560
    ids, greedy, _ = references
    assert len(set(greedy)) >= len(greedy) // 2, greedy          # a varied continuation, not one token repeated
    # a plain forward over the whole sequence picks the same tokens, with clear margins: float32
    # rounding (about 1e-5 of a logit here) cannot flip them
    with torch.inference_mode():
        logits = pair4b.target(torch.tensor([ids + greedy])).logits[0, len(ids) - 1:-1].float()
    top = logits.topk(2, dim=-1)
    assert top.indices[:, 0].tolist() == greedy
    assert (top.values[:, 0] - top.values[:, 1]).min().item() > 1e-3


def _runs():
    runs = [(AR.name, "marginal"), (DFLASH.name, "marginal"), (DDTREE.name, "marginal"),
            *[(TAPS.name, e) for e in ESTIMATORS], (ORACLE.name, "marginal"), (DFLASH2.name, "marginal")]
    return [(s, e, 0.0) for s, e in runs] + [(s, e, T_SAMPLE) for s, e in runs if not policy(s).greedy_only]


@pytest.mark.slow
@pytest.mark.parametrize("selector,estimator,temperature", _runs())
def test_every_selector_decodes_ar_tokens(pair4b, references, selector, estimator, temperature):
    ids, greedy, sampled = references
    reference = sampled if temperature > 0 else greedy
    s = DecodeSession(pair4b, ids, selector=selector, estimator=estimator, budget=4, temperature=temperature,
                      seed=SEED, max_new_tokens=NEW, stop_at_eos=False, profile=fixed_profile(pair4b),
                      oracle_tokens=greedy if policy(selector).hindsight else None)
    s.run()
    assert s.generated == reference[:NEW]


# Deep acceptance: trees that hold the target's own continuation (from an AR run) beside random
# siblings, and random children under those siblings, so the accepted path's nodes are scattered
# through the tree and compaction moves them.
def planted_tree(root: int, path: list[int], rng: np.random.Generator,
                 siblings: int = 2) -> tuple[DraftTree, list[int]]:
    """A tree whose main path is `path` (depths 1..len(path)); returns it and the main path's nodes.
    At each depth: `siblings` random tokens under the main node above, a random child under the
    first sibling of the depth above, then the main node."""
    tokens, parents, main_nodes = [root], [-1], []
    main, first_sibling = 0, None
    for token in path:
        taken, first = {token}, None
        for _ in range(siblings):
            other = int(rng.integers(VOCAB))
            while other in taken:
                other = int(rng.integers(VOCAB))
            taken.add(other)
            tokens.append(other)
            parents.append(main)
            first = len(tokens) - 1 if first is None else first
        if first_sibling is not None:
            tokens.append(int(rng.integers(VOCAB)))
            parents.append(first_sibling)
        tokens.append(int(token))
        parents.append(main)
        main, first_sibling = len(tokens) - 1, first
        main_nodes.append(main)
    parents = np.array(parents)
    depths = np.zeros(len(tokens), dtype=np.int64)
    for i in range(1, len(tokens)):
        depths[i] = depths[parents[i]] + 1
    n = len(tokens)
    tree = DraftTree(tokens=np.array(tokens, dtype=np.int64), parents=parents, depths=depths,
                     ranks=np.zeros(n, dtype=np.int64), marginal_logprob=np.zeros(n), path_logprob=np.zeros(n),
                     reach=np.ones(n))
    assert tree.is_prefix_closed()
    return tree, main_nodes


PLANTED_POLICY = Policy("planted", "Planted", colour="#000000", symbol="circle", hindsight=True)


class PlantedSelector(Selector):
    """Verifies `planted_tree` of the target's continuation, DEPTHS[round] deep (the drafter still
    drafts every round, so its context follows every compaction)."""

    policy = PLANTED_POLICY

    def __init__(self):
        self.rounds, self.rng = 0, np.random.default_rng(7)

    def pool(self, root_token, lattice, cfg, ctx):
        depth = DEPTHS[self.rounds % len(DEPTHS)]
        self.rounds += 1
        return planted_tree(root_token, ctx.future_tokens[:depth], self.rng)[0]


@pytest.fixture
def planted():
    register(PLANTED_POLICY)
    yield PLANTED_POLICY.name
    unregister(PLANTED_POLICY.name)


def _assert_cache_is_fresh(pair, cache, tokens: list[int]) -> torch.Tensor:
    """The cache after a round holds what a fresh prefill of the committed sequence (all but its
    last token) holds, layer by layer, to float32 rounding; returns the fresh prefill's features."""
    fresh = DynamicCache(config=pair.target.config)
    features = prefill(pair.target, fresh, tokens, pair.feature_layers)
    length = len(tokens) - 1
    assert cache.get_seq_length() == length
    for layer, (mine, theirs) in enumerate(zip(cache.layers, fresh.layers)):
        for kind in ("keys", "values"):
            a, b = getattr(mine, kind)[..., :length, :], getattr(theirs, kind)
            assert a.shape == b.shape
            error = (a - b).abs().max().item()
            assert error <= 1e-4 * b.abs().max().item(), f"layer {layer} {kind}: {error:.3g}"
    return features


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, T_SAMPLE])
def test_planted_continuation_is_accepted_deep_in_a_session(pair4b, references, planted, temperature):
    ids, greedy, sampled = references
    reference = sampled if temperature > 0 else greedy
    s = DecodeSession(pair4b, ids, selector=planted, budget=32, temperature=temperature, seed=SEED,
                      max_new_tokens=PLANTED, stop_at_eos=False, oracle_tokens=reference)
    s.run(lambda record: _assert_cache_is_fresh(pair4b, s.cache, s.tokens))
    assert s.generated == reference
    taus = [r.tau for r in s.rounds]
    assert taus == [d + 1 for d in DEPTHS]
    assert np.mean(taus) >= 4
    assert all(r.verified_nodes > r.tau for r in s.rounds)           # siblings were verified and dropped
    # the drafter's context, fed the kept rows' features round by round, drafts what a context
    # fed a fresh prefill's features drafts
    features = _assert_cache_is_fresh(pair4b, s.cache, s.tokens)
    fresh = DraftContext(fast_drafter(pair4b), pair4b.mask_token_id)
    fresh.add(features)
    with torch.inference_mode():
        want = fresh.draft(s.tokens[-1], BLOCK - 1, pair4b.embed)
        got = s.draft_context.draft(s.tokens[-1], BLOCK - 1, pair4b.embed)
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()


@pytest.mark.slow
def test_planted_continuation_through_the_engine_functions(pair4b, references):
    """Round by round with the engine's own prefill / target_body / walk / compact_cache on a
    DynamicCache: the walk accepts the whole planted path, and the next logits from the compacted
    cache are those of a fresh forward over the committed sequence."""
    ids, greedy, _ = references
    target, rng = pair4b.target, np.random.default_rng(11)
    cache = DynamicCache(config=target.config)
    tokens, taus = list(ids), []
    with torch.inference_mode():
        prefill(target, cache, tokens, None)
        for depth in DEPTHS:
            start = len(tokens) - 1
            future = greedy[len(tokens) - len(ids):]
            tree, main = planted_tree(tokens[-1], future[:depth], rng)
            inputs = tree.verify_inputs(start, start, pair4b.dtype, pair4b.device)
            hidden, _ = target_body(target, cache, *inputs, None)
            result = walk(tree, HeadRows(target, hidden), 0.0, 0, start)
            assert result.accepted == main
            compact_cache(cache, start, [0] + result.accepted)
            committed = [int(tree.tokens[i]) for i in result.accepted] + [result.bonus_token]
            tokens += committed
            taus.append(len(committed))
            _assert_cache_is_fresh(pair4b, cache, tokens)
        assert tokens[len(ids):] == greedy
        assert np.mean(taus) >= 4
        position = torch.tensor([[len(tokens) - 1]])
        hidden, _ = target_body(target, cache, torch.tensor([[tokens[-1]]]), position, None, None)
        got = target.get_output_embeddings()(hidden)[-1]
        want = target(torch.tensor([tokens])).logits[0, -1]
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
    assert int(got.argmax()) == int(want.argmax())

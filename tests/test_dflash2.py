"""DFlash2 (issue 50): the dflash2 policy, its path selector, our training stage, and public DFlash2
drafter checkpoints (their convolutions) against references written here from the public description:

    S_t(a, b) = U_t(b) + <A(a) * H(h_t), B(b)>        H(h) = W h; the walk from the anchor takes
                                                       argmax_b S_t(prev, b) at T = 0, a draw from
                                                       softmax(S_t(prev, .) / T) over the top-K at T > 0
    Conv(x)_t = k_{t,0} * x_t + k_{t,1} * x_{t-1}      k_{t,j} = base_j + a correction from the
                                                       sublayer's normed input at t, shared per channel
                                                       group; x_{-1} = 0 (the block boundary); before
                                                       and after each attention and MLP sublayer

Lossless runs of every selector (dflash2 among them) over drawn prompts are tests/test_lossless.py's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from taps import DecodeSession, greedy_continuation, load_pair, published, sample_continuation
from taps.dflash2 import DFlash2Drafter, DynamicConv, load_drafter
from taps.drafter import DFlashDrafter, drafter_config
from taps.fast_drafter import DraftContext, FastDrafter
from taps.path_selector import PathSelector, PathSelectorConfig, walk
from taps.policies import DFLASH2, REGISTRY, names
from taps.selectors import DFlash2Selector, make_selector
from taps.verify import gumbel_noise

PROMPTS = ([5, 17, 33, 2, 60, 8], [40, 41, 42], [7, 7, 7, 9, 11, 3, 70, 2, 5, 61], [88])
NEW = 20


# --------------------------------------------------------------------------------- the policy
def test_dflash2_is_one_registry_entry_and_one_selector_class():
    assert DFLASH2.name in names() and REGISTRY[DFLASH2.name] is DFLASH2
    assert DFLASH2.label == "DFlash2" and DFLASH2.needs_drafter and DFLASH2.needs_path_selector
    assert DFLASH2.size_modes == () and not DFLASH2.size_field and not DFLASH2.uses_estimator
    others = [p for p in REGISTRY.values() if p is not DFLASH2]
    for what in ("colour", "symbol", "pattern"):
        assert getattr(DFLASH2, what) not in {getattr(p, what) for p in others}, what
    assert isinstance(make_selector(DFLASH2.name), DFlash2Selector)


def test_dflash2_is_lossless_at_t0_on_several_prompts(tiny_pair):
    assert tiny_pair.path_selector is not None
    for prompt in PROMPTS:
        reference = greedy_continuation(tiny_pair, prompt, NEW)
        for budget in (1, 3, 64):
            s = DecodeSession(tiny_pair, prompt, selector=DFLASH2.name, budget=budget, max_new_tokens=NEW,
                              stop_at_eos=False)
            s.run()
            assert s.generated == reference, (prompt, budget)
            assert all(r.verified_nodes <= min(budget, 7) for r in s.rounds)


@pytest.mark.parametrize("temperature, seed", [(0.7, 3), (1.3, 11)])
def test_dflash2_equals_plain_sampling_with_the_seed(tiny_pair, temperature, seed):
    for prompt in PROMPTS[:2]:
        reference = sample_continuation(tiny_pair, prompt, NEW, temperature, seed)
        s = DecodeSession(tiny_pair, prompt, selector=DFLASH2.name, budget=8, temperature=temperature, seed=seed,
                          max_new_tokens=NEW, stop_at_eos=False)
        s.run()
        assert s.generated == reference, prompt


def _step(pair, temperature=0.0, seed=0, prompt=PROMPTS[0], budget=16):
    s = DecodeSession(pair, prompt, selector=DFLASH2.name, budget=budget, temperature=temperature, seed=seed,
                      max_new_tokens=8, stop_at_eos=False)
    record = s.step()
    return s, record


def _transition(selector: PathSelector, prev: int, hidden_t: np.ndarray, token: int) -> float:
    """<A(prev) * (W h_t), B(token)>, straight from the definition."""
    A = selector.predecessor_codebook.detach().double().numpy()
    B = selector.successor_codebook.detach().double().numpy()
    W = selector.hidden_projection.weight.detach().double().numpy()
    return float(np.sum(A[prev] * (W @ hidden_t) * B[token]))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_the_walk_is_the_argmax_or_the_draw_of_its_q_and_q_is_a_distribution(tiny_pair, temperature):
    s, record = _step(tiny_pair, temperature, seed=5)
    chain = s.selector.last_walk
    vocab = tiny_pair.target.config.vocab_size
    q = chain.q(vocab)
    depth, k = chain.candidates.shape
    assert k == min(tiny_pair.path_selector.top_k, vocab) == 16 and depth == 7
    assert np.allclose(q.sum(1), 1.0, atol=1e-12) and np.all(q >= 0)
    outside = np.ones_like(q, dtype=bool)
    np.put_along_axis(outside, chain.candidates, False, axis=1)
    assert np.all(q[outside] == 0.0)
    # the candidates are the drafter's top-K at each depth, best first (the lattice's columns): the
    # round's draft again, from a fresh session
    fresh = DecodeSession(tiny_pair, PROMPTS[0], selector=DFLASH2.name, budget=16, temperature=temperature, seed=5,
                          max_new_tokens=8, stop_at_eos=False)
    with torch.inference_mode():
        lattice = fresh._draft(fresh.tokens[-1], 7)
    assert np.array_equal(chain.candidates, lattice.tokens[:, :16])
    # the walk against the definition, position by position
    hidden = lattice.hidden.double().cpu().numpy()
    prev, scale = fresh.tokens[-1], (1 / temperature if temperature > 0 else 1.0)
    start = len(fresh.tokens) - 1
    for t in range(depth):
        scores = np.array([lattice.logprobs[t, j] + scale * _transition(tiny_pair.path_selector, prev, hidden[t], c)
                           for j, c in enumerate(chain.candidates[t])])
        want_q = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        assert np.allclose(chain.probs[t], want_q, atol=1e-9)
        if temperature > 0:
            noise = gumbel_noise(5, start + t + 1, vocab).numpy()[chain.candidates[t]]
            pick = int(np.argmax(scores + noise))
        else:
            pick = int(np.argmax(scores))
        assert chain.choice[t] == pick
        prev = int(chain.candidates[t, pick])
    # the verified chain is the walk, its reach the walk's own probabilities along it
    assert record.pool_tokens[1:] == chain.tokens.tolist()
    assert np.allclose(record.pool_reach, np.cumprod(np.r_[1.0, chain.chosen_prob]))


def test_the_walk_is_not_the_drafter_argmax_everywhere(tiny_pair):
    """The tiny pair's random selector is strong enough to leave DFlash's chain (the test above
    would hold trivially if the walk never did)."""
    choices = np.concatenate([_step(tiny_pair, prompt=p)[0].selector.last_walk.choice for p in PROMPTS])
    assert np.any(choices > 0) and np.any(choices == 0)


def test_a_pair_without_a_path_selector_is_refused_with_what_to_do(tiny_pair_dir):
    pair = load_pair(tiny_pair_dir, drafter=str(tiny_pair_dir / "drafter"), device="cpu", dtype="float64")
    assert pair.path_selector is None and not DFLASH2.runs_on(pair) and REGISTRY["dflash"].runs_on(pair)
    with pytest.raises(ValueError, match=r"has no DFlash2 path selector.*python -m taps\.train path_selector"):
        DecodeSession(pair, PROMPTS[0], selector=DFLASH2.name)
    session = DecodeSession(pair, PROMPTS[0], selector="ddtree", budget=4, max_new_tokens=4)
    with pytest.raises(ValueError, match="has no DFlash2 path selector"):
        session.reset(selector=DFLASH2.name)
    assert session.config.selector != DFLASH2.name       # unchanged, still usable
    session.run()


def test_a_path_selector_leaves_the_fingerprint_alone(tiny_pair, tiny_pair_dir):
    """The fingerprint keys latency profiles; a pair's selector folder is not part of it."""
    without = load_pair(tiny_pair_dir, drafter=str(tiny_pair_dir / "drafter"), device="cpu", dtype="float64")
    assert without.path_selector is None and tiny_pair.path_selector is not None
    assert without.fingerprint == tiny_pair.fingerprint


def test_a_selector_for_another_pair_is_refused(tiny_pair_dir, tmp_path):
    PathSelector(PathSelectorConfig(vocab_size=99, hidden_size=32)).save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="vocabulary is 99"):
        load_pair(tiny_pair_dir, selector=str(tmp_path / "other"), device="cpu")


# --------------------------------------------------------------------------------- selector references
def _random_selector(vocab: int, hidden: int, rank: int, top_k: int = 16, seed: int = 0) -> PathSelector:
    torch.manual_seed(seed)
    return PathSelector(PathSelectorConfig(vocab_size=vocab, hidden_size=hidden, selector_rank=rank,
                                           selector_top_k=top_k), init_std=0.05).double().eval()


def test_selector_scores_and_walk_equal_the_reference_at_published_widths():
    """Hidden 2560 (Qwen3-4B), rank 256, top-16 as published; a 4,096-token vocabulary (the
    slow suite repeats it at 151,936)."""
    _check_selector_reference(vocab=4096)


@pytest.mark.slow
def test_selector_reference_at_the_published_vocabulary():
    _check_selector_reference(vocab=published.QWEN3_VOCAB)


def _check_selector_reference(vocab: int):
    hidden, rank, k, depth, root = 2560, published.DFLASH2["selector_rank"], published.DFLASH2["selector_top_k"], 15, 7
    selector = _random_selector(vocab, hidden, rank, k)
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(depth, hidden, generator=gen, dtype=torch.float64)
    logits = torch.randn(depth, vocab, generator=gen, dtype=torch.float64) * 3
    logp = torch.log_softmax(logits, -1)
    unary, cands = logp.topk(k, -1)
    trans = selector.transitions(root, h, cands).detach().numpy()
    A, B = selector.predecessor_codebook.detach().numpy(), selector.successor_codebook.detach().numpy()
    W = selector.hidden_projection.weight.detach().numpy()
    gate = h.numpy() @ W.T
    for t in (0, 1, depth - 1):
        prevs = [root] * k if t == 0 else cands[t - 1].tolist()
        want = np.array([[np.dot(A[a] * gate[t], B[b]) for b in cands[t].tolist()] for a in prevs])
        assert np.allclose(trans[t], want, rtol=1e-10, atol=1e-12)
    for temperature in (0.0, 0.8):
        noise = np.random.default_rng(2).gumbel(size=(depth, k)) if temperature > 0 else None
        # the walk takes the lattice's log-probs at the temperature: log_softmax(logits / T)
        tempered = torch.log_softmax(logits / temperature, -1).gather(1, cands) if temperature else unary
        chain = walk(tempered.numpy(), trans, cands.numpy(), temperature, noise)
        prev, scale = root, (1 / temperature if temperature else 1.0)
        for t in range(depth):
            # S_t(prev, b) from the raw logits (U_t = the logit), tempered as a whole
            s = np.array([logits[t, b].item() + np.dot(A[prev] * gate[t], B[b]) for b in cands[t].tolist()]) * scale
            q = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            assert np.allclose(chain.probs[t], q, atol=1e-10)
            pick = int(np.argmax(s + noise[t])) if temperature else int(np.argmax(s))
            assert chain.choice[t] == pick
            prev = int(cands[t, pick])
        assert np.array_equal(chain.tokens, cands.numpy()[np.arange(depth), chain.choice])


def test_a_walk_at_t_above_0_needs_its_noise():
    with pytest.raises(ValueError, match="Gumbel noise"):
        walk(np.zeros((2, 3)), np.zeros((2, 3, 3)), np.zeros((2, 3), dtype=np.int64), 0.5)


# --------------------------------------------------------------------------------- training
def _bigram_blocks(n=96, depth=4, k=4, vocab=20, hidden=8, seed=0):
    """Blocks whose target token follows its predecessor by a fixed rule the unary does not know."""
    from taps.train.path_selector import Blocks

    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(0, vocab, (n,), generator=gen)
    label = torch.empty(n, depth, dtype=torch.long)
    prev = torch.empty(n, depth, dtype=torch.long)
    p = first
    for t in range(depth):
        prev[:, t] = p
        p = (p * 7 + 3) % vocab
        label[:, t] = p
    cands = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(n * depth)]).view(n, depth, k)
    hit = torch.rand(n, depth, generator=gen) < 0.8
    slot = torch.randint(0, k, (n, depth), generator=gen)
    cands = cands.masked_fill(cands == label[..., None], (vocab - 1))           # the label once at most
    cands.scatter_(2, slot[..., None], torch.where(hit, label, cands.gather(2, slot[..., None])[..., 0])[..., None])
    hits = cands == label[..., None]
    index = torch.where(hits.any(-1), hits.float().argmax(-1), -1)
    unary = torch.log_softmax(torch.randn(n, depth, k, generator=gen), -1)
    states = 1.0 + 0.1 * torch.randn(n, depth, hidden, generator=gen)       # normed states share a direction
    return Blocks(cands, unary, label, torch.full((n, depth), -3.0), index, prev, states, torch.arange(n) // 4)


def test_training_reduces_the_loss_on_a_tiny_batch():
    from taps.train.path_selector import PathSelectorTrainConfig, evaluate, selector_loss, train_step

    torch.manual_seed(0)
    blocks = _bigram_blocks()
    selector = PathSelector(PathSelectorConfig(vocab_size=20, hidden_size=8, selector_rank=8, selector_top_k=4))
    tc = PathSelectorTrainConfig(lr=5e-2, warmup_steps=1, max_steps=60, batch_blocks=32, gamma=7.0)
    before = selector_loss(selector, blocks, tc.gamma).item()
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(selector.parameters(), lr=tc.lr)
    for step in range(tc.max_steps):
        train_step(selector, optimizer, blocks, rng, step, tc)
    after = selector_loss(selector, blocks, tc.gamma).item()
    assert after < 0.5 * before
    result = evaluate(selector.eval(), blocks)
    assert result["top1_selector"] > result["top1_drafter"]
    assert result["tau"]["4"]["selector"] > result["tau"]["4"]["drafter"]


def test_the_training_stage_runs_end_to_end_and_its_selector_loads(tiny_pair_dir, tmp_path):
    """`python -m taps.train path_selector --quick` on the tiny pair and random sequences; the pair
    then loads the selector it wrote and decodes losslessly with it."""
    from taps.train.__main__ import main

    vocab = 90
    rng = np.random.default_rng(0)
    (tmp_path / "drafter_data").mkdir()
    for split, rows in (("train", 6), ("val", 2)):
        np.save(tmp_path / "drafter_data" / f"{split}.npy", rng.integers(2, vocab, size=(rows, 96)).astype(np.int32))
    main(["path_selector", "--out", str(tmp_path), "--quick", "--target", str(tiny_pair_dir / "target"),
          "--drafter", str(tiny_pair_dir / "drafter"), "--rank", "4", "--top-k", "8"])
    log = json.loads((tmp_path / "selector" / "training_log.json").read_text())
    assert log["selector_config"]["selector_rank"] == 4 and log["train_blocks"] == 24 and log["val_blocks"] == 8
    pair = load_pair(tiny_pair_dir, selector=str(tmp_path / "selector"), device="cpu", dtype="float64")
    assert pair.path_selector.top_k == 8
    prompt = PROMPTS[0]
    s = DecodeSession(pair, prompt, selector=DFLASH2.name, budget=8, max_new_tokens=12, stop_at_eos=False)
    s.run()
    assert s.generated == greedy_continuation(pair, prompt, 12)


# --------------------------------------------------------------------------------- the shipped pair
def test_the_shipped_pair_has_a_selector_and_keeps_its_profile(shipped_pair):
    from taps.profiles import shipped_reference

    assert shipped_pair.path_selector is not None and shipped_pair.path_selector.top_k == 16
    name, profile, why = shipped_reference(shipped_pair)
    assert profile is not None, why
    assert profile.key["fingerprint"] == shipped_pair.fingerprint          # the selector is not in the key
    assert DFLASH2.runs_on(shipped_pair)


def test_dflash2_is_lossless_on_the_shipped_pair(shipped_pair):
    prompt = "def add(a, b):\n    "
    ids = shipped_pair.encode_prompt(prompt)
    s = DecodeSession(shipped_pair, prompt, selector=DFLASH2.name, budget=15, max_new_tokens=12, stop_at_eos=False)
    s.run()
    assert s.generated == greedy_continuation(shipped_pair, ids, 12)


# --------------------------------------------------------------------------------- published checkpoints
def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, in_float32: bool) -> torch.Tensor:
    if in_float32:               # as transformers' Qwen3RMSNorm (the training module's norms) computes it
        x32 = x.to(torch.float32)
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x [n, heads, head_dim] turned by Qwen3's default rotary embedding (angles as float32 products)."""
    dim = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions.to(torch.float32)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], -1)
    cos, sin = angles.cos().double()[:, None, :], angles.sin().double()[:, None, :]
    half = dim // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def reference_conv(y: torch.Tensor, source: torch.Tensor, base: torch.Tensor, projection: torch.Tensor, side: int,
                   kernel: int, group: int) -> torch.Tensor:
    """Conv(y)_t[c] = sum_j (base[side, j, c] + (P source_t)[(side * kernel + j) * G + c // group]) * y_{t-j}[c],
    y_{t-j} = 0 before the block's first row."""
    n, d = y.shape
    groups = d // group
    dyn = source @ projection.T                                   # [n, 2 * kernel * groups]
    out = torch.zeros_like(y)
    channel_group = torch.arange(d) // group
    for t in range(n):
        for j in range(kernel):
            if t - j >= 0:
                tap = base[side, j] + dyn[t, (side * kernel + j) * groups + channel_group]
                out[t] += tap * y[t - j]
    return out


def reference_forward(w: dict, config, features: torch.Tensor, block: torch.Tensor, kernel: int, group: int,
                      norms_in_float32: bool = False) -> torch.Tensor:
    """The DFlash2 drafter's forward from its description: DFlash's (context features -> fc ->
    hidden_norm; queries from the block, keys and values from [context ; block], bidirectional,
    rotary at absolute positions, q/k norms, GQA) with each sublayer's input convolved (taps from
    the normed input) and its output convolved with the same input's other taps before the residual."""
    eps, heads, kv = config.rms_norm_eps, config.num_attention_heads, config.num_key_value_heads
    hd, theta = config.head_dim, config.rope_parameters["rope_theta"]
    c, n = features.shape[0], block.shape[0]

    def rms(x, weight):
        return _rms(x, weight, eps, norms_in_float32)

    context = rms(features @ w["fc.weight"].T, w["hidden_norm.weight"])
    hidden = block
    for i in range(config.num_hidden_layers):
        L = {k.split(f"layers.{i}.", 1)[1]: v for k, v in w.items() if k.startswith(f"layers.{i}.")}
        x = rms(hidden, L["input_layernorm.weight"])
        xc = reference_conv(x, x, L["attention_conv.base_kernel"], L["attention_conv.kernel_projection.weight"], 0,
                            kernel, group)
        q = rms((xc @ L["self_attn.q_proj.weight"].T).view(n, heads, hd), L["self_attn.q_norm.weight"])
        both = torch.cat([context, xc])
        k = rms((both @ L["self_attn.k_proj.weight"].T).view(c + n, kv, hd), L["self_attn.k_norm.weight"])
        v = (both @ L["self_attn.v_proj.weight"].T).view(c + n, kv, hd)
        q, k = _rope(q, torch.arange(c, c + n), theta), _rope(k, torch.arange(c + n), theta)
        out = torch.empty(n, heads, hd, dtype=block.dtype)
        for h in range(heads):
            g = h // (heads // kv)
            out[:, h] = torch.softmax(q[:, h] @ k[:, g].T / math.sqrt(hd), -1) @ v[:, g]
        attn = out.reshape(n, heads * hd) @ L["self_attn.o_proj.weight"].T
        hidden = hidden + reference_conv(attn, x, L["attention_conv.base_kernel"],
                                         L["attention_conv.kernel_projection.weight"], 1, kernel, group)
        x = rms(hidden, L["post_attention_layernorm.weight"])
        xc = reference_conv(x, x, L["mlp_conv.base_kernel"], L["mlp_conv.kernel_projection.weight"], 0, kernel, group)
        gate, up = xc @ L["mlp.gate_proj.weight"].T, xc @ L["mlp.up_proj.weight"].T
        mlp = (gate * torch.sigmoid(gate) * up) @ L["mlp.down_proj.weight"].T
        hidden = hidden + reference_conv(mlp, x, L["mlp_conv.base_kernel"], L["mlp_conv.kernel_projection.weight"], 1,
                                         kernel, group)
    return rms(hidden, w["norm.weight"])


def test_the_convolution_equals_the_reference_at_published_widths():
    """Hidden 2560, two taps, groups of 16 channels; a block of 16 rows, and a batch of two blocks
    (no tap crosses from one block into the next)."""
    d, kernel, group = 2560, published.DFLASH2["conv_kernel_size"], published.DFLASH2["conv_group_size"]
    conv = DynamicConv(d, kernel, group).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        conv.base_kernel.copy_(torch.randn(conv.base_kernel.shape, generator=gen, dtype=torch.float64))
        conv.kernel_projection.weight.copy_(torch.randn(conv.kernel_projection.weight.shape, generator=gen,
                                                        dtype=torch.float64) * 0.02)
    assert tuple(conv.kernel_projection.weight.shape) == (2 * kernel * d // group, d)
    x = torch.randn(2, 16, d, generator=gen, dtype=torch.float64)
    y = torch.randn(2, 16, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        dyn = conv.dynamic(x)
        for side, data in ((0, x), (1, y)):
            got = conv.convolve(data, dyn, side)
            for b in range(2):
                want = reference_conv(data[b], x[b], conv.base_kernel, conv.kernel_projection.weight, side, kernel,
                                      group)
                assert torch.allclose(got[b], want, rtol=1e-12, atol=1e-12)
        # the two-tap formula itself: Conv(x)_t = k_{t,0} x_t + k_{t,1} x_{t-1}, and x_{-1} = 0 at the boundary
        taps = conv.base_kernel[0] + dyn[0, :, 0].repeat_interleave(group, -1)       # [16, 2, d]
        got = conv.convolve(x, dyn, 0)[0]
        assert torch.allclose(got[0], taps[0, 0] * x[0, 0])
        assert torch.allclose(got[5], taps[5, 0] * x[0, 5] + taps[5, 1] * x[0, 4])
    fresh = DynamicConv(d, kernel, group)
    assert torch.equal(fresh.convolve(y[0].float(), fresh.dynamic(x[0].float()), 1), y[0].float())   # identity at init


def _dflash2_config(hidden=64, layers=2, heads=4, kv=2, head_dim=16, vocab=40, block=8, group=8):
    target = published.target_config("qwen3-4b", 4, hidden_size=hidden, intermediate_size=2 * hidden,
                                     num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                                     vocab_size=vocab, max_position_embeddings=128)
    config = drafter_config(target, num_layers=layers, block_size=block, mask_token_id=1)
    config.update({"architectures": ["DFlash2DraftModel"], "selector_top_k": 6, "selector_rank": 8,
                   "conv_kernel_size": 2, "conv_group_size": group})
    return config


def _random_dflash2(config, seed=0, dtype=torch.float64) -> DFlash2Drafter:
    torch.manual_seed(seed)
    drafter = DFlash2Drafter(config).to(dtype).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if "base_kernel" in name:
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.15)
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return drafter


def _check_drafter_against_reference(config, context: int = 12, tolerance: float = 1e-8):
    drafter = _random_dflash2(config)
    hidden = config.hidden_size
    gen = torch.Generator().manual_seed(3)
    features = torch.randn(context, len(drafter.target_layer_ids) * hidden, generator=gen, dtype=torch.float64)
    table = torch.randn(5, hidden, generator=gen, dtype=torch.float64)

    def embed(ids):
        return table[torch.where(ids == drafter.mask_token_id, 0, 1 + ids % 4)]

    block = embed(torch.tensor([3] + [drafter.mask_token_id] * (config.block_size - 1)))
    weights = {k: v for k, v in drafter.state_dict().items() if "rotary_emb" not in k}
    kernel, group = config.conv_kernel_size, config.conv_group_size
    with torch.no_grad():
        want = reference_forward(weights, config, features, block, kernel, group)
        fast = FastDrafter(drafter, torch.nn.Linear(hidden, 8, dtype=torch.float64))
        draft = DraftContext(fast, drafter.mask_token_id)
        draft.add(features)
        got = draft.draft(3, config.block_size - 1, embed)
        assert (got - want[1:]).abs().max() <= tolerance * want.abs().max()
        want32 = reference_forward(weights, config, features, block, kernel, group, norms_in_float32=True)
        cache = drafter.new_cache()
        drafter.extend_cache(cache, features[None])
        got = drafter.draft_block(cache, block[None])[0]
        assert (got - want32).abs().max() <= tolerance * want32.abs().max()
        # and without the convolutions the reference is not matched: they are really there
        plain = DFlashDrafter(config).to(torch.float64)
        plain.load_state_dict({k: v for k, v in drafter.state_dict().items()
                               if "conv" not in k and "candidate_selector" not in k}, strict=False)
        cache = plain.new_cache()
        plain.extend_cache(cache, features[None])
        assert (plain.draft_block(cache, block[None])[0] - want32).abs().max() > 1e-3 * want32.abs().max()


def test_the_dflash2_drafter_equals_the_reference_forward():
    """Fused (DraftContext) and training module, two layers, small widths; the slow suite repeats
    it at the Qwen3-4B widths."""
    _check_drafter_against_reference(_dflash2_config())


@pytest.mark.slow
def test_the_dflash2_drafter_equals_the_reference_at_published_widths():
    config = published.dflash2_drafter_config("qwen3-4b", num_layers=1, target_layers=4,
                                              vocab_size=1024, max_position_embeddings=256)
    _check_drafter_against_reference(config, context=20)


def test_published_dflash2_names_and_shapes_at_full_size():
    config = published.dflash2_drafter_config("qwen3-4b")
    with torch.device("meta"):
        drafter = DFlash2Drafter(config)
    d, vocab, r = 2560, published.QWEN3_VOCAB, published.DFLASH2["selector_rank"]
    got = {n: tuple(p.shape) for n, p in drafter.named_parameters()}
    for i in range(config.num_hidden_layers):
        for part in ("attention_conv", "mlp_conv"):
            assert got.pop(f"layers.{i}.{part}.base_kernel") == (2, 2, d)
            assert got.pop(f"layers.{i}.{part}.kernel_projection.weight") == (2 * 2 * d // 16, d)
    assert got.pop("candidate_selector.hidden_projection.weight") == (r, d)
    assert got.pop("candidate_selector.predecessor_codebook") == (vocab, r)
    assert got.pop("candidate_selector.successor_codebook") == (vocab, r)
    with torch.device("meta"):
        dflash = DFlashDrafter(published.drafter_config("qwen3-4b"))
    assert got == {n: tuple(p.shape) for n, p in dflash.named_parameters()}     # the rest is DFlash's


def test_a_dflash2_checkpoint_loads_by_folder_and_decodes_losslessly(tiny_pair_dir, tmp_path):
    """A DFlash2DraftModel folder (random weights, tiny widths) loads as DFlash's do; its selector
    becomes the pair's; the dflash2 policy decodes AR's tokens with it, and the fused drafter drafts
    what the module does."""
    target = load_pair(tiny_pair_dir, device="cpu", dtype="float64").target.config
    config = drafter_config(target, num_layers=2, block_size=8, mask_token_id=1)
    config.update({"architectures": ["DFlash2DraftModel"], "dflash_config": {**config.dflash_config,
                   "selector_top_k": 16, "selector_rank": 8, "conv_kernel_size": 2, "conv_group_size": 8}})
    drafter = _random_dflash2(config, dtype=torch.float32)
    drafter.save_pretrained(tmp_path / "pair" / "drafter")
    manifest = {"name": "tiny-dflash2", "target": str(tiny_pair_dir / "target"), "drafter": "drafter"}
    (tmp_path / "pair" / "pair.json").write_text(json.dumps(manifest))
    pair = load_pair(tmp_path / "pair", device="cpu", dtype="float64")
    assert isinstance(pair.drafter, DFlash2Drafter) and pair.path_selector is pair.drafter.candidate_selector
    assert pair.path_selector.top_k == 16 and pair.path_selector.config.selector_rank == 8
    loaded = {k: v for k, v in pair.drafter.state_dict().items() if "rotary" not in k}
    assert all(torch.equal(loaded[k], v.double()) for k, v in drafter.state_dict().items() if "rotary" not in k)
    for temperature in (0.0, 1.0):
        reference = (greedy_continuation(pair, PROMPTS[2], NEW) if temperature == 0
                     else sample_continuation(pair, PROMPTS[2], NEW, temperature, 4))
        s = DecodeSession(pair, PROMPTS[2], selector=DFLASH2.name, budget=7, max_new_tokens=NEW,
                          temperature=temperature, seed=4, stop_at_eos=False)
        s.run()
        assert s.generated == reference


def test_an_incomplete_dflash2_config_is_refused(tmp_path):
    config = _dflash2_config()
    del config.conv_group_size
    DFlashDrafter(drafter_config(published.target_config("qwen3-4b", 4, hidden_size=64, intermediate_size=128,
                                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                          vocab_size=40), num_layers=1)).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.update(architectures=["DFlash2DraftModel"], selector_top_k=16, selector_rank=8, conv_kernel_size=2)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="no conv_group_size"):
        load_drafter(tmp_path)


def test_module_docstrings_name_the_tensors():
    import taps.dflash2
    import taps.path_selector

    for name in ("attention_conv.base_kernel", "attention_conv.kernel_projection.weight", "mlp_conv.base_kernel",
                 "candidate_selector.hidden_projection.weight", "candidate_selector.predecessor_codebook",
                 "candidate_selector.successor_codebook"):
        assert name in taps.dflash2.__doc__, name
    assert "hidden_projection" in taps.path_selector.__doc__
    assert Path(taps.dflash2.__file__).exists()

"""The GPU path that does not wait on itself, tested on the CPU: stage timing by events with one
synchronize per read, the target's hidden states kept only for the drafter's layers, the
preallocated target cache with in-place compaction, the tree-mask buffer and the walk's one copy."""

from __future__ import annotations

import time

import pytest
import torch

from taps import DecodeSession
from taps.record import STAGES
from taps.timing import StageTimer

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# ---------------------------------------------------------------- stage timing
class _Clock:
    """A host clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _FakeEvent:
    """A timing event on a made-up device timeline: `record` stamps the clock's time; `synchronize`
    counts the waits (the real event's wait for the device)."""

    waits = 0

    def __init__(self, clock: _Clock):
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock.now

    def synchronize(self):
        type(self).waits += 1

    def elapsed_time(self, end: "_FakeEvent") -> float:
        assert self.at is not None and end.at is not None, "an event read before it was recorded"
        return 1000.0 * (end.at - self.at)


def test_event_timer_tiles_the_round_and_waits_once():
    clock = _Clock()
    _FakeEvent.waits = 0
    timer = StageTimer("cpu", event=lambda: _FakeEvent(clock))
    assert timer.uses_events
    spans = {"draft": 0.004, "pool": 0.001, "estimate": 0.0005, "select": 0.002, "verify": 0.010, "commit": 0.003}
    for stage, span in spans.items():
        with timer(stage):
            clock.now += span
        clock.now += 0.0001          # host work between two stages: the next stage starts where this one ended
    assert _FakeEvent.waits == 0     # nothing waits inside the round
    seconds = timer.seconds
    assert _FakeEvent.waits == 1     # one synchronize, when the round's seconds are read
    assert set(seconds) == set(STAGES)
    assert all(v >= 0 for v in seconds.values())
    assert sum(seconds.values()) == pytest.approx(clock.now - 0.0001)     # the stages tile the round
    assert seconds["draft"] == pytest.approx(0.004)
    assert seconds["pool"] == pytest.approx(0.0011)                       # the gap before it is charged to it
    assert timer.seconds == seconds and _FakeEvent.waits == 1             # read again: nothing pending, no wait


def test_event_timer_adds_a_stage_entered_twice():
    clock = _Clock()
    timer = StageTimer("cpu", event=lambda: _FakeEvent(clock))
    for _ in range(3):
        with timer("verify"):
            clock.now += 0.002
    assert timer.seconds["verify"] == pytest.approx(0.006)
    with pytest.raises(ValueError, match="unknown stage"):
        with timer("walk"):
            pass


def test_cpu_timer_uses_the_host_clock_without_events():
    clock = _Clock()
    timer = StageTimer("cpu", clock=clock)
    assert not timer.uses_events
    with timer("draft"):
        clock.now += 0.25
    clock.now += 1.0                 # between stages: charged to none on the host clock
    with timer("verify"):
        clock.now += 0.5
    assert timer.seconds["draft"] == pytest.approx(0.25)
    assert timer.seconds["verify"] == pytest.approx(0.5)
    assert timer.seconds["pool"] == 0.0


def test_session_rounds_and_prefill_are_timed(tiny_pair):
    s = DecodeSession(tiny_pair, "def f(x):\n    return", selector="ddtree", budget=8, max_new_tokens=12)
    assert s.prefill_s > 0
    while not s.finished:
        t0 = time.perf_counter()
        r = s.step()
        wall = time.perf_counter() - t0
        assert set(r.timings) == set(STAGES)
        assert all(v >= 0 for v in r.timings.values())
        assert 0 < sum(r.timings.values()) <= wall        # disjoint stretches inside the step


@CUDA
def test_cuda_timer_records_events_and_reads_them_once():
    timer = StageTimer("cuda")
    assert timer.uses_events
    x = torch.randn(512, 512, device="cuda")
    t0 = time.perf_counter()
    for stage in STAGES:
        with timer(stage):
            x = x @ x
            x = x / x.norm()
    seconds = timer.seconds
    wall = time.perf_counter() - t0
    assert all(v >= 0 for v in seconds.values())
    assert 0 < sum(seconds.values()) <= wall


# ---------------------------------------------------------------- features of the drafter's layers only
def _all_hidden_states_features(target, ids, pos, layers):
    """Today's path: every layer's output kept, the drafter's layers concatenated."""
    from transformers import DynamicCache

    from taps.drafter import context_features

    out = target.get_decoder()(input_ids=ids, position_ids=pos, cache=DynamicCache(config=target.config),
                               use_cache=True, output_hidden_states=True)
    return out.last_hidden_state[0], context_features(out.hidden_states, layers)[0]


def test_features_of_tapped_layers_are_bit_identical(tiny_pair):
    from transformers import DynamicCache

    from taps.verify import target_body

    target = tiny_pair.target
    count = target.config.num_hidden_layers
    ids = torch.tensor([tiny_pair.encode_prompt("def add(a, b):\n    return a + b\n")], device=tiny_pair.device)
    pos = torch.arange(ids.shape[1], device=tiny_pair.device).view(1, -1)
    for layers in (list(tiny_pair.feature_layers), [0, count - 1], list(range(count)), [count - 1, 0, 0]):
        want_hidden, want = _all_hidden_states_features(target, ids, pos, layers)
        hidden, got = target_body(target, DynamicCache(config=target.config), ids, pos, None, layers)
        assert torch.equal(got, want), layers
        assert torch.equal(hidden, want_hidden)
    hidden, none = target_body(target, DynamicCache(config=target.config), ids, pos, None, None)
    assert none is None and torch.equal(hidden, want_hidden)


def test_verify_writes_nothing_on_the_target(tiny_pair):
    """The features come from transformers' own recording (a collector per call), not from hooks a
    session adds: after the first forward the target's modules hold the same hooks as before."""
    from transformers import DynamicCache

    from taps.verify import target_body

    target = tiny_pair.target
    ids = torch.tensor([tiny_pair.encode_prompt("x = 1\n")], device=tiny_pair.device)
    pos = torch.arange(ids.shape[1], device=tiny_pair.device).view(1, -1)
    target_body(target, DynamicCache(config=target.config), ids, pos, None, [0])
    hooks = [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in target.modules()]
    target_body(target, DynamicCache(config=target.config), ids, pos, None, [0, 1])
    assert [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in target.modules()] == hooks


# ---------------------------------------------------------------- the preallocated target cache
def _tree_mask(parents: list[int], past: int, dtype) -> torch.Tensor:
    n = len(parents)
    visible = torch.zeros(n, past + n, dtype=torch.bool)
    visible[:, :past] = True
    for i in range(n):
        j = i
        while j >= 0:
            visible[i, past + j] = True
            j = parents[j]
    return torch.zeros(n, past + n, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min).view(1, 1, n, -1)


def _decode_with(pair, cache, rounds: int = 5):
    """Prefill, then rounds of (a tree forward, compaction to a path, one plain step); every
    forward's hidden states and features, and the cache's keys at the end."""
    from taps.verify import compact_cache, target_body

    device, target, layers = pair.device, pair.target, list(pair.feature_layers)
    ids = pair.encode_prompt("def mean(xs):\n    return sum(xs) / len(xs)\n")
    out = list(target_body(target, cache, torch.tensor([ids], device=device),
                           torch.arange(len(ids), device=device).view(1, -1), None, layers))
    past, parents, depths = len(ids), [-1, 0, 0, 1, 3, 3], [0, 1, 1, 2, 3, 3]
    gen = torch.Generator().manual_seed(0)
    for _ in range(rounds):
        tokens = torch.randint(0, target.config.vocab_size, (1, len(parents)), generator=gen).to(device)
        pos = (past + torch.tensor(depths)).view(1, -1).to(device)
        out += target_body(target, cache, tokens, pos, _tree_mask(parents, past, pair.dtype).to(device), layers)
        compact_cache(cache, past, [0, 1, 3, 5])
        past += 4
        out.append(target_body(target, cache, tokens[:, :1], torch.tensor([[past]], device=device), None, None)[0])
        past += 1
        assert cache.get_seq_length() == past
    return out, [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


@pytest.mark.parametrize("chunk", [256, 3])
def test_target_cache_gives_dynamic_cache_results_bit_for_bit(tiny_pair, chunk):
    from transformers import DynamicCache

    from taps.target_cache import TargetCache

    target = tiny_pair.target
    want, want_kv = _decode_with(tiny_pair, DynamicCache(config=target.config))
    cache = TargetCache(target.config.num_hidden_layers, chunk=chunk)
    got, got_kv = _decode_with(tiny_pair, cache)
    assert len(got) == len(want)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got_kv, want_kv))
    assert cache.capacity % chunk == 0 and cache.capacity >= cache.get_seq_length()


def test_target_cache_writes_in_place_and_grows_geometrically():
    from taps.target_cache import TargetCache

    cache = TargetCache(num_layers=3, capacity=0, chunk=4)
    states = lambda n, fill: torch.full((1, 2, n, 8), float(fill))  # noqa: E731
    capacities, storages = [], set()
    for step in range(40):
        for layer in range(3):
            keys, values = cache.update(states(3, step), states(3, -step), layer)
            assert keys.shape == (1, 2, 3 * (step + 1), 8) and values.shape == keys.shape
            assert keys.untyped_storage().data_ptr() == cache.storage.untyped_storage().data_ptr()   # views
        capacities.append(cache.capacity)
        storages.add(cache.storage.data_ptr())
    assert len(storages) == len(set(capacities)) <= 7              # 120 positions in chunks of 4: doubling
    assert all(b == a or b >= 2 * a for a, b in zip(capacities, capacities[1:]))
    keys = cache.layers[2].keys
    assert all(torch.equal(keys[0, :, 3 * s:3 * s + 3], torch.full((2, 3, 8), float(s))) for s in range(40))
    # compaction keeps the context and the chosen tree entries, in order, in every layer
    before = [layer.values.clone() for layer in cache.layers]
    pointer = cache.storage.data_ptr()
    cache.compact(100, [0, 4, 5, 19])
    assert cache.storage.data_ptr() == pointer and cache.get_seq_length() == 104
    for layer, old in zip(cache.layers, before):
        assert torch.equal(layer.values, torch.cat([old[..., :100, :], old[..., [100, 104, 105, 119], :]], dim=-2))
    cache.compact(104, [0])                   # nothing to move: only the length changes
    assert cache.get_seq_length() == 104
    cache.crop(-4)
    assert cache.get_seq_length() == 100 and cache.layers[1].keys.shape[-2] == 100
    with pytest.raises(ValueError, match="same heads"):
        cache.update(torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8), 0)


def test_make_target_cache_keeps_dynamic_cache_for_sliding_layers(tiny_pair):
    from transformers import DynamicCache, Qwen3Config

    from taps.target_cache import TargetCache, make_target_cache

    assert isinstance(make_target_cache(tiny_pair.target.config), TargetCache)
    sliding = Qwen3Config(num_hidden_layers=2, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                          num_key_value_heads=1, vocab_size=50, use_sliding_window=True, sliding_window=8,
                          max_window_layers=0, layer_types=["sliding_attention", "sliding_attention"])
    assert type(make_target_cache(sliding)) is DynamicCache


@pytest.fixture(scope="module")
def shipped32():
    """The shipped pair, which accepts deep paths (compaction over many positions)."""
    from taps import load_pair
    from taps.pair import default_pair_path

    return load_pair(default_pair_path(), device="cpu", dtype="float32", drafter_precision="int8")


@pytest.mark.parametrize("pair_name", ["tiny_pair", "shipped32"])
@pytest.mark.parametrize("selector,temperature", [("ddtree", 0.0), ("taps", 0.0), ("dflash", 0.8), ("taps", 0.8),
                                                  ("ar", 0.8)])
def test_sessions_decide_the_same_with_the_old_cache(request, monkeypatch, pair_name, selector, temperature):
    """Every decision of a session (tokens, tree sizes, accepted nodes) is the one it made with
    transformers' DynamicCache."""
    from transformers import DynamicCache

    import taps.session

    pair = request.getfixturevalue(pair_name)

    def run():
        s = DecodeSession(pair, "class Stack:\n    def push(self, x):", selector=selector, budget=12,
                          temperature=temperature, seed=3, max_new_tokens=24, stop_at_eos=False)
        s.run()
        return s.generated, [(r.selected, r.accepted) for r in s.rounds]

    new = run()
    monkeypatch.setattr(taps.session, "make_target_cache", lambda config, capacity=0: DynamicCache(config=config))
    assert run() == new
    if pair_name == "shipped32" and selector != "ar":
        assert max(len(accepted) for _, accepted in new[1]) >= (3 if temperature == 0 else 2)   # deep paths compacted


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_plain_decoding_is_unchanged_by_the_cache(shipped32, monkeypatch, temperature):
    from transformers import DynamicCache

    import taps.reference
    from taps import sample_continuation

    prompt = shipped32.encode_prompt("def is_prime(n):")
    new = sample_continuation(shipped32, prompt, 40, temperature, seed=5)
    monkeypatch.setattr(taps.reference, "make_target_cache", lambda config, capacity=0: DynamicCache(config=config))
    assert sample_continuation(shipped32, prompt, 40, temperature, seed=5) == new


# ---------------------------------------------------------------- the tree-mask buffer
def _random_tree(rng, n: int):
    import numpy as np

    from taps.tree import DraftTree

    parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    depths = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
    zeros = np.zeros(n)
    return DraftTree(tokens=rng.integers(0, 1000, n), parents=parents, depths=depths, ranks=zeros.astype(int),
                     marginal_logprob=zeros, path_logprob=zeros, reach=np.ones(n))


def test_ancestor_matrix_by_levels_equals_the_walk_up_each_path():
    import numpy as np

    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 40, 300):
        tree = _random_tree(rng, n)
        want = np.eye(n, dtype=bool)
        for i in range(1, n):
            want[i] |= want[tree.parents[i]]
        assert np.array_equal(tree.ancestor_matrix(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mask_buffer_gives_verify_inputs_bit_for_bit(dtype):
    import numpy as np

    from taps.tree import TreeMaskBuffer

    rng = np.random.default_rng(1)
    buffer = TreeMaskBuffer(dtype, "cpu", rows=17, columns=100, chunk=16)
    past, pointers = 30, []
    for n, step in [(17, 0), (5, 3), (1, 1), (12, 6), (17, 2), (40, 4), (9, 50), (3, -20)]:
        past += step
        tree = _random_tree(rng, n)
        want = tree.verify_inputs(past, past, dtype, torch.device("cpu"))
        got = buffer.verify_inputs(tree, past, past)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        if n == 1:
            assert got[2] is None                               # a root-only tree verifies without a mask
        else:
            assert got[2].shape == want[2].shape and torch.equal(got[2], want[2])
        pointers.append(buffer.buffer.data_ptr())
    assert len(set(pointers[:4])) == 1                          # reused while it fits (grown for 40 rows after)
    assert buffer.buffer.shape[0] % 16 == 0 and buffer.buffer.shape[1] % 16 == 0


# ---------------------------------------------------------------- the walk's one copy from the device
class _Head:
    """A stand-in target: only its lm_head, a random linear map."""

    def __init__(self, hidden: int, vocab: int, seed: int):
        torch.manual_seed(seed)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)
        with torch.no_grad():
            self.lm_head.weight.mul_(8.0)          # peaked distributions: sampled walks accept too

    def get_output_embeddings(self):
        return self.lm_head


def _old_walk(tree, head, temperature, seed, start):
    """The walk as it was before the single copy (the reference for its decisions)."""
    import numpy as np

    from taps.verify import choose_token

    inner = sorted(set(tree.parents[1:].tolist())) if tree.size else []
    if temperature <= 0.0 and tree.size:
        head.get(list(range(len(tree.tokens))))
    child_prob = np.ones(len(tree.tokens))
    target_tokens = np.full(len(tree.tokens), -1)
    if inner:
        logits = head.get(inner)
        target_tokens[inner] = logits.argmax(-1).cpu().numpy()
        probs = torch.softmax(logits / temperature if temperature > 0 else logits, dim=-1)
        row_of = {node: i for i, node in enumerate(inner)}
        rows = torch.as_tensor([row_of[int(p)] for p in tree.parents[1:]])
        child_prob[1:] = probs[rows, torch.as_tensor(tree.tokens[1:])].double().cpu().numpy()
    children, accepted, node = tree.children(), [], 0
    while True:
        if temperature > 0:
            token = choose_token(head.get([node])[0], temperature, seed, start + int(tree.depths[node]) + 1)
        elif target_tokens[node] >= 0:
            token = int(target_tokens[node])
        else:
            token = int(head.get([node])[0].argmax())
        child = children[node].get(token)
        if child is None:
            return accepted, token, target_tokens, child_prob
        accepted.append(child)
        node = child


def _tree_on_target_path(rng, n: int, head_module, hidden):
    """A random tree whose first chain follows the head's argmax (so walks accept a few nodes)."""
    tree = _random_tree(rng, n)
    tree.tokens[1:] %= head_module.out_features
    with torch.no_grad():
        greedy = head_module(hidden).argmax(-1).numpy()
    for node in range(1, n):
        if rng.random() < 0.6:
            tree.tokens[node] = greedy[tree.parents[node]]
    return tree


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@torch.no_grad()
def test_walk_decides_as_before(temperature):
    import numpy as np

    from taps.verify import HeadRows, edge_feedback, walk

    rng = np.random.default_rng(7)
    target = _Head(hidden=16, vocab=40, seed=0)
    deepest = 0
    for trial in range(30):
        n = int(rng.integers(1, 24))
        hidden = torch.randn(n, 16, generator=torch.Generator().manual_seed(trial))
        tree = _tree_on_target_path(rng, n, target.lm_head, hidden)
        want = _old_walk(tree, HeadRows(target, hidden), temperature, 11, 100 + trial)
        head = HeadRows(target, hidden)
        got = walk(tree, head, temperature, 11, 100 + trial)
        assert (got.accepted, got.bonus_token) == want[:2]
        assert np.array_equal(got.target_tokens, want[2]) and np.array_equal(got.child_prob, want[3])
        deepest = max(deepest, len(got.accepted))
        selected = np.arange(n)
        assert np.array_equal(edge_feedback(tree, selected, head, temperature),
                              edge_feedback(tree, selected, HeadRows(target, hidden), temperature), equal_nan=True)
    assert deepest >= 2


@torch.no_grad()
def test_greedy_walk_reads_the_device_once(monkeypatch):
    import numpy as np

    from taps.verify import HeadRows, edge_feedback, walk

    rng = np.random.default_rng(3)
    target = _Head(hidden=16, vocab=40, seed=1)
    hidden = torch.randn(12, 16, generator=torch.Generator().manual_seed(0))
    tree = _tree_on_target_path(rng, 12, target.lm_head, hidden)
    reads = []
    for name in ("cpu", "item", "tolist", "numpy", "__int__", "__index__", "__float__", "__bool__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _real=real, _name=name, **k:
                            (reads.append(_name), _real(self, *a, **k))[1])
    head = HeadRows(target, hidden)
    result = walk(tree, head, 0.0, 0, 50)
    feedback = edge_feedback(tree, np.arange(12), head, 0.0)
    monkeypatch.undo()
    assert reads.count("cpu") == 1 and not set(reads) - {"cpu", "numpy"}     # one copy, read on the host
    assert np.array_equal(feedback[1:], (head.greedy[tree.parents[1:]] == tree.tokens[1:]).astype(float))
    assert result.bonus_token == int(head.greedy[result.accepted[-1] if result.accepted else 0])


def test_gumbel_noise_is_todays_draw():
    from taps.verify import _mix, gumbel_noise

    for seed, position in [(0, 0), (3, 17), (2**31 - 1, 40_000)]:
        u = torch.rand(151_936, generator=torch.Generator().manual_seed(_mix(seed, position)), dtype=torch.float64)
        assert torch.equal(gumbel_noise(seed, position, 151_936), -torch.log(-torch.log(u.clamp_min(1e-300))))


@CUDA
@pytest.mark.parametrize("selector,temperature", [("ddtree", 0.0), ("taps", 0.8)])
def test_cuda_session_decides_as_on_the_cpu(tiny_pair_dir, selector, temperature):
    """The device path (events, target cache, mask buffer, one copy a greedy round) on a GPU, in
    float64: the same tokens and trees as on the CPU."""
    from taps import load_pair

    runs = []
    for device in ("cpu", "cuda"):
        pair = load_pair(tiny_pair_dir, device=device, dtype="float64")
        s = DecodeSession(pair, "def area(r):\n    return", selector=selector, budget=12, temperature=temperature,
                          seed=2, max_new_tokens=24, stop_at_eos=False)
        s.run()
        assert all(v >= 0 for r in s.rounds for v in r.timings.values())
        runs.append((s.generated, [(r.selected, r.accepted) for r in s.rounds]))
    assert runs[0] == runs[1]


# ---------------------------------------------------------------- torch.compile of verify, behind a flag
def test_compile_verify_is_refused_on_packed_linears(shipped32):
    with pytest.raises(ValueError, match="oneDNN packed"):
        DecodeSession(shipped32, "x = 1", selector="ddtree", budget=4, max_new_tokens=2, compile_verify=True)


@pytest.mark.slow
def test_compiled_verify_gives_the_same_tokens(tiny_pair_dir):
    """torch.compile'd target layers in verify (a minute or two of compiling on 2 CPU cores)."""
    from taps import load_pair

    pair = load_pair(tiny_pair_dir, device="cpu", dtype="float64")
    torch._dynamo.reset()
    runs = {}
    for compiled in (False, True):
        s = DecodeSession(pair, "def area(r):\n    return", selector="ddtree", budget=8, max_new_tokens=16,
                          stop_at_eos=False, compile_verify=compiled)
        s.run()
        runs[compiled] = (s.generated, [(r.selected, r.accepted) for r in s.rounds])
    assert runs[True] == runs[False]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0          # compiled code did run
    assert all("forward" not in layer.__dict__ for layer in pair.target.get_decoder().layers)   # untouched


@pytest.mark.parametrize("stage", ["draft", "verify"])
def test_running_out_of_device_memory_names_what_to_lower_and_the_session_goes_on(tiny_pair, monkeypatch, stage):
    """A round that runs out of device memory says which setting to lower, leaves the session as it
    was, and the next rounds decode exactly plain greedy's tokens."""
    import taps.session as session_module
    from taps import greedy_continuation

    prompt = [5, 9, 11, 3, 7]
    s = DecodeSession(tiny_pair, prompt, selector="ddtree", budget=8, max_new_tokens=24, stop_at_eos=False)
    s.step()
    before = (list(s.tokens), s.cache.get_seq_length())
    calls = {"n": 0}

    def fail_once(original):
        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
            return original(*args, **kwargs)
        return wrapped

    if stage == "draft":
        monkeypatch.setattr(s, "_draft", fail_once(s._draft))
    else:
        monkeypatch.setattr(session_module, "target_body", fail_once(session_module.target_body))
    with pytest.raises(RuntimeError, match=f"ran out of memory in the {stage} stage; lower .*"
                                           f"{'block size' if stage == 'draft' else 'the budget'}"):
        s.step()
    assert (list(s.tokens), s.cache.get_seq_length()) == before
    s.run()
    assert s.generated == greedy_continuation(tiny_pair, prompt, 24)


def test_the_cache_goes_under_the_name_this_transformers_takes(tiny_pair):
    """transformers 5.24 takes `cache=`, earlier 5.x (the GPU image's 5.17) `past_key_values=` and
    silently ignores `cache=`; the engine asks the decoder's signature."""
    from taps.verify import cache_argument

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, **kwargs):
            return None

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, **kwargs):
            return None

    assert cache_argument(Old()) == "past_key_values" and cache_argument(New()) == "cache"
    import inspect

    names = inspect.signature(type(tiny_pair.target.get_decoder()).forward).parameters
    assert cache_argument(tiny_pair.target.get_decoder()) in names

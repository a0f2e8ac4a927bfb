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


def test_feature_tap_keeps_only_the_drafter_layers(tiny_pair):
    from taps.verify import FeatureTap

    decoder = tiny_pair.target.get_decoder()
    before = [len(layer._forward_hooks) for layer in decoder.layers]
    with FeatureTap(decoder, [0]) as tap:
        assert [len(layer._forward_hooks) for layer in decoder.layers] == [before[0] + 1, *before[1:]]
        assert not tap.needs_all_hidden_states
    assert [len(layer._forward_hooks) for layer in decoder.layers] == before

"""TAPS Studio's decoding engine: lossless tree speculative decoding with diffusion drafters.

    from taps import load_pair, DecodeSession
    pair = load_pair()                      # the shipped pair, or load_pair("path/or/folder")
    session = DecodeSession(pair, "def fib(n):", selector="taps", budget=32, taps_mode="reach")
    for round in session.run(): print(round.tau, round.verified_nodes, round.waste_nodes)

TAPS's default size choice (`taps_mode="cost"`) reads this machine's saved latency profile, or the
one passed as `profile=` (`taps.eval.measure.profile_for(pair, 32)` measures and saves it once).

Names are imported lazily, so `python -m taps.train ...` can set threading options before torch
is first imported.
"""

from importlib import import_module

_EXPORTS = {
    "ModelPair": "pair", "PairError": "pair", "load_pair": "pair",
    "DecodeConfig": "session", "DecodeSession": "session", "Round": "session",
    "greedy_continuation": "session", "sample_continuation": "session",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'taps' has no attribute {name!r}")

"""TAPS Studio's decoding engine: lossless tree speculative decoding with diffusion drafters.

    from taps import load_pair, DecodeSession
    pair = load_pair()                      # the shipped pair, or load_pair("path/or/folder")
    session = DecodeSession(pair, "def fib(n):", selector="taps", budget=32)
    for round in session.run(): print(round.tau, round.verified_nodes, round.waste_nodes)
"""

from .pair import ModelPair, PairError, load_pair
from .session import DecodeConfig, DecodeSession, Round, greedy_continuation, sample_continuation

__all__ = ["ModelPair", "PairError", "load_pair", "DecodeConfig", "DecodeSession", "Round",
           "greedy_continuation", "sample_continuation"]

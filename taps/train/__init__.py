"""Training our own small model pair for TAPS Studio.

Stages, run in order with ``python -m taps.train <stage> --out runs/pair``:

1. ``tokenizer`` - byte-level BPE trained on the Python standard library (``tokenizer.py``).
2. ``target``    - a small Qwen3-architecture causal LM trained from scratch (``target.py``).
3. ``drafter``   - the diffusion drafter (``drafter.py``).
4. ``scorer``    - the draft-tree scorer (``scorer.py``).

The corpus and the train/validation/held-out splits live in ``data.py``.
Every stage module exposes ``add_arguments(parser)`` and ``main(args)``.
"""

"""Training our own small model pair for TAPS Studio.

Stages, run in order with ``python -m taps.train <stage> --out runs/pair``:

1. ``tokenizer`` - byte-level BPE trained on a corpus' train split (``tokenizer.py``): ``stdlib``
   (the Python standard library) or ``stdlib+libs`` (plus torch, transformers, numpy, pandas,
   networkx and sympy, deduplicated by ``dedup.py``).
2. ``target``    - a small Qwen3-architecture causal LM trained from scratch (``target.py``).
   ``unloop``    - optional: unlikelihood fine-tuning against its own greedy loops (``unloop.py``).
3. ``drafter``   - the diffusion drafter (``drafter.py``).
4. ``scorer``    - the TAPS path-conditioned scorer (``scorer.py``).
   ``path_selector`` - DFlash2's path selector for the drafter (``path_selector.py``; optional).
5. ``package``   - copy a run into ``assets/models/<name>`` (``package.py``).

The corpus and the train/validation/held-out splits live in ``data.py``.
Every stage module exposes ``add_arguments(parser)`` and ``main(args)``; the command line
(``__main__.py``) sets the OpenMP wait policy before torch is imported.
"""

"""Roofline latency profiles: what a round would cost on a device nobody here has, estimated from
the target's shapes and the device's published peak FLOP/s and memory bandwidth. Pure numpy.

    verify(m) = layers x launch + max(FLOPs(m + 1 rows) / peak FLOP/s, bytes moved / bandwidth)

bytes moved = the weights read once + the KV cache read at the profile's context length; FLOPs =
2 x (m + 1) x the matrix weights + attention over the context, + the output head. The drafter's
pass is priced the same way from the drafter's shape over its block. Device constants (with their
public sources) and model shapes live in one data file, `assets/profiles/roofline.json`; this
CPU's constants there are fitted to the measured reference profile (`fit_device`). Profiles built
here have kind "roofline" and ids `roofline-<device>-<model>`: estimates, never measurements.
"""

from __future__ import annotations

MODEL_FIELDS = ("params", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab")


def _get(config, name: str, default=None):
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def model_shape(config, name: str = "") -> dict:
    """The shape dict of a Qwen3/Llama-style decoder config (a transformers config or a dict with
    its field names): params counts the embedding, every layer's matrices and an untied head."""
    hidden = int(_get(config, "hidden_size"))
    heads = int(_get(config, "num_attention_heads"))
    kv_heads = int(_get(config, "num_key_value_heads", heads) or heads)
    head_dim = int(_get(config, "head_dim", None) or hidden // heads)
    layers = int(_get(config, "num_hidden_layers"))
    intermediate = int(_get(config, "intermediate_size"))
    vocab = int(_get(config, "vocab_size"))
    tied = bool(_get(config, "tie_word_embeddings", False))
    shape = {"name": name, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
             "head_dim": head_dim, "intermediate": intermediate, "vocab": vocab, "tied": tied}
    shape["params"] = int(layer_params(shape) * layers + vocab * hidden * (1 if tied else 2))
    return {"params": shape.pop("params"), **shape}


def layer_params(shape: dict) -> int:
    """The matrix weights of one decoder layer: q and o, k and v, and the gated MLP's three."""
    hidden, q, kv = shape["hidden"], shape["heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
    return 2 * hidden * q + 2 * hidden * kv + 3 * hidden * shape["intermediate"]

"""Roofline latency profiles: what a round would cost on a device nobody here has, estimated from
the target's shapes and the device's published peak FLOP/s and memory bandwidth. Pure numpy.

    verify(m) = layers x launch + max(FLOPs(m + 1 rows) / peak FLOP/s, bytes moved / bandwidth)

bytes moved = the weights read once + the KV cache read at the profile's context length; FLOPs =
2 x (m + 1) x the matrix weights + attention over the context, + the output head. The drafter's
pass is priced the same way from the drafter's shape over its block. A round costs that drafter
pass, its host work (pool, estimate, select, commit) and verify(m); the AR step costs verify(0) and
the AR round's host work, timed the same way (a round's stages besides its forwards), so every term
of the AR step is a round's too and a round never costs less than one AR step (a data file whose
host costs say otherwise is refused). Device constants (with their public sources) and model shapes live
in one data file, `assets/profiles/roofline.json`; this CPU's constants there are fitted to the
measured reference profile (`fit_device`). Profiles built here have kind "roofline" and ids
`roofline-<device>-<model>`: estimates, never measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import ESTIMATORS
from .cost_model import LatencyProfile, default_sizes
from .paths import PROFILES_DIR
from .policies import AR, REGISTRY

DATA_PATH = PROFILES_DIR / "roofline.json"
FORMULA = ("verify(m) = layers × launch + max(FLOPs(m + 1 rows) / peak FLOP/s, "
           "(weights + KV cache) bytes / bandwidth)")
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


# ---------------------------------------------------------------------------- the data file
def load_data(path: str | Path | None = None) -> dict:
    """The roofline data file: devices (constants and their sources), model shapes, drafter rules,
    host-side costs. A file that is missing or malformed raises ValueError saying which."""
    path = Path(path) if path else DATA_PATH
    try:
        data = json.loads(path.read_text(encoding="utf-8"))     # ×, µ: not the locale's encoding on Windows
    except (OSError, ValueError) as exc:
        raise ValueError(f"the roofline data file {path} cannot be read ({exc})") from exc
    return check_data(data, path)


def check_data(data: dict, path: str | Path = "the data") -> dict:
    """`data` when it is a usable roofline data file, else a ValueError saying what is wrong. Host
    costs are seconds >= 0, and no round's is below the AR round's: the AR step's host work (its
    pool, select, commit) is a round's too, and a cheaper one would price a round below an AR step."""
    for part in ("devices", "models", "drafter", "host_s", "context_length"):
        if part not in data:
            raise ValueError(f"the roofline data file {path} has no {part!r}")
    for name, device in data["devices"].items():
        missing = [k for k in ("name", "peak_flops", "bandwidth", "launch_s", "bytes_per_param", "source")
                   if k not in device]
        if missing or "-" in name:
            raise ValueError(f"roofline device {name!r} in {path}: needs {', '.join(missing) or 'a name without -'}")
    for name, shape in data["models"].items():
        missing = [k for k in MODEL_FIELDS if k not in shape]
        if missing:
            raise ValueError(f"roofline model {name!r} in {path} lacks {', '.join(missing)}")
    host = data["host_s"]
    bad = [name for name, cost in host.items()
           if not isinstance(cost, (int, float)) or isinstance(cost, bool) or not 0 <= cost < float("inf")]
    if bad:
        raise ValueError(f"roofline host_s in {path}: {', '.join(bad)} must be seconds >= 0")
    ar = float(host.get(AR.name, 0.0))
    below = [name for name, cost in host.items() if name != AR.name and cost < ar]
    if below:
        raise ValueError(f"roofline host_s in {path}: {', '.join(below)} below the AR round's {ar:g} s would price "
                         "a round below an AR step (every round does the AR round's host work, and more)")
    return data


def round_host_s(host: dict) -> dict[str, float]:
    """Per run label of every registered policy but AR, a round's host seconds besides its drafter pass
    and verify: the data file's where the reference CPU timed that policy; else (the oracle) the
    cheapest timed round's, or the AR round's when none was timed."""
    timed = {name: float(cost) for name, cost in host.items() if name != AR.name}
    floor = min(timed.values(), default=float(host.get(AR.name, 0.0)))
    labels = [label for entry in REGISTRY.values() if not entry.baseline
              for label in ([entry.run_label(e) for e in ESTIMATORS] if entry.uses_estimator else [entry.run_label()])]
    return {**dict.fromkeys(labels, floor), **timed}


# ---------------------------------------------------------------------------- the formula
def verify_cost(shape: dict, rows, context: int, bytes_per_param: float) -> tuple[np.ndarray, float]:
    """(FLOPs, bytes moved) of a forward over `rows` new positions after `context` cached ones:
    2 FLOPs per weight per row in the layers and the output head, attention over context + rows;
    bytes = every layer's weights and the head read once, plus the KV cache read."""
    rows = np.asarray(rows, dtype=np.float64)
    layers = shape["layers"]
    weights = layers * layer_params(shape) + shape["hidden"] * shape["vocab"]
    attention = 4.0 * rows * (context + rows) * shape["heads"] * shape["head_dim"] * layers
    flops = 2.0 * rows * weights + attention
    kv = 2.0 * layers * shape["kv_heads"] * shape["head_dim"] * context
    return flops, float((weights + kv) * bytes_per_param)


def pass_seconds(device: dict, shape: dict, rows, context: int) -> np.ndarray:
    """layers x launch + max(FLOPs / peak FLOP/s, bytes / bandwidth) for one forward of `rows` rows."""
    flops, moved = verify_cost(shape, rows, context, device["bytes_per_param"])
    return shape["layers"] * device["launch_s"] + np.maximum(flops / device["peak_flops"], moved / device["bandwidth"])


def batch_pass_seconds(device: dict, shape: dict, batch: int, rows, context: int) -> np.ndarray:
    """One forward of `batch` requests of `rows` new positions each, every request after its own
    `context` cached ones (`taps.batch`): the weights read once, every request's KV cache read, the
    FLOPs of every row and every request's attention."""
    flops, moved = verify_cost(shape, rows, context, device["bytes_per_param"])
    _, weights_only = verify_cost(shape, rows, 0, device["bytes_per_param"])
    moved = weights_only + batch * (moved - weights_only)
    return shape["layers"] * device["launch_s"] + np.maximum(batch * flops / device["peak_flops"],
                                                             moved / device["bandwidth"])


def roofline_batch(device: str, model: str, batches: list[int] | None = None, widths: list[int] | None = None,
                   data: dict | None = None, shape: dict | None = None) -> dict:
    """The roofline's verify cost at a batch (a `taps.batch_cost.BatchVerify` as a dict) for a data-file
    model (or `shape`) on `device`, at the data file's context length: an estimate, never a measurement."""
    from .batch_cost import BatchVerify

    data = data or load_data()
    dev = data["devices"][device]
    target = shape or data["models"][model]
    batches = batches or [1, 2, 4, 8, 16, 32, 64]
    widths = widths or [0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    context = int(data["context_length"])
    grid = [[float(v) for v in batch_pass_seconds(dev, target, b, np.asarray(widths) + 1, context)] for b in batches]
    return BatchVerify(batches=batches, widths=widths, seconds=grid, context_length=context, kind="roofline",
                       source=f"{label(device, model, data)} (not measured): one forward of B x (w + 1) rows, "
                              "the weights read once and every request's KV cache").as_dict()


def drafter_shape(data: dict, target: dict, drafter_config=None) -> tuple[dict, int]:
    """The drafter's shape and block size: the pair's drafter config when given, else the data
    file's rule (DFlash on Qwen3: a few layers at the target's width, the target's head)."""
    if drafter_config is not None:
        shape = model_shape(drafter_config)
        return shape, int(_get(drafter_config, "block_size", 0) or data["drafter"]["block_size"])
    rule = data["drafter"]
    return {**target, "name": f"{target.get('name', 'target')} drafter", "layers": int(rule["layers"])}, \
        int(rule["block_size"])


# ---------------------------------------------------------------------------- fitting this CPU
def fit_device(profile: LatencyProfile, bytes_per_param: float = 4.0) -> dict:
    """This CPU's peak FLOP/s, bandwidth and per-layer launch cost fitted to a measured profile whose
    `model` holds the target's shape: for each split of the sizes into a flat (memory-bound) part and
    a linear (compute-bound) part, a least-squares line over the linear part gives launch and peak,
    the flat part's mean level gives the bandwidth; the split whose whole curve is closest (squared
    log error over every size) wins."""
    shape = profile.model
    if not shape or any(k not in shape for k in MODEL_FIELDS):
        raise ValueError("fitting a roofline device needs a measured profile with the target's shape (model)")
    sizes = np.asarray(profile.sizes, dtype=np.float64)
    times = np.asarray(profile.verify_s, dtype=np.float64)
    flops, moved = verify_cost(shape, sizes + 1, profile.context_length, bytes_per_param)
    best = None
    for split in range(1, len(sizes) - 1):
        slope, intercept = np.polyfit(flops[split:], times[split:], 1)
        memory_s = float(np.mean(times[:split])) - intercept
        if slope <= 0 or intercept < 0 or memory_s <= 0:
            continue
        device = {"peak_flops": 1.0 / slope, "bandwidth": moved / memory_s, "launch_s": intercept / shape["layers"],
                  "bytes_per_param": bytes_per_param}
        error = float(np.sum(np.log(pass_seconds(device, shape, sizes + 1, profile.context_length) / times) ** 2))
        if best is None or error < best[0]:
            best = (error, device)
    if best is None:
        raise ValueError("the measured profile has no flat-then-linear shape to fit a roofline to")
    return {k: float(f"{v:.4g}") for k, v in best[1].items()}


# ---------------------------------------------------------------------------- profiles
PREFIX = "roofline-"


def profile_id(device: str, model: str) -> str:
    return f"{PREFIX}{device}-{model}"


def split_id(profile_id: str, data: dict | None = None) -> tuple[str, str]:
    """(device, model) of a roofline id, or a ValueError naming the known devices."""
    data = data or load_data()
    if not profile_id.startswith(PREFIX):
        raise ValueError(f"{profile_id!r} is not a roofline profile id (roofline-<device>-<model>)")
    device, _, model = profile_id[len(PREFIX):].partition("-")
    if device not in data["devices"] or not model:
        raise ValueError(f"unknown roofline profile {profile_id!r}: devices are {', '.join(data['devices'])}")
    return device, model


def label(device: str, model: str, data: dict | None = None) -> str:
    data = data or load_data()
    dev = data["devices"].get(device, {}).get("name", device)
    mod = data["models"][model]["name"] if model in data["models"] else f"{model} (the loaded pair's shape)"
    return f"roofline estimate: {dev} × {mod}"


def roofline_profile(device: str, model: str, pair=None, max_nodes: int = 1024, data: dict | None = None,
                     ) -> LatencyProfile:
    """The roofline estimate of a round's costs for `model` (a data-file model, or the loaded pair's
    name: its target and drafter configs) on `device`. Per-round host-side costs (pool, estimate,
    select, commit) are the data file's, measured on the reference CPU and assumed the same anywhere:
    a round pays the drafter pass + its host cost + verify(m), the AR step verify(0) + the AR round's."""
    data = data or load_data()
    if device not in data["devices"]:
        raise ValueError(f"unknown roofline device {device!r}: one of {', '.join(data['devices'])}")
    dev = data["devices"][device]
    drafter_config = None
    if model in data["models"]:
        target = {**data["models"][model]}
    elif pair is not None and model == pair.name:
        target = model_shape(pair.target.config, pair.name)
        drafter_config = pair.drafter.config if pair.drafter is not None else None
    else:
        known = [*data["models"], *([pair.name] if pair is not None else [])]
        raise ValueError(f"unknown roofline model {model!r}: one of {', '.join(known)}")
    context = int(data["context_length"])
    sizes = default_sizes(max_nodes)
    verify = pass_seconds(dev, target, np.asarray(sizes) + 1, context)
    draft_shape, block = drafter_shape(data, target, drafter_config)
    draft_s = float(pass_seconds(dev, draft_shape, block, context)) if block else 0.0
    host = data["host_s"]
    weights = float(verify_cost(target, 1, 0, dev["bytes_per_param"])[1])
    fits = "" if not dev.get("memory_bytes") or weights <= dev["memory_bytes"] else (
        f"; its weights ({weights / 1e9:.0f} GB) do not fit in the {dev['memory_bytes'] / 1e9:.0f} GB of the device: "
        "the estimate assumes they did")
    overhead = {policy: draft_s + cost for policy, cost in round_host_s(host).items()}
    return LatencyProfile(
        sizes=sizes, verify_s=[float(v) for v in verify], draft_s=draft_s, device=device,
        pair=pair.name if pair is not None else "", context_length=context, overhead_s=overhead,
        ar_step_s=float(verify[0]) + float(host.get(AR.name, 0.0)), key={"roofline": profile_id(device, model)},
        source=f"{label(device, model, data)} (not measured): {FORMULA}; {dev['source']}{fits}",
        kind="roofline", device_name=dev["name"], dtype=dev.get("dtype", ""),
        model={k: target[k] for k in (*MODEL_FIELDS, "name") if k in target},
        batch_verify=roofline_batch(device, model, data=data, shape=target))


def roofline_ids(pair=None, data: dict | None = None) -> list[str]:
    """Every roofline profile id offered: each device with each data-file model and the loaded pair."""
    data = data or load_data()
    models = [*([pair.name] if pair is not None else []), *data["models"]]
    return [profile_id(d, m) for d in data["devices"] for m in models]


def ratio(profile: LatencyProfile, big: int = 64, small: int = 1) -> float:
    """verify(big) / verify(small): about 1 where a tree is as cheap as a token, more where it grows."""
    return float(profile.verify_time(big) / profile.verify_time(small))


# ---------------------------------------------------------------------------- the estimate against a measurement
def device_for(device_name: str, data: dict | None = None) -> str | None:
    """The data file's device whose key is in a device's name ("NVIDIA H200" -> "h200", "CPU, 2 threads"
    -> "cpu"), or None when none is."""
    data = data or load_data()
    flat = "".join(c for c in str(device_name).lower() if c.isalnum())
    return next((key for key in data["devices"] if key in flat), None)


def estimate_error(profile: LatencyProfile, device: str, drafter_config=None, data: dict | None = None) -> list[dict]:
    """The roofline estimate on `device` against a measured profile of a target shape (its `model`),
    at the profile's own context length: one row per verify size, the AR step and the drafter pass,
    each {"what": "verify" | "ar" | "draft", "size": m or None, "measured_s", "estimate_s", "error"},
    error = estimate / measured - 1 (below 0: the estimate is optimistic). The drafter is priced
    from `drafter_config` when given, else the data file's DFlash rule. Verify compares the medians
    before the monotone fit; the AR step and the round costs carry the data file's host costs on
    both sides."""
    data = data or load_data()
    if device not in data["devices"]:
        raise ValueError(f"unknown roofline device {device!r}: one of {', '.join(data['devices'])}")
    shape = profile.model
    if not shape or any(k not in shape for k in MODEL_FIELDS):
        raise ValueError("comparing with a roofline estimate needs a measured profile with the target's shape (model)")
    dev, context = data["devices"][device], int(profile.context_length)
    measured = profile.raw_verify_s or profile.verify_s
    estimate = pass_seconds(dev, shape, np.asarray(profile.sizes) + 1, context)
    rows = [{"what": "verify", "size": int(m), "measured_s": float(t), "estimate_s": float(e)}
            for m, t, e in zip(profile.sizes, measured, estimate)]
    ar_estimate = float(pass_seconds(dev, shape, 1, context)) + float(data["host_s"].get(AR.name, 0.0))
    rows.append({"what": AR.name, "size": None, "measured_s": float(profile.ar_step_s), "estimate_s": ar_estimate})
    draft_shape, block = drafter_shape(data, shape, drafter_config)
    if block and profile.draft_s > 0:
        rows.append({"what": "draft", "size": None, "measured_s": float(profile.draft_s),
                     "estimate_s": float(pass_seconds(dev, draft_shape, block, context))})
    for row in rows:
        row["error"] = row["estimate_s"] / row["measured_s"] - 1.0 if row["measured_s"] > 0 else float("nan")
    return rows

"""Load a target + drafter (+ tokenizer, + optional TAPS scorer) from a folder or hub ids.

A pair folder holds `pair.json` ({"name", "target", "drafter", "scorer"}; each a sub-folder or a
hub id) or simply the sub-folders `target/` (model + tokenizer), `drafter/` and `scorer/`.
Public checkpoints load by id, e.g. target "Qwen/Qwen3-4B" with drafter "z-lab/Qwen3-4B-DFlash-b16".
CPU float32 by default; CUDA + bfloat16 when a GPU is there and asked for ("auto" or "cuda").
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .drafter import DFlashDrafter, resolve_folder
from .linear import pack_linears
from .paths import MODELS_DIR
from .scorer import TapsScorer

ASSETS = MODELS_DIR


class PairError(ValueError):
    """A pair that cannot be loaded or does not fit together."""


@dataclass
class ModelPair:
    target: torch.nn.Module
    tokenizer: object
    drafter: DFlashDrafter | None
    scorer: TapsScorer | None
    name: str
    device: torch.device
    dtype: torch.dtype
    fingerprint: str = ""            # sha1 of the files the pair was loaded from (keys latency profiles)
    drafter_precision: str = "same"  # the drafter's inference precision: "same" as the target, or "int8"
    _texts: dict = field(default_factory=dict, repr=False, compare=False)   # token id -> its text

    @property
    def feature_layers(self) -> list[int] | None:
        return self.drafter.target_layer_ids if self.drafter is not None else None

    @property
    def mask_token_id(self) -> int:
        if self.drafter is not None and self.drafter.mask_token_id is not None:
            return int(self.drafter.mask_token_id)
        return int(self.tokenizer.mask_token_id)

    @property
    def max_context(self) -> int:
        return int(self.target.config.max_position_embeddings)

    @property
    def eos_token_ids(self) -> set[int]:
        ids = self.target.config.eos_token_id
        ids = set(ids if isinstance(ids, (list, tuple)) else [ids]) if ids is not None else set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.target.get_input_embeddings()(ids)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target.get_output_embeddings()(hidden)

    def encode_prompt(self, prompt: str | list[int]) -> list[int]:
        """A prompt's token ids, or a ValueError that says what to change (empty, too long, bad ids)."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError("the prompt is empty: type some text to continue")
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt is empty: type some text to continue")
        limit = self.max_context - 2
        if len(ids) > limit:
            raise ValueError(f"the prompt is {len(ids)} tokens, longer than the model's context allows "
                             f"({limit} tokens); shorten it")
        vocab = self.target.config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"prompt token ids must lie in 0..{vocab - 1}")
        return ids

    def token_texts(self, tokens) -> list[str]:
        """Each token's text on its own, decoded once per pair."""
        ids = tokens.tolist() if hasattr(tokens, "tolist") else [int(t) for t in tokens]
        missing = sorted(set(ids) - self._texts.keys())
        if missing:
            self._texts.update(zip(missing, self.tokenizer.batch_decode([[t] for t in missing])))
        texts = self._texts
        return [texts[t] for t in ids]

    def describe(self) -> dict:
        def count(m):
            return sum(p.numel() for p in m.parameters()) if m is not None else 0

        return {"name": self.name, "device": str(self.device), "dtype": str(self.dtype).replace("torch.", ""),
                "target_params": count(self.target), "drafter_params": count(self.drafter),
                "scorer_params": count(self.scorer), "vocab_size": int(self.target.config.vocab_size),
                "target_layers": int(self.target.config.num_hidden_layers),
                "drafter_layers": int(self.drafter.config.num_hidden_layers) if self.drafter else 0,
                "block_size": self.drafter.block_size if self.drafter else 0,
                "max_context": self.max_context}


def fingerprint(folders: list[Path]) -> str:
    """A sha1 over the names, sizes and bytes of every file in the pair's folders."""
    digest = hashlib.sha1()
    for folder in folders:
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
            with path.open("rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def default_pair_path() -> Path | None:
    """The shipped pair: the first folder under assets/models that holds a pair.json."""
    if not ASSETS.is_dir():
        return None
    found = sorted(p.parent for p in ASSETS.glob("*/pair.json"))
    return found[0] if found else None


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PairError("device 'cuda' was asked for but no CUDA GPU is available; use --device cpu")
    return torch.device(device)


def _pair_manifest(folder: Path) -> dict:
    manifest = folder / "pair.json"
    if manifest.exists():
        raw = json.loads(manifest.read_text())
    else:
        raw = {name: name for name in ("target", "drafter", "scorer") if (folder / name).is_dir()}
        if "target" not in raw:
            raise PairError(f"{folder} is not a model pair: no pair.json and no target/ folder")
    out = {"name": raw.get("name", folder.name)}
    for key in ("target", "drafter", "scorer", "tokenizer"):
        value = raw.get(key)
        if value:
            local = folder / value
            out[key] = str(local) if local.exists() else value
    return out


def check_fit(target_config, drafter: DFlashDrafter | None, tokenizer) -> None:
    """Raise PairError when the drafter or tokenizer does not fit the target."""
    if len(tokenizer) > target_config.vocab_size:
        raise PairError(f"tokenizer has {len(tokenizer)} tokens but the target's vocabulary is "
                        f"{target_config.vocab_size}: they do not belong together")
    if drafter is None:
        return
    dc = drafter.config
    if dc.hidden_size != target_config.hidden_size:
        raise PairError(f"drafter hidden size {dc.hidden_size} does not match the target's "
                        f"{target_config.hidden_size}")
    if dc.vocab_size != target_config.vocab_size:
        raise PairError(f"drafter vocabulary {dc.vocab_size} does not match the target's {target_config.vocab_size}")
    n = target_config.num_hidden_layers
    if any(i < 0 or i >= n for i in drafter.target_layer_ids):
        raise PairError(f"drafter reads target layers {drafter.target_layer_ids} but the target has {n} layers")
    if drafter.mask_token_id is None and tokenizer.mask_token_id is None:
        raise PairError("no mask token: neither the drafter config (dflash_config.mask_token_id) nor the "
                        "tokenizer defines one")


def load_pair(pair: str | Path | None = None, *, target: str | None = None, drafter: str | None = None,
              scorer: str | None = None, device: str = "auto", dtype: torch.dtype | str | None = None,
              no_drafter: bool = False, drafter_precision: str = "auto") -> ModelPair:
    """Load a pair folder (or the shipped pair when None), with optional per-part overrides.
    `drafter_precision`: "same" (the pair's dtype), "int8" (dynamic quantization, CPU float32),
    "bfloat16", or "auto" (int8 for a float32 pair on the CPU, where it drafts 2-3x faster with the
    same acceptance; "same" elsewhere), for the drafter's inference only; the target always runs as
    loaded, in its own precision (a float32 target on the CPU multiplies several rows with oneDNN's
    prepacked GEMM, `taps.linear`; TAPS_TARGET_GEMM=default keeps PyTorch's default kernels)."""
    from .fast_drafter import PRECISIONS

    if drafter_precision not in (*PRECISIONS, "auto"):
        raise PairError(f"unknown drafter precision '{drafter_precision}': choose one of {', '.join(PRECISIONS)}")
    parts: dict = {}
    if pair is not None:
        folder = Path(pair)
        if not folder.is_dir():
            raise PairError(f"model pair folder not found: {pair}")
        parts = _pair_manifest(folder)
    elif target is None:
        shipped = default_pair_path()
        if shipped is None:
            raise PairError("no model pair given and no shipped pair under assets/models; pass --pair or --target")
        parts = _pair_manifest(shipped)
    for key, value in (("target", target), ("drafter", drafter), ("scorer", scorer)):
        if value:
            parts[key] = value
    if "target" not in parts:
        raise PairError("the pair names no target model")
    dev = resolve_device(device)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    dtype = dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    if drafter_precision == "auto":
        drafter_precision = "int8" if dev.type == "cpu" and dtype == torch.float32 else "same"
    if drafter_precision == "int8" and (dev.type != "cpu" or dtype != torch.float32):
        raise PairError("drafter precision int8 needs a float32 pair on the CPU; use 'same' or 'bfloat16'")
    name = parts.get("name") or Path(parts["target"]).name
    try:
        target_folder = resolve_folder(parts["target"])
        model = AutoModelForCausalLM.from_pretrained(target_folder, dtype=dtype, attn_implementation="sdpa")
        tokenizer = AutoTokenizer.from_pretrained(resolve_folder(parts.get("tokenizer", target_folder)))
    except (OSError, ValueError) as exc:
        raise PairError(f"could not load the target model from {parts['target']}: {exc}") from exc
    model.to(dev).eval()
    if dev.type == "cpu" and dtype == torch.float32 and os.environ.get("TAPS_TARGET_GEMM", "onednn") != "default":
        pack_linears(model)          # oneDNN for products of several rows (taps.linear); same weights
    draft = None
    if parts.get("drafter") and not no_drafter:
        try:
            draft = DFlashDrafter.from_pretrained(parts["drafter"], dtype=dtype, device=dev)
        except (OSError, ValueError) as exc:
            raise PairError(f"could not load the drafter from {parts['drafter']}: {exc}") from exc
    check_fit(model.config, draft, tokenizer)
    score = None
    if parts.get("scorer"):
        try:
            score = TapsScorer.from_pretrained(parts["scorer"], device=dev)
        except (OSError, ValueError) as exc:
            raise PairError(f"could not load the TAPS scorer from {parts['scorer']}: {exc}") from exc
        if score.config.model_dim != model.config.hidden_size:
            raise PairError(f"scorer expects model dim {score.config.model_dim}, target has {model.config.hidden_size}")
    folders = [target_folder] + [Path(parts[k]) for k in ("drafter", "scorer")
                                 if parts.get(k) and Path(parts[k]).is_dir()]
    return ModelPair(target=model, tokenizer=tokenizer, drafter=draft, scorer=score, name=name, device=dev,
                     dtype=dtype, fingerprint=fingerprint(folders),
                     drafter_precision=drafter_precision if draft is not None else "same")

"""Load a target + drafter (+ tokenizer, + optional TAPS scorer) from a folder or hub ids.

A pair folder holds `pair.json` ({"name", "target", "drafter", "scorer", "selector"}; each a
sub-folder or a hub id) or simply the sub-folders `target/` (model + tokenizer), `drafter/`,
`scorer/` and `selector/` (DFlash2's path selector trained for this drafter, `taps.path_selector`;
a DFlash2 drafter checkpoint carries its own).
Public checkpoints load by id, e.g. target "Qwen/Qwen3-4B" with drafter "z-lab/Qwen3-4B-DFlash-b16".
CPU float32 by default; CUDA + bfloat16 when a GPU is there and asked for ("auto" or "cuda").
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from . import machine
from .calibrate import Calibration
from .dflash2 import load_drafter
from .drafter import DFlashDrafter, reads_layer_outputs, resolve_folder
from .linear import pack_linears
from .path_selector import PathSelector, check_selector_fit
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
    fingerprint: str = ""            # what the pair was loaded from (`fingerprint`; keys latency profiles)
    drafter_precision: str = "same"  # the drafter's inference precision: "same" as the target, or "int8"
    generation_eos: tuple[int, ...] = ()   # stop tokens of the target's generation_config.json
    calibration: Calibration | None = None   # reach maps shipped with the scorer (taps.calibrate)
    path_selector: PathSelector | None = None   # DFlash2's path selector for this drafter (the dflash2 policy)
    _texts: dict = field(default_factory=dict, repr=False, compare=False)   # token id -> its text
    _texts_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

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
        return ids | set(self.generation_eos)

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
        """Each token's text on its own, decoded once per pair (the memo is the pair's one table that
        grows while sessions decode; its lock keeps two sessions from filling it at once)."""
        ids = tokens.tolist() if hasattr(tokens, "tolist") else [int(t) for t in tokens]
        with self._texts_lock:
            missing = sorted(set(ids) - self._texts.keys())
            if missing:
                self._texts.update(zip(missing, self.tokenizer.batch_decode([[t] for t in missing])))
            return [self._texts[t] for t in ids]

    def describe(self) -> dict:
        def count(m):
            return sum(p.numel() for p in m.parameters()) if m is not None else 0

        return {"name": self.name, "device": str(self.device), "dtype": str(self.dtype).replace("torch.", ""),
                "target_params": count(self.target), "drafter_params": count(self.drafter),
                "scorer_params": count(self.scorer), "path_selector_params": count(self.path_selector),
                "vocab_size": int(self.target.config.vocab_size),
                "target_layers": int(self.target.config.num_hidden_layers),
                "drafter_layers": int(self.drafter.config.num_hidden_layers) if self.drafter else 0,
                "block_size": self.drafter.block_size if self.drafter else 0,
                "max_context": self.max_context}


def content_fingerprint(folders: list[Path]) -> str:
    """A sha1 over the names, sizes and bytes of every file in the folders: exact, and as slow as
    reading them all. For training's caches and stamps (features of a target retrained in place
    must not be reused); loading a pair uses the cheap `fingerprint`."""
    digest = hashlib.sha1()
    for folder in folders:
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
            with path.open("rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


FINGERPRINT_FORMAT = "taps-fingerprint-2"
READ_LIMIT = 1_000_000    # bytes a fingerprint reads of one folder, at most
WHOLE_FILE = 64 << 10     # files up to this size are read whole; larger ones by their two ends:
EDGE = 32 << 10           # their first and last 32 KB (safetensors files: their header only)


def _read_span(path: Path, start: int, length: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(length)


def _file_digest(path: Path, size: int, budget: int) -> tuple[bytes, int]:
    """What identifies one file without reading its tensors, and the bytes read for it (at most
    `budget`): a safetensors file's header (dtypes, shapes, offsets, metadata), a small file whole,
    a large one's first and last EDGE bytes. Its name and size are hashed by the caller."""
    if path.suffix == ".safetensors":
        if size < 8 or budget < 8:
            return b"", 0
        length = int.from_bytes(_read_span(path, 0, 8), "little")
        if length > size - 8:        # not a safetensors header: the loader says so, the length is kept here
            return f"header length {length}".encode(), 8
        header = _read_span(path, 8, min(length, budget - 8))
        return header, 8 + len(header)
    if size <= min(WHOLE_FILE, budget):
        return _read_span(path, 0, size), size
    edge = min(EDGE, budget // 2)
    if edge <= 0:
        return b"", 0
    return _read_span(path, 0, edge) + _read_span(path, size - edge, edge), 2 * edge


def hub_revision(folder: Path) -> str:
    """'org/name@commit' for a folder of the hub cache (`.../models--org--name/snapshots/<commit>`), else ''."""
    folder = Path(folder)
    repo = folder.parent.parent.name
    if folder.parent.name != "snapshots" or not repo.startswith(("models--", "datasets--")):
        return ""
    return f"{repo.split('--', 1)[1].replace('--', '/')}@{folder.name}"


def _folder_digest(digest, folder: Path) -> int:
    """Hash one folder's hub revision and files (smallest first, so configs always count); return the bytes read."""
    folder = Path(folder)
    digest.update(f"revision {hub_revision(folder)}\n".encode())
    files = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue      # .cache/ (hub download metadata with timestamps), .git/ ...
        files.append((path.stat().st_size, rel.as_posix(), path))
    read = 0
    for size, rel, path in sorted(files):
        part, n = _file_digest(path, size, READ_LIMIT - read)
        read += n
        digest.update(f"file {rel} {size} {len(part)}\n".encode())
        digest.update(part)
    return read


def fingerprint(folders: Mapping[str, Path] | Sequence[Path]) -> str:
    """A sha1 that tells checkpoints apart without reading their weights: per part (target,
    drafter, scorer, ...: a mapping from role to folder, or a list), the hub revision when the
    folder is a hub snapshot, and every file's name and size with its safetensors header or, for
    other files, its bytes (small files) or first and last 32 KB; under 1 MB read per folder.
    Two checkpoints that differ only in tensor values under the same headers and sizes share it
    (their training logs, saved beside the weights, usually tell them apart)."""
    roles = folders.items() if isinstance(folders, Mapping) else ((str(i), f) for i, f in enumerate(folders))
    digest = hashlib.sha1(FINGERPRINT_FORMAT.encode())
    for role, folder in roles:
        digest.update(f"\npart {role}\n".encode())
        _folder_digest(digest, Path(folder))
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
        try:
            raw = json.loads(manifest.read_text())
        except (ValueError, OSError) as exc:
            raise PairError(f"{manifest} cannot be read ({exc}): it holds {{\"name\", \"target\", \"drafter\", "
                            f"\"scorer\"}}, each a sub-folder or a hub id") from exc
        if not isinstance(raw, dict):
            raise PairError(f"{manifest} must hold an object with \"target\" (and \"drafter\", \"scorer\")")
    else:
        raw = {name: name for name in ("target", "drafter", "scorer", "selector") if (folder / name).is_dir()}
        if "target" not in raw:
            raise PairError(f"{folder} is not a model pair: no pair.json and no target/ folder")
    out = {"name": raw.get("name", folder.name)}
    for key in ("target", "drafter", "scorer", "selector", "tokenizer"):
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


def out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocation that did not fit (GPU or CPU)."""
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _memory_message(exc: BaseException, dev: torch.device, dtype: torch.dtype) -> str:
    where = "GPU" if dev.type == "cuda" else "CPU"
    ways = []
    if dtype == torch.float32:
        ways.append("load it in bfloat16 (--dtype bfloat16: half the memory)")
    if dev.type == "cuda":
        ways.append("load it on the CPU (--device cpu)")
    ways.append("choose a smaller target or drafter (or free the memory other programs hold)")
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return (f"out of {where} memory loading the pair in {str(dtype).replace('torch.', '')} on {dev} ({first}): "
            + ", or ".join(ways) + "; nothing of it stays loaded")


@contextmanager
def _loading(what: str, source, hint: str = ""):
    """Any failure inside becomes a PairError that names the part and where it came from (running
    out of memory passes through: `load_pair` frees what was loaded and says what to lower)."""
    try:
        yield
    except PairError:
        raise
    except Exception as exc:
        if out_of_memory(exc):
            raise
        raise PairError(f"could not load {what} from {source}: {exc}" + (f"; {hint}" if hint else "")) from exc


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def target_shape_mismatch(folder: Path) -> str:
    """Which of a target folder's weights do not fit the model its config.json builds (read from
    the safetensors headers and a model on the meta device, so nothing is allocated); '' if none."""
    from safetensors import safe_open
    from transformers import AutoConfig

    try:
        with torch.device("meta"):
            own = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).state_dict()
        wrong = []
        for file in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(str(file), "pt") as fh:
                for key in fh.keys():
                    shape = list(fh.get_slice(key).get_shape())
                    if key in own and list(own[key].shape) != shape:
                        wrong.append(f"{key} is {shape} in the file but {list(own[key].shape)} by the config")
    except Exception:  # noqa: BLE001 - this only words a message; the caller keeps the original one
        return ""
    if not wrong:
        return ""
    return (f"the weights in {folder} do not fit its config.json ({len(wrong)} tensors differ: "
            f"{'; '.join(wrong[:3])}): use the config saved with these weights")


def generation_stops(folder: Path) -> tuple[int, ...]:
    """The stop tokens of a folder's generation_config.json (eos_token_id: one id or a list), if it has one."""
    if not (Path(folder) / "generation_config.json").is_file():
        return ()
    eos = GenerationConfig.from_pretrained(folder).eos_token_id
    ids = eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
    return tuple(int(i) for i in ids)


def _target_parts(parts: dict, dev: torch.device, dtype: torch.dtype, folders: dict):
    """The target model (on `dev`, packed for the CPU GEMM where it applies), its tokenizer and stop tokens."""
    with _loading("the target model", parts["target"],
                  "a target folder holds a transformers causal LM, its config.json and complete weights "
                  "(download or save a damaged file again)"):
        folders["target"] = target_folder = resolve_folder(parts["target"])
        if not (target_folder / "config.json").is_file():
            raise FileNotFoundError(f"no config.json in {target_folder}")
        try:
            model = AutoModelForCausalLM.from_pretrained(target_folder, dtype=dtype, attn_implementation="sdpa")
        except (RuntimeError, ValueError, OSError) as exc:
            if out_of_memory(exc):
                raise
            raise ValueError(target_shape_mismatch(target_folder) or str(exc)) from exc
        model.to(dev).eval()
        reads_layer_outputs(model)   # the drafter's context features: layer outputs before the final norm
        if dev.type == "cpu" and dtype == torch.float32 and os.environ.get("TAPS_TARGET_GEMM", "onednn") != "default":
            if not pack_linears(model):  # oneDNN for products of several rows (taps.linear); same weights
                machine.announce(("onednn",))     # ... or PyTorch's default kernels, said once
        stops = generation_stops(target_folder)
    source = parts.get("tokenizer", target_folder)
    with _loading("the tokenizer", source, "the target folder needs its tokenizer files (tokenizer.json, "
                  "tokenizer_config.json), or name a tokenizer folder in pair.json (\"tokenizer\")"):
        folder = resolve_folder(source)
        if folder != target_folder:
            folders["tokenizer"] = folder
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(f"no tokenizer files in {folder} (none of {', '.join(TOKENIZER_FILES)})")
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer, stops


def _load_parts(parts: dict, name: str, dev: torch.device, dtype: torch.dtype, no_drafter: bool,
                drafter_precision: str) -> ModelPair:
    folders: dict[str, Path] = {}
    model, tokenizer, stops = _target_parts(parts, dev, dtype, folders)
    draft = None
    if parts.get("drafter") and not no_drafter:
        with _loading("the drafter", parts["drafter"]):
            folders["drafter"] = resolve_folder(parts["drafter"], allow_patterns=["*.json", "*.safetensors"])
            draft = load_drafter(folders["drafter"], dtype=dtype, device=dev)
    check_fit(model.config, draft, tokenizer)
    score = calibration = None
    if parts.get("scorer"):
        with _loading("the TAPS scorer", parts["scorer"]):
            folders["scorer"] = resolve_folder(parts["scorer"])
            score = TapsScorer.from_pretrained(folders["scorer"], device=dev)
            calibration = Calibration.load(folders["scorer"])
        if score.config.model_dim != model.config.hidden_size:
            raise PairError(f"scorer expects model dim {score.config.model_dim}, target has {model.config.hidden_size}")
    selector = _path_selector(parts, draft, model.config.vocab_size, dev, dtype)
    # The fingerprint (which keys latency profiles) covers the target, drafter, scorer and tokenizer
    # folders; a separate path selector folder stays out of it, so adding or retraining one leaves
    # the pair's saved and shipped profiles in force (see `_path_selector`).
    return ModelPair(target=model, tokenizer=tokenizer, drafter=draft, scorer=score, name=name, device=dev,
                     dtype=dtype, fingerprint=fingerprint(folders), generation_eos=stops, calibration=calibration,
                     drafter_precision=drafter_precision if draft is not None else "same", path_selector=selector)


def _path_selector(parts: dict, drafter: DFlashDrafter | None, vocab: int, dev: torch.device,
                   dtype: torch.dtype) -> PathSelector | None:
    """The pair's DFlash2 path selector: the pair's own `selector` folder when it has one (trained for
    its drafter by `python -m taps.train path_selector`), else a DFlash2 drafter's `candidate_selector`,
    else None. A selector folder is not part of the pair's fingerprint: a latency profile times the
    target's verify forward, the drafter's pass and each policy's round overhead, and the dflash2
    policy sizes nothing from a profile (a chain of at most the budget); its per-round cost (K x K
    products of rank r per position) is inside the drafter-pass overhead a profile falls back to."""
    if drafter is None:
        return None
    if parts.get("selector"):
        with _loading("the DFlash2 path selector", parts["selector"],
                      "a selector folder holds config.json and model.safetensors from `python -m taps.train "
                      "path_selector`"):
            selector = PathSelector.from_pretrained(resolve_folder(parts["selector"]), device=dev, dtype=dtype)
        why = check_selector_fit(selector, vocab, drafter.config.hidden_size)
        if why:
            raise PairError(f"{why}: the selector in {parts['selector']} was trained for another pair")
        return selector
    return getattr(drafter, "candidate_selector", None)


def _resolve_dtype(dtype, dev: torch.device) -> torch.dtype:
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise PairError(f"unknown dtype '{dtype}': choose float32, bfloat16 or float16")
        dtype = getattr(torch, dtype)
    return dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)


def load_pair(pair: str | Path | None = None, *, target: str | None = None, drafter: str | None = None,
              scorer: str | None = None, selector: str | None = None, device: str = "auto",
              dtype: torch.dtype | str | None = None, no_drafter: bool = False,
              drafter_precision: str = "auto") -> ModelPair:
    """Load a pair folder (or the shipped pair when None), with optional per-part overrides (a
    drafter given here drops the pair folder's path selector, which was trained for its own drafter,
    unless a `selector` is given too).
    `drafter_precision`: "same" (the pair's dtype), "int8" (dynamic quantization, CPU float32),
    "bfloat16", or "auto" (int8 for a float32 pair on a CPU with a quantized engine, where it drafts
    faster with the same acceptance; "same" elsewhere, said once: `taps.machine`), for the drafter's
    inference only; the target always runs as
    loaded, in its own precision (a float32 target on the CPU multiplies several rows with oneDNN's
    prepacked GEMM, `taps.linear`; TAPS_TARGET_GEMM=default keeps PyTorch's default kernels).
    Every failure is a PairError that says what to do; running out of memory frees what was loaded
    and names the setting to lower."""
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
    if drafter and not selector:
        parts.pop("selector", None)
    for key, value in (("target", target), ("drafter", drafter), ("scorer", scorer), ("selector", selector)):
        if value:
            parts[key] = value
    if "target" not in parts:
        raise PairError("the pair names no target model")
    dev = resolve_device(device)
    dtype = _resolve_dtype(dtype, dev)
    if drafter_precision == "auto":
        drafter_precision = "int8" if dev.type == "cpu" and dtype == torch.float32 else "same"
        if drafter_precision == "int8" and not machine.int8_drafting()[0]:
            drafter_precision = "same"           # no quantized engine here: float32 drafting, said once
            machine.announce(("int8",))
    if drafter_precision == "int8" and (dev.type != "cpu" or dtype != torch.float32):
        raise PairError("drafter precision int8 needs a float32 pair on the CPU; use 'same' or 'bfloat16'")
    if drafter_precision == "int8" and not machine.int8_drafting()[0]:
        raise PairError(f"drafter precision int8 is unavailable here ({machine.int8_drafting()[1]}); "
                        "use 'auto', 'same' or 'bfloat16'")
    name = parts.get("name") or Path(parts["target"]).name
    try:
        return _load_parts(parts, name, dev, dtype, no_drafter, drafter_precision)
    except Exception as exc:  # noqa: BLE001 - only running out of memory is handled here
        if not out_of_memory(exc):
            raise
        message = _memory_message(exc, dev, dtype)
    # out of the except block: the failed load's frames (and the tensors they hold) are gone now
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    raise PairError(message)

"""The loader (issue 35): both DFlash config layouts, sliding-window drafters refused, stop tokens
from generation_config.json, every load failure a PairError that says what to do, a fingerprint
from sizes, headers and hub revisions (not every byte), and drafter buffers that grow with the context."""

from __future__ import annotations

import builtins
import io
import json
import random
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny import build_tiny_pair

from taps import DecodeSession
from taps.__main__ import main
from taps.drafter import DFlashDrafter, default_target_layer_ids
from taps.pair import READ_LIMIT, PairError, _memory_message, content_fingerprint, fingerprint, hub_revision, load_pair


@pytest.fixture(scope="module")
def pair_source(tmp_path_factory) -> Path:
    return build_tiny_pair(tmp_path_factory.mktemp("loader") / "tiny")


@pytest.fixture
def pair_dir(pair_source, tmp_path) -> Path:
    """A fresh copy of the tiny pair that a test may edit."""
    return Path(shutil.copytree(pair_source, tmp_path / "pair"))


def edit_config(folder: Path, change) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


def load(folder: Path, **kw):
    return load_pair(folder, device="cpu", dtype="float32", drafter_precision="same", **kw)


# ------------------------------------------------------------------------------ config layouts
def test_dflash_keys_at_the_top_level_are_read_not_replaced_by_the_default(pair_dir):
    ids = [0, 2]
    assert ids != default_target_layer_ids(4, 2)

    def top_level(config):
        config.pop("dflash_config")
        config.update(target_layer_ids=ids, mask_token_id=3)

    edit_config(pair_dir / "drafter", top_level)
    pair = load(pair_dir)
    assert pair.drafter.target_layer_ids == ids and pair.drafter.layer_ids_source == "top level"
    assert pair.feature_layers == ids and pair.mask_token_id == 3


def test_nested_and_top_level_keys_that_disagree_are_refused(pair_dir):
    edit_config(pair_dir / "drafter", lambda c: c.update(target_layer_ids=[0, 3]))
    with pytest.raises(PairError, match="two target_layer_ids"):
        load(pair_dir)


def test_a_config_that_names_no_layers_gets_the_default_with_a_warning(pair_dir):
    edit_config(pair_dir / "drafter", lambda c: c["dflash_config"].pop("target_layer_ids"))
    with pytest.warns(UserWarning, match="names no target_layer_ids"):
        pair = load(pair_dir)
    assert pair.drafter.target_layer_ids == default_target_layer_ids(4, 2)
    assert pair.drafter.layer_ids_source == "default"


def test_the_nested_layout_loads_without_a_warning(pair_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        pair = load(pair_dir)
    assert pair.drafter.layer_ids_source == "dflash_config"


# --------------------------------------------------------------------------- sliding windows
@pytest.mark.parametrize("change", [
    lambda c: c.update(layer_types=["full_attention", "sliding_attention"], use_sliding_window=True,
                       sliding_window=64),
    lambda c: (c.pop("layer_types", None), c.update(use_sliding_window=True, sliding_window=64,
                                                    max_window_layers=0)),
], ids=["layer_types", "use_sliding_window"])
def test_a_sliding_window_drafter_is_refused(pair_dir, change):
    edit_config(pair_dir / "drafter", change)
    with pytest.raises(PairError, match="sliding_attention.*full attention only"):
        load(pair_dir)


def test_a_sliding_window_setting_that_applies_to_no_drafter_layer_loads(pair_dir):
    """transformers gives layers below max_window_layers full attention: so does this engine."""
    edit_config(pair_dir / "drafter", lambda c: (c.pop("layer_types", None),
                                                 c.update(use_sliding_window=True, sliding_window=64)))
    assert load(pair_dir).drafter is not None


# ------------------------------------------------------------------------------- stop tokens
def test_stop_tokens_from_generation_config_join_the_eos_ids(pair_dir):
    assert load(pair_dir).eos_token_ids == {0}
    (pair_dir / "target" / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 7]}))
    pair = load(pair_dir)
    assert pair.eos_token_ids == {0, 7} and pair.generation_eos == (0, 7)
    # a decode stops at the new stop token: find where greedy decoding first emits a token, make it a stop
    free = DecodeSession(pair, "ab", selector="ar", max_new_tokens=12, stop_at_eos=False)
    free.run()
    stop = free.generated[3]
    (pair_dir / "target" / "generation_config.json").write_text(json.dumps({"eos_token_id": stop}))
    pair = load(pair_dir)
    stopped = DecodeSession(pair, "ab", selector="ddtree", budget=8, max_new_tokens=12)
    stopped.run()
    assert stopped.generated[-1] == stop and len(stopped.generated) <= free.generated.index(stop) + 1


# -------------------------------------------------------------------------------- load errors
def test_a_drafter_whose_config_does_not_fit_its_weights_is_a_message(pair_dir, capsys):
    edit_config(pair_dir / "drafter", lambda c: c.update(hidden_size=48))
    with pytest.raises(PairError, match=r"do not fit its config.json.*\[.*48.*\].*use the config saved"):
        load(pair_dir)
    assert main(["generate", "--pair", str(pair_dir), "--prompt", "ab", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err       # (after transformers' progress bars)
    assert err.splitlines()[-1].startswith("error: could not load the drafter") and "Traceback" not in err


def test_a_target_whose_config_does_not_fit_its_weights_is_a_message(pair_dir):
    edit_config(pair_dir / "target", lambda c: c.update(intermediate_size=80))
    with pytest.raises(PairError, match=r"target model.*do not fit its config.json.*\[80, 32\] by the config"):
        load(pair_dir)


@pytest.mark.parametrize("part", ["target", "drafter"])
def test_damaged_or_missing_weights_are_a_message(pair_dir, part):
    weights = pair_dir / part / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(PairError, match=f"could not load the {part}.*(damaged|header)"):
        load(pair_dir)
    weights.unlink()
    with pytest.raises(PairError, match=f"could not load the {part}"):
        load(pair_dir)


def test_other_load_failures_are_messages(pair_dir, tmp_path, monkeypatch):
    edit_config(pair_dir / "drafter", lambda c: c.pop("block_size"))
    with pytest.raises(PairError, match="not a DFlash drafter config: 'block_size' is missing"):
        load(pair_dir)
    (pair_dir / "pair.json").write_text("{not json")
    with pytest.raises(PairError, match="pair.json cannot be read"):
        load(pair_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (pair_dir / "target" / name).unlink()
    with pytest.raises(PairError, match="could not load the tokenizer.*no tokenizer files"):
        load_pair(None, target=str(pair_dir / "target"), device="cpu")
    with pytest.raises(PairError, match="unknown dtype 'float33'"):
        load_pair(None, target=str(pair_dir / "target"), device="cpu", dtype="float33")


def test_an_unreachable_hub_id_is_a_message(pair_source, monkeypatch, tmp_path):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(PairError, match="could not load the drafter from nobody/no-such-drafter.*hf download"):
        load(pair_source, drafter="nobody/no-such-drafter")


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")])
def test_running_out_of_memory_names_what_to_lower_and_loads_again_after(pair_source, monkeypatch, error):
    def too_big(*args, **kwargs):
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(DFlashDrafter, "from_pretrained", too_big)
        with pytest.raises(PairError, match=r"out of CPU memory.*--dtype bfloat16.*smaller") as caught:
            load(pair_source)
    assert caught.value.__cause__ is None and caught.value.__context__ is None   # nothing of the load kept alive
    assert load(pair_source).drafter is not None
    on_gpu = _memory_message(error, torch.device("cuda"), torch.bfloat16)
    assert "out of GPU memory" in on_gpu and "--device cpu" in on_gpu and "--dtype" not in on_gpu


# -------------------------------------------------------------------------------- fingerprint
def parts(folder: Path, **more) -> dict:
    return {"target": folder / "target", "drafter": folder / "drafter", **more}


def test_the_fingerprint_changes_with_the_drafter_and_the_scorer(pair_dir, tmp_path):
    from taps.scorer import ScorerConfig, TapsScorer

    base = load(pair_dir).fingerprint
    assert load(pair_dir, no_drafter=True).fingerprint != base
    other = build_tiny_pair(tmp_path / "other", block_size=4)           # another drafter, same target shape
    assert load(pair_dir, drafter=str(other / "drafter")).fingerprint != base
    TapsScorer(ScorerConfig(model_dim=32)).save_pretrained(tmp_path / "scorer")
    with_scorer = load(pair_dir, scorer=str(tmp_path / "scorer")).fingerprint
    TapsScorer(ScorerConfig(model_dim=32, hidden_dim=32)).save_pretrained(tmp_path / "scorer2")
    other_scorer = load(pair_dir, scorer=str(tmp_path / "scorer2")).fingerprint
    assert len({base, with_scorer, other_scorer}) == 3
    # the same parts in other roles are another pair
    assert fingerprint({"target": pair_dir / "drafter", "drafter": pair_dir / "target"}) != \
        fingerprint(parts(pair_dir))


def fake_snapshot(cache: Path, repo: str, commit: str, source: Path) -> Path:
    """A hub cache entry as huggingface_hub lays it out: models--org--name/{refs/main, snapshots/<commit>/}."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / commit
    if not snapshot.exists():
        shutil.copytree(source, snapshot)
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text(commit)
    return snapshot


def test_the_fingerprint_covers_a_drafter_given_by_hub_id_and_its_revision(pair_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    cache = tmp_path / "hub"
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    first, second = "a" * 40, "b" * 40
    snapshot = fake_snapshot(cache, "org/tiny-drafter", first, pair_dir / "drafter")
    assert hub_revision(snapshot) == f"org/tiny-drafter@{first}"
    by_id = load(pair_dir, drafter="org/tiny-drafter")
    assert by_id.drafter is not None
    local = load(pair_dir).fingerprint
    assert by_id.fingerprint != local                      # the same files, but a hub revision
    fake_snapshot(cache, "org/tiny-drafter", second, pair_dir / "drafter")   # a new commit, the same files
    assert load(pair_dir, drafter="org/tiny-drafter").fingerprint not in (by_id.fingerprint, local)
    (cache / "models--org--tiny-drafter" / "refs" / "main").write_text(first)
    assert load(pair_dir, drafter="org/tiny-drafter").fingerprint == by_id.fingerprint


def test_the_fingerprint_ignores_tensor_values_under_the_same_headers(pair_dir):
    """(Training's caches key on `content_fingerprint`, which reads every byte and does tell them apart.)"""
    before, exact = fingerprint(parts(pair_dir)), content_fingerprint([pair_dir / "drafter"])
    weights = pair_dir / "drafter" / "model.safetensors"
    state = load_file(str(weights))
    old = weights.read_bytes()
    save_file({k: torch.randn_like(v) for k, v in state.items()}, str(weights), metadata={"format": "pt"})
    assert weights.read_bytes() != old and len(weights.read_bytes()) == len(old)
    assert fingerprint(parts(pair_dir)) == before and content_fingerprint([pair_dir / "drafter"]) != exact
    save_file({k: v.double() for k, v in state.items()}, str(weights), metadata={"format": "pt"})   # a new header
    assert fingerprint(parts(pair_dir)) != before


class CountingFile:
    """A file whose reads are counted into `total`."""

    def __init__(self, fh, total: list[int]):
        self._fh, self._total = fh, total

    def _count(self, data):
        self._total[0] += len(data) if isinstance(data, (bytes, str)) else sum(map(len, data))
        return data

    def read(self, *args):
        return self._count(self._fh.read(*args))

    def readline(self, *args):
        return self._count(self._fh.readline(*args))

    def readlines(self, *args):
        return self._count(self._fh.readlines(*args))

    def readinto(self, buffer):
        n = self._fh.readinto(buffer)
        self._total[0] += n or 0
        return n

    def __iter__(self):
        return (self._count(line) for line in self._fh)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __getattr__(self, name):
        return getattr(self._fh, name)


def bytes_read(monkeypatch, run) -> int:
    total = [0]
    real_open = builtins.open

    def counting_open(*args, **kwargs):
        return CountingFile(real_open(*args, **kwargs), total)

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", counting_open)
        patch.setattr(io, "open", counting_open)
        run()
    return total[0]


def big_checkpoint(folder: Path, header_extra: str = "", poke: bytes = b"") -> Path:
    """A checkpoint folder with a 256 MB safetensors file (sparse: written as a header and a size),
    a 3 MB tokenizer.json and small configs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 8192}))
    text = random.Random(0).randbytes(1_500_000).hex()
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": text}}))
    n = 8192 * 8192
    header = json.dumps({"__metadata__": {"format": "pt", "note": header_extra},
                         "w": {"dtype": "F32", "shape": [8192, 8192], "data_offsets": [0, 4 * n]}}).encode()
    path = folder / "model.safetensors"
    with path.open("wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + 4 * n)
        if poke:
            fh.seek(8 + len(header) + 12345)
            fh.write(poke)
    return folder


def test_the_fingerprint_reads_under_1_mb_of_a_checkpoint_folder(tmp_path, monkeypatch):
    folder = big_checkpoint(tmp_path / "big")
    assert sum(p.stat().st_size for p in folder.iterdir()) > 250e6
    printed: list[str] = []
    read = bytes_read(monkeypatch, lambda: printed.append(fingerprint([folder])))
    assert 0 < read <= READ_LIMIT < 1 << 20
    assert printed[0] == fingerprint([folder])
    assert fingerprint([big_checkpoint(tmp_path / "poked", poke=b"new tensor bytes")]) == printed[0]
    assert fingerprint([big_checkpoint(tmp_path / "meta", header_extra="x")]) != printed[0]
    shipped = Path(__file__).parents[1] / "assets" / "models" / "taps-code-10m"
    if shipped.is_dir():
        for part in ("target", "drafter", "scorer"):
            assert bytes_read(monkeypatch, lambda part=part: fingerprint([shipped / part])) <= READ_LIMIT


# ----------------------------------------------------------------------- growing draft buffers
def test_draft_buffers_grow_and_draft_as_a_preallocated_buffer_does(tmp_path):
    from taps.fast_drafter import BUFFER_STEP, DraftContext, FastDrafter

    pair = load_pair(build_tiny_pair(tmp_path / "long", max_positions=2048), device="cpu", dtype="float64")
    fast = FastDrafter(pair.drafter, pair.target.get_output_embeddings())
    growing = DraftContext(fast, pair.mask_token_id)
    whole = DraftContext(fast, pair.mask_token_id, size=fast.capacity)
    assert growing.size == 0 and whole.size == fast.capacity == 2048 + pair.drafter.block_size
    gen = torch.Generator().manual_seed(3)
    width = len(pair.feature_layers) * pair.target.config.hidden_size
    sizes = []
    for step, n in enumerate([40, 1, 3, 200, 7, 300, 5, 600, 2, 800]):
        feats = torch.randn(n, width, generator=gen, dtype=torch.float64)
        growing.add(feats)
        whole.add(feats)
        root = int(torch.randint(2, 90, (1,), generator=gen))
        a, b = growing.draft(root, 7, pair.embed), whole.draft(root, 7, pair.embed)
        assert torch.equal(a, b), step
        sizes.append(growing.size)
    assert sizes[0] == BUFFER_STEP and sizes == sorted(sizes) and sizes[-1] == 2048 and len(set(sizes)) == 4
    assert all(s % BUFFER_STEP == 0 for s in sizes) and growing.length == whole.length == 1958
    # the last block that fits: the buffers grow to the drafter's whole context, and no further
    last = torch.randn(fast.capacity - 1958 - 8, width, generator=gen, dtype=torch.float64)
    growing.add(last)
    whole.add(last)
    assert torch.equal(growing.draft(5, 7, pair.embed), whole.draft(5, 7, pair.embed))
    assert growing.size == fast.capacity
    # the rotary table covers every position a context may reach, built once: drafts only read it
    assert fast.rotary.shape[0] == fast.capacity and torch.equal(fast.rotary, fast._rotary_rows(0, fast.capacity))
    growing.add(torch.randn(1, width, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="runs past the drafter's context"):
        growing.draft(2, 7, pair.embed)


def test_a_long_decode_across_buffer_growth_keeps_its_drafts(tmp_path, monkeypatch):
    """A session whose drafter buffers grow drafts, verifies and commits exactly what one with
    buffers made at full size does."""
    import taps.session
    from taps.fast_drafter import DraftContext

    pair = load_pair(build_tiny_pair(tmp_path / "long", max_positions=512), device="cpu", dtype="float64")
    prompt = "def f(x):\n    return x * 2\n" * 8     # 216 tokens: buffers of 256 positions at first

    def rounds():
        s = DecodeSession(pair, prompt, selector="ddtree", budget=8, max_new_tokens=72, stop_at_eos=False)
        s.run()
        return s.generated, [(r.pool_tokens, r.accepted) for r in s.rounds], s

    grown, grown_rounds, session = rounds()
    assert len(session.tokens) == 288 and session.draft_context.size == 512   # grown from 256 on the way
    monkeypatch.setattr(taps.session, "DraftContext",
                        lambda fast, mask: DraftContext(fast, mask, size=fast.capacity))
    whole, whole_rounds, session = rounds()
    assert session.draft_context.size == session.draft_context.fast.capacity
    assert grown == whole and len(grown_rounds) == len(whole_rounds)
    for (pool_a, acc_a), (pool_b, acc_b) in zip(grown_rounds, whole_rounds):
        assert list(pool_a) == list(pool_b) and list(acc_a) == list(acc_b)


def test_a_bfloat16_drafter_keeps_float32_rotary_frequencies_as_the_target(pair_source):
    """Weights in the pair's dtype, built without a random init (meta, then the file's tensors);
    the rotary inverse frequencies stay float32 like the target's: in bfloat16 they would be off by
    up to 2^-9 relative, turning the angles by radians a few thousand positions in."""
    pair = load_pair(pair_source, device="cpu", dtype="bfloat16")
    drafter = pair.drafter
    assert not any(t.is_meta for t in drafter.parameters())
    assert {t.dtype for t in drafter.parameters()} == {torch.bfloat16}
    assert drafter.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(drafter.rotary_emb.inv_freq, pair.target.model.rotary_emb.inv_freq.float())

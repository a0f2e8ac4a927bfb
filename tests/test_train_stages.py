"""Drafter and scorer training: the training forward equals the inference path, and --quick runs."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from taps.drafter import context_features
from taps.train.common import TrainError
from taps.train.drafter import block_mask, continue_batch, drafter_loss, target_features, teacher_logprobs


def test_training_forward_equals_incremental_drafting(tiny_pair):
    """Blocks trained side by side under one mask see exactly what a live draft sees."""
    pair = tiny_pair
    drafter, target = pair.drafter, pair.target
    gen = torch.Generator().manual_seed(0)
    dev = pair.device
    seq = torch.randint(2, 90, (1, 30), generator=gen).to(dev)
    anchors = torch.tensor([4, 11, 19], device=dev)
    block = drafter.block_size
    with torch.no_grad():
        feats = context_features(target(input_ids=seq, output_hidden_states=True).hidden_states,
                                 drafter.target_layer_ids)
        ids = torch.full((1, len(anchors), block), pair.mask_token_id, device=dev)
        ids[:, :, 0] = seq[:, anchors]
        embeds = pair.embed(ids.view(1, -1))
        positions = (anchors[:, None] + torch.arange(block, device=dev)[None, :]).reshape(-1)
        context = drafter.context_kv(feats, torch.arange(seq.shape[1], device=dev))
        together = drafter(embeds, positions, context, block_mask(anchors, seq.shape[1], block, embeds.dtype))
        together = together.view(len(anchors), block, -1)
        for a, p in enumerate(anchors.tolist()):
            cache = drafter.new_cache()
            drafter.extend_cache(cache, feats[:, :p])
            alone = drafter.draft_block(cache, pair.embed(ids[:, a]))[0]
            torch.testing.assert_close(together[a], alone, rtol=1e-9, atol=1e-9)


def test_drafter_loss_is_finite_and_trainable(tiny_pair):
    pair = tiny_pair
    dev = pair.device
    seqs = torch.randint(2, 90, (2, 24), generator=torch.Generator().manual_seed(1)).to(dev)
    weights = torch.exp(-torch.arange(pair.drafter.block_size - 1, dtype=torch.float64, device=dev) / 7)
    loss, agree = drafter_loss(pair.drafter, pair.target, seqs, torch.tensor([3, 9], device=dev), pair.mask_token_id,
                               weights)
    assert torch.isfinite(loss) and agree.shape == (pair.drafter.block_size - 1,)
    loss.backward()
    assert pair.drafter.fc.weight.grad is not None
    pair.drafter.zero_grad(set_to_none=True)


def test_sampled_contexts_keep_each_prompt_and_are_the_targets_draws_at_t(tiny_pair):
    """The calibration stage's contexts at T > 0: each sequence's prompt, then the target sampled at T
    (seeded: the same call, the same text), not its greedy text."""
    from taps.train.calibrate import sampled_contexts

    pair = tiny_pair
    prompts = torch.randint(2, 90, (3, 6), generator=torch.Generator().manual_seed(4)).to(pair.device)
    greedy = continue_batch(pair.target, prompts, 30).cpu().numpy()
    sampled = sampled_contexts(pair.target, greedy, 6, 1.0, seed=3, batch=2)
    assert sampled.shape == greedy.shape and sampled.dtype == greedy.dtype
    assert np.array_equal(sampled[:, :6], greedy[:, :6])
    assert not np.array_equal(sampled[:, 6:], greedy[:, 6:])
    assert np.array_equal(sampled, sampled_contexts(pair.target, greedy, 6, 1.0, seed=3, batch=2))
    # T -> 0 is the greedy text again
    assert np.array_equal(sampled_contexts(pair.target, greedy, 6, 1e-6, seed=3), greedy)


def test_distillation_teacher_is_the_targets_next_token_distribution(tiny_pair):
    """With `distill`, the drafter learns the target's distribution at each block position: on the
    target's own greedy text the teacher's argmax is the label there, and the loss mixes CE and KL."""
    pair = tiny_pair
    dev = pair.device
    prompts = torch.randint(2, 90, (2, 6), generator=torch.Generator().manual_seed(2)).to(dev)
    seqs = continue_batch(pair.target, prompts, 20)
    anchors = torch.tensor([5, 9], device=dev)
    block = pair.drafter.block_size
    label_pos = anchors[:, None] + torch.arange(1, block, device=dev)[None, :]
    _, final = target_features(pair.target, seqs, pair.drafter.target_layer_ids, final=True)
    teacher = teacher_logprobs(pair.target, final, label_pos)
    assert teacher.shape == (2, 2, block - 1, pair.target.config.vocab_size)
    assert torch.equal(teacher.argmax(-1), seqs[:, label_pos])
    weights = torch.ones(block - 1, dtype=torch.float64, device=dev)
    ce, _ = drafter_loss(pair.drafter, pair.target, seqs, anchors, pair.mask_token_id, weights)
    kl, _ = drafter_loss(pair.drafter, pair.target, seqs, anchors, pair.mask_token_id, weights, distill=1.0)
    mixed, _ = drafter_loss(pair.drafter, pair.target, seqs, anchors, pair.mask_token_id, weights, distill=0.25)
    assert kl.item() >= 0 and torch.isfinite(kl)
    torch.testing.assert_close(mixed, 0.75 * ce + 0.25 * kl)
    mixed.backward()
    assert pair.drafter.fc.weight.grad is not None
    pair.drafter.zero_grad(set_to_none=True)


@pytest.mark.parametrize("final", [False, True])
def test_feature_cache_is_saved_and_read_back(tmp_path, tiny_pair_dir, tiny_pair, monkeypatch, final):
    """The drafter stage's feature cache survives a restart: the second call reads the files the
    first wrote (it never runs the target) and gives the same tensors; other sequences get new files."""
    from taps.train import drafter as stage

    pair = tiny_pair
    seqs = np.random.default_rng(0).integers(2, 90, size=(3, 20)).astype(np.int32)
    seqs_t = torch.from_numpy(seqs.astype(np.int64)).to(pair.device)
    layers = pair.drafter.target_layer_ids
    first = stage.cached_features(pair.target, tiny_pair_dir / "target", seqs, seqs_t, layers, final, tmp_path)
    assert len(list(tmp_path.glob("features-*.npy"))) == 1 and len(list(tmp_path.glob("final-*.npy"))) == int(final)
    want = stage.target_features(pair.target, seqs_t, layers, final=final)
    torch.testing.assert_close(first[0], (want[0] if final else want).half())

    def no_target(*args, **kwargs):
        raise AssertionError("the cache was not read back")

    monkeypatch.setattr(stage, "target_features", no_target)
    again = stage.cached_features(pair.target, tiny_pair_dir / "target", seqs, seqs_t, layers, final, tmp_path)
    assert torch.equal(again[0], first[0]) and (not final or torch.equal(again[1], first[1]))
    monkeypatch.undo()
    stage.cached_features(pair.target, tiny_pair_dir / "target", seqs[:2], seqs_t[:2], layers, final, tmp_path)
    assert len(list(tmp_path.glob("features-*.npy"))) == 2


@pytest.mark.parametrize("final", [False, True])
def test_feature_cache_on_disk_resumes_and_reads_the_same_rows(tmp_path, tiny_pair_dir, tiny_pair, monkeypatch,
                                                               final):
    """Features too big for memory (`--feature-disk-gb`): written through a memory map batch by
    batch; a run stopped part-way goes on from the last saved batch (it never recomputes the rows
    before it), and the rows read back equal the in-memory cache's."""
    from taps.train import drafter as stage

    pair = tiny_pair
    seqs = np.random.default_rng(1).integers(2, 90, size=(5, 20)).astype(np.int32)
    seqs_t = torch.from_numpy(seqs.astype(np.int64)).to(pair.device)
    layers = pair.drafter.target_layer_ids
    folder = tiny_pair_dir / "target"
    for name in ("mem", "disk", "disk2"):
        (tmp_path / name).mkdir()
    memory = stage.cached_features(pair.target, folder, seqs, seqs_t, layers, final, tmp_path / "mem")
    real, calls = stage.target_features, []

    def stops_after_three(target, batch, layer_ids, final=False):
        calls.append(len(batch))
        if len(calls) > 3:
            raise KeyboardInterrupt("stopped")
        return real(target, batch, layer_ids, final=final)

    monkeypatch.setattr(stage, "target_features", stops_after_three)
    small = dict(batch=1, save_every=2)             # progress saved every 2 rows, and at the end
    paths = [tmp_path / "disk" / "features-x.npy"] + ([tmp_path / "disk" / "final-x.npy"] if final else [])
    with pytest.raises(KeyboardInterrupt):
        stage.disk_features(pair.target, seqs_t, layers, final, paths, **small)
    assert not paths[0].exists() and json.loads(paths[0].with_suffix(".partial.json").read_text()) == {"rows": 2}
    calls.clear()
    rows = stage.disk_features(pair.target, seqs_t, layers, final, paths, **small)
    assert calls == [1, 1, 1]                        # rows 2, 3 and 4 only
    assert all(p.exists() for p in paths) and not list((tmp_path / "disk").glob("*.partial.*"))
    pick = torch.tensor([4, 0, 4, 2])
    for got, want in zip(rows, [memory[0], memory[1]] if final else [memory[0]]):
        assert got.shape == tuple(want.shape)
        assert torch.equal(got[pick], want[pick])
    monkeypatch.undo()
    on_disk = stage.cached_features(pair.target, folder, seqs, seqs_t, layers, final, tmp_path / "disk2",
                                    on_disk=True)
    assert isinstance(on_disk[0], stage.DiskRows) and torch.equal(on_disk[0][pick], memory[0][pick])
    assert (on_disk[1] is None) == (not final)



@pytest.mark.parametrize("on_disk,final", [(False, False), (True, False), (True, True)])
def test_features_from_an_earlier_run_copies_its_rows_and_computes_only_the_rest(
        tmp_path, tiny_pair_dir, tiny_pair, monkeypatch, on_disk, final):
    """`--features-from`: an earlier run's features of the first sequences (same target, same
    layers) are copied; only the new sequences' rows are computed. A file made from other
    sequences is not used, whatever its size."""
    from taps.train import drafter as stage

    pair = tiny_pair
    seqs = np.random.default_rng(2).integers(2, 90, size=(5, 20)).astype(np.int32)
    other = seqs.copy()
    other[1, 7] += 1                                 # differs in one token of its second sequence
    seqs_t = torch.from_numpy(seqs.astype(np.int64)).to(pair.device)
    layers = pair.drafter.target_layer_ids
    folder = tiny_pair_dir / "target"
    for name in ("earlier", "wrong", "new", "new2", "full"):
        (tmp_path / name).mkdir()
    earlier = stage.cached_features(pair.target, folder, seqs[:3], seqs_t[:3], layers, final, tmp_path / "earlier")
    stage.cached_features(pair.target, folder, other[:4], seqs_t[:4], layers, final, tmp_path / "wrong")
    full = stage.cached_features(pair.target, folder, seqs, seqs_t, layers, final, tmp_path / "full")
    real, rows_computed = stage.target_features, []

    def counted(target, batch, layer_ids, final=False):
        rows_computed.append(len(batch))
        return real(target, batch, layer_ids, final=final)

    monkeypatch.setattr(stage, "target_features", counted)
    got = stage.cached_features(pair.target, folder, seqs, seqs_t, layers, final, tmp_path / "new",
                                on_disk=on_disk, features_from=str(tmp_path / "earlier"))
    assert sum(rows_computed) == 2                   # sequences 3 and 4 only
    everything = torch.arange(5)
    for i in range(2 if final else 1):
        mine, first, want = got[i][everything], earlier[i], full[i]
        assert torch.equal(mine[:3], first)          # copied as they were
        torch.testing.assert_close(mine, want, rtol=1e-2, atol=1e-2)
    rows_computed.clear()
    stage.cached_features(pair.target, folder, seqs, seqs_t, layers, final, tmp_path / "new2",
                          on_disk=on_disk, features_from=str(tmp_path / "wrong"))
    assert sum(rows_computed) == 5                   # other sequences' features are never copied
    with pytest.raises(FileNotFoundError, match="no such folder"):
        stage.cached_features(pair.target, folder, seqs[:4], seqs_t[:4], layers, final, tmp_path / "full",
                              features_from=str(tmp_path / "missing"))


def test_disk_rows_hint_the_next_steps_rows_without_changing_what_is_read(tmp_path):
    """The drafter stage asks the kernel for the next step's rows while it computes this one:
    `next_rows` is exactly what the next draw gives, without advancing the generator (so a run is
    the same with or without the hint), and each hinted byte range is that row's bytes."""
    from taps.train import drafter as stage

    rng = np.random.default_rng(3)
    rng.integers(0, 10)
    peeked = stage.next_rows(rng, 1000, 16)
    assert np.array_equal(peeked, rng.integers(0, 1000, size=16))
    assert not np.array_equal(stage.next_rows(rng, 1000, 16), peeked)   # it follows the generator

    values = np.random.default_rng(4).standard_normal((40, 6, 5)).astype(np.float16)
    np.save(tmp_path / "f.npy", values)
    rows = stage.DiskRows(np.load(tmp_path / "f.npy", mmap_mode="r"), torch.device("cpu"))
    pick = np.array([7, 3, 7, 39, 0])
    ranges = rows.byte_ranges(pick)
    assert len(ranges) == 4                          # each distinct row once
    for (start, length), row in zip(ranges, np.unique(pick)):
        assert bytes(rows.array._mmap[start: start + length]) == values[row].tobytes()
    assert rows.will_need(pick) in (0, 4)            # 0 only where the platform has no madvise
    assert torch.equal(rows[torch.as_tensor(pick)], torch.from_numpy(values[pick]))


def test_init_from_target_copies_layers_and_routes_their_input(tiny_pair):
    """`--init-layers`: the drafter's layers and final norm start as the target's, and when the
    features hold the first copied layer's input, `fc` passes exactly that input through."""
    from taps.drafter import DFlashDrafter
    from taps.train.drafter import init_from_target

    pair = tiny_pair
    target = pair.target
    ids = pair.drafter.target_layer_ids
    n_draft = len(pair.drafter.layers)
    first = ids[0] + 1                                      # its input is the output of layer ids[0]
    copied = [min(first + j, len(target.model.layers) - 1) for j in range(n_draft)]
    drafter = DFlashDrafter(pair.drafter.config).to(pair.device, target.dtype)
    init_from_target(drafter, target, copied)
    for mine, i in zip(drafter.layers, copied):
        for name, value in target.model.layers[i].state_dict().items():
            assert torch.equal(mine.state_dict()[name], value), (i, name)
    assert torch.equal(drafter.norm.weight, target.model.norm.weight)
    assert torch.equal(drafter.hidden_norm.weight, target.model.layers[first].input_layernorm.weight)
    seqs = torch.randint(2, 90, (1, 12), device=pair.device)
    hidden = target(input_ids=seqs, output_hidden_states=True).hidden_states
    features = context_features(hidden, ids)
    torch.testing.assert_close(drafter.fc(features), hidden[first])
    with pytest.raises(ValueError, match="target layer ids"):
        init_from_target(drafter, target, [len(target.model.layers)] * n_draft)
    from taps.train.drafter import layer_list

    assert layer_list("4,5", "--init-layers") == [4, 5]
    with pytest.raises(ValueError, match="--init-layers takes comma-separated layer numbers"):
        layer_list("4;5", "--init-layers")


@pytest.mark.slow
def test_quick_drafter_stage_trains_from_features_on_disk(tmp_path, tiny_pair_dir, capsys):
    """With features bigger than --feature-cache-gb but within --feature-disk-gb, the stage keeps
    them on disk, memory-mapped, and trains from them; its loss still drops (--quick checks)."""
    import shutil

    from taps.train import drafter as drafter_stage

    out = tmp_path / "run"
    shutil.copytree(tiny_pair_dir / "target", out / "target")
    parser = argparse.ArgumentParser()
    drafter_stage.add_arguments(parser)
    drafter_stage.main(parser.parse_args(["--out", str(out), "--quick", "--feature-cache-gb", "0",
                                          "--feature-disk-gb", "1"]))
    assert "on disk, memory-mapped" in capsys.readouterr().out
    assert (out / "drafter" / "model.safetensors").exists()
    assert len(list((out / "drafter_data").glob("features-*.npy"))) == 1


@pytest.mark.slow
def test_quick_drafter_and_scorer_stages(tmp_path, tiny_pair_dir, capsys):
    """The drafter and scorer stages run end to end on a tiny target and lower their losses."""
    import shutil

    from taps import DecodeSession, load_pair
    from taps.train import drafter as drafter_stage
    from taps.train import scorer as scorer_stage

    out = tmp_path / "run"
    shutil.copytree(tiny_pair_dir / "target", out / "target")
    args = argparse.Namespace(out=out, target=None, quick=True, resume=True,
                              **{k: None for k in ("num_layers", "block_size", "target_layers", "intermediate_size",
                                                   "corpus", "max_files", "regen_sequences", "val_sequences",
                                                   "prompt_len", "gen_len", "regen_batch", "batch_size", "anchors",
                                                   "gamma", "lr", "min_lr_ratio", "warmup_steps", "weight_decay",
                                                   "grad_clip", "max_steps", "minutes", "seed", "log_every",
                                                   "eval_every", "ckpt_minutes", "distill", "init_layers",
                                                   "init_drafter")})
    drafter_stage.main(args)
    assert (out / "drafter" / "model.safetensors").exists()
    from transformers import AutoConfig

    from taps.drafter import DFlashDrafter
    from taps.train.drafter import DrafterConfig, check_data_target, model_config, start_weights

    # the regenerated sequences are stamped with their target: another target is refused
    assert json.loads((out / "drafter_data" / "target.json").read_text())["target"] == str(out / "target")
    check_data_target(out / "drafter_data", out / "target")
    changed = tmp_path / "changed"
    shutil.copytree(out / "target", changed)
    (changed / "generation_config.json").write_text((changed / "generation_config.json").read_text() + " ")
    with pytest.raises(TrainError, match="regenerated by another target"):
        check_data_target(out / "drafter_data", changed)
    # --init-drafter: the weights of a trained drafter, from its folder or its checkpoint, shape-checked
    fresh = DFlashDrafter.from_pretrained(out / "drafter")
    for source in (out / "drafter", out / "drafter_ckpt" / "ckpt.pt"):
        weights = start_weights(source, fresh)
        assert all(torch.equal(weights[k], v) for k, v in fresh.state_dict().items())
    target_config = AutoConfig.from_pretrained(out / "target")
    other = DFlashDrafter(model_config(DrafterConfig(num_layers=2, block_size=6), target_config, fresh.mask_token_id))
    with pytest.raises(ValueError, match="another drafter shape"):
        start_weights(out / "drafter", other)
    with pytest.raises(FileNotFoundError, match="no such drafter"):
        start_weights(out / "nowhere", fresh)
    sargs = argparse.Namespace(out=out, target=None, drafter=None, quick=True, resume=True,
                               **{f: None for f in scorer_stage.ScorerTrainConfig.__dataclass_fields__})
    scorer_stage.main(sargs)
    assert (out / "scorer" / "model.safetensors").exists()
    log = json.loads((out / "scorer" / "training_log.json").read_text())
    for which in ("calibration_learned", "calibration_marginal"):
        taus = log[which]["tau_by_budget"]
        assert list(taus) == [str(b) for b in scorer_stage.BUDGETS]
        assert all(1.0 <= taus[b] <= int(b) + 1 for b in taus)
        assert list(taus.values()) == sorted(taus.values())      # more nodes never accept less
    # the saved traces are reused only with the weights they were collected with
    trace_file = next((out / "scorer_data").glob("traces-*.pt"))
    parts = scorer_stage.load_pair_parts(out, None, None)
    assert torch.load(trace_file, weights_only=False)["fingerprint"] == scorer_stage.weights_fingerprint(
        parts.target, parts.drafter)
    drafter_weights = load_file(out / "drafter" / "model.safetensors")
    first = next(iter(drafter_weights))
    drafter_weights[first] = drafter_weights[first] + 0.01
    save_file(drafter_weights, out / "drafter" / "model.safetensors")
    capsys.readouterr()
    scorer_stage.main(sargs)                # resume on, as a rerun of the same command: nothing stale is kept
    printed = capsys.readouterr().out
    assert "collected with other target or drafter weights" in printed
    assert "trained on pools of other target or drafter weights: training afresh" in printed
    assert "resumed from" not in printed
    retrained = json.loads((out / "scorer" / "training_log.json").read_text())
    assert retrained["steps"] > 0
    parts = scorer_stage.load_pair_parts(out, None, None)   # its checkpoint names the pools it was trained on
    assert torch.load(out / "scorer_ckpt" / "ckpt.pt", weights_only=False)["traces"] == \
        scorer_stage.weights_fingerprint(parts.target, parts.drafter)
    (out / "pair.json").write_text('{"name": "q", "target": "target", "drafter": "drafter", "scorer": "scorer"}')
    # the calibration stage: validation pools at two temperatures, a map per estimator, saved with the scorer
    from taps.train import calibrate as calibrate_stage

    cargs = argparse.Namespace(out=out, pair=None, data=None, scorer_folder=None, regenerate=0,
                               **{f: None for f in calibrate_stage.CalibrateConfig.__dataclass_fields__})
    cargs.pools, cargs.temperatures = 8, "0,0.8"
    calibrate_stage.main(cargs)
    report = json.loads((out / "calibration_report.json").read_text())
    assert set(report["report"]) == {"marginal", "learned"} and set(report["report"]["learned"]) == {"0", "0.8"}
    pair = load_pair(out, device="cpu")
    assert pair.calibration is not None and pair.calibration.reach_map("learned", 0.7) is not None
    curve = pair.calibration.reach_curve("learned", 0.0, 16)       # a batch plan's saved starting curve
    assert curve.shape == (16,) and np.all(np.diff(curve) <= 1e-12) and 0 < curve[0] <= 1
    capsys.readouterr()
    calibrate_stage.main(cargs)                 # a rerun reads the validation pools back
    assert "loaded 8 traces" in capsys.readouterr().out
    s = DecodeSession(pair, "def f(x):", selector="taps", estimator="learned", budget=8, max_new_tokens=10,
                      stop_at_eos=False)
    s.run()
    assert len(s.generated) == 10
    assert np.isfinite(s.rounds[0].pool_reach).all()


def test_budget_acceptance_counts_the_greedy_chain_inside_the_top_nodes():
    """Held-out tau of the reach rule: the root's token plus the greedy-path nodes among the
    `budget` nodes of highest predicted reach."""
    from taps.train.scorer import budget_acceptance

    observed = np.array([1.0, 1.0, 0.0, 1.0, 1.0])     # the target's greedy chain: root -> 1 -> 3 -> 4
    good = np.array([1.0, 0.9, 0.5, 0.8, 0.1])         # ranks the chain first but node 4 last
    bad = np.array([1.0, 0.4, 0.9, 0.3, 0.1])          # puts the sibling off the chain first
    assert budget_acceptance([(good, observed)], budgets=(1, 2, 3, 4)) == {"1": 2.0, "2": 3.0, "3": 3.0, "4": 4.0}
    assert budget_acceptance([(bad, observed)], budgets=(1, 2, 3)) == {"1": 1.0, "2": 2.0, "3": 3.0}
    both = budget_acceptance([(good, observed), (bad, observed)], budgets=(1,))
    assert both == {"1": 1.5}


def test_budget_acceptance_chooses_within_the_marginal_pool_as_taps_does():
    """With a marginal reach, the choice is made among the pool_factor x budget best marginal nodes."""
    from taps.train.scorer import budget_acceptance

    observed = np.array([1.0, 1.0, 0.0, 1.0, 1.0])
    learned = np.array([1.0, 0.9, 0.5, 0.8, 0.1])
    marginal = np.array([1.0, 0.3, 0.9, 0.2, 0.1])     # node 1 (on the chain) is only the 2nd best
    assert budget_acceptance([(learned, observed, marginal)], budgets=(1,), pool_factor=1) == {"1": 1.0}
    assert budget_acceptance([(learned, observed, marginal)], budgets=(1,), pool_factor=2) == {"1": 2.0}
    assert budget_acceptance([(learned, observed)], budgets=(1,), pool_factor=1) == {"1": 2.0}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_paths_trace_holds_the_run_time_pool_of_every_smaller_budget(seed):
    """The first N nodes of the largest run-time pool are the run-time pool of N nodes, node for
    node; a trace's sub-pool carries those nodes' labels."""
    from taps.pool import Lattice, top_paths
    from taps.train.scorer import Trace

    gen = torch.Generator().manual_seed(seed)
    lattice = Lattice.from_logits(torch.randn(15, 300, generator=gen) * 2.5, 64)
    big = top_paths(7, lattice, 256, 64)
    labels = np.arange(big.size, dtype=np.float64)
    trace = Trace(big, lattice, labels / big.size, labels % 2, nested=True)
    for nodes in (32, 64, 128):
        small = top_paths(7, lattice, nodes, 64)
        pool, prob, greedy = trace.sub_pool(nodes)
        for field in ("tokens", "parents", "depths", "ranks"):
            assert np.array_equal(getattr(pool, field), getattr(small, field)), field
        assert np.allclose(pool.path_logprob, small.path_logprob)
        assert np.array_equal(prob, labels[:nodes] / big.size) and np.array_equal(greedy, labels[:nodes] % 2)
    assert trace.sub_pool(1000)[0] is big


def test_scorer_anchors_stay_within_the_span_after_the_prompt():
    from taps.train.scorer import anchor_range

    assert anchor_range(256, 64, 128) == (63, 191)       # the first 128 generated positions
    assert anchor_range(256, 64, 0) == (63, 254)         # anywhere, leaving a token to verify
    assert anchor_range(100, 64, 128) == (63, 98)        # a short sequence ends first


@pytest.mark.parametrize("option, value, message", [
    ("anchor_span", -1, "--anchor-span must be at least 0, got -1"),
    ("pool_factor", 0, "--pool-factor must be at least 1, got 0"),
    ("train_traces", 0, "--train-traces must be at least 1, got 0"),
])
def test_scorer_stage_refuses_out_of_range_options(tmp_path, option, value, message):
    from taps.train import scorer as scorer_stage

    args = argparse.Namespace(out=tmp_path / "nowhere", target=None, drafter=None, quick=False, resume=True,
                              **{f: None for f in scorer_stage.ScorerTrainConfig.__dataclass_fields__})
    setattr(args, option, value)
    with pytest.raises(ValueError, match=message):
        scorer_stage.main(args)
    assert not (tmp_path / "nowhere").exists()


def test_command_line_prints_a_stage_refusal_as_one_line(tmp_path, capsys):
    """A library error (here an option out of range) reaches the command line as `error: <message>`
    on stderr and exit status 2, with no traceback."""
    from taps.train.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["scorer", "--out", str(tmp_path / "nowhere"), "--pool-factor", "0"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: --pool-factor must be at least 1, got 0\n"
    assert not (tmp_path / "nowhere").exists()


def test_checkpointer_guard_locks_and_pauses_on_sigterm(tmp_path, capsys):
    """Inside `guard()` a SIGTERM only asks for a pause; `pause` saves the checkpoint, lets go of
    the lock and the handler, and raises `Paused`. A live other process's lock is refused."""
    import os
    import signal

    from taps.train.common import Checkpointer, Paused

    ckpt = Checkpointer(tmp_path / "ckpt" / "ckpt.pt", every_minutes=60)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Paused, match="SIGTERM: paused at step 3"):
        with ckpt.guard():
            assert ckpt.lock.read_text() == str(os.getpid())
            signal.raise_signal(signal.SIGTERM)
            assert ckpt.stop_requested and not ckpt.maybe_save(lambda: {"step": 0})
            ckpt.pause({"step": 3}, "step 3")
    assert ckpt.load() == {"step": 3} and not ckpt.lock.exists()
    assert signal.getsignal(signal.SIGTERM) is before
    assert "run the same command again to resume" in capsys.readouterr().out
    ckpt.lock.write_text(str(os.getppid()))            # a live process (pytest's parent) trains here
    with pytest.raises(TrainError, match="another run"):
        with ckpt.guard():
            pass
    assert ckpt.lock.read_text() == str(os.getppid())

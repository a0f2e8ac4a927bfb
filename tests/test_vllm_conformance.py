"""Agreement with the field's serving engine (docs/vllm.md), without vLLM installed: the DFlash
context convention both engines now follow, the conformance command's own arithmetic and its
message where vLLM is missing, and the DFlash2 checkpoint layout. (`python -m taps.eval.vllm_check`
itself runs vLLM in its own virtualenv; its figures are in docs/vllm.md.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from taps import DecodeConfig, DecodeSession, load_pair
from taps.dflash2 import DFlash2Drafter, export_dflash2
from taps.eval import vllm_check
from taps.target_cache import make_target_cache
from taps.verify import prefill


def test_the_last_layers_feature_is_its_output_before_the_final_norm(tiny_pair):
    """The DFlash context feature of target layer i is that layer's output (the residual stream), the
    last layer's included: what vLLM and SGLang capture. transformers' `hidden_states[-1]` is the
    final-normed `last_hidden_state` unless the target `reads_layer_outputs` (the loader sets it)."""
    target = tiny_pair.target
    last = target.config.num_hidden_layers - 1
    seen = {}
    hook = target.get_decoder().layers[last].register_forward_hook(
        lambda module, args, out: seen.__setitem__("h", out[0] if isinstance(out, tuple) else out))
    ids = tiny_pair.encode_prompt("def f(x):\n    return x + 1")
    try:
        cache = make_target_cache(target.config, capacity=len(ids) + 4)
        features = prefill(target, cache, ids, [0, last])                       # as a session reads them
    finally:
        hook.remove()
    width = target.config.hidden_size
    layer_out = seen["h"].reshape(-1, width)
    torch.testing.assert_close(features.reshape(-1, 2 * width)[:, width:], layer_out, rtol=0, atol=0)
    normed = target.get_decoder().norm(layer_out)
    assert (normed - layer_out).abs().max() > 1e-3          # the final norm is not in it


def test_the_conformance_command_says_how_to_install_vllm(tmp_path, capsys):
    assert vllm_check.main(["--vllm-python", str(tmp_path / "nope" / "python")]) == 2
    err = capsys.readouterr().err
    assert "vLLM is not installed: no Python at" in err and "requirements-vllm.txt" in err and "docs/vllm.md" in err


def test_the_conformance_command_writes_its_table_into_the_out_folder(tiny_pair_dir, tmp_path, monkeypatch, capsys):
    """`--out DIR`: the printed table, also as DIR/vllm_check.md (vLLM and our runs faked here: the
    figures are not the point); an --out that ends in .md is refused before vLLM is looked for, and
    nothing is written."""
    def result(*_, **__):
        return {"rows": [{"ids": [1, 2, 3], "seconds": 1.0}], "accepted_per_round": [2], "drafts": 1,
                "accepted": 2, "per_position": [1, 1] + [0] * 13}

    monkeypatch.setattr(vllm_check, "check_vllm", lambda python: "0.0-fake")
    monkeypatch.setattr(vllm_check, "run_vllm", result)
    monkeypatch.setattr(vllm_check, "ours", result)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "def f():"}\n')
    out = tmp_path / "check"
    assert vllm_check.main(["--pair", str(tiny_pair_dir), "--prompt-file", str(prompts), "--limit", "1",
                            "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert (out / "vllm_check.md").read_text() == captured.out and "| vLLM | DFlash |" in captured.out
    assert f"wrote the table to {out / 'vllm_check.md'}" in captured.err
    with pytest.raises(SystemExit) as exit:
        vllm_check.main(["--out", str(tmp_path / "table.md")])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--out is a folder: this command writes vllm_check.md (the table, as printed) in it;" in err
    assert not (tmp_path / "table.md").exists()


def test_acceptance_per_position_and_length_from_drafts():
    length, per_position = vllm_check.acceptance([0, 2, 1, 3], 4)
    assert length == 1 + 6 / 4 and per_position == [0.75, 0.5, 0.25, 0.0]
    result = {"drafts": 4, "accepted": 6, "per_position": [3, 2, 1, 0]}
    assert vllm_check.vllm_acceptance(result, 4) == (length, per_position)      # vLLM's counters, same figures
    assert vllm_check.acceptance([], 2) == (0.0, [0.0, 0.0])


def test_the_dflash2_checkpoint_reads_back_to_the_same_decodes(shipped_pair, tmp_path):
    """The shipped drafter and path selector written as one DFlash2DraftModel checkpoint (identity
    convolutions, candidate_selector.* tensors) load through our DFlash2 loader and decode the
    dflash2 policy exactly as the pair does: the same chains, rounds and tokens."""
    export_dflash2(shipped_pair.drafter, shipped_pair.path_selector, tmp_path / "dflash2")
    root = Path(__file__).resolve().parent.parent / "assets" / "models" / "taps-code-10m"
    exported = load_pair(root, drafter=str(tmp_path / "dflash2"), device="cpu")
    assert isinstance(exported.drafter, DFlash2Drafter) and exported.path_selector is not None
    for prompt in ("def fibonacci(n):\n    if n <", "class Point:\n    def __init__(self, x, y):\n"):
        runs = []
        for pair in (shipped_pair, exported):
            session = DecodeSession(pair, prompt, DecodeConfig(max_new_tokens=32).with_run("dflash2", budget=15))
            session.run()
            runs.append((session.generated, [(r.tau, r.verified_nodes) for r in session.rounds]))
        assert runs[0] == runs[1], prompt
    with pytest.raises(ValueError, match="DFlash2 drafter already"):
        export_dflash2(exported.drafter, exported.path_selector, tmp_path / "again")

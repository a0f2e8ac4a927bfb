"""taps.linear: the target's linear layers on oneDNN-packed weights agree with F.linear, keep tied
weights tied, fall back where they must, and are named in the latency profile's key."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from taps import linear, load_pair
from taps.profiles import profile_key

pytestmark = pytest.mark.skipif(not linear.available(), reason="this PyTorch build has no oneDNN linear operators")


@pytest.mark.parametrize("out_features", [64, 768, 4096])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_agrees_with_f_linear(out_features, bias):
    torch.manual_seed(0)
    layer = nn.Linear(256, out_features, bias=bias)
    packed = linear.PackedLinear(layer)
    with torch.inference_mode():
        for shape in [(1, 256), (2, 256), (9, 256), (1, 17, 256), (3, 5, 256), (130, 256)]:
            x = torch.randn(shape)
            want, got = F.linear(x, layer.weight, layer.bias), packed(x)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # a non-contiguous input (a slice of a wider tensor) gives the same product
        wide = torch.randn(9, 512)
        torch.testing.assert_close(packed(wide[:, ::2]), F.linear(wide[:, ::2], layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
        # one row through a narrow matrix is F.linear itself, bit for bit; through a wide one, oneDNN
        x = torch.randn(1, 1, 256)
        if out_features < linear.ONE_ROW_PACKED:
            assert torch.equal(packed(x), F.linear(x, layer.weight, layer.bias))
        else:
            torch.testing.assert_close(packed(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        assert packed(torch.randn(0, 256)).shape == (0, out_features)


def test_packed_linear_falls_back_for_training_and_other_dtypes():
    torch.manual_seed(0)
    layer = nn.Linear(32, 48)
    packed = linear.PackedLinear(layer)
    x = torch.randn(4, 32, requires_grad=True)
    packed(x).sum().backward()                       # the packed operator has no backward: F.linear runs
    assert x.grad is not None and layer.weight.grad is not None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(4, -1))
    with torch.inference_mode():
        half = torch.randn(4, 32, dtype=torch.bfloat16)
        with pytest.raises(RuntimeError):            # as nn.Linear: a bfloat16 input to float32 weights
            packed(half)


def test_a_float32_cpu_target_runs_packed_with_tied_weights_and_the_same_logits(tiny_pair_dir, monkeypatch):
    packed_pair = load_pair(tiny_pair_dir, device="cpu", dtype="float32")
    monkeypatch.setenv("TAPS_TARGET_GEMM", "default")
    plain_pair = load_pair(tiny_pair_dir, device="cpu", dtype="float32")
    packed, plain = packed_pair.target, plain_pair.target
    n_linear = sum(type(m) is nn.Linear for m in plain.modules())
    assert n_linear > 0 and sum(isinstance(m, linear.PackedLinear) for m in packed.modules()) == n_linear
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert packed.get_output_embeddings().weight is packed.get_input_embeddings().weight  # still tied
    assert linear.kernel_name(packed) == "onednn" and linear.kernel_name(plain) == "default"
    assert profile_key(packed_pair)["target_gemm"] == "onednn" and profile_key(plain_pair)["target_gemm"] == "default"
    ids = torch.randint(3, packed.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a, b = packed(input_ids=ids).logits, plain(input_ids=ids).logits
        one_a, one_b = packed(input_ids=ids[:, :1]).logits, plain(input_ids=ids[:, :1]).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(one_a, one_b, rtol=1e-4, atol=1e-4)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_only_float32_cpu_models_are_packed(tiny_pair, monkeypatch):
    assert tiny_pair.dtype == torch.float64
    assert linear.kernel_name(tiny_pair.target) == "default"
    assert linear.pack_linears(nn.Sequential(nn.Linear(4, 4).double())) == 0
    assert linear.pack_linears(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))) == 2
    # a model whose linear weights exceed the limit keeps the default kernels (no doubled memory)
    monkeypatch.setattr(linear, "PACK_LIMIT_BYTES", 4 * 4 * 4)
    big = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    assert linear.pack_linears(big) == 0 and linear.kernel_name(big) == "default"

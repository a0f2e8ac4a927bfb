"""Tiny random-weight pairs built inside the tests (no files from outside, no hub).

The target is a real Qwen3 `transformers` model and the drafter our DFlashDrafter, both with
random weights scaled up so that distributions are peaked (acceptance happens, ties are rare).
Float64 keeps the tree forward and the sequential forward equal far below any argmax gap.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from taps.drafter import DFlashDrafter, drafter_config
from taps.path_selector import PathSelector, PathSelectorConfig

CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<|endoftext|>": 0, "<|mask|>": 1}
    for ch in CHARS:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   mask_token="<|mask|>")


def _scale(module: torch.nn.Module, std: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)


def build_tiny_pair(folder: Path, block_size: int = 8, seed: int = 0, hidden: int = 32,
                    target_layers: int = 4, drafter_layers: int = 2, max_positions: int = 256) -> Path:
    """Write target/ (model + tokenizer), drafter/, selector/ (a random DFlash2 path selector, scaled
    so that its walks leave the drafter's argmax now and then) and pair.json under `folder`; return it."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer) + 4, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=target_layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=hidden // 4, max_position_embeddings=max_positions, tie_word_embeddings=True,
                         eos_token_id=0, pad_token_id=0, bos_token_id=None)
    target = Qwen3ForCausalLM(config)
    _scale(target, 0.3, seed)
    drafter = DFlashDrafter(drafter_config(config, num_layers=drafter_layers, block_size=block_size,
                                           mask_token_id=1))
    _scale(drafter, 0.3, seed + 1)
    folder.mkdir(parents=True, exist_ok=True)
    target.save_pretrained(folder / "target")
    tokenizer.save_pretrained(folder / "target")
    drafter.save_pretrained(folder / "drafter")
    torch.manual_seed(seed + 2)
    PathSelector(PathSelectorConfig(vocab_size=config.vocab_size, hidden_size=hidden, selector_rank=8),
                 init_std=0.5).save_pretrained(folder / "selector")
    (folder / "pair.json").write_text('{"name": "tiny-random", "target": "target", "drafter": "drafter", '
                                      '"selector": "selector"}')
    return folder

"""Stage 1: a byte-level BPE tokenizer trained on the corpus' train split.

Special tokens: ``<|endoftext|>`` (id 0, also used as pad) and ``<|mask|>`` (id 1, for the
diffusion drafter). Byte-level pre-tokenizer and decoder, no prefix space, no normalizer, so any
text round-trips exactly: ``tok.decode(tok.encode(s)) == s``.

Saved as a ``transformers`` fast tokenizer in ``OUT/tokenizer/``, with ``training_info.json``
(compression on the validation split in characters and UTF-8 bytes per token). With
``--stats`` it also tokenizes both splits into ``OUT/data`` (the cache the target stage reads)
and writes ``OUT/tokenizer/corpus_stats.json``: files, characters, bytes and tokens per source,
and the dropped files by source and reason.

    python -m taps.train tokenizer --corpus stdlib --out runs/pair
    python -m taps.train tokenizer --corpus stdlib+libs --out runs/pair2 --stats
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from taps.train import data

SPECIAL_TOKENS = [data.EOT_TOKEN, data.MASK_TOKEN]  # ids 0 and 1


@dataclass
class TokenizerConfig:
    corpus: str = "stdlib"
    vocab_size: int = 4096
    min_frequency: int = 2
    max_files: int | None = None  # train on only the first N train files (quick mode)
    model_max_length: int = 1024


QUICK = dict(vocab_size=512, max_files=40)


def train_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    """Train the raw ``tokenizers.Tokenizer`` (deterministic for a given corpus and config)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = data.read_corpus("train", cfg.corpus, cfg.max_files)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, special in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(special) == i, f"{special} should have id {i}"
    return tok


def wrap(tok: Tokenizer, model_max_length: int = 1024):
    """The ``transformers`` fast tokenizer around a trained ``tokenizers.Tokenizer``."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=data.EOT_TOKEN,
        pad_token=data.EOT_TOKEN,
        mask_token=data.MASK_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def check_round_trip(hf_tok, texts: list[str]) -> None:
    """Raise if encode -> decode changes any of ``texts``."""
    for text in texts:
        ids = hf_tok.encode(text, add_special_tokens=False, verbose=False)
        back = hf_tok.decode(ids, clean_up_tokenization_spaces=False)
        if back != text:
            raise AssertionError(f"tokenizer does not round-trip text starting {text[:60]!r}")


ROUND_TRIP_SAMPLES = [
    "def f(x):\n\treturn x  # tab-indented\n",
    "s = 'naïve café – ünïcödé ✓ 日本語 🐍'\r\n",
    "    \n\n  trailing spaces   \n",
    "",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder; writes OUT/tokenizer/")
    parser.add_argument("--corpus", choices=data.CORPORA, default="stdlib")
    parser.add_argument("--vocab-size", type=int, default=None, help="default 4096 (512 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small vocab on a few files, for tests")
    parser.add_argument("--stats", action="store_true",
                        help="also tokenize both splits into OUT/data and write OUT/tokenizer/corpus_stats.json")


def main(args: argparse.Namespace) -> None:
    cfg = TokenizerConfig(corpus=args.corpus)
    if args.quick:
        cfg = TokenizerConfig(corpus=args.corpus, **QUICK)
    if args.vocab_size is not None:
        cfg.vocab_size = args.vocab_size

    t0 = time.time()
    tok = train_tokenizer(cfg)
    hf_tok = wrap(tok, cfg.model_max_length)
    assert hf_tok.mask_token_id == 1 and hf_tok.eos_token_id == 0 and hf_tok.pad_token_id == 0

    # round trip: a few hand-written strings plus the validation files
    val_texts = data.read_corpus("val", cfg.corpus)
    check_round_trip(hf_tok, ROUND_TRIP_SAMPLES + val_texts)

    # compression on the validation split
    val_chars = sum(len(t) for t in val_texts)
    val_bytes = sum(len(t.encode("utf-8")) for t in val_texts)
    val_tokens = sum(len(e.ids) for e in tok.encode_batch(val_texts, add_special_tokens=False))

    out_dir = Path(args.out) / "tokenizer"
    hf_tok.save_pretrained(out_dir)
    info = {
        "config": asdict(cfg),
        "vocab_size": tok.get_vocab_size(),
        "train_files": len(data.corpus_files("train", cfg.corpus, cfg.max_files)),
        "train_chars": sum(len(t) for t in data.read_corpus("train", cfg.corpus, cfg.max_files)),
        "val_chars_per_token": round(val_chars / max(val_tokens, 1), 3),
        "val_bytes_per_token": round(val_bytes / max(val_tokens, 1), 3),
        "seconds": round(time.time() - t0, 1),
    }
    (out_dir / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"tokenizer: vocab {info['vocab_size']}, {info['train_files']} train files, "
          f"{info['val_chars_per_token']} chars/token ({info['val_bytes_per_token']} bytes/token) on val, "
          f"{info['seconds']}s -> {out_dir}")
    if args.stats:
        write_corpus_stats(Path(args.out), cfg)


def write_corpus_stats(out: Path, cfg: TokenizerConfig) -> dict:
    """Tokenize both splits into OUT/data (reused by the target stage) and write
    OUT/tokenizer/corpus_stats.json from their per-source counts."""
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(out / "tokenizer")
    stats = data.corpus_stats(cfg.corpus)
    for split in data.SPLITS:
        stream = data.token_stream(hf_tok, split, out / "data", cfg.corpus, cfg.max_files)
        meta = json.loads((out / "data" / f"{split}.json").read_text())
        stats[split].update(tokens=int(stream.size), bytes=meta["bytes"], sources=meta["sources"],
                            tokens_note="tokens include one <|endoftext|> per file; per-source tokens do not")
    (out / "tokenizer" / "corpus_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    for split in data.SPLITS:
        print(f"{split}: {stats[split]['files']:,} files, {stats[split]['chars']:,} chars, "
              f"{stats[split]['tokens']:,} tokens")
    print(f"dropped: {stats['dropped']}")
    return stats

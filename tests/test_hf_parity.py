"""Parity with HF tokenizers, which no one here wrote: same merges on a real 1 MB corpus."""

from __future__ import annotations

import json
import warnings

import pytest

import gpubpe
from gpubpe._reference import gpt2_byte_to_unicode
from gpubpe.cli import demo_corpus_path

tokenizers = pytest.importorskip("tokenizers", reason="HF parity needs the 'dev' extra")


def hf_merges(path, vocab_size, special_tokens=(), **options):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size + len(special_tokens),  # HF counts special tokens, we do not
        min_frequency=0,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        **options,
    )
    hf.train([str(path)], trainer)
    merges = json.loads(hf.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def as_hf_strings(merges):
    chars = gpt2_byte_to_unicode()
    return [tuple("".join(chars[b] for b in part) for part in pair) for pair in merges]


def test_demo_corpus_is_over_one_megabyte():
    assert demo_corpus_path().stat().st_size >= 1_000_000


@pytest.mark.parametrize("vocab_size", [1000, 5000])
def test_merges_equal_hf_bpe_trainer(vocab_size):
    path = demo_corpus_path()
    ours = gpubpe.train([path], vocab_size, progress=False)
    theirs = hf_merges(path, vocab_size)
    assert len(theirs) == vocab_size - 256
    assert as_hf_strings(ours.merges) == theirs


@pytest.mark.parametrize("max_token_length", [1, 3, 4, 7])
def test_max_token_length_equals_hf_bpe_trainer(max_token_length):
    """HF's BpeTrainer ``max_token_length``: tokens shorter than it (two bytes always), even
    where that stops training early (3 allows only the pairs of two bytes)."""
    path = demo_corpus_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = gpubpe.train([path], 2000, max_token_length=max_token_length, progress=False)
    stopped_early = [w for w in caught if "shorter than max_token_length" in str(w.message)]
    assert bool(stopped_early) == (max_token_length <= 3)
    theirs = hf_merges(path, 2000, max_token_length=max_token_length)
    assert as_hf_strings(ours.merges) == theirs
    longest = max(len(ours.token_bytes(i)) for i in range(ours.vocab_size))
    assert longest == max(2, max_token_length - 1)
    assert ours.metadata["max_token_length"] == max_token_length

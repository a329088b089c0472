"""Parity with HF tokenizers, which no one here wrote: same merges on a real 1 MB corpus."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

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


@pytest.mark.parametrize("form", ["NFKC", "NFD"])
def test_training_with_a_normalizer_equals_hf(form, tmp_path):
    """HF's recipe of a normalizer, ByteLevel and BpeTrainer: the same merges on text the
    normalizer changes (full-width forms, compatibility characters, accents), the same
    tokens for every document, and the export runs as HF's own trained tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    path = Path(__file__).parent / "data" / "multiscript.txt"
    hf = Tokenizer(models.BPE())
    hf.normalizer = getattr(normalizers, form)()
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.train([str(path)], trainers.BpeTrainer(
        vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    merges = json.loads(hf.to_str())["model"]["merges"]
    tok = gpubpe.train([path], 2000, normalizer=form, progress=False)
    assert as_hf_strings(tok.merges) == [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                         for m in merges]
    docs = path.read_text(encoding="utf-8").splitlines(keepends=True)[:400] + [
        "ＡＢＣ　１２３ ﬁ ｶﾀｶﾅ ①", "e\u0301 Å ẛ̣", ""]
    chars = gpt2_byte_to_unicode()
    ours = [["".join(chars[b] for b in tok.token_bytes(i)) for i in ids]
            for ids in tok.encode_batch(docs)]
    assert ours == [e.tokens for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert tok.vocabulary.layout.normalizer == form and tok.metadata["normalizer"] == form
    exported = Tokenizer.from_str(json.dumps(tok.to_hf_json()))
    assert [e.ids for e in exported.encode_batch(docs)] == tok.encode_batch(docs)
    tok.save(tmp_path / "t.json")
    assert gpubpe.load(tmp_path / "t.json").encode_batch(docs) == tok.encode_batch(docs)
    cut = tok.truncate(1000)
    assert cut.vocabulary.layout.normalizer == form
    assert cut.merges == gpubpe.train([path], 1000, normalizer=form, progress=False).merges
    # documents without a newline (normalized one by one, not a batch of lines at a time)
    texts = [line.rstrip("\n") + " " for line in docs[:300]]
    hf.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    merges = json.loads(hf.to_str())["model"]["merges"]
    assert as_hf_strings(gpubpe.train(texts, 600, normalizer=form, progress=False).merges) == \
        [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]

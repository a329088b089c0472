"""Training: the fast CPU path against the reference oracle and against HF tokenizers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference, pretokenize
from gpubpe.errors import ConfigError, CorpusError
from gpubpe.kernels.merge import merge_batch_cpu
from gpubpe.pretokenize import count_words
from gpubpe.trainer import train_from_counts


def fast_rules(word_counts, vocab_size, min_frequency=0):
    rules = train_from_counts(word_counts, vocab_size, min_frequency=min_frequency, progress=False)
    return [tuple(rule) for rule in rules.tolist()]


# Pieces that make runs of one byte, equal-count ties, invalid UTF-8 and several scripts.
PIECES = ["a", "aa", "aaaa", "b", "ab", " ", "  ", "\n", "é", "中文", "😀", "'s", "1", "!",
          b"\xff", b"\xe4\xb8", b"\x00"]
documents = st.lists(
    st.lists(st.sampled_from(PIECES), max_size=12).map(
        lambda parts: b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)),
    max_size=8,
)


@given(documents, st.integers(256, 330), st.sampled_from([0, 2]))
def test_fast_training_equals_reference(docs, vocab_size, min_frequency):
    word_counts = count_words(docs)
    expected = _reference.train_bpe(word_counts, vocab_size, min_frequency)
    assert fast_rules(word_counts, vocab_size, min_frequency) == expected


@given(st.dictionaries(st.binary(min_size=1, max_size=6), st.integers(1, 5), max_size=12),
       st.integers(256, 300))
def test_fast_training_equals_reference_on_arbitrary_words(word_counts, vocab_size):
    assert fast_rules(word_counts, vocab_size) == _reference.train_bpe(word_counts, vocab_size)


@given(st.dictionaries(st.binary(min_size=1, max_size=12), st.integers(1, 5), max_size=12),
       st.integers(256, 320), st.integers(1, 6))
def test_max_token_length_equals_reference(word_counts, vocab_size, max_token_length):
    rules = train_from_counts(word_counts, vocab_size, max_token_length=max_token_length,
                              progress=False)
    assert [tuple(rule) for rule in rules.tolist()] == _reference.train_bpe(
        word_counts, vocab_size, max_token_length=max_token_length)


def test_golden_run_of_one_byte():
    # "aaaaa" x1: (a,a) occurs 4 times (overlaps count) -> merge to 256 = "aa".
    # Non-overlapping, left to right: aa aa a. Now (aa,aa)=1 and (aa,a)=1: equal counts,
    # HF's tie-break takes the smaller pair in its id space: (256,256) < (256,97)? No:
    # byte 'a' has HF id 64 (its rank among the GPT-2 characters), so (256, 64) < (256, 256)
    # and "aaa" = 257 comes first; then the word is [256, 257] and (256,257) -> "aaaaa".
    rules = fast_rules({b"aaaaa": 1}, 300)
    assert rules == [(97, 97, 256), (256, 97, 257), (256, 257, 258)]
    assert rules == _reference.train_bpe({b"aaaaa": 1}, 300)


def test_golden_equal_count_tie_uses_hf_order():
    # "ab" and "cd" both occur twice: equal counts. HF ranks bytes by their GPT-2 character,
    # which for printable ASCII is the byte order, so (a,b) < (c,d) wins first.
    assert fast_rules({b"cd": 2, b"ab": 2}, 258) == [(97, 98, 256), (99, 100, 257)]
    # Space (0x20) maps to U+0120 in GPT-2's table, after every printable byte, so at
    # equal counts ("zz" vs " z") the pair with the plain letter goes first.
    assert fast_rules({b" z": 3, b"zz": 3}, 257) == [(122, 122, 256)]


def test_counts_above_two_to_the_31_do_not_wrap():
    big = 3 * 2**31 + 7
    counts = {b"ab": big, b"cd": 2**31 - 1, b"cdcd": 1}
    # (a,b) has count 3*2^31+7; an int32 counter would wrap it negative and pick (c,d).
    assert fast_rules(counts, 257) == [(97, 98, 256)]
    assert fast_rules(counts, 260) == _reference.train_bpe(counts, 260)


def test_train_from_documents_matches_reference_and_stops_at_vocab_size():
    docs = ["the cat sat on the mat", "the hat", "that is the thing"] * 3
    tok = gpubpe.train(docs, 270, progress=False)
    expected = _reference.train_bpe(count_words(docs), 270)
    assert [tuple(r) for r in tok.vocabulary.rules.tolist()] == expected
    assert tok.vocab_size == 270


def test_numba_merge_loop_ran():
    gpubpe.train(["abababab cdcd"], 260, progress=False)
    assert merge_batch_cpu.signatures, "the Numba merge loop was never compiled or called"


def test_result_does_not_depend_on_threads(tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"word{i % 997} other{i % 13} thing\n" for i in range(20000)))
    one = gpubpe.train([corpus], 340, progress=False, num_threads=1)
    monkeypatch.setattr(pretokenize, "_BATCH_BYTES", 4096)  # many batches over two threads
    two = gpubpe.train([corpus], 340, progress=False, num_threads=2)
    assert one.merges == two.merges


def test_long_single_word_is_not_quadratic():
    # 10 MB of one byte: every merge halves the run, so training ends after a few dozen
    # merges with the whole word in a handful of tokens.
    with pytest.warns(UserWarning, match="no pair left"):
        tok = gpubpe.train([b"a" * 10_000_000], 400, progress=False)
    merges = tok.merges
    assert merges[0] == (b"a", b"a")
    assert merges[1] == (b"aa", b"aa")
    assert len(merges) < 60  # the pairs run out


def test_min_frequency_stops_training():
    with pytest.warns(UserWarning, match="at min_frequency"):
        tok = gpubpe.train(["ab ab ab cd"], 300, min_frequency=3, progress=False)
    assert tok.merges == [(b"a", b"b")]


@pytest.mark.parametrize("size", [255, 0, -1])
def test_vocab_size_below_256_is_rejected(size):
    with pytest.raises(ConfigError, match="256"):
        gpubpe.train(["abc"], size, progress=False)


def test_bad_corpora_give_clear_errors(tmp_path):
    with pytest.raises(CorpusError, match="no such file"):
        gpubpe.train([tmp_path / "missing.txt"], 300, progress=False)
    with pytest.raises(CorpusError, match="directory"):
        gpubpe.train([tmp_path], 300, progress=False)
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(CorpusError, match="binary"):
        gpubpe.train([binary], 300, progress=False)
    with pytest.raises(CorpusError, match="no text"):
        gpubpe.train([], 300, progress=False)
    with pytest.raises(CorpusError, match="surrogate"):
        gpubpe.train(["ok", "bad \ud800 text"], 300, progress=False)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(CorpusError, match="no text"):
        gpubpe.train([empty], 300, progress=False)


def test_small_corpus_warns_with_the_reached_size():
    with pytest.warns(UserWarning, match="stopped at 258"):
        tok = gpubpe.train(["abc"], 1000, progress=False)
    assert tok.vocab_size == 258


def test_special_tokens_are_never_merged():
    tok = gpubpe.train(["aa<|x|>aa<|x|>aa"], 257, special_tokens=["<|x|>"], progress=False)
    assert all(b"<" not in a + b for a, b in tok.merges)
    assert tok.encode("aa<|x|>", allowed_special={"<|x|>"}) == [256, tok.vocab_size]


def test_jsonl_corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"body": t}) for t in ["low lower", "lowest low"]))
    tok = gpubpe.train([path], 260, text_field="body", progress=False)
    expected = _reference.train_bpe(count_words(["low lower", "lowest low"]), 260)
    assert [tuple(r) for r in tok.vocabulary.rules.tolist()] == expected
    with pytest.raises(CorpusError, match="'text' field"):
        gpubpe.train([path], 260, progress=False)


def test_rules_are_int64():
    assert train_from_counts({b"ab": 1}, 257, progress=False).dtype == np.int64


def cli_trained(tmp_path, text: str, *options: str):
    """(a corpus file of ``text``, the tokenizer ``gpubpe train`` makes of it with ``options``)."""
    from gpubpe.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text(text, encoding="utf-8")
    assert main(["train", str(corpus), *options, "-o", str(tmp_path / "t.json"),
                 "--no-progress"]) == 0
    return corpus, gpubpe.load(tmp_path / "t.json")


def test_max_token_length_from_the_cli_scaffold_and_device(tmp_path):
    corpus, tok = cli_trained(tmp_path, "the theory of the thermal theatre\n" * 30,
                              "--vocab-size", "262", "--max-token-length", "4")
    assert max(len(tok.token_bytes(i)) for i in range(tok.vocab_size)) == 3
    assert tok.merges == gpubpe.train([corpus], 262, max_token_length=4, progress=False).merges
    scaffold = gpubpe.train([corpus], 262, max_token_length=5, scaffold=True, progress=False)
    assert max(len(t) for t in scaffold.vocabulary.token_bytes) == 4
    on_device = gpubpe.train([corpus], 262, max_token_length=4, backend="cuda", progress=False)
    assert on_device.merges == tok.merges  # the CUDA simulator: the device's loop, its limit
    with pytest.raises(ConfigError, match="max_token_length=0"):
        gpubpe.train([corpus], 300, max_token_length=0, progress=False)
    with pytest.raises(ConfigError, match="extend does not take it"):
        gpubpe.train([corpus], extend=tok, add=5, max_token_length=4, progress=False)


def test_a_normalizer_from_the_cli_and_where_it_is_refused(tmp_path):
    corpus, tok = cli_trained(tmp_path, "ＡＢＣ abc ﬁnal final ①\n" * 40,
                              "--vocab-size", "264", "--normalizer", "NFKC")
    assert tok.encode("ＡＢＣ ﬁnal") == tok.encode("ABC final")
    assert tok.merges == gpubpe.train([corpus.read_text(encoding="utf-8")], 264,
                                      normalizer="NFKC", progress=False).merges
    # extending it from a corpus normalizes that corpus as the base does
    grown = gpubpe.train([corpus], extend=tok, add=2, progress=False)
    assert grown.vocabulary.layout.normalizer == "NFKC"
    assert grown.merges == gpubpe.train([corpus], 266, normalizer="NFKC", progress=False).merges
    assert grown.encode("ＡＢＣ ﬁnal") == grown.encode("ABC final")
    for kwargs, message in (
            (dict(normalizer="NFKX"), "normalizer='NFKX': expected None or one of"),
            (dict(normalizer="NFC", scaffold=True), "with scaffold=True"),
            (dict(normalizer="NFC", extend=tok, add=2), "applies to training from a corpus")):
        with pytest.raises(ConfigError, match=message):
            gpubpe.train([corpus], None if "extend" in kwargs else 264, progress=False, **kwargs)
    counts = gpubpe.count_words([corpus], progress=False)
    with pytest.raises(ConfigError, match="the base normalizes its text \\(NFKC\\)"):
        gpubpe.train(counts=counts, extend=tok, add=2, progress=False)

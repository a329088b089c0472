"""The CPU's BPE of one word (``bpe_scan_word`` up to 255 bytes, the heap above) and its
pair lookup, against tiktoken on the real cl100k ranks (issue 14: long CJK words).

- every rule of the table is found through the pair signatures and cells, with its
  rank and result (a signature that dropped a rule would change ids silently);
- words of CJK text, kana, random bytes, letters and runs of one byte, at the lengths
  where the scan ends and the heap starts and up to 70,000 bytes (positions past 2**16
  in the heap's keys), equal tiktoken's ``encode_single_piece``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubpe.kernels.encode.bpe import SCAN_WORD
from gpubpe.kernels.encode.rules import NO_PAIR_VALUE, pair_value

tiktoken = pytest.importorskip("tiktoken", reason="real-vocabulary tests need the 'dev' extra")

KANA_AND_HAN = "あいうえおかきくけこさしすせそアイウエオカキクケコーー漢字日本語中文東京大学"
ENGLISH_LETTERS = "eeeeettttaaaoooiiinnnsssrrhhdlucmfwypvbgkjqxz"  # about as often as in English


def test_every_rule_passes_the_signatures_with_its_rank_and_result(cl100k_tok):
    rules = cl100k_tok._rules
    stored = rules.keys != np.uint64(0xFFFFFFFFFFFFFFFF)
    keys, ranks = rules.keys[stored], rules.ranks[stored]
    assert keys.size > 200_000  # every split of every cl100k token
    for key, rank in zip(keys.tolist(), ranks.tolist()):
        found = pair_value(rules.pair_cells, rules.pair_signatures, key >> 32, key & 0xFFFFFFFF)
        assert found == (rank << 32) | int(rules.result[rank]), (key >> 32, key & 0xFFFFFFFF)


def test_pairs_without_a_rule_answer_none(cl100k_tok):
    rules = cl100k_tok._rules
    have = set(rules.keys.tolist())
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 100_256, size=(20_000, 2)).tolist()
    absent = [(a, b) for a, b in pairs if (a << 32) | b not in have]
    assert len(absent) > 19_000
    for a, b in absent:
        assert pair_value(rules.pair_cells, rules.pair_signatures, a, b) == NO_PAIR_VALUE


@pytest.mark.parametrize("length", [2, 3, 31, 32, 33, 64, SCAN_WORD - 1, SCAN_WORD,
                                    SCAN_WORD + 1, SCAN_WORD + 2, 600, 4096, 70_000])
def test_words_at_the_scan_and_heap_lengths_equal_tiktoken(cl100k_tok, cl100k, length):
    rng = np.random.default_rng(length)
    kana = "".join(rng.choice(list(KANA_AND_HAN), size=length)).encode()[:length]
    letters = "".join(rng.choice(list(ENGLISH_LETTERS), size=length)).encode()
    words = [kana, rng.integers(0, 256, size=length, dtype=np.uint8).tobytes(),
             b"a" * length, b" " * length, "\u3042".encode() * (length // 3 + 1), letters,
             (b"thequickbrownfox" * (length // 16 + 1))]
    words = [word[:length] for word in words]
    assert cl100k_tok.encode_words(words) == [cl100k._core_bpe.encode_single_piece(word)
                                              for word in words]


@given(st.lists(st.one_of(st.binary(min_size=1, max_size=300),
                          st.text(KANA_AND_HAN, min_size=1, max_size=100).map(str.encode)),
                min_size=1, max_size=8))
def test_random_words_equal_tiktoken(cl100k_tok, cl100k, words):
    assert cl100k_tok.encode_words(words) == [cl100k._core_bpe.encode_single_piece(word)
                                              for word in words]

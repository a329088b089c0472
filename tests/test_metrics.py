"""Metrics: entropy, redundancy, Rényi efficiency, frequencies, and the bit-level report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubpe.bitlevel import PAPER_LEAD_BYTES, BitLevelCodec
from gpubpe.errors import ConfigError
from gpubpe.metrics import (
    bitlevel_report,
    bytes_per_token,
    redundancy,
    renyi_efficiency,
    renyi_entropy,
    shannon_entropy,
    token_frequencies,
)

histograms = st.lists(st.integers(0, 1000), min_size=2, max_size=20).filter(lambda c: sum(c) > 0)


def test_token_frequencies_is_an_int64_bincount():
    counts = token_frequencies(np.array([3, 1, 3, 3], dtype=np.uint32), vocab_size=5)
    assert counts.dtype == np.int64 and counts.tolist() == [0, 1, 0, 3, 0]
    assert token_frequencies([], vocab_size=3).tolist() == [0, 0, 0]
    with pytest.raises(ConfigError, match="id 5"):
        token_frequencies([1, 5], vocab_size=5)


def test_shannon_entropy_worked_examples():
    assert shannon_entropy([1, 1, 1, 1]) == 2.0  # uniform over 4: log2 4
    assert shannon_entropy([7, 0, 0]) == 0.0  # one token: no information
    # p = (1/2, 1/4, 1/4): 1/2 * 1 + 2 * 1/4 * 2 = 1.5 bits
    assert shannon_entropy([2, 1, 1]) == 1.5
    assert shannon_entropy([2**40, 2**40]) == 1.0  # counts far above 2**31 stay exact


def test_redundancy_is_one_minus_entropy_over_log_vocab():
    # Scaffold-BPE eq. 5: R = 1 - H / log2 |V|; H = 1.5 bits, |V| = 8: R = 1 - 1.5 / 3 = 0.5
    assert redundancy([2, 1, 1], vocab_size=8) == 0.5
    assert redundancy([3, 3, 3, 3]) == 0.0  # the whole vocabulary used uniformly


def test_renyi_efficiency_worked_examples():
    # p = (1/2, 1/2), alpha = 2: H_2 = -log2(1/4 + 1/4) = 1 bit; |V| = 4: E = 1 / 2
    assert renyi_efficiency([1, 1, 0, 0], alpha=2) == 0.5
    assert renyi_efficiency([5, 5, 5, 5]) == 1.0
    assert renyi_entropy([1, 3], alpha=0) == 1.0  # Hartley: log2 of the support size
    assert renyi_entropy([1, 3], alpha=math.inf) == pytest.approx(-math.log2(0.75))
    assert renyi_entropy([1, 3], alpha=1) == shannon_entropy([1, 3])


@given(histograms)
def test_renyi_entropy_falls_with_alpha_and_meets_shannon_at_one(counts):
    values = [renyi_entropy(counts, a) for a in (0, 0.5, 0.999999, 1, 2, 2.5, 10, math.inf)]
    assert all(a >= b - 1e-9 for a, b in zip(values, values[1:], strict=False))
    assert values[2] == pytest.approx(shannon_entropy(counts), abs=1e-4)
    assert 0.0 <= renyi_efficiency(counts) <= 1.0 + 1e-12
    assert 0.0 <= redundancy(counts) <= 1.0


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: shannon_entropy([0, 0]), "sum to 0"),
        (lambda: shannon_entropy([1, -1]), "negative"),
        (lambda: renyi_entropy([1, 1], alpha=-1), "alpha=-1"),
        (lambda: renyi_efficiency([4]), "vocab_size=1"),
        (lambda: bytes_per_token(10, 0), "n_tokens=0"),
    ],
)
def test_undefined_measures_raise(call, named):
    with pytest.raises(ConfigError, match=named):
        call()


def test_bytes_per_token():
    assert bytes_per_token(10, 4) == 2.5


# --- bit-level report ---------------------------------------------------------------------

CODEC = BitLevelCodec(base_vocab_size=32000, lead_bytes=PAPER_LEAD_BYTES)
PAPER_BYTES = [0xE4, 0xBC, 0x97, 0xE5, 0x94, 0xA4, 0xE4, 0xBC, 0x97]
REN_BYTES = [0xE8, 0xAA, 0x8D]


def test_report_reproduces_the_papers_reductions():
    # The paper's reductions are of the sequence length in tokens: 9 byte tokens -> 7
    # (p1 5E 97 CA A4 5E 97), 22.22%; with 認 appended 12 -> 10 (one more prefix), 16.67%.
    report = bitlevel_report(PAPER_BYTES, CODEC)
    assert (report.tokens_before, report.tokens_after) == (9, 7)
    assert round(report.token_reduction_pct, 2) == 22.22
    assert (report.byte_tokens_before, report.byte_tokens_after) == (9, 7)
    assert report.relative_gain == 9 / 7
    with_ren = bitlevel_report(PAPER_BYTES + REN_BYTES, CODEC)
    assert (with_ren.tokens_before, with_ren.tokens_after) == (12, 10)
    assert math.floor(with_ren.token_reduction_pct * 100) / 100 == 16.66


def test_report_on_a_mixed_batch():
    # sequence 0: a merged token, 众, a merged token; sequence 1: "a", 众 众
    batch = [[300, *PAPER_BYTES[:3], 301], [97, *PAPER_BYTES[:3], *PAPER_BYTES[:3]]]
    report = bitlevel_report(batch, CODEC)
    # before: 5 + 7 = 12 tokens, 3 + 7 = 10 of them bytes ("a" is a byte token too)
    # after: 300 p1 hi lo 301 | 97 p1 hi lo hi lo: 11 tokens, 3 + 6 byte-level
    assert (report.tokens_before, report.tokens_after) == (12, 11)
    assert (report.byte_tokens_before, report.byte_tokens_after) == (10, 9)
    assert report.byte_token_reduction_pct == pytest.approx(10.0)
    flat = np.concatenate([np.array(s, dtype=np.uint32) for s in batch])
    assert bitlevel_report(flat, CODEC, offsets=[0, 5, 12]) == report
    before = token_frequencies(flat, 32000)
    assert report.efficiency_before == renyi_efficiency(before, 2.5, 32000)
    assert report.byte_efficiency_before == renyi_efficiency(before[:256], 2.5, 256)
    coded, _ = CODEC.encode_batch(flat, np.array([0, 5, 12]))
    after = token_frequencies(coded, CODEC.vocab_size)
    byte_level = np.r_[after[:256], after[32000:]]
    assert report.byte_efficiency_after == renyi_efficiency(byte_level, 2.5, 256 + 256 + 3)
    assert report.as_dict()["relative_gain"] == 12 / 11


def test_report_accepts_a_per_id_byte_predicate():
    def is_byte_or_300(token_id):  # written for one int at a time
        if not isinstance(token_id, int):
            raise TypeError("one id at a time")
        return token_id < 256 or token_id == 300

    report = bitlevel_report([300, *PAPER_BYTES, 301], CODEC, base_is_byte=is_byte_or_300)
    assert (report.byte_tokens_before, report.byte_tokens_after) == (10, 8)


def test_report_with_no_byte_tokens_gives_nan_efficiency():
    report = bitlevel_report([300, 301], CODEC)
    assert report.token_reduction_pct == 0.0 and report.relative_gain == 1.0
    assert math.isnan(report.byte_efficiency_before) and math.isnan(report.byte_token_reduction_pct)

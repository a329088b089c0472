"""The device pre-tokenizer (``kernels/encode/pretok_cuda.py``) in the CUDA simulator.

Piece starts equal the CPU scanner's (``pretok.split_ends``, itself tested
equal to ``regex`` in ``test_scanners.py``) for GPT-2, cl100k and o200k;
word counts equal ``pretok.count_scanned_words`` and ``gpubpe.count_words``
on the CPU; syncs per call do not grow with the data.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import gpubpe
from gpubpe import pretokenize
from gpubpe.kernels._cuda import device_stats, launch, to_device, to_host
from gpubpe.kernels.encode import pretok_cuda
from gpubpe.kernels.encode.pretok_cuda import count_words_cuda, word_start_flags_cuda
from gpubpe.kernels.pretok import CL100K, GPT2, O200K, count_scanned_words, split_ends

SCANNERS = {"gpt2": GPT2, "cl100k": CL100K, "o200k": O200K}
CATEGORIES = ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So "
              "Zs Zl Zp Cc Cf Co Cn").split()
INVALID = [b"\xff", b"\x80", b"\xe4\xb8", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80",
           b"\xf0\x9f\x98"]


@lru_cache(maxsize=1)
def category_text() -> bytes:
    """Three code points of every general category (first, middle, last), each in a few
    contexts (after a letter, a space, a digit, an apostrophe; doubled)."""
    code_points = np.arange(0x110000)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    parts = []
    for category in CATEGORIES:
        members = [m.start() for m in regex.finditer(r"\p{gc=" + category + "}", text)]
        for k in sorted({0, len(members) // 2, len(members) - 1}):
            char = text[members[k]]
            parts += [f"a{char}", f" {char}{char}", f"1{char}", f"'{char}'S", f"A{char}b\n"]
    return "".join(parts).encode("utf-8")


def tricky_text() -> bytes:
    """Invalid UTF-8, contractions, long whitespace runs, digit runs, punctuation + CR/LF."""
    parts = [b"a" + bad + b"b " + bad + "\u4e2d".encode() + bad + b"\n/x" for bad in INVALID]
    parts += [f"{b}'{s} ".encode() for b, s in itertools.product(
        ["", "x", "AB", "\u4e2d"], ["s", "T", "re", "VE", "ll", "\u017f", "d", "m", "x"])]
    parts += [b"x" + b" " * 40 + "y\t\t\t \n\n \r\n   \u3000 ".encode()]
    parts += [b"1234567 12 \xd9\xa3\xd9\xa3\xd9\xa3\xd9\xa3 ..a x.a ABCdef's .\n/ end  \n  "]
    return b"".join(parts)


def device_args(document: bytes, starts, ends, scanner):
    data = np.frombuffer(document, dtype=np.uint8)
    return (to_device(np, data), to_device(np, np.asarray(starts, np.int64)),
            to_device(np, np.asarray(ends, np.int64)), scanner,
            to_device(np, pretokenize.scanner_table(scanner)), np)


def cpu_flags(document: bytes, starts, ends, scanner) -> np.ndarray:
    """1 at every piece start of ``split_ends``, segment by segment."""
    data = np.frombuffer(document, dtype=np.uint8)
    table = pretokenize.scanner_table(scanner)
    flags = np.zeros(len(document), np.uint8)
    for start, end in zip(starts, ends):
        if start < end:
            piece_ends = split_ends(data, np.array([start]), np.array([end]), scanner, table)
            flags[[start, *piece_ends[:-1].tolist()]] = 1
    return flags


def device_flags(document: bytes, starts, ends, scanner) -> np.ndarray:
    flags = word_start_flags_cuda(*device_args(document, starts, ends, scanner))
    assert flags.dtype == np.uint8 and flags.shape == (len(document),)
    return to_host(flags)


def check_flags(document: bytes, starts, ends) -> None:
    for name, scanner in SCANNERS.items():
        got = device_flags(document, starts, ends, scanner)
        expected = cpu_flags(document, starts, ends, scanner)
        bad = np.flatnonzero(got != expected)
        assert bad.size == 0, (name, bad[:5], document[max(0, bad[0] - 8):bad[0] + 8])


def test_hand_worked_piece_starts():
    document = b"..a x.a 1234567 \n  "  # cl100k: .. a| x|.a| |123|456|7| \n  (test_scanners)
    got = device_flags(document, [0], [len(document)], CL100K)
    assert np.flatnonzero(got).tolist() == [0, 2, 3, 5, 7, 8, 11, 14, 15]


@pytest.mark.parametrize("which", ["categories", "tricky"])
def test_flags_equal_cpu_scanner_on_one_segment(which):
    document = category_text() if which == "categories" else tricky_text()
    check_flags(document, [0], [len(document)])


def test_flags_equal_cpu_scanner_on_segments_cut_mid_text():
    document = tricky_text()[:600]
    n = len(document)
    # Adjacent segments, an empty one, gaps (special-token text), cuts inside a
    # multi-byte char and inside whitespace runs, a segment reaching the end.
    bounds = [(0, 7), (7, 7), (7, 40), (45, 46), (46, 200), (203, 333), (333, 334),
              (340, n)]
    starts, ends = zip(*bounds)
    check_flags(document, starts, ends)
    got = device_flags(document, starts, ends, GPT2)
    assert got[40:45].sum() == 0 and got[200:203].sum() == 0  # outside every segment


def test_flags_of_empty_input_and_no_segments():
    assert device_flags(b"", [], [], GPT2).size == 0
    assert device_flags(b"abc def", [], [], O200K).tolist() == [0] * 7


alphabet = st.sampled_from(list("aZ1 '\t\n\r/.\u3000\u0301\u4e2d\u0663sStT"))
random_bytes = st.one_of(st.text(alphabet, max_size=120).map(str.encode),
                         st.binary(max_size=80))


@settings(max_examples=8)
@given(random_bytes, st.lists(st.integers(0, 200), max_size=6))
def test_flags_equal_cpu_scanner_on_random_text(document, cut_points):
    cuts = sorted({0, len(document), *[c for c in cut_points if c < len(document)]})
    # Every other gap between cuts is a segment: some adjacent, some with gaps between.
    bounds = [(a, b) for k, (a, b) in enumerate(zip(cuts, cuts[1:])) if k % 3 != 1]
    starts, ends = zip(*bounds) if bounds else ((), ())
    check_flags(document, starts, ends)


def test_syncs_and_launches_per_call_do_not_grow_with_the_data():
    costs = []
    for document in (tricky_text()[:100], category_text()[:2000]):
        with device_stats() as flags_stats:
            word_start_flags_cuda(*device_args(document, [0], [len(document)], O200K))
        with device_stats() as count_stats:
            count_words_cuda(*device_args(document, [0], [len(document)], O200K))
        costs.append((flags_stats.syncs, dict(flags_stats.launches), count_stats.syncs,
                      dict(count_stats.launches)))
    assert costs[0] == costs[1]
    assert costs[0][0] == 0 and costs[0][2] == 3


def cpu_counts(document: bytes, starts, ends, scanner):
    data = np.frombuffer(document, dtype=np.uint8)
    return count_scanned_words(data, np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                               scanner, pretokenize.scanner_table(scanner))


@pytest.mark.parametrize("name", list(SCANNERS))
def test_counts_equal_cpu_counts(name):
    # Repeated words (short and long, the long ones past the 7-byte key), across segments.
    document = (tricky_text()[:300] + b" internationalization internationalization words"
                b" words 12345678 \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6") * 3
    bounds = [(0, 120), (120, 121), (130, 500), (500, len(document))]
    starts, ends = zip(*bounds)
    got = count_words_cuda(*device_args(document, starts, ends, SCANNERS[name]))
    expected = cpu_counts(document, starts, ends, SCANNERS[name])
    assert got[3] is False and expected[3] is False
    for got_column, expected_column in zip(got[:3], expected[:3]):
        assert got_column.dtype == np.int64
        assert got_column.tolist() == expected_column.tolist()


def test_a_long_word_unlike_the_first_of_its_cell_is_reported():
    # Two different 9-byte words in two segments; then the cell of the second is
    # pointed at the first, as a 56-bit key collision would leave it.
    document = b"abcdefghi abcdefghj"
    args = device_args(document, [0, 10], [9, 19], GPT2)
    marks = pretok_cuda.piece_marks_cuda(*args)
    scan, positions = pretok_cuda._positions_of_marks(marks, np)
    n_cells = pretok_cuda.table_cells_for(3)
    keys = np.full(n_cells, pretok_cuda.EMPTY_KEY, np.uint64)
    counts, lengths = np.zeros(n_cells, np.int64), np.zeros(n_cells, np.int64)
    first = np.full(n_cells, pretok_cuda.NO_POSITION, np.int64)
    control = np.zeros(2, np.int64)
    launch(pretok_cuda.count_insert_kernel, 3, args[0], positions, scan, marks, keys, counts,
           first, lengths)
    assert sorted(first[keys != pretok_cuda.EMPTY_KEY].tolist()) == [0, 10]
    check = (pretok_cuda.long_word_check_kernel, 3, args[0], positions, scan, marks, keys,
             first, control)
    launch(*check)
    assert control[pretok_cuda.COLLIDED] == 0
    first[first == 10] = 0
    launch(*check)
    assert control[pretok_cuda.COLLIDED] == 1


def test_count_words_with_backend_cuda_equals_the_cpu(tmp_path):
    path = tmp_path / "corpus.txt"
    lines = [tricky_text()[:200], b"Hello world<|endoftext|>hello World 2024", b"",
             b"internationalization " * 3, category_text()[:300]]
    path.write_bytes(b"\n".join(lines) + b"\n")
    for pattern in ("gpt2", "o200k"):
        on_cpu = gpubpe.count_words([path], pattern=pattern, special_tokens=["<|endoftext|>"],
                                    progress=False)
        with device_stats() as stats:
            on_device = gpubpe.count_words([path], pattern=pattern,
                                           special_tokens=["<|endoftext|>"], progress=False,
                                           backend="cuda")
        assert on_device.as_dict() == on_cpu.as_dict()
        assert stats.launches["count_insert_kernel"] == 1  # the device counted
    on_device = pretokenize.count_words(lines, "cl100k", backend="cuda")
    assert list(on_device.items()) == list(pretokenize.count_words(lines, "cl100k").items())

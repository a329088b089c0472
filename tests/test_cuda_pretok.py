"""The device pre-tokenizer (``kernels/encode/pretok_cuda.py``) in the CUDA simulator.

Piece starts equal the CPU scanner's (``pretok.split_ends``, itself tested
equal to ``regex`` in ``test_scanners.py``) for GPT-2, cl100k and o200k;
word counts equal ``pretok.count_scanned_words`` and ``gpubpe.count_words``
on the CPU; syncs per call do not grow with the data.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import gpubpe
from gpubpe import pretokenize
from gpubpe.backend import resolve_backend
from gpubpe.cli import main
from gpubpe.kernels._cuda import device_stats, device_zeros, launch, to_device, to_host
from gpubpe.kernels.encode import pretok_cuda
from gpubpe.kernels.encode.pretok_cuda import count_words_cuda, word_start_flags_cuda
from gpubpe.kernels.pretok import (
    CL100K,
    GPT2,
    O200K,
    count_scanned_words,
    is_safe_cut,
    split_ends,
)

ROOT = Path(__file__).resolve().parent.parent
SCANNERS = {name: pretokenize.scanner_for(regex) for name, regex in pretokenize.NAMED_PATTERNS.items()}
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


def device_xp():
    """NumPy under the simulator, CuPy on a GPU (``NUMBA_ENABLE_CUDASIM=0``)."""
    return resolve_backend("cuda").xp


def device_args(document: bytes, starts, ends, scanner):
    xp = device_xp()
    data = np.frombuffer(document, dtype=np.uint8)
    return (to_device(xp, data), to_device(xp, np.asarray(starts, np.int64)),
            to_device(xp, np.asarray(ends, np.int64)), scanner,
            to_device(xp, pretokenize.scanner_table(scanner)), xp)


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


def test_flags_equal_cpu_scanner_on_real_multilingual_text():
    # 1.5 KB from each eighth of the file (its scripts follow one another); the
    # slices start and end anywhere, mid-character included.
    text = (ROOT / "tests" / "data" / "multiscript.txt").read_bytes()
    document = b"".join(text[k * len(text) // 8:][:1500] for k in range(8))
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
    assert costs[0][0] == 0 and costs[0][2] == 4


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
    assert got[3] is False and expected[-1] is False
    for got_column, expected_column in zip(got[:3], expected[:3]):
        assert got_column.dtype == np.int64
        assert got_column.tolist() == expected_column.tolist()


def test_counts_over_batches_equal_cpu_counts_of_the_whole(name="o200k"):
    # Starting from room for 4 words and 8 bytes, the table is rehashed and the
    # pool grown on the device while words already counted are kept.
    scanner = SCANNERS[name]
    batches = [b" ".join(b"w%d internationalization" % i for i in range(k, k + 40))
               + tricky_text()[k:k + 150] for k in (0, 30, 100)]
    counter = pretok_cuda.DeviceWordCounter(
        scanner, to_device(device_xp(), pretokenize.scanner_table(scanner)), device_xp(),
        words=4, pool_bytes=8)
    with device_stats() as stats:
        for batch in batches:
            counter.add(*device_args(batch, [0], [len(batch)], scanner)[:3])
        got = counter.result()
    assert stats.launches["rehash_kernel"] >= 2
    assert stats.syncs == 2 * len(batches) + 2
    whole = b"".join(batches)
    expected = cpu_counts(whole, np.cumsum([0] + [len(b) for b in batches[:-1]]),
                          np.cumsum([len(b) for b in batches]), scanner)
    pool = got.pool.tobytes()
    got_words = [pool[a:a + n] for a, n in zip(got.pool_start.tolist(), got.length.tolist())]
    expected_words = [whole[a:a + n] for a, n in zip(expected[0].tolist(), expected[1].tolist())]
    assert got_words == expected_words
    assert got.count.tolist() == expected[2].tolist()
    assert got.first.tolist() == expected[0].tolist()


def collision_setup(document, starts, ends):
    """A counter and the arguments of its kernels for one batch, marks and positions made."""
    args = device_args(document, starts, ends, GPT2)
    counter = pretok_cuda.DeviceWordCounter(GPT2, args[4], args[5], words=8)
    marks = pretok_cuda.piece_marks_cuda(*args)
    scan, positions = pretok_cuda._positions_of_marks(marks, args[5])
    return counter, (args[0], positions, scan, marks, 0)


def test_a_long_word_unlike_the_first_of_its_new_cell_is_reported():
    # Two different 9-byte words in two segments; then the cell of the second is
    # pointed at the first, as a 56-bit key collision would leave it.
    counter, words = collision_setup(b"abcdefghi abcdefghj", [0, 10], [9, 19])
    xp = device_xp()
    new_cells, control = device_zeros(xp, 4, xp.int64), device_zeros(xp, 3, xp.int64)
    tables = (counter.keys, counter.first, counter.lengths, counter.slot, counter.word_start,
              counter.pool, control)
    launch(pretok_cuda.count_insert_kernel, 3, *words, counter.keys, counter.counts,
           counter.first, counter.lengths, new_cells, control)
    assert to_host(control).tolist() == [2, 18, 0]  # new words, their bytes, not collided
    launch(pretok_cuda.long_word_check_kernel, 3, *words, *tables)
    assert to_host(control)[pretok_cuda.COLLIDED] == 0
    counter.first[counter.first == 10] = 0
    launch(pretok_cuda.long_word_check_kernel, 3, *words, *tables)
    assert to_host(control)[pretok_cuda.COLLIDED] == 1


def test_a_long_word_unlike_its_pooled_word_raises_and_counting_falls_back(monkeypatch):
    document = b"abcdefghi abcdefghi"
    counter, _ = collision_setup(document, [0], [9])
    counter.add(*device_args(document, [0], [9], GPT2)[:3])
    counter.pool[8] = ord("X")  # the pooled word is now "abcdefghX", as if another word's
    with pytest.raises(pretok_cuda.WordCollision):
        counter.add(*device_args(document, [10], [19], GPT2)[:3])
    # count_words then counts on the CPU: the same counts.
    monkeypatch.setattr(pretok_cuda.DeviceWordCounter, "add", lambda *args: (_ for _ in ()).throw(
        pretok_cuda.WordCollision("forced")))
    docs = [b"abcdefghi abcdefghi", b"x y"]
    assert (pretokenize.count_words(docs, "gpt2", backend="cuda")
            == pretokenize.count_words(docs, "gpt2"))


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
    counts_file = tmp_path / "corpus.counts"
    assert main(["count", str(path), "-o", str(counts_file), "--backend", "cuda",
                 "--no-progress"]) == 0
    assert gpubpe.WordCounts.load(counts_file).as_dict() == gpubpe.count_words(
        [path], progress=False).as_dict()


def cjk_lines(limit: int) -> bytes:
    """Chinese and Japanese lines of tests/data/multiscript.txt, about ``limit`` bytes."""
    lines = (ROOT / "tests" / "data" / "multiscript.txt").read_text("utf-8").splitlines(True)
    kana_or_han = regex.compile("[\u3040-\u30ff\u4e00-\u9fff]")
    text = "".join(line for line in lines if kana_or_han.search(line)).encode()
    return text[len(text) // 3:][:limit]


def test_cuts_and_flags_on_chinese_and_japanese_text():
    # The device cuts CJK text where the CPU's is_safe_cut does (a letter before
    # punctuation, a newline before text), segments starting and ending mid-character
    # included; then the chunks' piece starts equal the CPU's.
    document = cjk_lines(1200)
    n = len(document)
    bounds = [(0, 301), (301, 302), (302, 640), (641, 641), (643, 900), (900, n)]
    starts, ends = zip(*bounds)
    for name, scanner in SCANNERS.items():
        marks = to_host(pretok_cuda.cut_marks_cuda(*device_args(document, starts, ends, scanner)))
        data = np.frombuffer(document, np.uint8)
        table = pretokenize.scanner_table(scanner)
        expected = [p for start, end in bounds for p in range(start + 1, end)
                    if is_safe_cut(data, p, start, end, scanner, table)]
        got = np.flatnonzero(marks == pretok_cuda.PIECE_START).tolist()
        assert got == expected, name
        assert len(got) > n // 60  # clauses, not documents
    check_flags(document, starts, ends)

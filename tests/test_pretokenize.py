"""Pre-tokenization: the Numba GPT-2 scanner equals `regex`, readers and segments."""

from __future__ import annotations

from collections import Counter

import numpy as np
import regex
from hypothesis import given
from hypothesis import strategies as st

from gpubpe import pretokenize
from gpubpe.kernels.pretok import GPT2, count_scanned_words, split_ends
from gpubpe.pretokenize import GPT2_PATTERN, count_words, word_bytes

# Characters that exercise every branch: contractions, the optional space, letters,
# numbers, other, Unicode whitespace (NBSP, U+3000, NEL, U+2028), emoji, CJK, marks.
TRICKY = list("aZé 'stmdlrev1٣!./-_\t\n\r\x0b\x0c\x85\xa0\u3000\u2028中😀\u0301") + [
    "'s", "'ll", "'re", "'ve", "  ", "\n\n", " \n"]
text_pieces = st.lists(st.one_of(st.sampled_from(TRICKY), st.characters(exclude_categories=["Cs"])),
                       max_size=40).map("".join)
invalid_bytes = st.sampled_from([b"\xff", b"\xe4\xb8", b"\xed\xa0\x80", b"\xc0\x80",
                                 b"\xf4\x90\x80\x80", b"\x80", b"\xf0\x9f\x98"])
byte_docs = st.lists(st.one_of(text_pieces.map(str.encode), invalid_bytes), max_size=6).map(b"".join)


def regex_words(document: bytes) -> list[bytes]:
    text = document.decode("utf-8", "surrogateescape")
    return [word_bytes(w) for w in regex.findall(GPT2_PATTERN, text)]


def scanner_words(document: bytes) -> list[bytes]:
    data = np.frombuffer(document, dtype=np.uint8)
    ends = split_ends(data, np.array([0], np.int64), np.array([len(document)], np.int64), GPT2,
                      pretokenize.code_point_classes())
    starts = [0, *ends.tolist()[:-1]]
    return [document[a:b] for a, b in zip(starts, ends.tolist())]


@given(byte_docs)
def test_numba_gpt2_scanner_equals_regex(document):
    assert scanner_words(document) == regex_words(document)


@given(st.lists(byte_docs, max_size=5))
def test_word_counts_equal_regex_per_document(docs):
    expected = Counter()
    for doc in docs:
        expected.update(regex_words(doc))
    assert count_words(docs) == dict(expected)


def test_gpt2_counting_runs_the_numba_kernel():
    assert count_words(["hello world"]) == {b"hello": 1, b" world": 1}
    assert count_scanned_words.signatures, "the Numba counting kernel did not run"


@given(st.lists(st.sampled_from(["a", " ", "\n", "\t", "b.", "/", "x'", "é", "1"]), max_size=40)
       .map("".join), st.sampled_from(["gpt2", "cl100k", "o200k", "llama3"]))
def test_file_lines_are_documents_for_every_named_pattern(tmp_path_factory, text, pattern):
    # Joining lines into one regex call must give the same words as one call per line.
    path = tmp_path_factory.mktemp("c") / "c.txt"
    path.write_bytes(text.encode())
    expected = Counter()
    compiled = pretokenize.resolve_pattern(pattern)
    for line in text.encode().splitlines(keepends=True):
        expected.update(word_bytes(w) for w in regex.findall(compiled, line.decode()))
    assert count_words([path], pattern) == dict(expected)


def test_special_tokens_cut_words_and_are_not_counted():
    counts = count_words(["ab<|eot|>cd ab<|eot|>"], special_tokens=["<|eot|>"])
    assert counts == {b"ab": 1, b"cd": 1, b" ab": 1}


def test_custom_pattern_and_no_pattern():
    assert count_words(["a1b2"], pattern=r"\d|[a-z]") == {b"a": 1, b"1": 1, b"b": 1, b"2": 1}
    assert count_words(["two words", "two words"], pattern=None) == {b"two words": 2}


def test_class_table_matches_regex_on_samples():
    classes = pretokenize.code_point_classes()
    for char, cls in [("a", 1), ("中", 1), ("٣", 2), ("Ⅷ", 2), (" ", 3), ("\u3000", 3), ("!", 0)]:
        assert classes[ord(char)] == cls, char


def test_str_items_are_documents_unless_they_name_files(tmp_path):
    assert count_words(["hello.world", "a/b"]) == {b"hello": 1, b".": 1, b"world": 1, b"a": 1,
                                                   b"/": 1, b"b": 1}
    path = tmp_path / "c.txt"
    path.write_text("hi\n")
    assert count_words([str(path)]) == {b"hi": 1, b"\n": 1}
    import pytest

    from gpubpe.errors import CorpusError
    with pytest.raises(CorpusError, match="no such file"):
        count_words(["missing-corpus.txt"])


def test_the_chunked_reader_keeps_item_order_paths_and_error_indexes(tmp_path):
    """iter_batches takes a list of str a chunk at a time (issue 18); a path, a bytes item, a
    str subclass or a lone surrogate anywhere in a chunk still gets the one-by-one rules."""
    import numpy as np
    import pytest

    from gpubpe.errors import CorpusError

    path = tmp_path / "middle.txt"
    path.write_bytes(b"from the file\nsecond line\n")
    n = pretokenize._READ_CHUNK
    docs = [f"doc {i} \u4e2d\n" for i in range(2 * n + 10)]
    items = docs[:n + 5] + [str(path), b"raw bytes", np.str_("numpy str")] + docs[n + 5:]
    batches = list(pretokenize.iter_batches(items, batch_bytes=1 << 30))
    documents = [bytes(b.data[a:e]) for b in batches
                 for a, e in zip(np.concatenate([[0], b.doc_ends[:-1]]), b.doc_ends)]
    expected = ([d.encode() for d in docs[:n + 5]] + [b"from the file\n", b"second line\n",
                b"raw bytes", b"numpy str"] + [d.encode() for d in docs[n + 5:]])
    assert documents == expected
    assert len(batches) == 3  # the documents before the file, the file, the rest
    with pytest.raises(CorpusError, match=f"document {n + 7} holds a lone surrogate"):
        list(pretokenize.iter_batches(docs[:n + 7] + ["bad \ud800"] + docs[n + 7:]))
    ends_like = pretokenize._may_end_like_a_path
    assert ends_like(pretokenize._Documents.of([b"a", b"b.txt"]))
    assert not ends_like(pretokenize._Documents.of([b"a.txt\n", b"x"]))
    for name in (b"c.jsonl", b"d.jsonl.gz", b"e.parquet", b".txt", b"f.gz"):
        assert ends_like(pretokenize._Documents.of([b"line\n", name, b"more\n"])), name
    for name in (b"xt", b"t", b"", b"a.jsonx", b"a.parque", b"gz.\n", b"a.TXT"):
        assert not ends_like(pretokenize._Documents.of([b"line\n", name, b"z"])), name


def test_the_word_tally_adds_shares_in_order_as_a_counter_does():
    """``_WordTally`` (kernels.word_tally) from its small start through growth of the table,
    the word arrays and the pool: the counts and first-occurrence order of a Counter."""
    from collections import Counter

    import numpy as np

    from gpubpe.kernels.word_tally import packed_words

    rng = np.random.default_rng(3)
    tally, expected = pretokenize._WordTally(), Counter()
    for _ in range(4):
        words = [bytes(rng.integers(97, 100, rng.integers(1, 24)).astype(np.uint8))
                 for _ in range(40_000)]
        counts = rng.integers(1, 5, len(words))
        length = np.array([len(w) for w in words], dtype=np.int64)
        packed, hashes = packed_words(np.frombuffer(b"".join(words), np.uint8),
                                      np.cumsum(length) - length, length)
        tally.add(packed, length, counts.astype(np.int64), hashes)
        for word, count in zip(words, counts.tolist()):
            expected[word] += count
    assert len(expected) > 1 << 16 and sum(map(len, expected)) > 1 << 20  # it grew
    assert list(tally.as_dict().items()) == list(expected.items())


def test_the_word_tally_keeps_words_that_share_a_hash_apart():
    """A long word's key is only a hint: words of one length (8-24 bytes) given one key,
    each differing from the first in one byte (so every lane of the 8-byte compares and
    every masked tail), are counted apart; the same words again add to them. The last
    words end the packed array, where the compare goes byte by byte. Words of up to 7
    bytes are their own keys (``word_key``): those are exact, one word a key."""
    import numpy as np

    from gpubpe.kernels.hashing import LONG_WORD_TAG
    from gpubpe.kernels.word_tally import packed_words

    words = []
    for size in range(1, 25):
        first = bytes(range(65, 65 + size))
        words += [first] + [first[:k] + b"~" + first[k + 1:] for k in range(size)]
    length = np.array([len(w) for w in words], dtype=np.int64)
    packed, keys = packed_words(np.frombuffer(b"".join(words), np.uint8),
                                np.cumsum(length) - length, length)
    assert len(set(keys[length <= 7].tolist())) == int(np.sum(length <= 7))  # exact
    long = length > 7
    keys[long] = LONG_WORD_TAG | (length[long].astype(np.uint64) * np.uint64(7919))
    tally = pretokenize._WordTally()
    tally.add(packed, length, np.ones(len(words), np.int64), keys)
    tally.add(packed, length, np.full(len(words), 2, np.int64), keys)
    assert tally.as_dict() == {word: 3 for word in words}


def test_words_compare_equal_8_bytes_at_a_time_and_at_an_arrays_end():
    """``hashing.same_bytes`` against bytes equality: words of 1-20 bytes equal, and
    differing in any one byte, read with 8 bytes to spare (the wide compare) and ending
    their array (byte by byte); and the counting kernel, which compares every word it
    meets again with its first occurrence, finds no false collision in real text."""
    from pathlib import Path

    from gpubpe.kernels.hashing import same_bytes

    for size in range(1, 21):
        word = bytes(range(40, 40 + size))
        for k in [None, *range(size)]:
            other = word if k is None else word[:k] + b"!" + word[k + 1:]
            for spare in (b"", b"12345678"):
                a = np.frombuffer(b"x" + word + spare, np.uint8)
                b = np.frombuffer(b"yz" + other + spare, np.uint8)
                assert same_bytes(a, 1, b, 2, size) == (word == other), (size, k, spare)
    text = Path(__file__).parent / "data" / "multiscript.txt"
    data = np.frombuffer(text.read_bytes(), np.uint8)
    starts, ends = np.array([0], np.int64), np.array([data.size], np.int64)
    *_, collided = count_scanned_words(data, starts, ends, GPT2, pretokenize.scanner_table(GPT2))
    assert not collided


def test_the_counting_kernel_gives_each_words_key_and_packed_bytes_its_bytes():
    """The keys ``count_scanned_words`` returns (made as it meets the words) are
    ``word_key``'s, as ``packed_words`` makes them again; ``packed_bytes`` (a memcpy a
    word) packs what ``packed_words`` packs, words of 1 to hundreds of bytes."""
    from pathlib import Path

    from gpubpe.kernels.word_tally import packed_bytes, packed_words

    text = (Path(__file__).parent / "data" / "multiscript.txt").read_bytes()
    data = np.frombuffer(text + b" " + b"x" * 300 + b" y", np.uint8)
    starts, ends = np.array([0, 5000], np.int64), np.array([5000, data.size], np.int64)
    at, length, _, keys, collided = count_scanned_words(data, starts, ends, GPT2,
                                                        pretokenize.scanner_table(GPT2))
    packed, expected_keys = packed_words(data, at, length)
    assert not collided and keys.dtype == np.uint64 and length.max() > 300
    assert keys.tolist() == expected_keys.tolist()
    assert packed_bytes(data, at, length).tobytes() == packed.tobytes() == b"".join(
        data[a:a + n].tobytes() for a, n in zip(at, length))


def test_line_ends_equal_numpys_at_every_place_in_a_word():
    """``kernels.jsonl.line_ends`` (8 bytes a step) against NumPy: newlines at every
    position of the 8-byte words and in the bytes after the last whole word, several in
    one word, none at all, no data; beside them the bytes one bit from a newline (0x0B,
    0x08, 0x8A, 0x0E) and 0x00/0xFF, which an inexact zero-byte test would take for one
    just above a real newline."""
    from gpubpe.kernels.jsonl import line_ends

    def numpy_ends(data: bytes) -> list[int]:
        ends = (np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1).tolist()
        return ends if ends and ends[-1] == len(data) else [*ends, len(data)]

    rng = np.random.default_rng(5)
    others = np.array([0x0B, 0x08, 0x8A, 0x0E, 0x00, 0xFF, 0x61], np.uint8)
    cases = [b"", b"\n", b"a", b"\n" * 20, bytes(others) * 3]
    for size in range(1, 34):
        for p in (0.05, 0.3, 0.9):
            newline = rng.random(size) < p
            cases.append(np.where(newline, 10, rng.choice(others, size)).astype(np.uint8).tobytes())
        cases += [b"\x0b" * k + b"\n" + b"\x0b" * (size - k) for k in range(size)]
    for data in cases:
        assert line_ends(np.frombuffer(data, np.uint8)).tolist() == numpy_ends(data), data


def test_the_tallys_words_are_new_bytes_freed_with_their_list(traced_memory):
    """``_pystr.bytes_objects`` makes the tally's words (``kernels.word_tally.new_words``):
    equal to slices of the pool, each None's reference given back, the bytes freed with
    the list (tracemalloc sees CPython's allocator); when PyBytes_FromStringAndSize fails
    (a length past what memory allows) the kernel names that word, the rest stay None and
    no error is left set."""
    import ctypes

    from gpubpe import _pystr
    from gpubpe.kernels.word_tally import new_words

    pool = np.frombuffer(b"alpha beta\xe4\xb8\xad\x00gamma" * 50, np.uint8)
    records = np.array([[a, n, 1] for a in range(0, 800, 7) for n in (0, 1, 5, 13)], np.int64)
    expected = [pool[a:a + n].tobytes() for a, n, _ in records.tolist()]
    words, hashes = _pystr.bytes_objects(pool, records, 0, len(expected))
    assert words == expected and hashes.tolist() == list(map(hash, expected))
    assert _pystr.bytes_objects(pool, records, 3, 9)[0] == expected[3:9]
    made, left, nones = traced_memory(lambda: _pystr.bytes_objects(pool, records, 0,
                                                                  len(expected)))
    assert abs(nones) <= 2 and made > sum(map(len, expected)) and left < 1024
    words = [None] * 3
    items_at = ctypes.c_int64.from_address(id(words) + 24).value
    records = np.array([[0, 5, 1], [0, 1 << 62, 1], [6, 4, 1]], np.int64)
    hashes = np.zeros(3, np.int64)
    assert new_words(items_at, 3, records, pool, 0, hashes, _pystr._bytes_api()) == 1
    assert words == [b"alpha", None, None] and hashes.tolist() == [hash(b"alpha"), 0, 0]


def test_the_tallys_dict_is_made_with_the_words_hashes(traced_memory):
    """``_pystr.dict_of_words`` (``kernels.word_tally.filled_dict``) inserts the words with
    the hashes ``bytes_objects`` made: the dict of ``dict(zip(...))``, in order, found by
    equal bytes made elsewhere (the hashes are ``hash()``'s), counts past the small ints;
    it holds one reference to each word and each count, all freed with it."""
    import sys

    from gpubpe import _pystr

    pool = np.frombuffer(b"alpha beta\xe4\xb8\xad\x00gamma" * 50, np.uint8)
    records = np.array([[a, 3 + a % 11, 1000 + a] for a in range(0, 700, 7)], np.int64)
    words, hashes = _pystr.bytes_objects(pool, records, 0, len(records))
    counts = records[:, 2].tolist()
    references = sys.getrefcount(words[0])
    made = _pystr.dict_of_words(words, hashes, records)
    gained = sys.getrefcount(words[0]) - references
    assert gained == 1
    assert list(made.items()) == list(dict(zip(words, counts)).items())
    assert all(made[pool[a:a + n].tobytes()] == c for a, n, c in records.tolist())
    held, left, _ = traced_memory(lambda: _pystr.dict_of_words(words, hashes, records))
    assert held > 16 * len(words) and left < 1024


def test_words_looked_up_in_a_copy_of_the_tally_add_as_words_probed(monkeypatch):
    """``known_words`` (a counting thread's lookup in ``_WordTally.known``) finds a word of
    the tally when its bytes are the word's (short words by key, long ones compared: a
    Thue-Morse string and its complement share a key, only one is found); adding with
    those indices gives the tally of adding without them, the new words in order."""
    from collections import Counter

    from gpubpe.kernels.word_tally import known_words, packed_words

    morse = [bin(i).count("1") & 1 for i in range(2048)]
    a, b = ("".join("ab"[x] for x in morse).encode(), "".join("ba"[x] for x in morse).encode())
    rng = np.random.default_rng(5)
    first = [bytes(rng.integers(97, 101, rng.integers(1, 12)).astype(np.uint8))
             for _ in range(3000)] + [a]
    later = [bytes(rng.integers(97, 101, rng.integers(1, 12)).astype(np.uint8))
             for _ in range(3000)] + [b, a]

    def share(words):
        length = np.array([len(w) for w in words], np.int64)
        packed, keys = packed_words(np.frombuffer(b"".join(words), np.uint8),
                                    np.cumsum(length) - length, length)
        return packed, length, np.arange(1, len(words) + 1, dtype=np.int64), keys

    monkeypatch.setattr(pretokenize, "_KNOWN_FROM_WORDS", 1000)  # (a copy from 8,192 words)
    probed, looked_up = pretokenize._WordTally(), pretokenize._WordTally(share_known=True)
    for tally in (probed, looked_up):
        tally.add(*share(first))
    packed, length, counts, keys = share(later)
    found = np.empty(length.size, np.int64)
    known_words(*looked_up.known, packed, length, keys, found)
    index = {word: w for w, word in enumerate(dict.fromkeys(first))}
    assert found.tolist() == [index.get(word, -1) for word in later]
    assert found[-2] == -1 and found[-1] == index[a]  # b shares a's key, is not a
    probed.add(packed, length, counts, keys)
    looked_up.add(packed, length, counts, keys, found)
    expected = Counter(dict.fromkeys(first + later, 0))
    for words in (first, later):
        for word, count in zip(words, range(1, len(words) + 1)):
            expected[word] += count
    assert list(looked_up.as_dict().items()) == list(probed.as_dict().items()) \
        == list(expected.items())


def test_long_words_sharing_their_hash_are_counted_apart():
    """Thue-Morse strings of 2,048 letters and their complements share their polynomial
    hash mod 2**64 for every odd base (their difference is a multiple of the product of
    B**(2**j) - 1 for j < 11, which 2**66 divides), so their 56-bit word keys are equal:
    the counting kernel reports the collision, the tally keeps them apart, and
    ``count_words`` gives the counts of the regex split on 1 and 2 threads."""
    from collections import Counter

    from gpubpe.kernels.hashing import word_key
    from gpubpe.kernels.word_tally import packed_words

    morse = [bin(i).count("1") & 1 for i in range(2048)]
    a, b = ("".join("ab"[x] for x in morse), "".join("ba"[x] for x in morse))
    words = [w.encode() for w in (a, " " + b, " " + a, " " + b)]
    arrays = [np.frombuffer(w, np.uint8) for w in words]
    assert word_key(arrays[1], 0, len(words[1])) == word_key(arrays[2], 0, len(words[2]))
    data = np.frombuffer(b"".join(words), np.uint8)
    *_, collided = count_scanned_words(data, np.array([0], np.int64),
                                       np.array([data.size], np.int64), GPT2,
                                       pretokenize.scanner_table(GPT2))
    assert collided
    length = np.array([len(w) for w in words], np.int64)
    packed, keys = packed_words(data, np.cumsum(length) - length, length)
    tally = pretokenize._WordTally()
    tally.add(packed, length, np.ones(len(words), np.int64), keys)
    assert tally.as_dict() == Counter(words)
    documents = [a + " " + b + " " + a + " " + b, "x " + b]
    gpt2 = pretokenize.resolve_pattern("gpt2")
    expected = Counter(w.encode() for d in documents for w in pretokenize.split_words(d, gpt2))
    for threads in (1, 2):
        assert pretokenize.count_words(documents, num_threads=threads) == expected


lines_text = st.lists(st.sampled_from(["", "a", "bc", "\n", "\n\n", "long line " * 3, "é中"]),
                      max_size=30).map("".join).map(str.encode)


@given(lines_text, st.lists(st.integers(0, 200), max_size=8), st.sampled_from([1, 3, 64]))
def test_range_lines_tile_a_file_at_its_line_starts(tmp_path_factory, content, cuts, slack):
    """Byte ranges that tile a file give its bytes once, each range the whole lines that
    start in it, whatever the slack read past a range (lines longer than it, a last line
    with no "\\n", ranges in which no line starts)."""
    from unittest import mock

    path = tmp_path_factory.mktemp("r") / "lines.txt"
    path.write_bytes(content)
    line_starts = {0} | {k + 1 for k, byte in enumerate(content) if byte == 10}
    bounds = sorted({0, len(content), *(c for c in cuts if c < len(content))})
    file = pretokenize._OpenFile(path)
    pieces = []
    with mock.patch.object(pretokenize, "_LINE_SLACK", slack):
        for start, end in zip(bounds, bounds[1:]):
            data, at = pretokenize._range_lines(file.fd, start, end)
            if data:
                assert start <= at < end and at in line_starts
                assert at + len(data) in line_starts | {len(content)}
            pieces.append(bytes(data))
    assert b"".join(pieces) == content


@given(lines_text, st.sampled_from([1, 5, 64]), st.sampled_from([1, 4]))
def test_file_batches_cut_at_line_ends_whatever_the_slack(tmp_path_factory, content, size, slack):
    """``_line_chunks`` reads about ``batch_bytes`` with ``slack`` more and puts the file
    back after the line cut at the limit: the batches hold the file's lines, in order."""
    from unittest import mock

    path = tmp_path_factory.mktemp("b") / "lines.txt"
    path.write_bytes(content)
    with mock.patch.object(pretokenize, "_LINE_SLACK", slack), \
            mock.patch.object(pretokenize, "_FIRST_DOCUMENT_BATCH_BYTES", size):
        batches = list(pretokenize.read_file(path, batch_bytes=size))
    documents = [bytes(b.data[x:y]) for b in batches
                 for x, y in zip(b.doc_starts.tolist(), b.doc_ends.tolist())]
    assert documents == content.splitlines(keepends=True)
    assert sum(b.input_bytes for b in batches) == len(content)


def test_a_chunk_of_bytes_documents_is_read_in_one_join():
    """bytes items are always documents, a file-name shape too: a chunk of only bytes is
    joined at once (``_bytes_documents``), a mixed one item by item; the same counts."""
    from gpubpe.pretokenize import iter_batches

    lines = [f"hello world {i}\n" for i in range(5000)] + ["notes.txt"]
    as_bytes = [line.encode() for line in lines]
    batches = list(iter_batches(as_bytes))
    assert b"".join(bytes(b.data) for b in batches) == b"".join(as_bytes)
    assert sum(b.doc_ends.size for b in batches) == len(lines)
    mixed = [line if i % 2 else line.encode() for i, line in enumerate(lines[:-1])] + [b"notes.txt"]
    assert count_words(as_bytes) == count_words(mixed) == count_words(lines[:-1] + [b"notes.txt"])

"""Same outputs on 1, 2 and the default number of threads (issue 18).

The thread-scaling targets are benchmarks (``bench/encode_bench.py --sweep``,
``bench/RESULTS.md``); here only the outputs are checked, bit for bit: word counts
(and their order), token ids and offsets with a cold and a warm word cache, and
the bit-level codec's chunks.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import gpubpe
from gpubpe import _threads, pretokenize
from gpubpe import tokenizer as tokenizer_module
from gpubpe._threads import run_all
from gpubpe.bitlevel import BitLevelCodec
from gpubpe.errors import CorpusError
from gpubpe.kernels import bitpack

DATA_DIR = Path(__file__).parent / "data"
THREAD_COUNTS = (1, 2, None)  # None: the default, every core


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return (DATA_DIR / "multiscript.txt").read_text(encoding="utf-8").splitlines(keepends=True)


@pytest.fixture(scope="module")
def tok(lines) -> gpubpe.Tokenizer:
    return gpubpe.train(lines[:3000], 1000, special_tokens=["<|endoftext|>"], progress=False)


def _threads_past_the_cores(monkeypatch) -> None:
    """Let ``pretokenize`` run as many threads as asked on this machine's cores: the
    paths for many cores (``_READ_IN_SHARES_FROM``) run, slower, on CI's 2."""
    check = _threads.check_num_threads
    monkeypatch.setattr(pretokenize, "thread_count",
                        lambda n: check(n) or int(n) if n is not None else 2)


def _small_reads(monkeypatch) -> None:
    """Small batches and chunks, so that there are several, each cut into thread shares,
    and the shares of the many-thread path reach their largest size."""
    monkeypatch.setattr(pretokenize, "_FIRST_DOCUMENT_BATCH_BYTES", 100_000)
    monkeypatch.setattr(pretokenize, "_READ_CHUNK", 700)
    monkeypatch.setattr(pretokenize, "_MAX_SHARE_BYTES", 40_000)
    monkeypatch.setattr(pretokenize, "_MIN_SEGMENT_SHARE_BYTES", 1)


def _slow_shares(monkeypatch, seconds: float) -> list[int]:
    """Each counted share takes ``seconds`` longer; ``[shares running now]``."""
    import threading
    import time

    running, lock = [0], threading.Lock()
    counted_share = pretokenize._WordCounting._counted_share

    def slow_share(*args):
        with lock:
            running[0] += 1
        time.sleep(seconds)
        try:
            return counted_share(*args)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(pretokenize._WordCounting, "_counted_share", slow_share)
    return running


def _fails_once_no_share_runs(count, items: list, running: list[int]) -> None:
    """``count`` of ``items`` and then a read error: the error comes out only once no
    share runs any more (no thread keeps counting for a call that has ended)."""
    def failing_read():
        yield from items
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="disk"):
        try:
            count(failing_read())
        finally:
            assert running[0] == 0


@pytest.mark.parametrize("pattern", ["gpt2", r"\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+"])
def test_count_words_is_the_same_on_every_thread_count(lines, pattern, monkeypatch):
    """1, 2 and the default threads, and 4 and 8 (their corpus read by the counting
    tasks, see ``_WordCounting.corpus_tasks``) forced past this machine's cores."""
    _small_reads(monkeypatch)
    _threads_past_the_cores(monkeypatch)
    counts = [pretokenize.count_words(lines, pattern, num_threads=t)
              for t in (*THREAD_COUNTS, 4, 8)]
    assert sum(counts[0].values()) > 100_000  # the corpus' words, not an empty run
    if pattern == "gpt2":  # the shares of 4 and 8 threads counted in one kernel each
        assert pretokenize.count_str_share.signatures
    for other in counts[1:]:
        assert other == counts[0]
        assert list(other) == list(counts[0])  # first-occurrence order too


@pytest.mark.parametrize("specials", [["<|endoftext|>"], []])
def test_many_threads_read_paths_bytes_and_specials_in_place(lines, tmp_path, monkeypatch,
                                                             specials):
    """A list mixing str documents with a path, bytes, a str subclass and special tokens:
    on 8 threads (items read by the counting tasks, in one kernel a share when there are no
    special tokens; the chunks holding other items read one by one on the calling thread,
    in their place) the counts, their order and the bytes reported to progress are those
    of one thread, and those of the documents ``iter_batches`` reads."""
    from collections import Counter

    _small_reads(monkeypatch)
    _threads_past_the_cores(monkeypatch)
    path = tmp_path / "middle.txt"
    path.write_text("".join(lines[:400]), encoding="utf-8")
    docs = [line + "<|endoftext|>" if k % 7 == 0 else line for k, line in enumerate(lines)]
    items = (docs[:3000] + [str(path), b"raw bytes \xe4\xb8\xad", np.str_("numpy str")]
             + docs[3000:6000] + [path] + docs[6000:16000] + [str(path)]  # in a chunk of str
             + docs[16000:18000])

    class Progress:
        n = 0

        def update(self, n):
            self.n += n

    runs = []
    for threads in (1, 8):
        progress = Progress()
        runs.append((pretokenize.count_words(items, special_tokens=specials,
                                             num_threads=threads, progress=progress),
                     progress.n))
    (one, one_bytes), (many, many_bytes) = runs
    assert many == one and list(many) == list(one)
    documents = [bytes(b.data[x:y]) for b in pretokenize.iter_batches(items)
                 for x, y in zip(b.doc_starts.tolist(), b.doc_ends.tolist())]
    assert many_bytes == one_bytes == sum(map(len, documents))
    gpt2 = pretokenize.resolve_pattern("gpt2")
    words = Counter(w.encode() for document in documents
                    for part in (document.decode().split("<|endoftext|>") if specials
                                 else [document.decode()])
                    for w in pretokenize.split_words(part, gpt2))
    assert many == words and list(many) == list(words)


def test_many_threads_name_the_bad_document_and_end_their_shares(lines, monkeypatch):
    """On 8 threads a lone surrogate far into the list is named by its index, and an
    iterable that raises while read gives its error once no share runs any more."""
    import threading

    from gpubpe.errors import CorpusError

    _small_reads(monkeypatch)
    _threads_past_the_cores(monkeypatch)
    bad = lines[:5000] + ["bad \ud800\n"] + lines[5000:8000]
    with pytest.raises(CorpusError, match="document 5000 holds a lone surrogate"):
        pretokenize.count_words(bad, num_threads=8)

    running = _slow_shares(monkeypatch, 0.005)
    _fails_once_no_share_runs(lambda corpus: pretokenize.count_words(corpus, num_threads=8),
                              lines[:6000], running)
    assert threading.active_count() < 40  # the kept pools, not a thread a call


def test_utf8_bound_ends_bound_each_prefix_of_the_list(lines):
    """``utf8_bound_ends`` (str headers only): exact on ASCII, at least the UTF-8 bytes
    of every prefix elsewhere, and None for a list that is not all exact str."""
    from gpubpe._pystr import utf8_bound_ends

    texts = lines[:2000] + ["", "\U0001F600", "caf\xe9", "ĀĂ"]
    ends = utf8_bound_ends(texts)
    true_ends = np.cumsum([len(t.encode()) for t in texts])
    assert ends is not None and (ends >= true_ends).all()
    assert (np.diff(ends, prepend=0) <= 4 * np.array([len(t) for t in texts])).all()
    ascii = [t for t in lines if t.isascii()][:500]
    assert np.array_equal(utf8_bound_ends(ascii), np.cumsum([len(t) for t in ascii]))
    assert utf8_bound_ends(["a", b"b"]) is None
    assert utf8_bound_ends(["a", np.str_("b")]) is None


def test_utf8_bound_ends_of_one_item_a_block(lines):
    """``utf8_bound_ends(texts, step)`` reads one item in each block of ``step``
    (``sampled_item``): their prefix bounds are those of the full pass at the items read,
    and an item not read may be no str (the counting task that reads it refuses it: see
    ``test_many_threads_count_an_item_the_sample_did_not_read``)."""
    from gpubpe._pystr import utf8_bound_ends
    from gpubpe.kernels.str_utf8 import sampled_item

    texts = lines[:3001]
    picks = [sampled_item(j, 7, len(texts)) for j in range(-(-len(texts) // 7))]
    assert all(7 * j <= k < min(7 * j + 7, len(texts)) for j, k in enumerate(picks))
    assert len(set(k - 7 * j for j, k in enumerate(picks))) == 7  # not one place a block
    every = np.diff(utf8_bound_ends(texts), prepend=0)
    assert np.array_equal(utf8_bound_ends(texts, 7), np.cumsum(every[picks]))
    read, not_read = picks[3], 21 + (picks[3] - 21 + 1) % 7
    assert utf8_bound_ends(texts[:read] + [b"b"] + texts[read + 1:], 7) is None
    assert utf8_bound_ends(texts[:not_read] + [b"b"] + texts[not_read + 1:], 7) is not None


def test_shares_of_a_sampled_chunk_cover_it_in_about_equal_bytes(lines, monkeypatch):
    """A chunk too long to read every str header of is cut from a sample of them: the
    shares cover it in order, each about its bytes (the headers' bound) and about equal."""
    from gpubpe._pystr import utf8_bound_ends

    monkeypatch.setattr(pretokenize, "_SAMPLED_A_SHARE", 512)
    monkeypatch.setattr(pretokenize, "_MIN_SHARE_BYTES", 1)
    items = lines * 3
    shares = pretokenize._ShareSizes(8).shares(pretokenize._Items(items, 0))
    assert len(shares) == 8
    assert [s.lo for s in shares] == [0] + [s.hi for s in shares[:-1]]
    assert shares[-1].hi == len(items)
    exact = np.concatenate([[0], utf8_bound_ends(items)])
    share_bytes = np.array([exact[s.hi] - exact[s.lo] for s in shares])
    approx = np.array([s.approx_bytes for s in shares])
    assert (abs(approx - share_bytes) < 0.2 * share_bytes).all()
    assert share_bytes.max() < 1.3 * share_bytes.min()


def test_many_threads_count_an_item_the_sample_did_not_read(lines, monkeypatch):
    """A bytes document where no sampled header is: the share's kernel refuses it, the
    chunk is read one item at a time, and the counts are one thread's."""
    _small_reads(monkeypatch)
    _threads_past_the_cores(monkeypatch)
    monkeypatch.setattr(pretokenize, "_SAMPLED_A_SHARE", 4)  # 700 items: every 21st read
    from gpubpe.kernels.str_utf8 import sampled_item

    items = lines[:1] + [b"raw bytes \xe4\xb8\xad"] + lines[1:20000]
    assert sampled_item(0, 700 // (8 * 4), 700) != 1  # the first chunk's block 0: not read
    one = pretokenize.count_words(items, num_threads=1)
    many = pretokenize.count_words(items, num_threads=8)
    assert many == one and list(many) == list(one)
    assert one[b" bytes"] >= 1


@pytest.mark.parametrize("suffix, specials, pattern", [
    (".txt", [], "gpt2"), (".txt", ["<|endoftext|>"], "gpt2"), (".jsonl", [], "gpt2"),
    (".txt", [], r"\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+")])
def test_many_threads_count_a_file_in_byte_ranges(lines, tmp_path, monkeypatch, suffix,
                                                  specials, pattern):
    """On 8 threads a file of lines or JSON lines is counted by tasks that each read the
    lines starting in a byte range of it (``_range_lines``): the counts, their order and
    the bytes given to progress are one thread's, and no file stays open."""
    import json
    import time
    import weakref

    _small_reads(monkeypatch)
    _threads_past_the_cores(monkeypatch)
    monkeypatch.setattr(pretokenize, "_MIN_SHARE_BYTES", 2000)
    monkeypatch.setattr(pretokenize, "_LINE_SLACK", 16)  # lines longer than it
    docs = [line + "<|endoftext|>" if k % 7 == 0 else line for k, line in enumerate(lines[:6000])]
    path = tmp_path / f"corpus{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    else:
        path.write_text("".join(docs) + "a last line with no newline", encoding="utf-8")
    ranges = []
    range_lines = pretokenize._range_lines
    monkeypatch.setattr(pretokenize, "_range_lines",
                        lambda *args: ranges.append(args[1:]) or range_lines(*args))

    class Progress:
        n = 0

        def update(self, n):
            self.n += n

    files = []  # weak references to the open files of the byte ranges
    open_file = pretokenize._OpenFile

    class Recorded(open_file):
        def __init__(self, path):
            super().__init__(path)
            files.append(weakref.ref(self))

    monkeypatch.setattr(pretokenize, "_OpenFile", Recorded)
    runs = []
    for threads in (1, 8):
        progress = Progress()
        runs.append((pretokenize.count_words(path, pattern, special_tokens=specials,
                                             num_threads=threads, progress=progress),
                     progress.n))
    (one, one_bytes), (many, many_bytes) = runs
    assert sum(one.values()) > 50_000
    assert many == one and list(many) == list(one)
    assert many_bytes == one_bytes == path.stat().st_size
    assert len(ranges) > 8 and sorted(ranges)[0][0] == 0
    for _ in range(200):  # a range task the calling thread ran itself leaves its cancelled
        if not any(f() for f in files):  # entry in the pool's queue until a pool thread
            break  # takes it: the file is closed then
        time.sleep(0.01)
    assert files and not any(f() for f in files)


@pytest.mark.parametrize("size", [1, 200_000, 5_000_000, 123_456_789])
def test_byte_ranges_tile_a_file_in_growing_chunks(size):
    """``_byte_ranges``: the ranges tile ``[0, size)`` in order; a chunk is a range a thread
    (the last in two a thread), chunks double up to threads x ``_MAX_SHARE_BYTES``, and no
    range is under ``_MIN_SHARE_BYTES`` unless its chunk is."""
    chunks = list(pretokenize._byte_ranges(size, 8))
    ranges = [r for chunk in chunks for r in chunk]
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))
    sizes = [chunk[-1][1] - chunk[0][0] for chunk in chunks]
    assert all(b <= max(2 * a, 8 * pretokenize._MAX_SHARE_BYTES) for a, b in zip(sizes, sizes[1:]))
    assert all(len(chunk) <= 8 for chunk in chunks[:-1]) and len(chunks[-1]) <= 16
    assert all(b - a >= pretokenize._MIN_SHARE_BYTES or len(chunk) == 1
               for chunk in chunks for a, b in chunk)


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_many_threads_name_a_bad_file_as_one_thread_does(tmp_path, monkeypatch, kind):
    """A file the counting tasks would read in byte ranges is checked first, as the one
    reader checks it: the same CorpusError on 1 and 8 threads."""
    _threads_past_the_cores(monkeypatch)
    path = tmp_path / "corpus.txt"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\x00" * 300_000)
    errors = []
    for threads in (1, 8):
        with pytest.raises(CorpusError) as caught:
            pretokenize.count_words(path, num_threads=threads)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and str(path) in errors[0]


def test_many_threads_name_a_bad_json_line_of_a_later_byte_range(lines, tmp_path,
                                                                  monkeypatch):
    import json

    _threads_past_the_cores(monkeypatch)
    monkeypatch.setattr(pretokenize, "_MIN_SHARE_BYTES", 2000)
    rows = [json.dumps({"text": line}) for line in lines[:3000]]
    rows[2500] = '{"text": "cut short'
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:2501: not valid JSON"):
        pretokenize.count_words(path, num_threads=8)


def test_segment_shares_cover_the_batch_in_order(monkeypatch):
    starts = np.arange(0, 1000, 10, dtype=np.int64)
    ends = starts + np.arange(1, 101, dtype=np.int64) % 10
    assert len(pretokenize._segment_shares(starts, ends, 3)) == 1  # 450 bytes: no shares
    monkeypatch.setattr(pretokenize, "_MIN_SEGMENT_SHARE_BYTES", 100)
    shares = pretokenize._segment_shares(starts, ends, 3)
    assert len(shares) == 3
    assert np.array_equal(np.concatenate([s for s, _ in shares]), starts)
    assert np.array_equal(np.concatenate([e for _, e in shares]), ends)
    assert len(pretokenize._segment_shares(starts, ends, 8)) == 4  # 4 of >= 100 bytes


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_encode_arrays_is_the_same_on_every_thread_count(tok, lines, cache, monkeypatch):
    """Short documents (lines), past the size where the threaded path starts, their
    str -> UTF-8 in runs on the threads too; 5 and 8 shards (their new words deduplicated
    in as many parts, ``tokenizer._distinct_new_words``) forced past this machine's cores."""
    monkeypatch.setattr(tokenizer_module, "_PARALLEL_MIN_BYTES", 1 << 12)
    monkeypatch.setattr(tokenizer_module, "_PARALLEL_MIN_DOCUMENTS", 1000)
    check = tokenizer_module.check_num_threads  # 5 and 8 shards on CI's 2 cores too
    monkeypatch.setattr(tokenizer_module, "thread_count",
                        lambda n: check(n) or int(n) if n is not None else 2)
    documents = lines[:6000] + ["<|endoftext|>" + lines[7]]
    if cache == "warm":
        tok.encode_arrays(documents[::3], num_threads=1, allowed_special="all")
    results, caches = [], []
    for threads in (*THREAD_COUNTS, 5, 8):
        if cache == "cold":
            tok.clear_cache()
        results.append(tok.encode_arrays(documents, num_threads=threads,
                                         allowed_special="all"))
        caches.append([array.copy() for array in tok._cache])
    assert results[0].ids.size > 50_000
    for other in caches[1:]:  # the new words admitted alike (beside the writes, or in parts)
        _assert_same_cache(other, caches[0])
    assert caches[0][-1][0] > 1000  # words in the cache
    for other in results[1:]:
        assert np.array_equal(other.ids, results[0].ids)
        assert np.array_equal(other.offsets, results[0].offsets)
    assert tok.decode_batch(results[0])[:-1] == documents[:-1]


def _assert_same_cache(cache, expected) -> None:
    """The same words at the same slots, bytes and ids: the table's (key, slot) cells as a
    set (words admitted in parts take their cells at once, so where a word lands in its
    probe run may differ), every other array bit for bit up to the words used."""
    table, byte_offsets, id_offsets, pool_bytes, pool_ids, used = cache
    assert used[0] == expected[-1][0]
    n = int(used[0])
    for got, want in ((byte_offsets, expected[1]), (id_offsets, expected[2])):
        assert np.array_equal(got[:n + 1], want[:n + 1])
    assert np.array_equal(pool_bytes[:byte_offsets[n]], expected[3][:byte_offsets[n]])
    assert np.array_equal(pool_ids[:id_offsets[n]], expected[4][:id_offsets[n]])

    def cells(table):
        pairs = table.reshape(-1, 2)
        pairs = pairs[pairs[:, 0] != np.uint64(2**64 - 1)]
        return pairs[np.lexsort(pairs.T[::-1])]

    assert np.array_equal(cells(table), cells(expected[0]))


def test_admission_in_parts_fills_the_cache_as_one_pass(tok, lines):
    """``admission_slots`` then ``cache_admit_part`` in 1, 3 and 7 parts run at once on
    threads (``tokenizer._Admission`` from ``ADMIT_IN_PARTS_FROM`` threads) leave the cache
    as ``cache_admit_cpu`` in first-seen order does, every word found at its slot; words
    longer than the cache takes are skipped alike."""
    from concurrent.futures import ThreadPoolExecutor

    from gpubpe.kernels import encode as kernels
    from gpubpe.kernels.encode.words import _cached_slot

    data = np.frombuffer("".join(lines[:4000] + ["x" * 200 + "\n"]).encode(), np.uint8)
    pieces = (np.array([0]), np.array([data.size]), np.array([-1]))
    empty = kernels.empty_word_cache(tokenizer_module._CACHE_WORDS,
                                     tokenizer_module._CACHE_POOL_BYTES)
    _, _, new = tokenizer_module._encode_pieces(
        data, pieces, tok._scan_args(), empty, tok._word_encoder(1), 2,
        lambda new_words: _not_admitted())
    assert new.word_len.max() > tokenizer_module._CACHE_WORD_BYTES  # one skipped
    serial = kernels.empty_word_cache(tokenizer_module._CACHE_WORDS,
                                      tokenizer_module._CACHE_POOL_BYTES)
    assert tokenizer_module._admit_new_words(serial, data, new)
    for parts in (1, 3, 7):
        cache = kernels.empty_word_cache(tokenizer_module._CACHE_WORDS,
                                         tokenizer_module._CACHE_POOL_BYTES)
        slots = kernels.admission_slots(cache, new.word_len, new.id_offsets,
                                        tokenizer_module._CACHE_WORD_BYTES)
        cuts = np.linspace(0, slots.size, parts + 1).astype(np.int64).tolist()
        with ThreadPoolExecutor(parts) as pool:
            for done in [pool.submit(kernels.cache_admit_part, cache, data, new.word_at,
                                     new.word_key, new.ids, new.id_offsets, slots, lo, hi)
                         for lo, hi in zip(cuts, cuts[1:])]:
                done.result()
        _assert_same_cache(cache, serial)
        found = [_cached_slot(data, a, n, key, cache)
                 for a, n, key in zip(new.word_at, new.word_len, new.word_key)]
        assert found == [-1 if s < 0 else s for s in slots.tolist()]
    assert serial[-1][0] > 1000


@contextmanager
def _not_admitted():
    yield None


def test_bitlevel_codec_is_the_same_on_every_chunk_count(lines, monkeypatch):
    """The CPU codec's chunks (one a thread) on real text: ids and offsets bit for bit."""
    monkeypatch.setattr(bitpack, "MIN_CHUNK_IDS", 1 << 16)  # several chunks of these lines
    codec = BitLevelCodec(1000)
    tables = codec._tables
    data = [np.frombuffer(line.encode(), dtype=np.uint8) for line in lines[:20000]]
    ids = np.concatenate(data).astype(np.uint32)
    offsets = np.concatenate([[0], np.cumsum([d.size for d in data])]).astype(np.int64)
    assert ids.size > 4 * bitpack.MIN_CHUNK_IDS
    encoded = [codec.encode_batch(ids, offsets, num_threads=n) for n in THREAD_COUNTS]
    encoded.append(bitpack.bitlevel_encode_cpu(ids, offsets, tables["lead_prefix_ids"],
                                               tables["value_ids"], 1000, 4, run_all)[:2])
    decoded = [codec.decode_batch(*encoded[0], num_threads=n) for n in THREAD_COUNTS]
    decoded.append(bitpack.bitlevel_decode_cpu(*encoded[0], tables["decode_table"], 1000, 4,
                                               run_all)[:2])
    for other in encoded[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(other, encoded[0]))
    for other in decoded:
        assert np.array_equal(other[0], ids) and np.array_equal(other[1], offsets)


def test_a_child_forked_after_its_parent_ran_threads_runs_its_own(tok, lines, monkeypatch,
                                                                   in_forked_child):
    """A DataLoader's workers: a child forked after its parent ran on threads (the pools,
    the codec's chunks) encodes, codes, counts and decodes on threads of its own, as the
    parent did. It waited forever for the parent's pool threads, which a child has not;
    the codec's chunks, an OpenMP loop then, ended it ("fork() called from a process
    already using GNU OpenMP")."""
    monkeypatch.setattr(tokenizer_module, "_PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(bitpack, "MIN_CHUNK_IDS", 1 << 16)  # the codec's chunks on 2 threads
    texts, codec = lines[:2000], BitLevelCodec(tok.n_vocab)

    def on_threads() -> list:
        batch = tok.encode_arrays(texts, num_threads=2)
        ids = np.tile(batch.ids, 4 * bitpack.MIN_CHUNK_IDS // batch.ids.size + 1)
        return [batch.ids.tolist(), codec.encode(ids, num_threads=2).tolist(),
                gpubpe.count_words(texts, num_threads=2, progress=False).as_dict(),
                tok.decode_batch(batch, num_threads=2)]

    in_parent = on_threads()
    assert in_parent[3] == texts
    assert in_forked_child(lambda: [a == b for a, b in zip(on_threads(), in_parent)]) == [True] * 4


def test_a_child_forked_while_a_thread_changed_the_word_cache_drops_that_cache(
        tok, lines, in_forked_child):
    """A fork while another thread held the word cache's lock (admitting a batch's words,
    which it holds while the ids are written): the child, which has no such thread, drops
    that cache and encodes, instead of waiting for the lock for good."""
    texts = lines[5000:5600]
    expected = tok.encode_arrays(texts).tolist()
    with tok._cache_lock:  # as a thread admitting words at the fork
        assert in_forked_child(lambda: tok.encode_arrays(texts).tolist() == expected)


def test_decode_batch_is_the_same_on_every_thread_count(tok, lines, monkeypatch):
    """Documents in runs on the threads (plans, then fills), with invalid UTF-8 and
    one-character documents in every run: the lines, and ids of each
    line cut at a random place, both halves decoded as their own documents."""
    monkeypatch.setattr(tokenizer_module, "_TEXT_KERNEL_MIN_IDS", 1 << 12)
    monkeypatch.setattr(tokenizer_module, "_TEXT_PARALLEL_MIN_IDS", 1 << 12)
    batch = tok.encode_arrays(lines[:6000], num_threads=1)
    rng = np.random.default_rng(18)
    cuts = batch.offsets[:-1] + rng.integers(0, 1 + np.diff(batch.offsets))
    offsets = np.unique(np.concatenate([batch.offsets, cuts]))
    cut = tokenizer_module.RaggedBatch(batch.ids, offsets)
    assert batch.ids.size > tokenizer_module._TEXT_PARALLEL_MIN_IDS
    results = [tok.decode_batch(b, num_threads=t) for b in (batch, cut) for t in THREAD_COUNTS]
    assert results[0] == lines[:6000]
    assert results[1] == results[2] == results[0]
    assert "\ufffd" in "".join(results[3])  # characters were cut
    assert results[3] == [tok.decode_bytes(batch.ids[a:b]).decode("utf-8", "replace")
                          for a, b in zip(offsets, offsets[1:])]
    assert results[4] == results[5] == results[3]
    assert "".join(results[3]) != "".join(lines[:6000])


def test_more_threads_than_cores_run_on_the_cores(monkeypatch):
    """A thread count past the cores this process may use runs on those cores (more
    threads only took turns: slower, bench/RESULTS.md); None means all of them. A CPU
    quota (a container's) bounds them too."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert _threads.usable_cores() <= cores
    cores = _threads.usable_cores()
    assert pretokenize.thread_count(None) == cores
    assert pretokenize.thread_count(cores + 6) == cores
    assert pretokenize.thread_count(1) == 1
    assert tokenizer_module._thread_count(cores + 6, 1 << 30) == cores
    monkeypatch.setattr(_threads, "usable_cores", lambda: 1)  # a container given one CPU
    assert pretokenize.thread_count(None) == pretokenize.thread_count(4) == 1


@pytest.mark.parametrize("own, files, cpus", [
    ("0::/", {"cpu.max": "200000 100000"}, 2),  # cgroup v2, the container's namespace
    ("0::/", {"cpu.max": "50000 100000"}, 1),  # half a CPU: one thread
    ("0::/kubepods/pod1/c1", {"kubepods/pod1/c1/cpu.max": "250000 100000"}, 2),  # 2.5
    ("0::/", {"cpu.max": "max 100000"}, None),  # no quota
    ("4:cpu,cpuacct:/docker/abc\n0::/", {"cpu,cpuacct/cpu.cfs_quota_us": "400000",
                                          "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 4),
    ("4:cpu,cpuacct:/docker/abc\n0::/", {"cpu,cpuacct/cpu.cfs_quota_us": "-1",
                                          "cpu,cpuacct/cpu.cfs_period_us": "100000"}, None),
    ("0::/", {}, None),  # nothing to read
])
def test_a_cgroup_cpu_quota_is_read_as_a_number_of_cpus(tmp_path, own, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    assert _threads.quota_cpus(own.split("\n"), tmp_path) == cpus


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_decode_batch_refuses_a_bad_thread_count(tok, threads):
    """Checked on every batch, also those too small to use threads."""
    from gpubpe.errors import ConfigError

    with pytest.raises(ConfigError, match="num_threads"):
        tok.decode_batch([[1, 2]], num_threads=threads)


def test_helped_calls_end_before_an_error_is_raised():
    """``tokenizer._helped`` runs calls on a pool thread and the calling thread (which runs
    ``first`` before): every call has run once; when ``first`` or a call raises, the error
    is raised only once no call runs any more (they write into the caller's arrays)."""
    import threading
    import time

    from gpubpe.tokenizer import _helped

    ran, running, lock = [], [0], threading.Lock()

    def call(k, fail=False):
        with lock:
            running[0] += 1
        time.sleep(0.01)
        with lock:
            running[0] -= 1
            ran.append(k)
        if fail:
            raise ValueError(f"call {k}")

    _helped([(call, k) for k in range(12)], 2, first=lambda: time.sleep(0.03))
    assert sorted(ran) == list(range(12))
    def fail_soon():
        time.sleep(0.005)  # a pool thread has begun a call
        raise ZeroDivisionError("first")

    four = [(call, k) for k in range(4)]
    for first, calls, message in ((fail_soon, [(call, k) for k in range(6)], "first"),
                                  (None, four[:3] + [(call, 3, True)], "call 3"),  # here
                                  (None, [four[0], (call, 1, True), *four[2:]], "call 1")):  # pooled
        ran.clear()
        with pytest.raises((ZeroDivisionError, ValueError), match=message):
            try:
                _helped(calls, 2, first=first)
            finally:
                assert running[0] == 0


def test_the_calling_thread_runs_the_costliest_unstarted_task_first():
    """While it waits for the oldest result, the calling thread of a ``HelpedPool`` runs
    the tasks no pool thread has started costliest first, the newest of equal cost first
    (a 4 MB batch's share taken last left the pool thread waiting at the end); the
    results still come in the order given."""
    import threading

    from gpubpe._threads import HelpedPool

    here, release = [], threading.Event()
    pool = HelpedPool(1)
    try:
        pool.submit(release.wait, 10)  # the one pool thread waits in it
        while not pool.tasks[0].future.running():
            release.wait(0.001)
        for name, cost in (("a", 1), ("b", 5), ("c", 3), ("d", 5), ("e", 1)):
            pool.submit(lambda name=name: here.append(name) or name, cost=cost)
        pool.submit(lambda: release.set() or "last")  # cost 0: runs last, frees the pool
        assert pool.oldest_result() is True
        assert here == ["d", "b", "c", "e", "a"]
        assert [pool.oldest_result() for _ in range(6)] == ["a", "b", "c", "d", "e", "last"]
    finally:
        release.set()
        pool.cancel()


def test_counting_shares_end_before_an_error_is_raised(lines, monkeypatch):
    """count_words on 2 threads counts its shares on the process's kept pool thread and
    the calling thread: when reading a batch raises, the error comes out only once no
    share runs any more (no thread keeps counting for a call that has ended), and the
    next call counts as one thread does."""
    running = _slow_shares(monkeypatch, 0.01)
    batches = [batch for k in range(0, 3000, 300)
               for batch in pretokenize.iter_batches(lines[k:k + 300])]
    assert len(batches) == 10
    _fails_once_no_share_runs(lambda read: pretokenize.count_batch_words(read, num_threads=2),
                              batches[:5], running)
    assert pretokenize.count_batch_words(iter(batches), num_threads=2) == \
        pretokenize.count_batch_words(iter(batches), num_threads=1)

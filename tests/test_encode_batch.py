"""Batched encoding and decoding: parity with the reference, HF tokenizers and tiktoken,
round trips, independence from threads and batch splits, special tokens, bad input."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference
from gpubpe import tokenizer as tokenizer_module
from gpubpe.errors import ConfigError, CorpusError, InputTypeError, SpecialTokenError
from gpubpe.kernels import encode as kernels
from gpubpe.model import Vocabulary
from gpubpe.pretokenize import GPT2_PATTERN, NAMED_PATTERNS, word_bytes
from gpubpe.tokenizer import RaggedBatch

DATA_DIR = Path(__file__).parent / "data"
SPECIALS = ["<|endoftext|>", "<|fim_middle|>", "<|fim|>"]


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return (DATA_DIR / "multiscript.txt").read_text(encoding="utf-8").splitlines(keepends=True)


@pytest.fixture(scope="module")
def tok(lines) -> gpubpe.Tokenizer:
    return gpubpe.train(lines[:4000], 2000, special_tokens=SPECIALS, progress=False)


def reference_ids(tok, text: str | bytes, pattern: str = GPT2_PATTERN, memo=None) -> list[int]:
    """The oracle: regex split, then ``_reference.encode_word`` on each word."""
    rules = [tuple(r) for r in tok.vocabulary.rules.tolist()]
    memo = {} if memo is None else memo
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    ids: list[int] = []
    for word in regex.findall(pattern, text):
        key = word_bytes(word)
        if key not in memo:
            memo[key] = _reference.encode_word(key, rules)
        ids.extend(memo[key])
    return ids


def hf_tokenizer(tok):
    """A HF ByteLevel BPE tokenizer holding the same vocabulary, built here by hand."""
    tokenizers = pytest.importorskip("tokenizers", reason="comparing with HF needs the 'hf' or 'dev' extra")
    chars = _reference.gpt2_byte_to_unicode()

    def as_hf(piece: bytes) -> str:
        return "".join(chars[b] for b in piece)

    pieces = tok.vocabulary.token_bytes
    vocab = {as_hf(piece): i for i, piece in enumerate(pieces)}
    merges = [(as_hf(pieces[a]), as_hf(pieces[b])) for a, b, _ in tok.vocabulary.rules.tolist()]
    hf = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    return hf


def tiktoken_encoding(tok):
    """tiktoken over the same bytes; its ranks are gpubpe ids (equal to rule order here)."""
    tiktoken = pytest.importorskip("tiktoken", reason="comparing with tiktoken needs the 'dev' extra")
    ranks = {piece: i for i, piece in enumerate(tok.vocabulary.token_bytes)}
    return tiktoken.Encoding("gpubpe-test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={})


# ---------------------------------------------------------------- parity


def test_batched_equals_reference_on_a_sample_of_every_script(tok, lines):
    sample = lines[::19]  # every part of the file (blocks of 20 lines) appears
    assert 50_000 < sum(len(s.encode()) for s in sample) < 120_000
    memo: dict = {}
    assert tok.encode_batch(sample, disallowed_special=()) == [
        reference_ids(tok, s, memo=memo) for s in sample]


def test_batched_equals_single_encode_on_all_of_multiscript(tok, lines):
    assert sum(len(s.encode()) for s in lines) > 1_000_000
    batched = tok.encode_batch(lines, disallowed_special=())
    assert batched == [tok.encode(s, disallowed_special=()) for s in lines]
    assert tok.encode("".join(lines), disallowed_special=()) == [i for ids in batched for i in ids]


def test_batched_equals_hf_tokenizers(tok, lines):
    hf = hf_tokenizer(tok)
    theirs = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    assert tok.encode_batch(lines, disallowed_special=()) == theirs


def test_batched_equals_tiktoken(tok, lines):
    enc = tiktoken_encoding(tok)
    assert tok.encode_batch(lines, disallowed_special=()) == enc.encode_ordinary_batch(lines)


def test_tiktoken_rank_rule_differs_when_a_token_has_two_splits():
    # Rules: 'b'+'c' -> 256 'bc', 'a'+'b' -> 257 'ab', 'ab'+'c' -> 258 'abc'.
    # BPE on "abc": rank 0 merges b,c -> [a, bc]; no rule joins a+bc -> [97, 256].
    # tiktoken merges any adjacent pair whose bytes are a token: a+bc = 'abc' -> [258].
    tok = gpubpe.Tokenizer(Vocabulary.from_rules([(98, 99, 256), (97, 98, 257), (257, 99, 258)]))
    assert tok.encode("abc") == [97, 256] == reference_ids(tok, "abc")
    assert tiktoken_encoding(tok).encode_ordinary("abc") == [258]


# ---------------------------------------------------------------- round trips

text_with_specials = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(SPECIALS)), max_size=8).map("".join)


@given(st.lists(st.text(max_size=40), max_size=6))
def test_str_batches_round_trip_and_equal_reference(tok, texts):
    texts = [t for t in texts if _encodable(t)]
    batch = tok.encode_batch(texts, disallowed_special=())
    assert batch == [reference_ids(tok, t) for t in texts]
    assert tok.decode_batch(batch) == texts


@given(st.lists(st.binary(max_size=60), max_size=6))
def test_bytes_batches_round_trip_and_equal_reference(tok, texts):
    batch = tok.encode_arrays(texts, disallowed_special=())
    assert batch.tolist() == [reference_ids(tok, t) for t in texts]
    assert [tok.decode_bytes(batch[i]) for i in range(len(texts))] == texts


@given(st.lists(text_with_specials, max_size=4))
def test_special_tokens_round_trip(tok, texts):
    texts = [t for t in texts if _encodable(t)]
    batch = tok.encode_batch(texts, allowed_special="all")
    assert tok.decode_batch(batch) == texts
    for text, ids in zip(texts, batch):
        specials = [i for i in ids if i >= tok.vocab_size]
        found = regex.findall("|".join(regex.escape(s) for s in sorted(SPECIALS, key=len)[::-1]),
                              text)
        assert specials == [tok.special_tokens[s] for s in found]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---------------------------------------------------------------- threads and splits


def test_ids_do_not_depend_on_threads_or_batch_splits(tok, lines):
    whole = tok.encode_arrays(lines[:6000], num_threads=1, disallowed_special=())
    for threads in (2, 3, 8):
        tok.clear_cache()
        again = tok.encode_arrays(lines[:6000], num_threads=threads, disallowed_special=())
        assert np.array_equal(again.ids, whole.ids) and np.array_equal(again.offsets, whole.offsets)
    pieces = [tok.encode_batch(lines[a:min(a + 777, 6000)], num_threads=2, disallowed_special=())
              for a in range(0, 6000, 777)]
    assert [ids for piece in pieces for ids in piece] == whole.tolist()


def test_one_long_document_is_shared_by_threads_exactly(tok, lines, monkeypatch):
    text = "".join(lines[:8000])
    one = tok.encode(text, disallowed_special=())
    monkeypatch.setattr(tokenizer_module, "_MIN_CUT_BYTES", 1000)  # many cuts
    for threads in (2, 5):
        assert tok.encode_batch([text], num_threads=threads, disallowed_special=())[0] == one


TRICKY = list("aZé 'stmdlrev1٣!./-_\t\n\r\x0b\x0c\x85\xa0\u3000\u2028中😀\u0301") + [
    "'s", "'ll", "  ", "\n\n", " \n", "<|fim|>"]


@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.characters(exclude_categories=["Cs"])),
                max_size=60).map("".join), st.integers(2, 4))
def test_cutting_documents_for_threads_never_changes_words(tok, text, threads):
    # Cut every few bytes (at GPT-2-safe points) and spread over threads: same ids.
    with mock.patch.object(tokenizer_module, "_PARALLEL_MIN_BYTES", 0), \
            mock.patch.object(tokenizer_module, "_MIN_CUT_BYTES", 1):
        ids = tok.encode_batch([text, text[::-1]], num_threads=threads, disallowed_special=())
    assert ids == [reference_ids(tok, text), reference_ids(tok, text[::-1])]


def test_tokenizers_pickle_for_worker_processes(tok, lines):
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.encode_batch(lines[:50], allowed_special="all") == \
        tok.encode_batch(lines[:50], allowed_special="all")


def test_the_numba_kernels_ran(tok):
    tok.encode_batch(["hello world"] * 3)  # the serial kernel
    with mock.patch.object(tokenizer_module, "_PARALLEL_MIN_BYTES", 0):  # the threaded steps
        tok.encode_batch(["hello world"] * 3, num_threads=2)
    tok.encode_batch([f"hello {SPECIALS[0]} world"], allowed_special="all")  # cut in pieces
    for kernel in (kernels.word_refs_scan_cpu, kernels.word_parts, kernels.new_words_of_part,
                   kernels.global_word_slots,
                   kernels.encode_word_list_cpu, kernels.count_piece_tokens_cpu,
                   kernels.write_piece_tokens_cpu, kernels.build_pieces_cpu):
        assert kernel.signatures, f"{kernel.__name__} did not run: a Python fallback?"


def test_word_cache_stays_bounded_and_never_changes_ids(tok, lines, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "_CACHE_WORDS", 64)
    monkeypatch.setattr(tokenizer_module, "_CACHE_POOL_BYTES", 512)
    small = gpubpe.Tokenizer(tok.vocabulary)
    expected = tok.encode_batch(lines[:3000], disallowed_special=())
    for start in range(0, 3000, 500):
        assert small.encode_batch(lines[start:start + 500], disallowed_special=()) == \
            expected[start:start + 500]
        assert small._cache.used[0] <= 64


# ---------------------------------------------------------------- long words


def test_a_million_repeated_bytes_encode_fast_and_exactly(tok):
    tok.encode("a" * 1000)
    started = time.perf_counter()
    ids = tok.encode("a" * 1_000_000)
    assert time.perf_counter() - started < 1.0
    assert tok.decode(ids) == "a" * 1_000_000
    hf = hf_tokenizer(tok)
    assert tok.encode("a" * 100_000) == hf.encode("a" * 100_000, add_special_tokens=False).ids


def test_a_megabyte_of_random_bytes_encodes_fast_and_round_trips(tok):
    data = np.random.default_rng(0).integers(0, 256, 1_000_000, dtype=np.uint8).tobytes()
    started = time.perf_counter()
    ids = tok.encode(data, disallowed_special=())
    assert time.perf_counter() - started < 1.0
    assert tok.decode_bytes(ids) == data
    assert ids[:2000] == tok.encode(data[:len(tok.decode_bytes(ids[:2000]))],
                                    disallowed_special=())


# ---------------------------------------------------------------- special tokens


def test_special_ids_follow_the_vocabulary(tok):
    ids = tok.encode("a<|endoftext|>b<|fim|>", allowed_special="all")
    assert ids[1] == tok.vocab_size and ids[-1] == tok.vocab_size + 2
    assert tok.n_vocab == tok.vocab_size + 3


def test_special_tokens_follow_tiktoken_rules(tok):
    text = "x<|fim_middle|>y<|endoftext|>"
    with pytest.raises(SpecialTokenError, match=r"document 1 holds the special token "
                                                r"'<\|fim_middle\|>' at character 1"):
        tok.encode_batch(["fine", text])
    allowed = tok.encode(text, allowed_special={"<|endoftext|>"}, disallowed_special=())
    assert allowed[-1] == tok.vocab_size
    assert tok.decode(allowed) == text and tok.vocab_size + 1 not in allowed
    assert tok.encode_ordinary(text) == tok.encode(text, disallowed_special=())
    assert tok.encode_ordinary(text) == reference_ids(tok, text)
    with pytest.raises(SpecialTokenError, match="<|nope|>"):
        tok.encode("x", allowed_special={"<|nope|>"})
    with pytest.raises(TypeError, match="collection of str"):
        tok.encode("x", allowed_special="<|endoftext|>")
    for call in (tok.encode, tok.encode_batch):
        with pytest.raises(InputTypeError, match="a collection of str, not 5"):
            call(["x"] if call == tok.encode_batch else "x", disallowed_special=5)


def test_longest_special_token_wins(tok):
    # "<|fim_middle|>" starts like "<|fim|>"? No: check the longer of two overlapping ones.
    tok2 = gpubpe.Tokenizer(Vocabulary.from_rules(tok.vocabulary.rules, ["<|a|>", "<|a|>b"]))
    ids = tok2.encode("<|a|>b<|a|>", allowed_special="all")
    assert ids == [tok2.vocab_size + 1, tok2.vocab_size]


@given(st.lists(st.text("<ab|> ", min_size=1, max_size=6), min_size=1, max_size=40,
                unique=True),
       st.lists(st.text("<ab|> xé", max_size=30), min_size=1, max_size=4))
def test_special_matches_are_regex_alternations_longest_first(tok, specials, texts):
    """Tokens sharing prefixes (the host finds the longest one at a byte by narrowing runs of
    the tokens in byte order): the matches of a regex alternation, longest token first."""
    with_specials = gpubpe.Tokenizer(Vocabulary.from_rules(tok.vocabulary.rules, specials),
                                     "cpu")
    alternation = regex.compile("|".join(regex.escape(t) for t in
                                         sorted(specials, key=len, reverse=True)))
    expected = []
    for text in texts:
        ids, at = [], 0
        for match in alternation.finditer(text):
            ids += with_specials.encode_ordinary(text[at:match.start()])
            ids.append(with_specials.special_tokens[match.group()])
            at = match.end()
        expected.append(ids + with_specials.encode_ordinary(text[at:]))
    assert with_specials.encode_batch(texts, allowed_special="all") == expected


def test_special_tokens_never_span_documents(tok):
    batch = tok.encode_batch(["x<|endof", "text|>y"], allowed_special="all")
    assert tok.vocab_size not in batch[0] + batch[1]


# ---------------------------------------------------------------- other patterns and Scaffold


SKIPPING = r"\p{L}+|\d"  # drops spaces and punctuation, as regex.findall does


@pytest.mark.parametrize("pattern", ["cl100k", "o200k", None, SKIPPING])
def test_other_patterns_equal_reference(lines, pattern):
    tok = gpubpe.train(lines[:1500], 600, pattern=pattern, progress=False)
    sample = lines[:400:7] + ["", "a\n\n b", "x" * 3000, "é, 中文 12 ok"]
    regex_text = NAMED_PATTERNS.get(pattern, pattern) if pattern else r"(?s).+"
    with mock.patch.object(tokenizer_module, "_PARALLEL_MIN_BYTES", 0):  # the threaded steps
        assert tok.encode_batch(sample, num_threads=2) == [reference_ids(tok, s, regex_text)
                                                           for s in sample]
    raw = [b"caf\xc3\xa9 \xff\xfeab 12", b"\xe4\xb8\xad\xe6 x"]  # invalid UTF-8 inside
    assert tok.encode_batch(raw) == [reference_ids(tok, r, regex_text) for r in raw]
    # Named patterns split with their Numba scanner, no pattern with the one that cuts where
    # no token joins (JOINS); only a custom one goes through regex. (The signatures of a
    # process: this asked for word_refs_given_cpu under None, and passed only where another
    # test had compiled it first.)
    split_kernel = kernels.word_refs_given_cpu if pattern == SKIPPING else \
        kernels.word_refs_scan_cpu
    assert split_kernel.signatures
    assert (tok._scanner is None) == (pattern == SKIPPING)


def test_scaffold_demolish_map_is_applied_per_word():
    # Rules: a+b -> 256 'ab', 256+c -> 257 'abc'. Mark 256 scaffold: output ids are
    # 0-255, then 257 becomes 256; internal 256 demolishes to [a, b].
    rules = np.array([(97, 98, 256), (256, 99, 257)])
    pieces = [bytes([b]) for b in range(256)] + [b"abc"]
    demolish = [[i] for i in range(256)] + [[97, 98], [256]]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in demolish])])
    vocab = Vocabulary(rules, [*pieces[:256], b"ab", b"abc"], output_bytes=pieces,
                       demolish_ids=np.concatenate(demolish).astype(np.uint32),
                       demolish_offsets=offsets.astype(np.int64))
    tok = gpubpe.Tokenizer(vocab)
    assert tok.vocab_size == 257
    assert tok.encode_batch(["abc", "ab", "abab c", "abcabc"]) == [
        [256], [97, 98], [97, 98, 97, 98, 32, 99], [256, 256]]
    assert tok.decode([97, 98, 256]) == "ababc"


# ---------------------------------------------------------------- ragged batches


def test_ragged_batch_indexing_and_padding(tok):
    texts = ["hello world", "", "a"]
    batch = tok.encode_arrays(texts)
    assert batch.ids.dtype == np.uint32 and batch.offsets.dtype == np.int64
    assert len(batch) == 3 and batch.offsets[0] == 0 and batch.offsets[-1] == batch.ids.size
    assert [batch[i].tolist() for i in range(3)] == tok.encode_batch(texts)
    assert batch[-1].tolist() == tok.encode("a") and tok.decode(batch[0]) == "hello world"
    ids, mask = batch.padded(pad_id=7)
    assert ids.shape == mask.shape == (3, len(batch[0]))
    assert ids[1].tolist() == [7] * ids.shape[1] and mask[1].sum() == 0
    assert ids[0][mask[0] == 1].tolist() == batch[0].tolist()
    with pytest.raises(ValueError, match="document 0 has"):
        batch.padded(max_len=1)
    cut, cut_mask = batch.padded(max_len=1, truncate=True)
    assert cut[:, 0].tolist() == [batch[0][0], 0, batch[2][0]] and cut_mask[:, 0].tolist() == [1, 0, 1]
    with pytest.raises(IndexError):
        batch[3]
    assert tok.decode_batch(batch) == texts


def test_a_few_short_documents_take_one_quick_call_each_with_the_batch_ids(tok, lines,
                                                                           monkeypatch):
    """Up to ``_QUICK_BATCH`` documents, 1 KB in all: one ``_quick_ids`` call each (a
    batch's fixed ~45 us is more than those), the batch path's ids; special tokens to find
    or check, and bad input, take the batch path."""
    short = [line for line in lines if 0 < len(line) < 100][:8]
    expected = tok.encode_arrays(short).tolist()
    batches = []
    monkeypatch.setattr(gpubpe.Tokenizer, "encode_arrays",
                        lambda self, texts, **kw: batches.append(texts) or RaggedBatch(
                            np.zeros(0, np.uint32), np.zeros(len(texts) + 1, np.int64)))
    assert tok.encode_batch(short) == expected
    assert tok.encode_batch([t.encode() for t in short]) == expected
    assert tok.encode_batch(short, disallowed_special=()) == expected
    assert tok.encode_batch(short, allowed_special="all") == expected  # none in them
    assert batches == []
    specials = ["x <|endoftext|> y", "<|fim|>"]
    tok.encode_batch(specials)  # a special token's start: the batch path checks and raises
    tok.encode_batch(short + ["one more"])  # nine documents
    tok.encode_batch(["x" * 600, "y" * 600])  # over 1 KB in all: the batch path's cache
    tok.encode_batch(["a", b"b"])  # the batch path names the bad item
    tok.encode_batch([None])
    assert batches == [specials, short + ["one more"], ["x" * 600, "y" * 600], ["a", b"b"],
                       [None]]
    with pytest.raises(ConfigError, match="num_threads=0"):
        tok.encode_batch(short, num_threads=0)


def test_empty_input(tok):
    assert tok.encode_batch([]) == [] and tok.encode("") == []
    assert tok.encode_batch(["", "", ""]) == [[], [], []]
    assert len(tok.encode_arrays([])) == 0
    assert tok.decode_batch([]) == [] and tok.decode_batch([[], []]) == ["", ""]
    assert RaggedBatch(np.zeros(0), np.zeros(1)).padded()[0].shape == (0, 0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("texts, message", [
    (["a", None, "b"], r"texts\[1\] is a NoneType"),
    ([None], r"texts\[0\] is a NoneType"),
    (["a", b"b"], r"texts\[1\] is bytes but texts\[0\] is str"),
    ([b"a", 3], r"texts\[1\] is a int"),
    ("just a string", "takes a list of documents"),
])
def test_bad_batches_raise_type_error_naming_the_index(tok, texts, message):
    with pytest.raises(TypeError, match=message):
        tok.encode_batch(texts)


def test_encode_buffer_checks_its_ranges(tok):
    data = b"hello world, hello"
    assert tok.encode_buffer(data, [0, 6], [5, 18]).tolist() == tok.encode_batch(
        ["hello", "world, hello"])
    for starts, ends in (([0, 3], [5, 18]), ([0], [19]), ([-1], [3]), ([4], [2]), ([0, 1], [2])):
        with pytest.raises(ValueError, match="document|one length"):
            tok.encode_buffer(data, starts, ends)


def test_lone_surrogates_are_a_clear_error(tok):
    with pytest.raises(CorpusError, match=r"texts\[1\] holds a lone surrogate '\\ud800' at "
                                          r"character 2"):
        tok.encode_batch(["ok", "ab\ud800"])
    with pytest.raises(TypeError, match="text is a NoneType"):
        tok.encode(None)


def test_nul_bytes_are_ordinary_text(tok):
    text = "a\x00b\x00\x00 c"
    assert tok.encode(text) == reference_ids(tok, text)
    assert tok.decode(tok.encode(text)) == text


def test_decoding_foreign_ids_names_the_first_bad_one(tok):
    with pytest.raises(ValueError, match="id 99999 at position 1 of document 1 is out of range"):
        tok.decode_batch([[1, 2], [3, 99999, -1]])
    with pytest.raises(ValueError, match="id -1 at position 0"):
        tok.decode([-1])
    with pytest.raises(ValueError, match=f"id {tok.n_vocab} at position 2"):
        tok.decode(np.array([1, 2, tok.n_vocab], dtype=np.uint32))
    with pytest.raises(TypeError, match="position 1 is 'x'"):
        tok.decode([1, "x"])
    with pytest.raises(TypeError, match="position 0 is 2.5"):
        tok.decode([2.5])
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([2**70])
    for ids in (np.array([5, tok.n_vocab + 3], np.uint32), np.array([5, -2], np.int64)):
        with pytest.raises(ValueError, match="at position 1 is out of range"):  # gather checks
            tok.decode_batch(RaggedBatch(ids, np.array([0, 1, 2], np.int64)))


def test_a_bad_id_in_a_short_list_is_named_as_in_a_long_one(tok):
    # decode() joins a short list's bytes in Python: a negative id must fall to the general
    # path's error, not index the table from its end (a padding of None past the table,
    # tried for min()'s cost, let -2 * n index id 0).
    n, good = tok.n_vocab, tok.encode("hello world, again")
    for bad in (-1, -n, -2 * n, -2 * n - 7, n, 2 * n - 1, 2 * n + 5):
        for ids in ([bad], [*good, bad], [bad, *good], [*good, bad, *good]):
            with pytest.raises(ValueError, match=f"id {bad} at position {ids.index(bad)} "
                                                 "is out of range"):
                tok.decode(ids)
    assert tok.decode(good * 3) == tok.decode(np.array(good * 3)) == "hello world, again" * 3


def test_gather_token_bytes_matches_a_python_join():
    """The gather's 16-byte slot moves: tokens of 0-40 bytes (longer than a slot too), the
    last ones at the table's end, documents of every length, empty ones too."""
    rng = np.random.default_rng(7)
    tokens = [rng.integers(0, 256, n).astype(np.uint8).tobytes() for n in rng.integers(1, 41, 300)]
    tokens[-1], tokens[-2] = b"\xff", b"abc"  # short tokens within 16 bytes of the end
    table_bytes = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    table_offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64)
    lengths = np.diff(table_offsets).astype(np.uint8)
    slots = kernels.byte_slots(table_bytes, table_offsets)
    ids = np.concatenate([rng.integers(0, len(tokens), 5000), [299, 298, 299]]).astype(np.int64)
    cuts = np.sort(rng.integers(0, ids.size, 40))
    doc_offsets = np.concatenate([[0], cuts, [ids.size, ids.size]]).astype(np.int64)
    for typed in (ids, ids.astype(np.uint32)):
        out, byte_offsets, bad = kernels.gather_token_bytes_cpu(typed, doc_offsets, table_bytes,
                                                                table_offsets, lengths, slots)
        assert bad == -1
        for d in range(doc_offsets.size - 1):
            expected = b"".join(tokens[t] for t in ids[doc_offsets[d]:doc_offsets[d + 1]])
            assert out[byte_offsets[d]:byte_offsets[d + 1]].tobytes() == expected
        assert byte_offsets[-1] == out.size


def test_first_bad_id_finds_out_of_range_ids_and_gaps():
    lengths = np.array([1, 2, 0, 3], dtype=np.uint8)  # id 2 is a gap
    assert kernels.first_bad_id(np.array([0, 1, 3, 3], np.uint32), lengths) == -1
    assert kernels.first_bad_id(np.array([0, 1, 2, 3], np.uint32), lengths) == 2
    assert kernels.first_bad_id(np.array([3, 4], np.int64), lengths) == 1
    assert kernels.first_bad_id(np.array([1, -1], np.int64), lengths) == 1
    assert kernels.first_bad_id(np.array([1, 2**63 + 5], np.uint64), lengths) == 1
    table_bytes = np.frombuffer(b"abbccc", dtype=np.uint8)
    table_offsets = np.array([0, 1, 3, 3, 6], dtype=np.int64)
    slots = kernels.byte_slots(table_bytes, table_offsets)
    for ids, bad in (([0, 3, 1], -1), ([0, 2], 1), ([4], 0), ([1, -3], 1)):
        out, bounds, found = kernels.gather_token_bytes_cpu(
            np.array(ids, np.int64), np.array([0, len(ids)], np.int64), table_bytes,
            table_offsets, lengths, slots)
        assert found == bad
        if bad < 0:
            assert out.tobytes() == b"".join([b"a", b"bb", b"", b"ccc"][i] for i in ids)


def test_long_batches_name_a_bad_document_in_a_later_chunk(tok):
    """A long list of mixed text (past the 4,096 items iter_batches reads at once); ids equal the
    one-by-one encoding, and a bad item past the first chunk is named by its index."""
    texts = [f"line {i} \u4e2d\u6587\n" if i % 3 else f"plain {i}\n" for i in range(9000)]
    batch = tok.encode_arrays(texts, num_threads=1)
    assert batch[8999].tolist() == tok.encode(texts[8999]) and len(batch) == 9000
    with pytest.raises(TypeError, match=r"texts\[5000\] is bytes but texts\[0\] is str"):
        tok.encode_arrays(texts[:5000] + [b"x"] + texts[5000:])
    with pytest.raises(ValueError, match=r"texts\[6000\] holds a lone surrogate"):
        tok.encode_arrays(texts[:6000] + ["a\ud800"] + texts[6000:])

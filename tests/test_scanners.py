"""The Numba scanners of the named patterns split as ``regex`` does.

Every case compares the pieces of ``kernels.pretok.split_ends`` with
``regex.findall`` of the same pattern on the same text (DeepSeek's: its three regexes in
sequence, ``pretokenize.split_words``; bytes that are not
valid UTF-8 go through ``surrogateescape``, as gpubpe treats them), then the
wiring: encoding and counting run the scanners, and agree with tiktoken's own
regex engine on a vocabulary exported to it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

import gpubpe
from gpubpe import pretokenize
from gpubpe.kernels import encode as encode_kernels
from gpubpe.kernels.pretok import (
    CHAR_CRLF,
    CHAR_L,
    CHAR_M,
    CHAR_N,
    CHAR_PS,
    CHAR_S,
    CHAR_U,
    CHAR_W,
    LETTER,
    NUMBER,
    OTHER,
    SPACE,
    count_scanned_words,
    split_ends,
)
from gpubpe.pretokenize import (
    NAMED_PATTERNS,
    count_words,
    resolve_pattern,
    scanner_for,
    split_words,
    word_bytes,
)

ROOT = Path(__file__).resolve().parent.parent
REAL_FILES = [ROOT / "tests" / "data" / "multiscript.txt", ROOT / "gpubpe" / "data" / "demo.txt"]
SCANNERS = {name: scanner_for(regex) for name, regex in NAMED_PATTERNS.items()}
NAMES = list(SCANNERS)
# Every general category; Cs (surrogates) has no UTF-8 form: invalid bytes stand for it.
CATEGORIES = ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So "
              "Zs Zl Zp Cc Cf Co Cn").split()
INVALID = [b"\xff", b"\x80", b"\xe4\xb8", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80",
           b"\xf0\x9f\x98"]


def scanned(document: bytes, name: str) -> list[bytes]:
    scanner = SCANNERS[name]
    data = np.frombuffer(document, dtype=np.uint8)
    ends = split_ends(data, np.array([0], np.int64), np.array([len(document)], np.int64),
                      scanner, pretokenize.scanner_table(scanner)).tolist()
    return [document[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def found(document: bytes, name: str) -> list[bytes]:
    text = document.decode("utf-8", "surrogateescape")
    return [word_bytes(w) for w in split_words(text, resolve_pattern(name))]


def check(texts, names=NAMES) -> None:
    for text in texts:
        document = text if isinstance(text, bytes) else text.encode("utf-8")
        for name in names:
            assert scanned(document, name) == found(document, name), (name, document)


@lru_cache(maxsize=1)
def category_samples() -> dict[str, list[str]]:
    """Per category: its first, middle and last code points and a few spread between."""
    code_points = np.arange(0x110000)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    samples = {}
    for category in CATEGORIES:
        members = [m.start() for m in regex.finditer(r"\p{gc=" + category + "}", text)]
        picks = sorted({0, len(members) // 2, len(members) - 1,
                        *range(0, len(members), max(1, len(members) // 6))})
        samples[category] = [text[members[k]] for k in picks]
    return samples


# ---------------------------------------------------------------- the class table


def test_flag_table_follows_the_general_category_of_every_code_point():
    # L = Lu Ll Lt Lm Lo; N = Nd Nl No; o200k's U = Lu Lt Lm Lo M, W = Ll Lm Lo M;
    # DeepSeek's M = Mn Mc Me and PS = P* S*.
    L, N, U, W, M, PS = CHAR_L, CHAR_N, CHAR_U, CHAR_W, CHAR_M, CHAR_PS
    expected = {"Lu": L | U, "Ll": L | W, "Lt": L | U, "Lm": L | U | W, "Lo": L | U | W,
                "Mn": U | W | M, "Mc": U | W | M, "Me": U | W | M, "Nd": N, "Nl": N, "No": N,
                **{c: PS for c in "Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So".split()}}
    flags = pretokenize.code_point_flags()
    code_points = np.arange(0x110000)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    for category in CATEGORIES:
        members = np.concatenate([code_points[m.start():m.end()]
                                  for m in regex.finditer(r"\p{gc=" + category + "}+", text)])
        got = np.unique(flags[members] & (L | N | U | W | M | PS))
        assert got.tolist() == [expected.get(category, 0)], category


def test_the_shipped_unicode_table_is_regexs_unicode_16():
    """The table the scanners read (``gpubpe/data``, made by ``bench/make_unicode_table.py``)
    is what ``regex`` reads under the 'dev' extra's pin (Unicode 16.0); a newer regex (17.0
    from 2025.10.22) reads more letters, and this fails: the table is right, not the pin."""
    from importlib.metadata import version

    shipped, read = pretokenize.code_point_flags(), pretokenize.flags_from_regex()
    differ = np.flatnonzero(shipped != read)
    assert differ.size == 0, (version("regex"), [hex(c) for c in differ[:5]], differ.size)
    punctuation = pretokenize.punctuation_from_regex()  # DeepSeek Coder's \p{P}
    assert np.array_equal(pretokenize.unicode_punctuation(), np.concatenate(
        [np.arange(lo, hi + 1) for lo, hi in punctuation])), version("regex")
    assert ord("!") in pretokenize.unicode_punctuation() and \
        ord("$") not in pretokenize.unicode_punctuation()  # Sc, a symbol
    assert pretokenize.code_point_classes()[[ord("a"), ord("7"), ord(" "), ord("!")]].tolist() \
        == [LETTER, NUMBER, SPACE, OTHER]


def test_deepseek_classes_are_read_as_regex_reads_them():
    """DeepSeek Coder's and LLM's flag table reads their CJK ranges and the LLM's letter and
    punctuation classes as plain ranges; ``regex`` over every code point agrees."""
    code_points = np.arange(0x110000)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    steps = pretokenize.DEEPSEEK_LLM_SPLITS
    for run in (steps[4], steps[1][len("\\s?"):], steps[2][len("\\s?"):]):
        read = [code_points[m.start():m.end()] for m in regex.finditer(run, text)]
        assert np.array_equal(np.unique(pretokenize._members(run)), np.concatenate(read)), run
    with pytest.raises(ValueError, match="plain characters"):
        pretokenize._members(r"[^\p{L}]+")


def test_whitespace_and_crlf_flags():
    # regex's \s is Unicode White_Space: not the separators \x1c-\x1f str.isspace() takes.
    flags = pretokenize.code_point_flags()
    for char in " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2028\u2029\u202f\u3000":
        assert flags[ord(char)] & CHAR_S, repr(char)
    for char in "a.\x1c\u200b\u180e\ufeff":
        assert not flags[ord(char)] & CHAR_S, repr(char)
    assert [c for c in range(0x110000) if flags[c] & CHAR_CRLF] == [10, 13]


def test_every_category_has_samples():
    samples = category_samples()
    assert all(samples[c] for c in CATEGORIES)  # Zl and Zp hold one code point each
    assert sum(map(len, samples.values())) > 150


# ---------------------------------------------------------------- targeted cases


@pytest.mark.parametrize("name", NAMES)
def test_every_pair_of_categories(name):
    samples = category_samples()
    firsts = {c: s[len(s) // 2] for c, s in samples.items()}
    lasts = {c: s[-1] for c, s in samples.items()}
    texts = []
    for a, b in itertools.product(CATEGORIES, repeat=2):
        x, y = firsts[a], lasts[b]
        texts += [x + y, " " + x + y, x + " " + y, x + "'s" + y, x + y + "\n", x + x + y + y,
                  x + "\u0301" + y, "A" + x + "a" + y]
    check(texts, [name])


@pytest.mark.parametrize("name", NAMES)
def test_every_sample_of_every_category_in_context(name):
    contexts = ["{}", "a{}", "A{}b", " {}", "{} ", "1{}", ".{}", "'{}", "{}'S", "\n{}\r\n", "{}{}"]
    texts = [c.format(s, s) for samples in category_samples().values() for s in samples
             for c in contexts]
    check(texts, [name])
    check([b"a" + bad + b"b" for bad in INVALID] + [b" " + bad + "中".encode() for bad in INVALID]
          + [bad + b"\n/x" for bad in INVALID], [name])


def test_contractions_in_every_case():
    suffixes = ["s", "t", "m", "d", "ll", "ve", "re", "\u017f", "x", "l", "v", "r"]
    cased = {"".join(v) for s in suffixes
             for v in itertools.product(*[(ch.lower(), ch.upper()) for ch in s])}
    texts = [before + "'" + suffix + after
             for suffix in cased
             for before in ["", "a", "Ab", "AB", "ab", "1", " ", "'", "中", "\u0301", "é"]
             for after in ["", "x", "X", " ", "'", "1", "'s"]]
    check(texts)


def test_digit_runs_next_to_letters():
    digits = ["1", "\u0663", "\u2167", "\u00bd", "\U0001d7ce"]  # Nd, Arabic-Indic, Nl, No, math
    texts = [before + digit * n + after
             for digit in digits for n in range(1, 11)
             for before in ["", "a", " ", "x ", ".", "A"]
             for after in ["", "b", " ", "B", ".", "\n"]]
    texts += ["1" * n + "\u0663" * m for n in range(1, 6) for m in range(1, 6)]
    check(texts)


def test_whitespace_mixes_and_ends_of_text():
    alphabet = [" ", "\t", "\n", "\r", "\u3000", "\x0b", "\x85", "a", "."]
    texts = ["".join(p) for n in range(1, 5) for p in itertools.product(alphabet, repeat=n)]
    texts += ["a" + " " * n + tail for n in range(1, 5) for tail in ["", "b", "\n", "\n\n ", "1"]]
    check(texts)


def test_hand_worked_splits():
    # cl100k: a prefix char joins letters only at a piece start ("..a" -> "..", "a");
    # digits go in threes; a whitespace run at the end of text is one piece.
    assert scanned(b"..a x.a 1234567 \n  ", "cl100k") == \
        [b"..", b"a", b" x", b".a", b" ", b"123", b"456", b"7", b" \n  "]
    # o200k: an upper-case run ends after its last letter that is also "lower"
    # (Lo here); CR/LF and "/" trail punctuation; no \s++$ rule.
    assert scanned("ABC\u4e2dDE .\n/x \n  ".encode(), "o200k") == \
        [b"ABC\xe4\xb8\xad", b"DE", b" .\n/", b"x", b" \n", b"  "]
    # An invalid byte is one "other" char (as surrogateescape makes it): one can
    # prefix letters, two form a punctuation run first.
    # Llama 3: cl100k's split but for a whitespace run that reaches the end and has
    # other whitespace after its last CR/LF (cl100k's \s++$ keeps it whole).
    assert scanned(b"..a x.a 1234567 \n  ", "llama3") == \
        [b"..", b"a", b" x", b".a", b" ", b"123", b"456", b"7", b" \n", b"  "]
    assert scanned(b"a \n\n b", "llama3") == scanned(b"a \n\n b", "cl100k") == \
        [b"a", b" \n\n", b" b"]
    for name in ("cl100k", "o200k", "llama3"):
        assert scanned(b"\xffabc", name) == [b"\xffabc"]
        assert scanned(b"\xe4\xb8abc", name) == [b"\xe4\xb8", b"abc"]


# ---------------------------------------------------------------- random and real text


def _category_chars():
    return st.sampled_from(sorted({s for v in category_samples().values() for s in v}))


tricky = st.sampled_from(list("aZ1 '\t\n\r\x0b/.\u3000\u0301") +
                         ["'s", "'LL", "'Ve", "'\u017f", "  ", "\r\n", " \n ", "\n/", "123"])
text_chunks = st.lists(st.one_of(_category_chars(), tricky, st.characters(exclude_categories=["Cs"])),
                       max_size=30).map("".join)
byte_documents = st.lists(st.one_of(text_chunks.map(str.encode), st.sampled_from(INVALID)),
                          max_size=6).map(b"".join)


@given(byte_documents)
def test_random_text_from_every_category(document):
    check([document])


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_real_multilingual_files(path):
    data = path.read_bytes()
    check([data])
    check(data.splitlines(keepends=True)[:3000])


# ---------------------------------------------------------------- wiring


@given(st.lists(byte_documents, max_size=4), st.sampled_from(["cl100k", "o200k", "llama3"]))
def test_counting_uses_the_scanner_and_equals_regex(documents, name):
    expected = Counter()
    for document in documents:
        expected.update(found(document, name))
    assert count_words(documents, name) == dict(expected)


def test_counting_runs_the_numba_kernel():
    assert count_words(["Don't stop, 12345!"], "o200k") == \
        {b"Don't": 1, b" stop": 1, b",": 1, b" ": 1, b"123": 1, b"45": 1, b"!": 1}
    assert count_scanned_words.signatures, "the Numba counting kernel did not run"


@pytest.fixture(scope="module")
def multiscript_documents():
    """tests/data/multiscript.txt as ~2 KB documents (English, code, zh, ja, ko, emoji)."""
    documents, current = [], ""
    for line in REAL_FILES[0].read_text(encoding="utf-8").splitlines(keepends=True):
        current += line
        if len(current.encode()) >= 2000:
            documents.append(current)
            current = ""
    return documents


@pytest.fixture(scope="module", params=["cl100k", "o200k", "llama3"])
def trained(request, multiscript_documents):
    return gpubpe.train(multiscript_documents[::4], 1200, pattern=request.param, progress=False)


def test_encoding_equals_tiktoken_with_its_own_regex(trained, multiscript_documents):
    # tiktoken splits with its own engine (fancy-regex), not ours, and the ranks
    # of a gpubpe-trained vocabulary are its ids.
    encoding = trained.to_tiktoken()
    documents = multiscript_documents[:200]
    expected = encoding.encode_ordinary_batch(documents)
    assert trained.encode_batch(documents, num_threads=2) == expected
    assert trained.encode_batch(documents, num_threads=1) == expected
    assert encode_kernels.word_refs_scan_cpu.signatures


def test_long_documents_cut_for_threads_give_the_same_ids(trained, multiscript_documents):
    text = "".join(multiscript_documents)  # ~1.1 MB: cut at safe points for two threads
    pattern = pretokenize.resolve_pattern(trained.vocabulary.pattern)
    custom = gpubpe.Tokenizer(dataclasses.replace(trained.vocabulary, pattern="(?:)" + pattern))
    assert trained.encode(text) == custom.encode(text)
    assert trained.encode_arrays([text, text[:5000]], num_threads=2).ids.tolist() == \
        trained.encode_arrays([text, text[:5000]], num_threads=1).ids.tolist()


def test_the_newest_letters_split_as_hf_bytelevel_splits_them():
    """The GPT-2 scanner's letters are Unicode 16.0's (``gpubpe/data/unicode16_flags.zlib``),
    as HF tokenizers' ByteLevel pre-tokenizer (its own regex engine) has them: letters of
    Unicode 15.0-16.0 join the "A" after them, those of 17 and later do not."""
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    from gpubpe.bytes_order import gpt2_byte_to_unicode

    to_byte = {char: byte for byte, char in gpt2_byte_to_unicode().items()}
    byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    letters = [0x11F04, 0x2EBF0, 0x10D4A, 0x16D43, 0x11380, 0x323B0, 0x10940, 0x1E6C0, 0x3D000]
    for cp in letters:
        text = chr(cp) + "A :" + chr(cp) + "1 b" + chr(cp)
        hf = [bytes(map(to_byte.__getitem__, piece)) for piece, _ in
              byte_level.pre_tokenize_str(text)]
        assert scanned(text.encode(), "gpt2") == hf, (hex(cp), regex.__version__,
                                                      tokenizers.__version__)

"""Pre-tokenization: split patterns, special tokens, corpus readers, word counting.

A document is split into words with a pattern (GPT-2's by default); words never
cross documents or special tokens. Bytes that are not valid UTF-8 are carried
through the ``str`` world with ``surrogateescape`` and come back unchanged.

Corpora are read as batches of UTF-8 bytes cut into segments (a document, or
the text between special tokens). Word counting for the named patterns (gpt2,
cl100k, o200k) runs the exact Numba scanners of ``gpubpe.kernels.pretok`` in
threads (they release the GIL); a custom pattern uses ``regex``.

Bytes that are not valid UTF-8 (input given as bytes) are split as ``regex``
splits the ``surrogateescape``-decoded text: each byte that starts no valid
sequence is one character of no class ("other": not a letter, number, mark
or whitespace), so it joins punctuation runs and can prefix a letter run.
Every path (Numba scanners, ``regex`` for custom patterns, the oracle) agrees
on this. It is not what ``errors="replace"`` decoding would give: that merges
a broken sequence into one U+FFFD, so ``b"\\xe4\\xb8abc"`` would be one piece
there and is two here (``b"\\xe4\\xb8"``, ``b"abc"``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from .errors import ConfigError, CorpusError
from .kernels.pretok import (
    CHAR_CRLF,
    CHAR_L,
    CHAR_N,
    CHAR_S,
    CHAR_U,
    CHAR_W,
    CL100K,
    GPT2,
    LETTER,
    NUMBER,
    O200K,
    SPACE,
    count_scanned_words,
)

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
NAMED_PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN, "o200k": O200K_PATTERN}

# Bytes per batch handed to a counting thread.
_BATCH_BYTES = 8 << 20


def resolve_pattern(pattern: str | None) -> str | None:
    """A pattern name ('gpt2', 'cl100k', 'o200k'), a custom regex, or None (no split)."""
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise ConfigError(f"pattern must be a name, a regex string or None, not {type(pattern).__name__}")
    text = NAMED_PATTERNS.get(pattern, pattern)
    try:
        regex.compile(text)
    except regex.error as exc:
        raise ConfigError(
            f"pattern {pattern!r} is neither a known name {sorted(NAMED_PATTERNS)} nor a valid regex: {exc}"
        ) from None
    return text


def split_words(text: str, pattern: str | None) -> list[str]:
    """Split one piece of text (no special tokens in it) into words."""
    if pattern is None:
        return [text] if text else []
    return regex.findall(pattern, text, concurrent=True)


def special_splitter(special_tokens: Iterable[str]) -> regex.Pattern | None:
    """A regex matching any special token, longest first, or None when there are none."""
    specials = sorted(set(special_tokens), key=len, reverse=True)
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s in specials))


def as_bytes(document: str | bytes, where: str) -> bytes:
    """A document as UTF-8 bytes; a str with lone surrogates is a CorpusError."""
    if isinstance(document, str):
        try:
            return document.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CorpusError(
                f"{where} holds a lone surrogate {document[exc.start]!r} at character "
                f"{exc.start}: it is not encodable as UTF-8; clean the text or pass bytes"
            ) from None
    if isinstance(document, bytes | bytearray | memoryview):
        return bytes(document)
    raise CorpusError(f"{where} is a {type(document).__name__}; expected str or bytes")


def word_bytes(word: str) -> bytes:
    """A word found by ``regex`` in surrogateescape-decoded text, back to its bytes."""
    return word.encode("utf-8", "surrogateescape")


@lru_cache(maxsize=1)
def code_point_classes() -> np.ndarray:
    """Class of every code point (other/letter/number/space) as ``regex`` sees it."""
    code_points = np.arange(0x110000, dtype=np.int64)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    classes = np.zeros(0x110000, dtype=np.uint8)
    for cls, pattern in ((LETTER, r"\p{L}+"), (NUMBER, r"\p{N}+"), (SPACE, r"\s+")):
        for match in regex.finditer(pattern, text):
            classes[code_points[match.start():match.end()]] = cls
    return classes


@lru_cache(maxsize=1)
def code_point_flags() -> np.ndarray:
    """``CHAR_*`` bit flags of every code point, as ``regex`` sees it (cl100k / o200k scanners).

    Each flag is the set of one class the patterns name, read from ``regex``
    itself (Python's ``unicodedata`` lags behind its Unicode version).
    """
    code_points = np.arange(0x110000, dtype=np.int64)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    text = code_points.astype(np.uint32).tobytes().decode("utf-32-le")
    flags = np.zeros(0x110000, dtype=np.uint8)
    for flag, pattern in _FLAG_CLASSES:
        for match in regex.finditer(pattern + "+", text):
            flags[code_points[match.start():match.end()]] |= flag
    return flags


_FLAG_CLASSES = (
    (CHAR_L, r"\p{L}"),
    (CHAR_N, r"\p{N}"),
    (CHAR_S, r"\s"),
    (CHAR_U, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
    (CHAR_W, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
    (CHAR_CRLF, r"[\r\n]"),
)
_SCANNERS = {GPT2_PATTERN: GPT2, CL100K_PATTERN: CL100K, O200K_PATTERN: O200K}


def scanner_for(regex_text: str | None) -> int | None:
    """The Numba scanner id (``kernels.pretok.GPT2`` ...) of a named pattern, None for others."""
    return _SCANNERS.get(regex_text)


def scanner_table(scanner: int) -> np.ndarray:
    """The class table a scanner reads: classes for GPT-2, flags for cl100k and o200k."""
    return code_point_classes() if scanner == GPT2 else code_point_flags()


# ---------------------------------------------------------------- corpus readers


@dataclass
class Batch:
    """UTF-8 bytes cut into documents: document d is ``data[doc_ends[d-1]:doc_ends[d]]``."""

    data: bytes
    doc_ends: np.ndarray  # int64, ascending, last == len(data)


def iter_batches(corpus, text_field: str = "text") -> Iterator[Batch]:
    """Read a corpus as batches of about 8 MB of whole documents.

    ``corpus`` is a path, or an iterable of paths, ``str`` and ``bytes``
    documents. A ``.jsonl`` file gives the ``text_field`` of each line; any
    other file gives each line as a document, its "\\n" kept (as HF's file
    trainer does). A str counts as a path when a file or folder is there, or
    when it reads as a corpus file name (``*.txt``, ``*.jsonl``, ``*.parquet``,
    no spaces), so a typo is an error rather than a one-line corpus; any other
    str is a document. Pass bytes to force a document.
    """
    if isinstance(corpus, str | os.PathLike):
        corpus = [corpus]
    if isinstance(corpus, bytes | bytearray):
        raise CorpusError("corpus is a bytes object; pass a list of documents or a path")
    try:
        items = iter(corpus)
    except TypeError:
        raise CorpusError(
            f"corpus must be a path or an iterable of paths/str/bytes, not {type(corpus).__name__}"
        ) from None
    pending: list[bytes] = []
    pending_bytes = 0
    for index, item in enumerate(items):
        if isinstance(item, os.PathLike) or (isinstance(item, str) and _looks_like_path(item)):
            if pending:
                yield _documents_batch(pending)
                pending, pending_bytes = [], 0
            yield from _read_path(Path(item), text_field)
            continue
        document = as_bytes(item, f"document {index}")
        pending.append(document)
        pending_bytes += len(document)
        if pending_bytes >= _BATCH_BYTES:
            yield _documents_batch(pending)
            pending, pending_bytes = [], 0
    if pending:
        yield _documents_batch(pending)


def _documents_batch(documents: list[bytes]) -> Batch:
    lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
    return Batch(b"".join(documents), np.cumsum(lengths))


_CORPUS_SUFFIX = regex.compile(r"^\S+\.(?:txt|jsonl|parquet)$")


def _looks_like_path(item: str) -> bool:
    """A str names a file when one exists there, or when it reads as a corpus file name.

    Anything else is a document: "hello.world" and "a/b" are text, not paths.
    """
    if "\n" in item or len(item) > 4096:
        return False
    return Path(item).is_file() or Path(item).is_dir() or bool(_CORPUS_SUFFIX.match(item))


def _read_path(path: Path, text_field: str) -> Iterator[Batch]:
    check_readable(path)
    if path.suffix == ".jsonl":
        yield from _read_jsonl(path, text_field)
    else:
        yield from _read_lines(path)


def check_readable(path: Path) -> None:
    """Raise CorpusError unless ``path`` is a readable text file."""
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    if path.is_dir():
        raise CorpusError(f"{path} is a directory; pass the files inside it")
    try:
        with path.open("rb") as handle:
            head = handle.read(8192)
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror})") from None
    if b"\x00" in head:
        raise CorpusError(f"{path} looks binary (NUL bytes in its first 8 KiB); expected text")


def _read_lines(path: Path) -> Iterator[Batch]:
    with path.open("rb") as handle:
        while True:
            data = handle.read(_BATCH_BYTES) + handle.readline()
            if not data:
                return
            doc_ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
            if doc_ends.size == 0 or doc_ends[-1] != len(data):
                doc_ends = np.append(doc_ends, len(data))
            yield Batch(data, doc_ends.astype(np.int64))


def _read_jsonl(path: Path, text_field: str) -> Iterator[Batch]:
    documents: list[bytes] = []
    size = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise CorpusError(f"{path}:{number}: not valid JSON ({exc})") from None
            if not isinstance(record, dict) or text_field not in record:
                raise CorpusError(
                    f"{path}:{number}: no {text_field!r} field; choose the field with text_field="
                )
            documents.append(as_bytes(record[text_field], f"{path}:{number} {text_field!r}"))
            size += len(documents[-1])
            if size >= _BATCH_BYTES:
                yield _documents_batch(documents)
                documents, size = [], 0
    if documents:
        yield _documents_batch(documents)


def segments(batch: Batch, specials: regex.Pattern | None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) byte ranges of the batch's text: documents, minus special tokens."""
    ends = batch.doc_ends
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    if specials is None:
        return starts, ends
    spans = np.array([m.span() for m in specials.finditer(batch.data)], dtype=np.int64)
    if spans.size == 0:
        return starts, ends
    cuts = np.unique(np.concatenate([[0], ends, spans[:, 0], spans[:, 1]]))
    starts, ends = cuts[:-1], cuts[1:]
    inside = np.searchsorted(spans[:, 0], starts, side="right") - 1
    in_special = (inside >= 0) & (starts < spans[np.maximum(inside, 0), 1])
    return starts[~in_special], ends[~in_special]


# ---------------------------------------------------------------- word counting


def count_words(
    corpus,
    pattern: str | None = "gpt2",
    special_tokens: Iterable[str] = (),
    text_field: str = "text",
    num_threads: int | None = None,
    progress=None,
) -> dict[bytes, int]:
    """Count pre-tokenized words over a corpus: ``{word_bytes: count}``.

    Special-token text is cut out and never counted. ``progress`` (a tqdm-like
    object) is advanced by the number of bytes read.
    """
    regex_text = resolve_pattern(pattern)
    specials = special_splitter(special_tokens)
    special_bytes = regex.compile(specials.pattern.encode("utf-8")) if specials else None
    counter = _count_scanned_batch if scanner_for(regex_text) is not None else _count_regex_batch
    threads = num_threads or os.cpu_count() or 1
    totals: Counter = Counter()
    with ThreadPoolExecutor(threads) as pool:
        pending = []
        for batch in iter_batches(corpus, text_field):
            starts, ends = segments(batch, special_bytes)
            pending.append(pool.submit(counter, batch.data, starts, ends, regex_text))
            if len(pending) > threads:
                totals.update(pending.pop(0).result())
            if progress is not None:
                progress.update(len(batch.data))
        for future in pending:
            totals.update(future.result())
    return dict(totals)


def _count_scanned_batch(data: bytes, starts, ends, regex_text) -> dict[bytes, int]:
    """Word counts of a batch by the Numba scanner of a named pattern."""
    array = np.frombuffer(data, dtype=np.uint8)
    scanner = scanner_for(regex_text)
    word_at, word_len, word_count, collided = count_scanned_words(
        array, starts, ends, scanner, scanner_table(scanner)
    )
    if collided:  # two words shared a 64-bit hash: count this batch exactly instead
        return _count_regex_batch(data, starts, ends, regex_text)
    return {
        data[at:at + length]: count
        for at, length, count in zip(word_at.tolist(), word_len.tolist(), word_count.tolist())
    }


def _count_regex_batch(data: bytes, starts, ends, regex_text) -> Counter:
    """Word counts of a batch by ``regex`` (a custom pattern, or None: a segment is a word)."""
    counts: Counter = Counter()
    for start, end in zip(starts.tolist(), ends.tolist()):
        counts.update(split_words(data[start:end].decode("utf-8", "surrogateescape"), regex_text))
    return Counter({word_bytes(word): count for word, count in counts.items()})

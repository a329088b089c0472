"""Word counts as a file: count a corpus once, train many vocabularies from it.

A :class:`WordCounts` holds the distinct pre-tokenized words (bytes) and their
int64 counts, with the split pattern and special tokens that made them and a
fingerprint. Training needs nothing else, so ``gpubpe.train(counts=...)``,
``gpubpe sweep`` and ``--extend`` never read the corpus again.

File format (``FORMAT_VERSION`` 1): an uncompressed NumPy ``.npz`` archive,
whatever its suffix (``.counts`` by convention), loaded without pickle:

- ``word_bytes`` uint8: every word's bytes, concatenated, words sorted by bytes;
- ``word_offsets`` int64 (W+1): word ``i`` is ``word_bytes[offsets[i]:offsets[i+1]]``;
- ``counts`` int64 (W);
- ``header`` uint8: UTF-8 JSON ``{"format": "gpubpe-counts", "version": 1,
  "pattern": ..., "special_tokens": [...], "fingerprint": ..., "sources": [...]}``.

Why ``.npz`` and not Parquet: NumPy is already a dependency (Parquet needs
``pyarrow``, ~100 MB, an optional extra here); loading is a few ``memcpy``s
of flat columns, which is what keeps loading under 10% of counting time; and
the file opens anywhere NumPy does (``np.load(path)``), in R/Julia/Rust
through their ``.npy`` readers. The columns are plain and flat, so a Parquet
export is one ``pyarrow.Table.from_arrays`` away if a user wants one.

The fingerprint is a SHA-256 over the pattern, the special tokens and the
sorted (word, count) table. It depends only on what was counted, not on how:
counting shards and merging gives the file of one pass, fingerprint included.
``sources`` lists the input files (path, size) for the record.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ConfigError, ModelFormatError
from .pretokenize import resolve_pattern

FORMAT = "gpubpe-counts"
FORMAT_VERSION = 1


@dataclass
class WordCounts:
    """Distinct words with int64 counts, and the pattern and special tokens that made them."""

    word_bytes: np.ndarray  # uint8, words concatenated in sorted order
    word_offsets: np.ndarray  # int64, W + 1
    counts: np.ndarray  # int64, W
    pattern: str | None = "gpt2"
    special_tokens: list[str] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)

    # ------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, word_counts: dict[bytes, int], pattern: str | None = "gpt2",
                  special_tokens: Iterable[str] = (), sources=()) -> WordCounts:
        """From ``{word_bytes: count}`` (sorted here, so equal counts give equal files)."""
        words = sorted(word_counts)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        counts = np.fromiter((word_counts[w] for w in words), dtype=np.int64, count=len(words))
        data = np.frombuffer(b"".join(words), dtype=np.uint8).copy()
        return cls(data, offsets, counts, pattern, list(special_tokens), list(sources))

    def as_dict(self) -> dict[bytes, int]:
        """``{word_bytes: count}``, what the trainers take."""
        data = self.word_bytes.tobytes()
        bounds = self.word_offsets.tolist()
        return dict(zip((data[a:b] for a, b in zip(bounds, bounds[1:])), self.counts.tolist()))

    def __len__(self) -> int:
        return int(self.counts.size)

    @property
    def total_bytes(self) -> int:
        """Bytes of text counted (special tokens excluded)."""
        return int(np.dot(np.diff(self.word_offsets), self.counts))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of pattern, special tokens and the sorted (word, count) table."""
        digest = hashlib.sha256()
        digest.update(json.dumps([self.pattern, self.special_tokens]).encode("utf-8"))
        for column in (self.word_offsets, self.counts, self.word_bytes):
            digest.update(np.ascontiguousarray(column).tobytes())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return (f"WordCounts({len(self):,} words, {self.total_bytes:,} bytes, "
                f"pattern={self.pattern!r}, special_tokens={self.special_tokens})")

    # ------------------------------------------------------------ files
    def save(self, path) -> None:
        """Write the counts file atomically (temporary file beside it, then rename)."""
        path = Path(path)
        header = {"format": FORMAT, "version": FORMAT_VERSION, "pattern": self.pattern,
                  "special_tokens": self.special_tokens, "fingerprint": self.fingerprint,
                  "sources": self.sources}
        buffer = io.BytesIO()
        np.savez(buffer, word_bytes=self.word_bytes, word_offsets=self.word_offsets,
                 counts=self.counts,
                 header=np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8))
        temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            temporary.write_bytes(buffer.getbuffer())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)

    @classmethod
    def load(cls, path) -> WordCounts:
        """Read a counts file; a file of another kind or a newer version is refused."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as archive:
                columns = {name: archive[name] for name in archive.files}
        except FileNotFoundError:
            raise ModelFormatError(f"{path}: no such counts file") from None
        except (ValueError, OSError, EOFError) as exc:
            raise ModelFormatError(f"{path} is not a gpubpe counts file ({exc}); make one with "
                                   "'gpubpe count FILES -o OUT.counts'") from None
        header = _header(columns, path)
        counts = cls(columns["word_bytes"], columns["word_offsets"], columns["counts"],
                     header.get("pattern"), list(header.get("special_tokens") or []),
                     list(header.get("sources") or []))
        _check_columns(counts, path)
        if header.get("fingerprint") != counts.fingerprint:
            raise ModelFormatError(f"{path}: the fingerprint does not match the counts; "
                                   "the file is corrupt, count the corpus again")
        return counts

    # ------------------------------------------------------------ merging
    def merged(self, *others: WordCounts) -> WordCounts:
        """These counts plus others' (same pattern and special tokens), summed per word."""
        for other in others:
            check_same_split(self, other, "merge counts")
        total: Counter = Counter(self.as_dict())
        sources = list(self.sources)
        for other in others:
            total.update(other.as_dict())
            sources += other.sources
        return WordCounts.from_dict(total, self.pattern, self.special_tokens, sources)


def _header(columns: dict, path: Path) -> dict:
    missing = {"word_bytes", "word_offsets", "counts", "header"} - columns.keys()
    if missing:
        raise ModelFormatError(f"{path} is not a gpubpe counts file (no {sorted(missing)})")
    try:
        header = json.loads(columns["header"].tobytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ModelFormatError(f"{path}: the counts header is not JSON; the file is corrupt") \
            from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ModelFormatError(f"{path} is not a gpubpe counts file (format "
                               f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelFormatError(
            f"{path}: counts format version {version!r} is newer than this gpubpe reads "
            f"({FORMAT_VERSION}); upgrade gpubpe or count the corpus again with this one")
    return header


def _check_columns(counts: WordCounts, path: Path) -> None:
    offsets = counts.word_offsets
    ok = (counts.word_bytes.dtype == np.uint8 and offsets.dtype == np.int64
          and counts.counts.dtype == np.int64 and offsets.size == counts.counts.size + 1
          and offsets[0] == 0 and offsets[-1] == counts.word_bytes.size
          and bool(np.all(np.diff(offsets) > 0)) and bool(np.all(counts.counts > 0)))
    if not ok:
        raise ModelFormatError(f"{path}: the counts columns are inconsistent (types, offsets or "
                               "non-positive counts); the file is corrupt")


def check_same_split(ours: WordCounts, theirs: WordCounts, doing: str) -> None:
    """ConfigError unless both counts were made with the same pattern and special tokens."""
    if resolve_pattern(ours.pattern) != resolve_pattern(theirs.pattern):
        raise ConfigError(f"cannot {doing}: pattern {theirs.pattern!r} differs from "
                          f"{ours.pattern!r}; count both with the same --pattern")
    if sorted(ours.special_tokens) != sorted(theirs.special_tokens):
        raise ConfigError(f"cannot {doing}: special tokens {theirs.special_tokens} differ from "
                          f"{ours.special_tokens}; count both with the same special tokens")


def check_pattern(counts: WordCounts, pattern: str | None, where: str) -> None:
    """ConfigError when ``pattern`` is not the pattern the counts were made with."""
    if resolve_pattern(pattern) != resolve_pattern(counts.pattern):
        raise ConfigError(
            f"{where}: the counts were made with pattern {counts.pattern!r}, not {pattern!r}; "
            f"pass pattern={counts.pattern!r} (--pattern {counts.pattern or 'none'}) or count "
            "the corpus again with the pattern you want")


def as_counts(counts) -> WordCounts:
    """A WordCounts from a WordCounts or a counts-file path."""
    if isinstance(counts, WordCounts):
        return counts
    if isinstance(counts, str | os.PathLike):
        return WordCounts.load(counts)
    raise ConfigError(f"counts must be a WordCounts or a counts file path, not "
                      f"{type(counts).__name__}")


# ---------------------------------------------------------------- counting


def count_words(corpus, *, pattern: str | None = "gpt2", special_tokens: Iterable[str] = (),
                text_field: str = "text", num_threads: int | None = None,
                progress: bool = True, backend: str = "cpu") -> WordCounts:
    """Pre-tokenize and count a corpus once: a :class:`WordCounts` to save or train from.

    ``corpus`` is what :func:`gpubpe.train` takes (paths or documents). Special
    token text is cut out and never counted; the progress bar counts bytes read.
    ``backend="cuda"`` counts on the device (any named pattern): the same counts.
    """
    from tqdm.auto import tqdm

    from .pretokenize import count_words as count_corpus_words

    resolve_pattern(pattern)
    special_tokens = list(dict.fromkeys(special_tokens))
    paths = _paths_of(corpus)
    total = sum(p.stat().st_size for p in paths) if paths else None
    with tqdm(total=total, desc="counting words", unit="B", unit_scale=True,
              disable=not progress, leave=False) as bar:
        word_counts = count_corpus_words(corpus, pattern, special_tokens, text_field,
                                         num_threads, bar, backend)
    sources = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    return WordCounts.from_dict(word_counts, pattern, special_tokens, sources)


def _paths_of(corpus) -> list[Path]:
    """The corpus items the one reader takes as files (its rule, never a file-system guess)."""
    from .pretokenize import is_corpus_path

    items = [corpus] if isinstance(corpus, str | os.PathLike) else corpus
    if not isinstance(items, list | tuple):
        return []
    return [Path(item) for item in items if is_corpus_path(item)]


# ---------------------------------------------------------------- training


def train_on_counts(counts, vocab_size, *, corpus=None, extend=None, add=None,
                    min_frequency: int = 0, pattern: str | None = "gpt2",
                    special_tokens: Iterable[str] = (), tie_break: str = "hf",
                    scaffold: bool = False, backend: str = "auto", progress: bool = True,
                    max_token_length: int | None = None, normalizer: str | None = None):
    """``gpubpe.train(counts=...)``: train from saved word counts, or extend a vocabulary
    (from counts, or from a corpus counted here as the base splits and normalizes it)."""
    if normalizer is not None:
        raise ConfigError("normalizer= applies to training from a corpus: a counts file holds "
                          "words already split, and extend follows the base's normalizer")
    if extend is not None and max_token_length is not None:
        raise ConfigError("max_token_length applies to training; extend does not take it")
    if extend is not None:
        from .extend import load_base

        if counts is not None:  # a .tiktoken base is split with the counts' pattern
            counts = as_counts(counts)
        extend = load_base(extend, pattern if counts is None else counts.pattern)
        form = None if extend.layout is None else extend.layout.normalizer
        if form is not None and counts is not None:
            raise ConfigError(f"the base normalizes its text ({form}); pass the corpus instead "
                              "of counts=, so it is normalized as the base does")
        normalized = False  # whether the counts are of text the base's normalizer ran on
        if corpus is not None and counts is None:
            from .trainer import normalized_documents

            normalized = form is not None
            text = normalized_documents(corpus, form) if normalized else corpus
            counts = count_words(text, pattern=extend.pattern,
                                 special_tokens=extend.special_tokens, progress=progress)
            corpus = None
    if corpus is not None:
        raise ConfigError("pass either a corpus or counts=, not both; count the corpus with "
                          "gpubpe.count_words and merge the counts to combine them")
    if counts is None:
        raise ConfigError("extend= needs counts= (the word counts of the text to learn from)")
    counts = as_counts(counts)
    if extend is not None:  # the base's pattern and special tokens rule, checked there
        from .extend import extend_tokenizer

        return extend_tokenizer(extend, counts, add, min_frequency=min_frequency,
                                vocab_size=vocab_size, progress=progress, normalized=normalized)
    check_pattern(counts, pattern, "train")
    special_tokens = list(dict.fromkeys(special_tokens)) or list(counts.special_tokens)
    if sorted(special_tokens) != sorted(counts.special_tokens):
        raise ConfigError(
            f"special tokens {special_tokens} differ from those the counts were made with "
            f"({counts.special_tokens}): their text was counted otherwise; count again with "
            "these special tokens")
    return train_counts_tokenizer(counts, vocab_size, min_frequency=min_frequency,
                                  tie_break=tie_break, scaffold=scaffold, backend=backend,
                                  progress=progress, max_token_length=max_token_length)


def train_counts_tokenizer(counts: WordCounts, vocab_size, *, min_frequency=0, tie_break="hf",
                           scaffold=False, backend="auto", progress=True,
                           max_token_length=None):
    """A Tokenizer trained on ``counts`` (checks as :func:`gpubpe.train`)."""
    import time
    import warnings

    from .backend import resolve_training_backend
    from .errors import CorpusError
    from .tokenizer import Tokenizer
    from .trainer import check_train_args, vocabulary_from_counts

    check_train_args(vocab_size, min_frequency, tie_break, max_token_length)
    if scaffold and vocab_size <= 256:
        raise ConfigError(f"scaffold=True needs vocab_size above 256 (got {vocab_size})")
    if counts.total_bytes == 0:
        raise CorpusError("the counts hold no text to train on")
    chosen = resolve_training_backend(backend)
    started = time.perf_counter()
    word_counts = counts.as_dict()
    loaded = time.perf_counter()
    vocab = vocabulary_from_counts(word_counts, vocab_size, min_frequency, scaffold, progress,
                                   chosen, counts.special_tokens, counts.pattern,
                                   max_token_length)
    if vocab.vocab_size < vocab_size:
        warnings.warn(f"training stopped at {vocab.vocab_size} tokens, below "
                      f"vocab_size={vocab_size}: no pair left", stacklevel=3)
    vocab.metadata.update(
        corpus_bytes=counts.total_bytes, unique_words=len(counts),
        counts_fingerprint=counts.fingerprint, seconds_loading_counts=round(loaded - started, 3),
        seconds_merging=round(time.perf_counter() - loaded, 3), backend=chosen.name,
        min_frequency=int(min_frequency), tie_break=tie_break, scaffold=bool(scaffold))
    return Tokenizer(vocab, backend)

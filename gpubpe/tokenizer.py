"""Tokenizer: encode and decode with a trained or loaded vocabulary.

Encoding pre-tokenizes, encodes each distinct word once with the Numba kernel
(``gpubpe.kernels.encode``), keeps a bounded cache of word encodings across
calls, and concatenates. Special tokens follow tiktoken's rules: text equal to
a special token raises unless allowed (``allowed_special``), or is encoded as
ordinary text when listed in ``disallowed_special=()``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Literal

import numpy as np

from .errors import SpecialTokenError
from .kernels.encode import encode_words_cpu, rule_table
from .model import Vocabulary
from .pretokenize import as_text, resolve_pattern, special_splitter, split_words, word_bytes

_CACHE_LIMIT = 1 << 18


class Tokenizer:
    """A byte-level BPE tokenizer (see :func:`gpubpe.train` and :meth:`Tokenizer.load`)."""

    def __init__(self, vocab: Vocabulary):
        self._vocab = vocab
        self._pattern = resolve_pattern(vocab.pattern)
        self._special_ids = vocab.special_ids()
        self._special_re = special_splitter(vocab.special_tokens)
        self._rule_keys, self._rule_values, self._rule_result = rule_table(vocab.rules)
        self._cache: dict[bytes, list[int]] = {}

    # ------------------------------------------------------------ introspection
    @property
    def vocab_size(self) -> int:
        """Normal tokens (256 bytes included, special tokens excluded)."""
        return self._vocab.vocab_size

    @property
    def n_vocab(self) -> int:
        """Every id the tokenizer can emit: normal plus special tokens."""
        return self.vocab_size + len(self._special_ids)

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The rules in rank order as ``(left_bytes, right_bytes)``."""
        pieces = self._vocab.token_bytes
        return [(pieces[left], pieces[right]) for left, right, _ in self._vocab.rules.tolist()]

    @property
    def scaffold_tokens(self) -> list[bytes]:
        """Bytes of the scaffold tokens (Scaffold-BPE), in internal id order; [] for BPE."""
        return [self._vocab.token_bytes[t] for t in self._vocab.scaffold_ids]

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special_ids)

    @property
    def metadata(self) -> dict:
        return self._vocab.metadata

    @property
    def vocabulary(self) -> Vocabulary:
        return self._vocab

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one id (special tokens: their UTF-8 text)."""
        self._check_ids([token_id])
        if token_id < self.vocab_size:
            return self._vocab.output_token_bytes[token_id]
        return self._vocab.special_tokens[token_id - self.vocab_size].encode("utf-8")

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, special_tokens={len(self._special_ids)}, "
                f"pattern={self._vocab.pattern!r})")

    # ------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write the tokenizer to one JSON file (format ``gpubpe/1``), atomically."""
        self._vocab.save(path)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Read a tokenizer written by :meth:`save`; a bad file raises ModelFormatError."""
        return cls(Vocabulary.load(path))

    # ------------------------------------------------------------ encoding
    def encode(
        self,
        text: str | bytes,
        *,
        allowed_special: Literal["all"] | Collection[str] = (),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """Encode text (str, or bytes of any content) to ids.

        Special-token text raises SpecialTokenError unless it is in
        ``allowed_special`` (then it becomes its special id) or excluded from
        ``disallowed_special`` (then it is encoded as ordinary text).
        """
        text = as_text(text, "text")
        allowed = self._special_set(allowed_special)
        disallowed = self._special_set(disallowed_special) - allowed
        out: list[int] = []
        for piece, special in self._split_special(text, allowed, disallowed):
            if special is not None:
                out.append(self._special_ids[special])
            else:
                out.extend(self._encode_ordinary_text(piece))
        return out

    def encode_ordinary(self, text: str | bytes) -> list[int]:
        """Encode text, treating special-token text as ordinary text."""
        return self._encode_ordinary_text(as_text(text, "text"))

    def _special_set(self, value) -> set[str]:
        if value == "all":
            return set(self._special_ids)
        unknown = set(value) - set(self._special_ids)
        if unknown:
            raise SpecialTokenError(
                f"{sorted(unknown)} are not special tokens of this tokenizer; "
                f"it has {sorted(self._special_ids)}"
            )
        return set(value)

    def _split_special(self, text: str, allowed: set[str], disallowed: set[str]):
        """Yield (ordinary_text, None) and (None... , special) pieces in order."""
        if self._special_re is None or not (allowed or disallowed):
            yield text, None
            return
        start = 0
        for match in self._special_re.finditer(text):
            token = match.group()
            if token in disallowed:
                raise SpecialTokenError(
                    f"the text holds the special token {token!r} at character {match.start()}; "
                    f"pass allowed_special={{{token!r}}} to encode it as a special token, or "
                    "disallowed_special=() to encode it as ordinary text"
                )
            if token in allowed:
                yield text[start:match.start()], None
                yield "", token
                start = match.end()
        yield text[start:], None

    def _encode_ordinary_text(self, text: str) -> list[int]:
        words = [word_bytes(w) for w in split_words(text, self._pattern)]
        self._encode_missing(words)
        cache = self._cache
        out: list[int] = []
        for word in words:
            out.extend(cache[word])
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        return out

    def _encode_missing(self, words: Iterable[bytes]) -> None:
        missing = [w for w in dict.fromkeys(words) if w not in self._cache]
        if not missing:
            return
        for word, ids in zip(missing, self.encode_words(missing)):
            self._cache[word] = ids

    def encode_words(self, words: list[bytes]) -> list[list[int]]:
        """BPE-encode pre-tokenized words (no splitting), one id list per word."""
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(words), dtype=np.uint8)
        ids, id_offsets = encode_words_cpu(data, offsets, self._rule_keys, self._rule_values,
                                           self._rule_result)
        flat = ids.tolist()
        bounds = id_offsets.tolist()
        return [flat[a:b] for a, b in zip(bounds, bounds[1:])]

    # ------------------------------------------------------------ decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for (special tokens as their UTF-8 text)."""
        ids = list(ids)
        self._check_ids(ids)
        pieces = self._vocab.output_token_bytes
        specials = self._vocab.special_tokens
        size = self.vocab_size
        return b"".join(
            pieces[i] if i < size else specials[i - size].encode("utf-8") for i in ids
        )

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Decode ids to text; invalid UTF-8 becomes U+FFFD unless errors='strict'."""
        return self.decode_bytes(ids).decode("utf-8", errors)

    def _check_ids(self, ids) -> None:
        limit = self.n_vocab
        for position, token_id in enumerate(ids):
            if isinstance(token_id, bool) or not isinstance(token_id, int | np.integer):
                raise TypeError(f"id at position {position} is {token_id!r}; expected an int")
            if not 0 <= token_id < limit:
                raise ValueError(
                    f"id {token_id} at position {position} is out of range: this tokenizer "
                    f"has ids 0..{limit - 1}; were the ids made by another vocabulary?"
                )

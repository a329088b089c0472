"""The vocabulary: merge rules, token bytes, special tokens, and its file format.

A vocabulary is its ordered rules ``(left, right, result)``; the bytes of each
token follow from them (ids 0-255 are the bytes; a rule creates the next id
unless the merged bytes already are a token). Special tokens take ids after
the normal ones: ``vocab_size``, ``vocab_size + 1``, ...

File format ``gpubpe/1``: one JSON object, written atomically (temporary file
in the same folder, then rename)::

    {"format": "gpubpe/1", "pattern": "gpt2", "special_tokens": ["<|endoftext|>"],
     "merges": [[left, right, result], ...], "metadata": {...}}
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ModelFormatError
from .pretokenize import resolve_pattern

FORMAT = "gpubpe/1"


@dataclass
class Vocabulary:
    """Rules in rank order, token bytes by id, special tokens, split pattern, metadata."""

    rules: np.ndarray  # (n, 3) int64: left, right, result
    token_bytes: list[bytes]  # by internal id
    special_tokens: list[str] = field(default_factory=list)
    pattern: str | None = "gpt2"
    metadata: dict = field(default_factory=dict)
    # Scaffold-BPE vocabularies (DESIGN §2) encode with every rule, then map each
    # internal id to its output ids: demolish_ids[demolish_offsets[t]:demolish_offsets[t+1]].
    # Plain BPE leaves both None: output ids are the internal ids.
    demolish_ids: np.ndarray | None = None  # uint32
    demolish_offsets: np.ndarray | None = None  # int64, one more than internal ids
    output_bytes: list[bytes] | None = None  # bytes of each output id, when they differ

    @classmethod
    def from_rules(cls, rules, special_tokens=(), pattern="gpt2", metadata=None) -> Vocabulary:
        """Build a vocabulary from rules, checking each result id against the bytes."""
        rules = np.asarray(rules, dtype=np.int64).reshape(-1, 3)
        return cls(rules, replay_token_bytes(rules), list(special_tokens), pattern,
                   dict(metadata or {}))

    @property
    def output_token_bytes(self) -> list[bytes]:
        """Bytes of each output id (normal tokens only), what decoding reads."""
        return self.token_bytes if self.output_bytes is None else self.output_bytes

    @property
    def vocab_size(self) -> int:
        """Number of normal output tokens (the 256 bytes included, special tokens excluded)."""
        return len(self.output_token_bytes)

    def special_ids(self) -> dict[str, int]:
        return {s: self.vocab_size + i for i, s in enumerate(self.special_tokens)}

    def to_json(self) -> dict:
        from . import __version__

        return {
            "format": FORMAT,
            "version": __version__,
            "pattern": self.pattern,
            "special_tokens": self.special_tokens,
            "merges": self.rules.tolist(),
            "metadata": self.metadata,
        }

    def save(self, path) -> None:
        """Write the vocabulary as JSON, atomically: a crash never leaves half a file."""
        path = Path(path)
        text = json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path) -> Vocabulary:
        """Read and validate a ``gpubpe/1`` file; errors say what is wrong with it."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ModelFormatError(f"{path}: no such tokenizer file") from None
        except IsADirectoryError:
            raise ModelFormatError(f"{path} is a directory, not a tokenizer file") from None
        except UnicodeDecodeError:
            raise ModelFormatError(f"{path} is not a gpubpe tokenizer file (not UTF-8 text)") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ModelFormatError(
                f"{path} is not valid JSON ({exc}); the file is corrupt or truncated"
            ) from None
        return cls.from_json(data, str(path))

    @classmethod
    def from_json(cls, data, where: str = "tokenizer") -> Vocabulary:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            hint = " (it looks like a HF tokenizer.json)" if isinstance(data, dict) and "model" in data else ""
            raise ModelFormatError(f"{where}: format is {found!r}, expected {FORMAT!r}{hint}")
        for key, kind in (("merges", list), ("special_tokens", list), ("metadata", dict)):
            if not isinstance(data.get(key), kind):
                raise ModelFormatError(f"{where}: field {key!r} is missing or not a {kind.__name__}")
        try:
            resolve_pattern(data.get("pattern"))
        except ValueError as exc:
            raise ModelFormatError(f"{where}: bad pattern: {exc}") from None
        rules = _rules_array(data["merges"], where)
        specials = data["special_tokens"]
        if not all(isinstance(s, str) and s for s in specials) or len(set(specials)) != len(specials):
            raise ModelFormatError(f"{where}: special_tokens must be distinct non-empty strings")
        try:
            return cls.from_rules(rules, specials, data.get("pattern"), data["metadata"])
        except ValueError as exc:
            raise ModelFormatError(f"{where}: {exc}") from None


def _rules_array(merges, where: str) -> np.ndarray:
    try:
        rules = np.array(merges, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        raise ModelFormatError(f"{where}: merges must be a list of [left, right, result] ints") from None
    if rules.size == 0:
        return rules.reshape(0, 3)
    if rules.ndim != 2 or rules.shape[1] != 3:
        raise ModelFormatError(f"{where}: merges must be a list of [left, right, result] ints")
    return rules


def replay_token_bytes(rules: np.ndarray) -> list[bytes]:
    """Token bytes implied by the rules; ValueError at the first inconsistent rule."""
    pieces = [bytes([b]) for b in range(256)]
    ids = {piece: i for i, piece in enumerate(pieces)}
    for rank, (left, right, result) in enumerate(rules.tolist()):
        if not (0 <= left < len(pieces) and 0 <= right < len(pieces)):
            raise ValueError(f"rule {rank} merges id {max(left, right)}, which is not defined yet")
        merged = pieces[left] + pieces[right]
        expected = ids.get(merged, len(pieces))
        if result != expected:
            raise ValueError(f"rule {rank} ({left}, {right}) gives id {result}; its bytes say {expected}")
        if expected == len(pieces):
            ids[merged] = expected
            pieces.append(merged)
    return pieces

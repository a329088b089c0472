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

import functools
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from . import atomic
from .errors import ConfigError, InputTypeError, ModelFormatError
from .normalize import FORMS
from .pretokenize import resolve_pattern

FORMAT = "gpubpe/1"


@dataclass
class IdLayout:
    """How an imported vocabulary numbers its ids and encodes (DESIGN §2).

    Kernels work on internal ids (0-255 the bytes, 256.. the other tokens in
    ``token_bytes``); ``output_ids`` maps each to the id a user sees, -1 for a
    token the source tool never emits (a byte missing from a HF vocabulary: HF
    drops it). The map is written by the same pass that writes the output.
    """

    output_ids: np.ndarray  # int64 per internal id: its output id, or -1 (emits nothing)
    special_ids: list[int]  # output id of each special token, in ``special_tokens`` order
    # tiktoken's rule: every rule making one token shares that token's rank (ties: leftmost).
    rank_by_token: bool = False
    # A word that is itself a token maps to it before any merge (tiktoken; HF ignore_merges).
    whole_tokens: bool = False
    # HF text handling before the split: a space before each text piece, a normalizer.
    prefix_space: bool = False
    normalizer: str | None = None  # None or a Unicode normal form (``normalize.FORMS``)
    # HF added-token flags by content: a subset of ("lstrip", "rstrip", "single_word",
    # "not_special", "normalized"): "not_special" for HF's ``special: false`` (matched
    # always, as HF does), "normalized" for ``normalized: true`` under a normalizer
    # (matched in the normalized text, its content normalized too, as HF does).
    special_flags: dict[str, list[str]] = field(default_factory=dict)
    # Which text pieces get the prefix space (``PREFIX_RULES``).
    prefix_rule: str = "unless-space"
    # SentencePiece-style BPE (HF ``byte_fallback``; ``metaspace``): the output id of each
    # byte's <0xXX> token; a token with no output id of its own (part of a character the
    # source lacks) emits these ids of its bytes.
    byte_fallback_ids: np.ndarray | None = None  # int64[256]

    def text_change(self) -> str | None:
        """What the source does to text before splitting, in words, or None: what a format
        without a normalizer or a prefix space (tiktoken, counts files) cannot follow."""
        if self.prefix_space:
            return "adds a space before each text piece"
        return None if self.normalizer is None else f"normalizes text ({self.normalizer})"

    def tokens_flagged(self, flag: str) -> frozenset[str]:
        """The added tokens with ``flag`` ("not_special": those the source does not call
        special; "normalized": those matched in the normalized text)."""
        return frozenset(token for token, flags in self.special_flags.items() if flag in flags)

    @property
    def metaspace(self) -> bool:
        """A SentencePiece-style vocabulary: a space is the source's "▁" (tokens' "▁" are
        spaces here, and a "▁" in text encodes as one), and decoding drops the prefix
        space again."""
        return self.byte_fallback_ids is not None

    @property
    def strips_space(self) -> bool:
        """Whether decoding drops one leading space of each sequence (HF's Strip or
        Metaspace decoder undoing the prefix "▁")."""
        return self.metaspace and self.prefix_space

    def to_json(self) -> dict:
        fallback = self.byte_fallback_ids
        return {"output_ids": self.output_ids.tolist(), "special_ids": list(self.special_ids),
                "rank_by_token": self.rank_by_token, "whole_tokens": self.whole_tokens,
                "prefix_space": self.prefix_space, "normalizer": self.normalizer,
                "special_flags": self.special_flags, "prefix_rule": self.prefix_rule,
                "byte_fallback_ids": None if fallback is None else fallback.tolist()}


# Which text pieces (a document cut at special tokens) HF puts a space before:
# "unless-space": each one not starting with a space (ByteLevel's add_prefix_space,
# Metaspace's prepend_scheme "always"); "always": each non-empty one (the Prepend("▁")
# normalizer of Llama 2's files); "first": a document's first piece, when it starts the
# document and not with a space (Metaspace's "first"); "sentencepiece": SentencePiece's own
# (a ``tokenizer.model`` read itself), one before the text of a document or after a special
# token, a user-defined token (matched always) counted as text: the space goes before a
# piece that starts such a stretch when the piece holds text or a user-defined token
# follows it, and never after a user-defined token.
PREFIX_RULES = ("unless-space", "always", "first", "sentencepiece")


class Template(NamedTuple):
    """The special tokens put around every document by ``add_special_tokens=True``: what HF's
    post-processor adds to one sequence (Llama 3's ``<|begin_of_text|>`` before it, RoBERTa's
    ``<s>`` before and ``</s>`` after). Names of special tokens of the vocabulary."""

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"before": list(self.before), "after": list(self.after)}


def own_layout(vocab: Vocabulary, normalizer: str | None = None) -> IdLayout:
    """The id layout of gpubpe's own numbering of ``vocab``: internal ids, special tokens
    after them, and ``normalizer``."""
    n_tokens = len(vocab.token_bytes)
    return IdLayout(np.arange(n_tokens, dtype=np.int64),
                    list(range(n_tokens, n_tokens + len(vocab.special_tokens))),
                    normalizer=normalizer)


def normalizing(vocab: Vocabulary, form: str | None) -> Vocabulary:
    """``vocab`` (gpubpe's own numbering) with its text normalized to ``form`` before the
    split, as a HF normalizer does: its own layout naming the form. None: ``vocab`` as it
    is."""
    if form is None:
        return vocab
    return Vocabulary.from_tokens(vocab.token_bytes, vocab.rules, own_layout(vocab, form),
                                  vocab.special_tokens, vocab.pattern, vocab.metadata)


def own_numbering(vocab: Vocabulary) -> bool:
    """Whether ``vocab`` numbers its tokens as gpubpe's training does (internal ids, special
    tokens after them), a normalizer aside: no layout, or its ``own_layout``."""
    layout = vocab.layout
    if layout is None:
        return True
    own = own_layout(vocab, layout.normalizer)
    return np.array_equal(layout.output_ids, own.output_ids) and all(
        getattr(layout, name) == getattr(own, name) for name in (
            "special_ids", "rank_by_token", "whole_tokens", "prefix_space", "special_flags",
            "prefix_rule")) and layout.byte_fallback_ids is None


def check_template(template: Template | None, special_tokens: list[str]) -> None:
    """ValueError unless every token of ``template`` is one of ``special_tokens``."""
    if template is None:
        return
    missing = [name for name in (*template.before, *template.after) if name not in special_tokens]
    if missing:
        raise ValueError(f"template token {missing[0]!r} is not a special token of the "
                         "vocabulary")


@dataclass
class Vocabulary:
    """Rules in rank order, token bytes by id, special tokens, split pattern, metadata."""

    rules: np.ndarray  # (n, 3) int64: left, right, result
    token_bytes: list[bytes]  # by internal id
    special_tokens: list[str] = field(default_factory=list)
    pattern: str | tuple[str, ...] | None = "gpt2"  # a tuple: regexes run in sequence
    metadata: dict = field(default_factory=dict)
    # Scaffold-BPE vocabularies (DESIGN §2) encode with every rule, then map each
    # internal id to its output ids: demolish_ids[demolish_offsets[t]:demolish_offsets[t+1]].
    # Plain BPE leaves both None: output ids are the internal ids.
    demolish_ids: np.ndarray | None = None  # uint32
    demolish_offsets: np.ndarray | None = None  # int64, one more than internal ids
    output_bytes: list[bytes] | None = None  # bytes of each output id, when they differ

    scaffold: np.ndarray | None = None  # bool per internal id (Scaffold-BPE), or None
    bitlevel_leads: list[int] | None = None  # lead bytes of the bit-level codec, if it is on
    # Imported vocabularies keep the source tool's ids and rule (see ``IdLayout``).
    layout: IdLayout | None = None
    # Special tokens around each document with ``add_special_tokens=True`` (an import's).
    template: Template | None = None

    @classmethod
    def from_rules(cls, rules, special_tokens=(), pattern="gpt2", metadata=None,
                   scaffold=None, demolish=None) -> Vocabulary:
        """Build a vocabulary from rules, checking each result id against the bytes.

        ``scaffold`` flags internal ids that are scaffold tokens (Scaffold-BPE);
        ``demolish`` maps each to its normal pieces (computed when omitted).
        """
        rules = np.asarray(rules, dtype=np.int64).reshape(-1, 3)
        vocab = cls(rules, replay_token_bytes(rules), list(special_tokens), pattern,
                    dict(metadata or {}))
        if scaffold is not None and np.any(scaffold):
            vocab._set_scaffold(np.asarray(scaffold, dtype=bool), demolish)
        return vocab

    def _set_scaffold(self, scaffold: np.ndarray, demolish: dict[int, list[int]] | None) -> None:
        if scaffold.size != len(self.token_bytes):
            raise ValueError(f"{scaffold.size} scaffold flags for {len(self.token_bytes)} tokens")
        if scaffold[:256].any():
            byte = int(np.flatnonzero(scaffold[:256])[0])
            raise ValueError(f"byte token {byte} is marked scaffold; byte tokens never are")
        demolish = shortest_normal_pieces(self.rules, scaffold) if demolish is None else demolish
        check_demolish(demolish, scaffold, self.token_bytes)
        output_id = np.cumsum(~scaffold) - 1
        pieces = [demolish[t] if scaffold[t] else [t] for t in range(scaffold.size)]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        self.scaffold = scaffold
        self.demolish_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.demolish_ids = output_id[np.concatenate(pieces)].astype(np.uint32)
        self.output_bytes = [b for b, flag in zip(self.token_bytes, scaffold) if not flag]

    @property
    def scaffold_ids(self) -> list[int]:
        """Internal ids of the scaffold tokens (empty for plain BPE)."""
        return [] if self.scaffold is None else np.flatnonzero(self.scaffold).tolist()


    @property
    def output_token_bytes(self) -> list[bytes]:
        """Bytes of each output id (normal tokens only) of a vocabulary without a layout."""
        return self.token_bytes if self.output_bytes is None else self.output_bytes

    @property
    def vocab_size(self) -> int:
        """Number of normal output tokens (the 256 bytes included, special tokens excluded)."""
        if self.layout is not None:
            return int(self.normal_output_ids().size)
        return len(self.output_token_bytes)

    def normal_output_ids(self) -> np.ndarray:
        """The distinct output ids of a layout's normal tokens (<0xXX> fallbacks included)."""
        outputs = self.layout.output_ids[self.layout.output_ids >= 0]
        if self.layout.byte_fallback_ids is not None:
            outputs = np.union1d(outputs, self.layout.byte_fallback_ids)
        return outputs

    @property
    def n_ids(self) -> int:
        """One more than the largest id (normal or special): ids below it may be gaps."""
        if self.layout is None:
            return self.vocab_size + len(self.special_tokens)
        return max([int(self.normal_output_ids().max(initial=-1)), *self.layout.special_ids]) + 1

    def special_ids(self) -> dict[str, int]:
        if self.layout is not None:
            return dict(zip(self.special_tokens, self.layout.special_ids))
        return {s: self.vocab_size + i for i, s in enumerate(self.special_tokens)}

    def id_table(self) -> list[bytes | None]:
        """Bytes of every output id below ``n_ids`` (special tokens: their UTF-8), None in gaps."""
        if self.layout is None:
            table: list[bytes | None] = list(self.output_token_bytes)
        else:
            table = [None] * self.n_ids
            if self.layout.byte_fallback_ids is not None:
                for byte, output in enumerate(self.layout.byte_fallback_ids.tolist()):
                    table[output] = bytes([byte])
            for internal, output in enumerate(self.layout.output_ids.tolist()):
                if output >= 0:
                    table[output] = self.token_bytes[internal]
        for token, token_id in self.special_ids().items():
            table[len(table):token_id + 1] = [None] * max(0, token_id + 1 - len(table))
            table[token_id] = token.encode("utf-8")
        return table

    def byte_ids(self) -> np.ndarray:
        """int64[256]: the output id of each byte token (-1 where the source tool has none)."""
        if self.layout is None:
            return np.arange(256, dtype=np.int64)
        return self.layout.output_ids[:256].copy()

    @functools.cached_property
    def join_table(self) -> np.ndarray:
        """What ``kernels.pretok.JOINS`` cuts text by (made once a vocabulary: each
        ``Tokenizer`` of it, ``with_backend``'s too, reads it; Gemma 4's takes 0.12 s): uint8 per byte pair ``256 * left +
        right``, 1 where the pair lies inside a token (no BPE symbol spans a pair left 0);
        for a SentencePiece-style vocabulary, whose tokens are whole characters (or parts
        of one), then the set of character pairs inside its tokens, which cuts finer.

        Measured (``bench/hf_file_bench.py --gguf``, one thread, cold cache): the byte
        pairs cut Gemma 4's Chinese into words of 9.7 characters on average (distinct
        words), the character pairs into 4.1; RESULTS, session 19."""
        from .kernels.pretok import char_pair_set

        joins = np.zeros(1 << 16, dtype=np.uint8)
        pool = np.frombuffer(b"".join(self.token_bytes), dtype=np.uint8).astype(np.int64)
        pairs = _pairs_within(pool, map(len, self.token_bytes), len(self.token_bytes))
        joins[pairs[0] * 256 + pairs[1]] = 1
        if self.layout is None or not self.layout.metaspace:
            return joins
        texts = [text for text in map(_utf8_or_none, self.token_bytes[256:]) if text]
        codes = np.frombuffer("".join(texts).encode("utf-32-le"), np.uint32).astype(np.int64)
        left, right = _pairs_within(codes, map(len, texts), len(texts))
        keys = np.unique(((left + 1) << 21) | (right + 1))  # kernels.pretok.char_pair_key
        return np.concatenate([joins, char_pair_set(keys.astype(np.uint64))])

    def output_map(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(ids, offsets): output ids of internal id t at ids[offsets[t]:offsets[t+1]], or Nones.

        The kernels' one output table: Scaffold demolishing, or an import's layout
        (one id per token, none for a token the source tool never emits).
        """
        if self.layout is None:
            return self.demolish_ids, self.demolish_offsets
        outputs, fallback = self.layout.output_ids, self.layout.byte_fallback_ids
        if fallback is None:
            emits = outputs >= 0
            offsets = np.zeros(emits.size + 1, dtype=np.int64)
            np.cumsum(emits, out=offsets[1:])
            return outputs[emits].astype(np.uint32), offsets
        parts = np.flatnonzero(outputs < 0)  # parts of characters: their bytes' <0xXX> ids
        lengths = np.ones(outputs.size, dtype=np.int64)
        lengths[parts] = [len(self.token_bytes[t]) for t in parts.tolist()]
        offsets = np.zeros(outputs.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.empty(offsets[-1], dtype=np.uint32)
        ids[offsets[:-1][outputs >= 0]] = outputs[outputs >= 0]
        for t in parts.tolist():
            ids[offsets[t]:offsets[t + 1]] = fallback[list(self.token_bytes[t])]
        return ids, offsets

    @classmethod
    def from_tokens(cls, token_bytes: list[bytes], rules, layout: IdLayout,
                    special_tokens=(), pattern="gpt2", metadata=None) -> Vocabulary:
        """An imported vocabulary: tokens by internal id (0-255 the bytes), rules, its layout.

        Rules may come in any rank order and any token may have no rule (it is
        then reached only whole, with ``layout.whole_tokens``). ValueError when a
        rule's bytes do not add up or two tokens share an output id.
        """
        rules = np.asarray(rules, dtype=np.int64).reshape(-1, 3)
        _check_tokens(token_bytes, rules)
        _check_layout(layout, len(token_bytes), len(special_tokens))
        return cls(rules, list(token_bytes), list(special_tokens), pattern, dict(metadata or {}),
                   layout=layout)

    def to_json(self) -> dict:
        from . import __version__

        return {
            "format": FORMAT,
            "version": __version__,
            "pattern": self.pattern,
            "special_tokens": self.special_tokens,
            "merges": self.rules.tolist(),
            "scaffold": self.scaffold_ids,
            "bitlevel": None if self.bitlevel_leads is None else {
                "lead_bytes": list(self.bitlevel_leads)},
            "demolish": {str(t): self.demolished_internal(t) for t in self.scaffold_ids},
            "metadata": self.metadata,
            **({} if self.template is None else {"template": self.template.to_json()}),
            **self._layout_json(),
        }

    def _layout_json(self) -> dict:
        if self.layout is None:
            return {}
        from .bytes_order import BYTE_TO_CHAR

        tokens = ["".join(BYTE_TO_CHAR[b] for b in piece) for piece in self.token_bytes[256:]]
        return {"tokens": tokens, "layout": self.layout.to_json()}

    def demolished_internal(self, token: int) -> list[int]:
        """Internal ids of the normal pieces of a scaffold token (its Demolishing)."""
        normal_internal = np.flatnonzero(~self.scaffold)
        a, b = self.demolish_offsets[token], self.demolish_offsets[token + 1]
        return normal_internal[self.demolish_ids[a:b]].tolist()

    def save(self, path) -> None:
        """Write the vocabulary as JSON, atomically: a crash never leaves half a file."""
        write_text_atomically(Path(path), json.dumps(self.to_json(), ensure_ascii=False,
                                                     separators=(",", ":")))

    @classmethod
    def load(cls, path) -> Vocabulary:
        """Read and validate a ``gpubpe/1`` file; errors say what is wrong with it."""
        return cls.from_json(read_tokenizer_json(Path(path)), str(path))

    @classmethod
    def from_json(cls, data, where: str = "tokenizer") -> Vocabulary:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            hint = " (it looks like a HF tokenizer.json: Tokenizer.load and from_hf read those)" \
                if isinstance(data, dict) and "model" in data else ""
            raise ModelFormatError(f"{where}: format is {found!r}, expected {FORMAT!r}{hint}")
        for key, kind in (("merges", list), ("special_tokens", list), ("metadata", dict)):
            if not isinstance(data.get(key), kind):
                raise ModelFormatError(f"{where}: field {key!r} is missing or not a {kind.__name__}")
        pattern = data.get("pattern")
        pattern = tuple(pattern) if isinstance(pattern, list) else pattern  # JSON's form of a tuple
        try:
            resolve_pattern(pattern)
        except ValueError as exc:
            raise ModelFormatError(f"{where}: bad pattern: {exc}") from None
        rules = _rules_array(data["merges"], where)
        specials = data["special_tokens"]
        try:
            specials = check_special_tokens(specials)
        except ValueError as exc:
            raise ModelFormatError(f"{where}: {exc}") from None
        if len(set(specials)) != len(specials):
            raise ModelFormatError(f"{where}: special_tokens must be distinct non-empty strings")
        scaffold, demolish = _scaffold_fields(data, len(rules), where)
        if "layout" in data:  # read here: their errors name the file once
            tokens, layout = _tokens_field(data, where), _layout_field(data, where)
        try:
            if "layout" in data:
                vocab = cls.from_tokens(tokens, rules, layout, specials, pattern,
                                        data["metadata"])
            else:
                vocab = cls.from_rules(rules, specials, pattern, data["metadata"],
                                       scaffold, demolish)
        except ValueError as exc:
            raise ModelFormatError(f"{where}: {exc}") from None
        bitlevel = data.get("bitlevel")
        if bitlevel is not None:
            leads = bitlevel.get("lead_bytes") if isinstance(bitlevel, dict) else None
            if not (isinstance(leads, list) and leads and all(isinstance(b, int) for b in leads)):
                raise ModelFormatError(f"{where}: 'bitlevel' must be {{'lead_bytes': [ints]}}")
            vocab.bitlevel_leads = leads
        vocab.template = _template_field(data, specials, where)
        return vocab


def _tokens_field(data: dict, where: str) -> list[bytes]:
    from .bytes_order import chars_to_bytes

    tokens = data.get("tokens")
    try:
        return [bytes([b]) for b in range(256)] + [chars_to_bytes(text) for text in tokens]
    except (TypeError, AttributeError, UnicodeEncodeError):
        raise ModelFormatError(f"{where}: 'tokens' must list byte-level strings (GPT-2's "
                               "alphabet), one per token after the 256 bytes") from None


def _layout_field(data: dict, where: str) -> IdLayout:
    fields = data.get("layout")
    try:
        flags = {k: list(v) for k, v in (fields.get("special_flags") or {}).items()}
        return IdLayout(np.array(fields["output_ids"], dtype=np.int64),
                        [int(i) for i in fields["special_ids"]],
                        bool(fields.get("rank_by_token")), bool(fields.get("whole_tokens")),
                        bool(fields.get("prefix_space")), fields.get("normalizer"), flags,
                        fields.get("prefix_rule", "unless-space"),
                        None if fields.get("byte_fallback_ids") is None else
                        np.array(fields["byte_fallback_ids"], dtype=np.int64))
    except (TypeError, KeyError, ValueError, AttributeError):
        raise ModelFormatError(f"{where}: 'layout' must hold output_ids and special_ids "
                               "lists of ints") from None


def _template_field(data: dict, special_tokens: list[str], where: str) -> Template | None:
    fields = data.get("template")
    if fields is None:
        return None
    parts = [fields.get(key, []) if isinstance(fields, dict) else None
             for key in ("before", "after")]
    if not all(isinstance(part, list) and all(isinstance(name, str) for name in part)
               for part in parts):
        raise ModelFormatError(f"{where}: 'template' must be {{'before': [special tokens], "
                               "'after': [special tokens]}")
    template = Template(*map(tuple, parts))
    try:
        check_template(template, special_tokens)
    except ValueError as exc:
        raise ModelFormatError(f"{where}: {exc}") from None
    return template


def _pairs_within(values: np.ndarray, lengths, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) of every two neighbours of ``values`` that lie in one of its runs of
    ``lengths`` (``count`` runs, end to end)."""
    ends = np.cumsum(np.fromiter(lengths, np.int64, count))[:-1]
    inside = np.ones(max(values.size - 1, 0), dtype=bool)
    inside[ends[ends <= inside.size] - 1] = False
    return values[:-1][inside], values[1:][inside]


def _utf8_or_none(token: bytes) -> str | None:
    """A token's text; None for a part of one character."""
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _check_tokens(token_bytes: list[bytes], rules: np.ndarray) -> None:
    """ValueError unless ids 0-255 are the bytes and each rule's parts spell its result."""
    if len(token_bytes) < 256 or any(token_bytes[b] != bytes([b]) for b in range(256)):
        raise ValueError("internal ids 0-255 must be the 256 byte tokens, in byte order")
    from .kernels.encode.rules import first_misspelt_rule

    n = len(token_bytes)
    if rules.size and (rules.min() < 0 or rules.max() >= n):
        raise ValueError(f"a rule names an id outside the {n} tokens")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, token_bytes), np.int64, n), out=offsets[1:])
    pool = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
    rank = first_misspelt_rule(pool, offsets, np.ascontiguousarray(rules))
    if rank >= 0:
        left, right, result = rules[rank].tolist()
        raise ValueError(f"rule {rank} ({left}, {right}) -> {result}: "
                         f"{token_bytes[left] + token_bytes[right]!r} is not "
                         f"{token_bytes[result]!r}")


def _check_layout(layout: IdLayout, n_tokens: int, n_specials: int) -> None:
    """ValueError unless every output id is a distinct non-negative uint32."""
    outputs = layout.output_ids
    if outputs.shape != (n_tokens,):
        raise ValueError(f"{outputs.size} output ids for {n_tokens} tokens")
    if len(layout.special_ids) != n_specials:
        raise ValueError(f"{len(layout.special_ids)} special ids for {n_specials} special tokens")
    used = np.concatenate([outputs[outputs >= 0], np.asarray(layout.special_ids, np.int64)])
    if used.size and (used.min() < 0 or used.max() >= 1 << 32):
        raise ValueError("output ids must be in 0..2**32-1")
    if np.unique(used).size != used.size:
        values, counts = np.unique(used, return_counts=True)
        raise ValueError(f"output id {int(values[counts > 1][0])} is given to two tokens")
    if layout.normalizer is not None and layout.normalizer not in FORMS:
        raise ValueError(f"normalizer {layout.normalizer!r}: expected None or one of "
                         f"{', '.join(FORMS)}")
    if layout.prefix_rule not in PREFIX_RULES:
        raise ValueError(f"prefix_rule {layout.prefix_rule!r}: expected one of {PREFIX_RULES}")
    fallback = layout.byte_fallback_ids
    if fallback is not None and (fallback.shape != (256,) or fallback.min() < 0 or np.unique(
            fallback).size != 256 or np.isin(fallback, layout.special_ids).any()):
        raise ValueError("byte_fallback_ids must be 256 distinct output ids (the <0x00>..<0xFF> "
                         "tokens), none a special token's")


def write_text_atomically(path: Path, text: str) -> None:
    """Write UTF-8 text to a temporary file beside ``path``, then rename it into place.

    The file gets mode 0666 minus the umask (0644 usually), like any other tool's.
    """
    atomic.write_text_atomically(path, text)


def check_special_tokens(special_tokens) -> list[str]:
    """Special tokens as a list of distinct non-empty str, in order; one str is one token.

    ``special_tokens="<|endoftext|>"`` is the one token, never its 13 characters.
    """
    if special_tokens is None:
        return []
    if isinstance(special_tokens, str):
        special_tokens = [special_tokens]
    try:
        tokens = list(special_tokens)
    except TypeError:
        raise InputTypeError(f"special_tokens is a {type(special_tokens).__name__}; expected a "
                             "str or a list of str") from None
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            fix = f"; write {token.decode('utf-8', 'replace')!r}" if isinstance(
                token, bytes) else ""
            raise InputTypeError(f"special token {index} is {token!r}, a "
                                 f"{type(token).__name__}; special tokens are str{fix}")
        if not token:
            raise ConfigError(f"special token {index} is the empty string; a special token "
                              "needs at least one character")
    return list(dict.fromkeys(tokens))


def _is_id(value) -> bool:
    """A JSON integer (not a bool, a float or a string)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _scaffold_fields(data: dict, n_rules: int, where: str):
    """(scaffold flags or None, demolish table or None) from a file's fields."""
    ids, table = data.get("scaffold", []), data.get("demolish", {})
    if not ids:
        return None, None
    if not (isinstance(ids, list) and all(map(_is_id, ids)) and isinstance(table, dict)):
        raise ModelFormatError(f"{where}: 'scaffold' must be a list of int ids, 'demolish' a "
                               "dict of id lists")
    n_tokens = 256 + n_rules
    bad = [t for t in ids if not 0 <= t < n_tokens]
    if bad:
        raise ModelFormatError(f"{where}: scaffold id {bad[0]} is not a token id "
                               f"(0..{n_tokens - 1})")
    flags = np.zeros(n_tokens, dtype=bool)
    flags[ids] = True
    demolish = {}
    for key, pieces in table.items():
        if not (isinstance(key, str) and key.isdigit() and isinstance(pieces, list)
                and all(map(_is_id, pieces))):
            raise ModelFormatError(f"{where}: 'demolish' entry {key!r}: {pieces!r} must map an "
                                   "id to a list of int ids")
        if not 0 <= int(key) < n_tokens or any(not 0 <= p < n_tokens for p in pieces):
            raise ModelFormatError(f"{where}: 'demolish' entry {key!r}: {pieces!r} names an id "
                                   f"outside 0..{n_tokens - 1}")
        demolish[int(key)] = pieces
    return flags, demolish


def shortest_normal_pieces(rules: np.ndarray, scaffold: np.ndarray) -> dict[int, list[int]]:
    """Demolishing table: each scaffold token's shortest sequence of normal tokens.

    Built through the rules that produce the token (the lowest rank wins a
    tie), recursively; children's bytes are shorter, so this terminates.
    """
    makers: dict[int, list[tuple[int, int]]] = {}
    for left, right, result in rules.tolist():
        makers.setdefault(result, []).append((left, right))
    table: dict[int, list[int]] = {}
    for token in np.flatnonzero(scaffold).tolist():
        table[token] = _pieces(token, makers, scaffold, table)
    return table


def _pieces(token, makers, scaffold, table) -> list[int]:
    if not scaffold[token]:
        return [token]
    if token not in table:
        options = [_pieces(left, makers, scaffold, table) + _pieces(right, makers, scaffold, table)
                   for left, right in makers[token]]
        table[token] = min(options, key=len)
    return table[token]


def check_demolish(demolish: dict[int, list[int]], scaffold: np.ndarray, token_bytes) -> None:
    """ValueError unless every scaffold token demolishes into normal tokens of its bytes."""
    for token in np.flatnonzero(scaffold).tolist():
        pieces = demolish.get(token)
        if not pieces:
            raise ValueError(f"scaffold token {token} has no demolish entry")
        if any(not 0 <= p < scaffold.size or scaffold[p] for p in pieces):
            raise ValueError(f"demolish entry of token {token} holds a scaffold or unknown id")
        if b"".join(token_bytes[p] for p in pieces) != token_bytes[token]:
            raise ValueError(
                f"demolish entry of token {token} spells {b''.join(token_bytes[p] for p in pieces)!r}, "
                f"not the token's bytes {token_bytes[token]!r}")


def _rules_array(merges, where: str) -> np.ndarray:
    # One pass over types (fast: 200k merges in ~40 ms); the slow search only names a bad rule.
    shapes_ok = all(type(rule) is list and len(rule) == 3 for rule in merges)
    bad = not shapes_ok or set(map(type, itertools.chain.from_iterable(merges))) - {int}
    found = bad and next(((rank, rule) for rank, rule in enumerate(merges)
                          if not (isinstance(rule, list) and len(rule) == 3
                                  and all(map(_is_id, rule)))), None)
    if found:
        rank, rule = found
        raise ModelFormatError(f"{where}: merge {rank} is {rule!r}; merges must be "
                               "[left, right, result] lists of ints (not floats, strings "
                               "or booleans)")
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


# The tokenizer files a model folder may hold, the first found read: HF's, Mistral's,
# SentencePiece's.
_FOLDER_FILES = ("tokenizer.json", "tekken.json", "tokenizer.model")


def tokenizer_json_path(path: Path) -> Path:
    """A tokenizer file's path: a model folder stands for the first of ``_FOLDER_FILES`` in
    it (its ``tokenizer.json`` where it holds none)."""
    if not path.is_dir():
        return path
    return next((path / name for name in _FOLDER_FILES if (path / name).exists()),
                path / "tokenizer.json")


def read_tokenizer_json(path: Path):
    """The parsed JSON of a tokenizer file; errors say what is wrong with the file."""
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
    except RecursionError:
        raise ModelFormatError(f"{path} nests JSON too deeply to be a tokenizer file; the "
                               "file is corrupt or not a tokenizer") from None
    return data

"""Tokenizer: encode and decode with a trained or loaded vocabulary.

Encoding works on whole batches: the documents become one UTF-8 buffer,
special tokens cut it into pieces, the pieces are split into words (the exact
Numba scanner of the GPT-2, cl100k, o200k or Llama 3 pattern, or ``regex`` for a custom
pattern), every distinct word is
encoded once (Numba, in threads without the GIL), and the ids are scattered
into one ragged array (``RaggedBatch``: ids uint32, offsets int64). A bounded
cache keeps the encodings of words across calls. ``encode`` is a batch of one.

Special tokens follow tiktoken's rules: text equal to a special token raises
unless allowed (``allowed_special``), or is encoded as ordinary text when
excluded from ``disallowed_special`` (``disallowed_special=()``). An imported
vocabulary's added tokens that its source marks as not special (HF ``special: false``,
GGUF user-defined: DeepSeek Coder's "ö", CodeGen's runs of spaces) are matched always, as
HF matches them; the two arguments name special tokens only.

Decoding is one gather from a flat byte table of every id.

Backends (``backend=``, DESIGN §4): ``cpu`` runs everything above in Numba;
``cuda`` also hands the BPE of the batch's distinct new words and the decoding
gather to the GPU (``gpubpe.device``); ``auto`` (the default) is ``cuda`` when
a device is usable, for batches with at least ``_AUTO_DEVICE_MIN_WORK`` bytes of
new words (or ids to decode), else ``cpu``. Every backend gives the same ids.
"""

from __future__ import annotations

import array as py_array
import codecs
import dataclasses
import functools
import gc
import itertools
import os
import threading
import unicodedata
import weakref
from collections.abc import Collection, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import regex

from . import gguf, interop, sentencepiece, tekken
from ._pystr import TextTables, decode_texts
from ._threads import HelpedPool, check_num_threads, run_all, thread_count
from .backend import FORKED_AFTER_CUDA, resolve_backend
from .bitlevel import DEFAULT_LEAD_BYTES, BitLevelCodec
from .device import DeviceCodec, HostBatchStream, is_device_array
from .errors import (
    BackendUnavailable,
    ConfigError,
    CorpusError,
    InputTypeError,
    SpecialTokenError,
    special_tokens_said,
)
from .kernels._cuda import array_module, to_device, to_host
from .kernels.encode import (
    ADMIT_IN_PARTS_FROM,
    PREFIX_ALWAYS,
    PREFIX_FIRST,
    PREFIX_MARKED,
    PREFIX_NONE,
    PREFIX_UNLESS_SPACE,
    WordCache,
    admission_slots,
    build_pieces_cpu,
    byte_slots,
    cache_admit_cpu,
    cache_admit_part,
    cache_has_room,
    clear_word_cache,
    count_piece_tokens_cpu,
    empty_word_cache,
    encode_pieces_serial_cpu,
    encode_short_text_cpu,
    encode_word_list_cpu,
    find_specials_cpu,
    first_bad_id,
    framed,
    gather_token_bytes_cpu,
    global_word_slots,
    interleaved_word_lists,
    join_word_lists,
    new_words_of_part,
    rule_table,
    source_piece_lengths,
    whole_tokens_of_words_cpu,
    word_parts,
    word_refs_given_cpu,
    word_refs_scan_cpu,
    write_piece_tokens_cpu,
    write_source_pieces,
)
from .kernels.pretok import GPT2, JOINS
from .model import (
    IdLayout,
    Template,
    Vocabulary,
    check_template,
    read_tokenizer_json,
    tokenizer_json_path,
)
from .normalize import hf_normalize, hf_normalize_bytes
from .pretokenize import (
    compiled_pattern,
    has_bytes_steps,
    resolve_pattern,
    scanner_for,
    scanner_table,
    step_spans,
    utf8_documents,
    utf8_offsets,
)

# Word cache: at most this many words, of at most _CACHE_WORD_BYTES bytes each.
_CACHE_WORDS = 1 << 17
_CACHE_POOL_BYTES = 16 * _CACHE_WORDS
_CACHE_WORD_BYTES = 64
# A full cache is emptied for the batch's own words only when fewer than this
# share of the batch's words were found in it (else it keeps serving well).
_CACHE_MIN_HIT_RATE = 0.5
# Batches smaller than this run on the calling thread only. The parallel path costs
# ~0.3-0.5 ms more CPU than the serial one (thread hand-offs, shard merging; measured
# 16-66 KB of zh and English, cl100k): with two idle cores it wins from ~32 KB. Was
# 256 KB, which kept ~200 KB batches on one thread where tiktoken used two.
_PARALLEL_MIN_BYTES = 1 << 16
_PARALLEL_MIN_DOCUMENTS = 1 << 13  # str documents encoded to UTF-8 on one thread below this
# decode_batch writes its strs itself (kernels.encode.texts) from this many host ids on;
# below, the byte gather and CPython's decoder. Measured (2-core VM, cl100k, ~2 KB
# documents, one thread, best of 7 x 5 calls, us, str kernels against the old path;
# bench/RESULTS.md): English 29 K ids 70 against 64, 89 K 202 against 199; mixed scripts
# 15 K 47 against 55, 63 K 218 against 233.
_TEXT_KERNEL_MIN_IDS = 1 << 16
# ... and runs on more than one thread from this many ids on: the pool's hand-offs (two a
# call) made 2 threads slower than one below it (English 380 K ids 816 us against 746,
# 757 K 1,378 against 1,540; mixed scripts 200 K 855 against 835, 373 K 1,276 against
# 1,592).
_TEXT_PARALLEL_MIN_IDS = 1 << 19
# Long GPT-2 documents are cut near every this many bytes (at least) so threads share them.
_MIN_CUT_BYTES = 1 << 16
# With backend="auto", the device takes a step only with this much work (bytes of new
# words, or ids to decode): below it a kernel launch and the copies cost more than the CPU.
_AUTO_DEVICE_MIN_WORK = 1 << 20
# encode() of a text of up to this many bytes runs one kernel without the word cache
# (``_quick_ids``). Per call, cl100k, one thread (bench/RESULTS.md, session 16): 64 B of
# English 21.2 -> 4.1 us, 1 KB 27.7 -> 23.7; past ~1 KB the cached path is faster.
_QUICK_MAX_BYTES = 1024
# encode_batch of at most this many documents (``_QUICK_MAX_BYTES`` in all), each one
# _quick_ids call when it can: a batch's fixed cost (~45 us: UTF-8, range and special-token
# checks, the kernel's call) is more than a few of those calls (session 23, RESULTS).
_QUICK_BATCH = 8
# decode() of a list of up to this many ids joins their bytes in Python (``_quick_bytes``):
# past it the kernel's gather, with its fixed ~3 us, is faster. cl100k, English, decode() a
# call (session 23, since the join gathers with ``itemgetter``): 96 ids 4.74 -> 3.38 us,
# 128 ids 4.99 -> 4.57; at 192 the kernel 5.37, the join 6.38 (was 64 ids; tiktoken 1.9 /
# 2.4 / 3.4 us).
_QUICK_MAX_IDS = 128

Specials = Literal["all"] | Collection[str]
# Id types ``encode_arrays(dtype=...)`` writes.
_ID_DTYPES = (np.dtype(np.uint32), np.dtype(np.int32), np.dtype(np.int64))


class RaggedBatch:
    """Token ids of a batch of documents: ``ids`` (uint32) and ``offsets`` (int64, B+1).

    ``encode_arrays(dtype=..., device=True)`` gives int32/int64 ids, and CuPy arrays
    (the methods below read host arrays: copy device ones down first).

    Document ``i`` is ``ids[offsets[i]:offsets[i + 1]]``, also ``batch[i]``.

    >>> batch = RaggedBatch(np.array([5, 6, 7], np.uint32), np.array([0, 2, 2, 3]))
    >>> len(batch), batch[0].tolist(), batch.tolist()
    (3, [5, 6], [[5, 6], [], [7]])
    >>> ids, mask = batch.padded(pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [0, 0], [7, 0]], [[1, 1], [0, 0], [1, 0]])
    """

    __slots__ = ("ids", "offsets")

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        # Device arrays stay on the device, and int32/int64 ids (``dtype=``) keep their type.
        kept = is_device_array(ids) or isinstance(ids, np.ndarray) and ids.dtype in _ID_DTYPES
        self.ids = ids if kept else np.asarray(ids, dtype=np.uint32)
        self.offsets = offsets if is_device_array(offsets) else np.asarray(offsets, np.int64)

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, index: int) -> np.ndarray:
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"a batch is indexed by document number, not {type(index).__name__}")
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"document {index} of a batch of {n}")
        index = index % n
        return self.ids[self.offsets[index]:self.offsets[index + 1]]

    @property
    def lengths(self) -> np.ndarray:
        """Ids per document (int64)."""
        return np.diff(self.offsets)

    def tolist(self) -> list[list[int]]:
        """One list of ids per document."""
        flat = self.ids.tolist()
        bounds = self.offsets.tolist()
        with _gc_paused():  # a list per document would trigger many full collections
            return [flat[a:b] for a, b in zip(bounds, bounds[1:])]

    def padded(self, max_len: int | None = None, pad_id: int = 0, truncate: bool = False):
        """``(ids, attention_mask)``, both 2-D ``(documents, max_len)``, padded on the right.

        ``ids`` is uint32, ``attention_mask`` uint8 (1 on real ids). ``max_len``
        defaults to the longest document; a longer document raises ValueError
        unless ``truncate=True`` (then its first ``max_len`` ids are kept).
        """
        lengths = self.lengths
        width = int(lengths.max(initial=0)) if max_len is None else _non_negative(max_len, "max_len")
        if not 0 <= pad_id < 1 << 32 or isinstance(pad_id, bool):
            raise ValueError(f"pad_id={pad_id!r} is not a uint32 id")
        too_long = np.flatnonzero(lengths > width)
        if too_long.size and not truncate:
            doc = int(too_long[0])
            raise ValueError(f"document {doc} has {lengths[doc]} ids, more than max_len={width}; "
                             "pass truncate=True to keep only the first max_len ids")
        kept = np.minimum(lengths, width)
        mask = np.arange(width) < kept[:, None]
        starts = np.repeat(self.offsets[:-1] - np.cumsum(kept) + kept, kept)
        ids = np.full((len(self), width), pad_id, dtype=np.uint32)
        ids[mask] = self.ids[starts + np.arange(starts.size)]
        return ids, mask.astype(np.uint8)

    def __repr__(self) -> str:
        return f"RaggedBatch({len(self)} documents, {self.ids.size} ids)"


@contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while building many containers (none are cyclic)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _non_negative(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    return int(value)


# Every tokenizer of the process (weakly): a forked child mends what a fork broke in each.
_TOKENIZERS: weakref.WeakSet = weakref.WeakSet()
_LEFT_BY_FORK: list = []  # their devices, never freed in the child: the memory is the parent's


class _ForkedDevice:
    """A ``backend="cuda"`` tokenizer's device in a child forked after CUDA ran: any use
    raises, saying why and what to do (CuPy's own error there names no cause)."""

    def __getattr__(self, name):
        raise BackendUnavailable(FORKED_AFTER_CUDA)


def _after_fork_in_child() -> None:
    for tok in list(_TOKENIZERS):
        tok._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Tokenizer:
    """A byte-level BPE tokenizer (see :func:`gpubpe.train` and :meth:`Tokenizer.load`)."""

    def __init__(self, vocab: Vocabulary, backend: str = "auto"):
        self._vocab = vocab
        # Counted once: an imported layout's counts read its 100 K+ output ids (decode()
        # checks every id against n_vocab: 7 of its 11 us a call for "hello world").
        self._vocab_size, self._n_vocab = vocab.vocab_size, vocab.n_ids
        self._pattern = resolve_pattern(vocab.pattern)
        self._scanner = scanner_for(self._pattern)  # None: a custom pattern, split by regex
        self._scan = _scanner_of(vocab, self._scanner)
        if self._scan.scanner == JOINS:
            self._scanner = JOINS
        self._special_ids = vocab.special_ids()
        # The ids ``add_special_tokens=True`` puts before and after each document.
        template = vocab.template or Template()
        self._frame = ([self._special_ids[name] for name in template.before],
                       [self._special_ids[name] for name in template.after])
        self._rules = _rule_table_of(vocab)
        self._backend_name = backend
        self._device = resolve_backend(backend).codec(self._rules)  # None: the host encodes
        self._device_min_work = _AUTO_DEVICE_MIN_WORK if backend == "auto" else 0
        self._special_tables: dict[frozenset, tuple] = {}
        self._decode_table: tuple[np.ndarray, np.ndarray] | None = None
        self._id_pieces: list[bytes | None] | None = None
        self._slot_table: tuple[np.ndarray, np.ndarray] | None = None
        self._text_tables: TextTables | None = None  # decode_batch's, built on first use
        self._padded_lengths: np.ndarray | None = None  # _id_lengths of a bit-level tokenizer
        self._id_gaps: np.ndarray | None = None  # bool per id: no token has it (imports)
        self._cache = None
        self._cache_lock = threading.Lock()
        self._cache_readers = 0
        _TOKENIZERS.add(self)
        # The layout whose text rules change the text pieces before the split (HF's prefix
        # space, "▁"), or None.
        layout = vocab.layout
        self._source_layout = layout if layout is not None and (
            layout.prefix_space or layout.metaspace) else None
        self._quick = self._quick_scanner()
        self._quick_kernel = None  # _quick_ids' compiled kernel (``_compiled_entry``)
        self._all_specials = frozenset(self._special_ids)
        # Decoding drops each sequence's leading space (HF's SentencePiece-style decoders).
        self._strips_space = layout is not None and layout.strips_space
        # Added tokens HF does not call special: matched whatever ``allowed_special`` says.
        self._always_matched = frozenset() if layout is None else \
            layout.tokens_flagged("not_special")
        self._always_matched_ids = np.array([self._special_ids[t] for t in self._always_matched],
                                            dtype=np.int64)
        # The ids ``skip_special_tokens`` leaves out: the special tokens HF calls special.
        self._skipped_ids = frozenset(self._special_ids.values()) - frozenset(
            self._always_matched_ids.tolist())
        # Added tokens HF matches in the normalized text (only under a normalizer).
        self._normalized_specials = frozenset() if layout is None else \
            layout.tokens_flagged("normalized")
        # The normal form the source's normalizer writes, or None.
        self._form = None if layout is None else layout.normalizer
        # The special tokens' first two characters, and bytes: a text holds a token only
        # if it holds its start ("<|" for tiktoken's and Llama's; one character would send
        # every text with a "<" to the general path). What ``_quick_ids`` looks for; for
        # tokens matched in the normalized text, the start of their normalized content too.
        starts = set(self._special_ids) | {hf_normalize(token, self._form)
                                           for token in self._normalized_specials}
        self._special_starts = {str: tuple({token[:2] for token in starts}),
                                bytes: tuple({token.encode("utf-8")[:2] for token in starts})}

    # ------------------------------------------------------------ introspection
    @property
    def vocab_size(self) -> int:
        """Normal tokens (256 bytes included, special tokens excluded)."""
        return self._vocab_size

    @property
    def backend(self) -> str:
        """Where encoding and decoding run: 'cpu' or 'cuda' (what 'auto' picked)."""
        return "cpu" if self._device is None else "cuda"

    def _after_fork(self) -> None:
        """In a forked child, which has only the thread that forked: a word cache another
        thread was changing is dropped (its lock held for good), no reader is counted; a
        device is left ("auto" encodes on the CPU, "cuda" raises when used: CUDA's state
        does not follow a fork)."""
        if self._cache_lock.locked():
            self._cache = None
        self._cache_lock, self._cache_readers = threading.Lock(), 0
        if self._device is not None:
            _LEFT_BY_FORK.append(self._device)
            self._device = None if self._backend_name == "auto" else _ForkedDevice()

    def with_backend(self, backend: str) -> Tokenizer:
        """This tokenizer on another backend ('auto', 'cpu' or 'cuda'); the same ids on each.

        ``backend='cuda'`` without a usable device raises BackendUnavailable
        naming the reason.
        """
        return type(self)(self._vocab, backend=backend)

    @property
    def n_vocab(self) -> int:
        """One more than the largest id (normal or special); imported layouts may leave gaps."""
        return self._n_vocab

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The rules in rank order as ``(left_bytes, right_bytes)``. A SentencePiece-style
        vocabulary's start with those building its multi-byte characters from their bytes
        (``gpubpe.sentencepiece``; its "▁" are spaces here)."""
        pieces = self._vocab.token_bytes
        return [(pieces[left], pieces[right]) for left, right, _ in self._vocab.rules.tolist()]

    @property
    def scaffold_tokens(self) -> list[bytes]:
        """Bytes of the scaffold tokens (Scaffold-BPE), in internal id order; [] for BPE."""
        return [self._vocab.token_bytes[t] for t in self._vocab.scaffold_ids]

    @property
    def template(self) -> Template | None:
        """The special tokens ``add_special_tokens=True`` puts around each document (an
        imported HF post-processor's, a ``tokenizer.model``'s or ``tekken.json``'s BOS), or
        None."""
        return self._vocab.template

    def with_template(self, before: Sequence[str] = (), after: Sequence[str] = ()) -> Tokenizer:
        """This tokenizer with the special tokens ``before`` and ``after`` each document
        where ``add_special_tokens=True`` (e.g. ``after=["<|endoftext|>"]``); saved with it,
        and written to its HF export as a ``TemplateProcessing``. Nothing: no template."""
        template = Template(tuple(before), tuple(after))
        try:
            check_template(template, list(self._special_ids))
        except ValueError as exc:
            name = next(n for n in (*template.before, *template.after)
                        if n not in self._special_ids)
            raise ConfigError(f"{exc}; {special_tokens_said(self._special_ids, name)}") from None
        vocab = dataclasses.replace(self._vocab, template=template if before or after else None)
        return type(self)(vocab, self._backend_name)

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
        quick = self._quick_bytes([token_id])
        if quick is not None:
            return quick
        self._check_ids([token_id])
        table_bytes, table_offsets = self._byte_table()
        return table_bytes[table_offsets[token_id]:table_offsets[token_id + 1]].tobytes()

    def __getstate__(self) -> dict:
        # tables and caches are rebuilt, locks and device arrays are not pickled
        return {"vocabulary": self._vocab, "backend": self._backend_name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["vocabulary"], state.get("backend", "auto"))

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, special_tokens={len(self._special_ids)}, "
                f"pattern={self._vocab.pattern!r})")

    # ------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write the tokenizer to one JSON file (format ``gpubpe/1``), atomically."""
        self._vocab.save(path)

    @classmethod
    def load(cls, path: str | Path, backend: str = "auto") -> Tokenizer:
        """Read a tokenizer written by :meth:`save`, a HF ``tokenizer.json`` or a model
        folder holding one (imported as :meth:`from_hf` imports it), a GGUF file (as
        :meth:`from_gguf`), Mistral's ``tekken.json`` (mistral-common's ids,
        ``gpubpe.tekken``) or a SentencePiece BPE ``tokenizer.model`` (SentencePiece's ids,
        ``interop.from_sentencepiece``); a bad file raises ModelFormatError."""
        path = tokenizer_json_path(Path(path))
        if gguf.is_gguf(path):
            return cls(interop.from_gguf(path), backend)
        if sentencepiece.is_model_file(path):
            return cls(interop.from_sentencepiece(path), backend)
        data = read_tokenizer_json(path)
        if isinstance(data, dict) and "format" not in data and "model" in data:
            return cls(interop.from_hf(data, where=str(path)), backend)
        if tekken.is_tekken(data):
            return cls(tekken.from_tekken(data, str(path)), backend)
        vocab = Vocabulary.from_json(data, str(path))
        if vocab.bitlevel_leads is not None:
            return BitLevelTokenizer(vocab, backend)
        return cls(vocab, backend)

    # ------------------------------------------------------------ other formats
    def to_hf_json(self) -> dict:
        """The tokenizer as a HF ``tokenizer.json`` object (same ids; see gpubpe.interop)."""
        return interop.to_hf_json(self._vocab)

    def to_hf(self, path: str | Path) -> None:
        """Write a HF ``tokenizer.json`` that ``tokenizers`` loads and encodes identically."""
        interop.save_hf(self._vocab, path)

    def to_tiktoken(self, name: str = "gpubpe"):
        """A ``tiktoken.Encoding`` with these ranks, pattern and special tokens."""
        return interop.to_tiktoken(self._vocab, name)

    @classmethod
    def from_hf(cls, source, *, strict: bool = True) -> Tokenizer:
        """Import a HF ByteLevel-BPE ``tokenizer.json`` (a path, JSON text or dict)."""
        return cls(interop.from_hf(source, strict=strict))

    @classmethod
    def from_gguf(cls, path: str | Path, *, pattern=None, strict: bool = True) -> Tokenizer:
        """Import the tokenizer of a GGUF file (llama.cpp's format, a whole model or its
        vocabulary alone): HF's ids for the model, as :func:`gpubpe.interop.from_gguf` says.
        ``pattern`` gives the split when the file's ``tokenizer.ggml.pre`` is one gpubpe's
        table lacks."""
        return cls(interop.from_gguf(path, pattern=pattern, strict=strict))

    @classmethod
    def from_gpt2_files(cls, vocab_json, merges_txt) -> Tokenizer:
        """Import GPT-2 style ``vocab.json`` + ``merges.txt``."""
        return cls(interop.from_gpt2_files(vocab_json, merges_txt))

    @classmethod
    def from_tiktoken(cls, encoding, pattern: str | None = None,
                      special_tokens: dict[str, int] | None = None) -> Tokenizer:
        """Import a ``tiktoken.Encoding``, or a ``.tiktoken`` rank file with its ``pattern``
        (a name of ``NAMED_PATTERNS`` or a regex): the same ids as tiktoken.

        An Encoding whose pattern is not a named one is checked on a probe text: where
        Python's ``regex`` reads its pattern otherwise than tiktoken's engine, the ids would
        differ, and the import is refused (ModelFormatError) instead."""
        tok = cls(interop.from_tiktoken(encoding, pattern=pattern,
                                        special_tokens=special_tokens))
        if not isinstance(encoding, str | os.PathLike) and \
                tok.vocabulary.pattern not in interop.NAMED_PATTERNS:
            interop.check_probe_ids(encoding, tok.encode(interop.PROBE_TEXT,
                                                         disallowed_special=()))
        return tok

    def with_bitlevel(self, lead_bytes=DEFAULT_LEAD_BYTES) -> BitLevelTokenizer:
        """This tokenizer with the bit-level codec on its output (DESIGN §3).

        3-byte UTF-8 characters left as byte tokens are re-encoded as a prefix
        id and two 9-bit ids; the codec's ids follow every id of this tokenizer.
        ``lead_bytes``: E0-EF by default, ``gpubpe.bitlevel.PAPER_LEAD_BYTES``
        (E4-EF) as the paper.
        """
        vocab = dataclasses.replace(self._vocab, bitlevel_leads=[int(b) for b in lead_bytes])
        return BitLevelTokenizer(vocab, self._backend_name)

    def truncate(self, vocab_size: int) -> Tokenizer:
        """This vocabulary cut to ``vocab_size`` normal tokens: what training at that size gives.

        Classic BPE keeps the rules up to where the token count first reaches
        ``vocab_size``; Scaffold-BPE needs its training's event log (see
        ``gpubpe.sweep.cut_rules``). Ids of the kept tokens do not change;
        special tokens follow the normal ones, as after training at that size.
        An imported vocabulary keeps its source's ids: its merged tokens of the smallest
        ids and the rules among them (``gpubpe.sweep``).
        """
        from .sweep import truncated_vocabulary

        return type(self)(truncated_vocabulary(self._vocab, vocab_size), self._backend_name)

    # ------------------------------------------------------------ encoding
    def encode(self, text: str | bytes, *, allowed_special: Specials = (),
               disallowed_special: Specials = "all", add_special_tokens: bool = False) -> list[int]:
        """Encode text (str, or bytes of any content) to ids.

        Special-token text raises SpecialTokenError unless it is in
        ``allowed_special`` (then it becomes its special id) or excluded from
        ``disallowed_special`` (then it is encoded as ordinary text).
        ``add_special_tokens=True`` puts the :attr:`template`'s special tokens around
        the ids, as HF's ``encode`` does by default (Llama 3's ``<|begin_of_text|>``):
        HF's ``encode(text).ids`` is ``encode(text, allowed_special="all",
        add_special_tokens=True)``.

        A text of up to 1 KB is split and merged in one kernel call (a few
        microseconds), without the word cache that batches and longer texts use;
        the ids are the same either way.
        """
        ids = self._quick_ids(text, allowed_special, disallowed_special)
        if ids is None:
            data = _single_document(text)
            ids = self._encode_documents(data, [0], [len(data)], allowed_special,
                                         disallowed_special, 1).ids.tolist()
        return self._framed_list(ids) if add_special_tokens else ids

    def _framed_list(self, ids: list[int]) -> list[int]:
        before, after = self._frame
        return [*before, *ids, *after] if before or after else ids

    def _quick_scanner(self) -> _Scanner | None:
        """The scanner ``_quick_ids`` splits with, or None where a short text needs the
        general path: a custom pattern (``regex``), a device asked to take every batch.
        (A prefix space and "▁" are written by ``_quick_ids``: Llama 2's "Hello world"
        25.8 -> 3.6 us a call, HF 2.3; RESULTS, session 19. Text a normalizer leaves as it
        is, or once normalized, runs here too: Claude's NFKC file, "Hello world" 39-50 ->
        3.6-5.0 us a call, HF 4.7-6.8; session 26.)"""
        if self._scanner is None:
            return None
        if self._device is not None and self._device_min_work <= _QUICK_MAX_BYTES:
            return None
        return self._scan_args()

    def _quick_ids(self, text, allowed_special, disallowed_special) -> list[int] | None:
        """``encode``'s ids of a short str or bytes in one kernel call, or None when the
        general path must run: a long text, one that holds the start of a special token
        (which may begin one) as given or once normalized, special-token names to check, a
        lone surrogate (the general path names it), bytes under a normalizer."""
        # The defaults' types tested inline, starts looked for in a loop: 0.35 of the ~2.9 us a
        # call on "Hello world" went to two calls of _names_no_token, a generator and a
        # tuple of the kernel's arguments (cl100k, session 22).
        if (self._quick is None or type(text) not in (str, bytes) or len(text) > _QUICK_MAX_BYTES
                or (allowed_special if type(allowed_special) is tuple
                    else not _names_no_token(allowed_special))
                or (disallowed_special != "all" if type(disallowed_special) is str
                    else not _names_no_token(disallowed_special))):
            return None
        if self._holds_special_start(text):
            return None
        if self._form is not None:  # normalized whole: no special token can be in it
            if type(text) is bytes:
                return None
            normal = hf_normalize(text, self._form)
            if normal is not text and self._holds_special_start(normal):
                return None
            text = normal
        try:
            data = text.encode("utf-8") if type(text) is str else text
            if self._source_layout is not None:
                data = _source_text(data, self._source_layout)
        except UnicodeEncodeError:
            return None
        if len(data) > _QUICK_MAX_BYTES:
            return None
        if self._quick_kernel is None:  # the first call compiles or loads the kernel
            args = (np.frombuffer(data, np.uint8), *self._quick, self._rules)
            ids = encode_short_text_cpu(*args)
            self._quick_kernel = _compiled_entry(encode_short_text_cpu, args)
            return ids.tolist()
        scanner, table = self._quick
        return self._quick_kernel(np.frombuffer(data, np.uint8), scanner, table,
                                  self._rules).tolist()

    def _holds_special_start(self, text: str | bytes) -> bool:
        for start in self._special_starts[type(text)]:
            if start in text:
                return True
        return False

    def encode_ordinary(self, text: str | bytes) -> list[int]:
        """Encode text, treating special-token text as ordinary text."""
        return self.encode(text, disallowed_special=())

    def encode_batch(self, texts: Sequence[str] | Sequence[bytes], *,
                     num_threads: int | None = None, allowed_special: Specials = (),
                     disallowed_special: Specials = "all",
                     add_special_tokens: bool = False) -> list[list[int]]:
        """Encode many documents (all str or all bytes) on ``num_threads`` threads (default: all cores).

        Same ids as :meth:`encode` on each document, whatever the thread count.
        """
        quick = self._quick_batch(texts, num_threads, allowed_special, disallowed_special)
        if quick is not None:
            return list(map(self._framed_list, quick)) if add_special_tokens else quick
        return self.encode_arrays(texts, num_threads=num_threads, allowed_special=allowed_special,
                                  disallowed_special=disallowed_special,
                                  add_special_tokens=add_special_tokens).tolist()

    def _quick_batch(self, texts, num_threads, allowed_special,
                     disallowed_special) -> list[list[int]] | None:
        """A list of up to ``_QUICK_BATCH`` documents of one type, ``_QUICK_MAX_BYTES`` in
        all, by ``_quick_ids`` each; None for the general path (which raises for bad input).
        Longer ones take the batch path, whose word cache makes their BPE cheaper."""
        if type(texts) is not list or not 0 < len(texts) <= _QUICK_BATCH \
                or set(map(type, texts)) not in ({str}, {bytes}) \
                or sum(map(len, texts)) > _QUICK_MAX_BYTES:
            return None
        check_num_threads(num_threads)
        found = []
        for text in texts:
            ids = self._quick_ids(text, allowed_special, disallowed_special)
            if ids is None:
                return None
            found.append(ids)
        return found

    def encode_ordinary_batch(self, texts: Sequence[str] | Sequence[bytes], *,
                              num_threads: int | None = None) -> list[list[int]]:
        """:meth:`encode_batch` treating special-token text as ordinary text."""
        return self.encode_batch(texts, num_threads=num_threads, disallowed_special=())

    def encode_arrays(self, texts: Sequence[str] | Sequence[bytes], *,
                      num_threads: int | None = None, allowed_special: Specials = (),
                      disallowed_special: Specials = "all", device: bool = False,
                      dtype=np.uint32, add_special_tokens: bool = False) -> RaggedBatch:
        """Encode many documents into one :class:`RaggedBatch` (no Python list per id).

        ``dtype``: the ids' type, uint32 (default), int32 or int64 (PyTorch's
        embedding lookups want a signed type). ``device=True`` leaves ids and
        offsets on the device (CuPy arrays; ``torch.from_dlpack`` takes them
        without a copy); it needs ``backend="cuda"``. ``add_special_tokens``: as in
        :meth:`encode`, around every document.
        """
        # Tried (issue 18): the list cut into ~1 MB parts, each part's str -> UTF-8 on a
        # reader thread while the previous part encoded: slower on 2 threads (1.14-1.21x
        # one thread, against 1.27-1.28x without): per-part work and a third thread on
        # two cores cost more than the overlap gave.
        data, starts, ends = _batch_as_bytes(texts, num_threads)
        batch = self._encode_documents(data, starts, ends, allowed_special, disallowed_special,
                                       num_threads, device=device, dtype=dtype)
        return RaggedBatch(*framed(batch.ids, batch.offsets, *self._frame)) \
            if add_special_tokens else batch

    def encode_buffer(self, data, doc_start, doc_end, *, num_threads: int | None = None,
                      allowed_special: Specials = (), disallowed_special: Specials = (),
                      device: bool | None = None, dtype=np.uint32) -> RaggedBatch:
        """Encode documents given as byte ranges ``data[doc_start[d]:doc_end[d]]`` of one buffer.

        For readers that already hold UTF-8 bytes (``gpubpe.encode_files``):
        no Python object per document. Special-token text is ordinary text by default.
        ``data`` may be text already on the device (a CuPy uint8 array; the ranges
        host or device int64 arrays): with ``backend="cuda"`` it never comes back
        to the host (special tokens are found on the device too); a custom
        pattern, a normalizer or HF's prefix space copy it to the host once. ``device``: where
        the ids go (default: where ``data`` is, when the backend has a device);
        ``dtype`` as in :meth:`encode_arrays`.
        """
        if device is None:  # where the text is (the host, for a backend without a device)
            device = is_device_array(data) and self._device is not None
        return self._encode_documents(data, doc_start, doc_end, allowed_special,
                                      disallowed_special, num_threads, device=device, dtype=dtype)

    def encode_words(self, words: list[bytes]) -> list[list[int]]:
        """BPE-encode pre-tokenized words (no splitting), one id list per word."""
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        starts = np.zeros(len(words), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        data = np.frombuffer(b"".join(words), dtype=np.uint8)
        ids, offsets = self._word_encoder(1)(data, starts, lengths)
        return RaggedBatch(ids, offsets).tolist()

    def batch_stream(self, allowed_special: Specials = ()):
        """How a run of batches reaches this backend and comes back (``encode_files``):
        a :class:`~gpubpe.device.DeviceBatchStream` when the device encodes text it holds,
        else text and ids stay on the host (where the device may still encode words)."""
        if self._device is None or self._scanner is None or \
                self._host_sees_text(bool(self._special_set(allowed_special) or
                                          self._always_matched)):
            return HostBatchStream()
        return self._device.batch_stream()

    def _host_sees_text(self, specials: bool) -> bool:
        """Whether encoding needs the text on the host: a normalizer, HF's prefix space, or
        special tokens with HF's flags (imported vocabularies)."""
        layout = self._vocab.layout
        return layout is not None and (layout.normalizer is not None or self._source_layout
                                       is not None or specials and layout.special_flags)

    def clear_cache(self) -> None:
        """Forget the word encodings kept across calls (for timing; results never change)."""
        with self._cache_lock:
            if self._cache is not None and not self._cache_readers:
                clear_word_cache(self._cache)
        if self._device is not None:
            self._device.clear_cache()

    # ------------------------------------------------------------ the pipeline
    def _encode_documents(self, data, doc_start, doc_end, allowed_special, disallowed_special,
                          num_threads, *, device: bool = False, dtype=np.uint32) -> RaggedBatch:
        out_dtype = self._output_placement(device, dtype)
        allowed = self._special_set(allowed_special)
        if self._always_matched:  # a new set: "all" keeps its one set (and hash) otherwise
            allowed = allowed | self._always_matched
        disallowed = self._special_set(disallowed_special)
        if allowed:
            disallowed = disallowed - allowed
        if is_device_array(data):
            found = self._encode_device_text(data, doc_start, doc_end, allowed, disallowed,
                                             out_dtype, device)
            if found is not None:
                return found
            data, doc_start, doc_end = self._text_to_host(data, doc_start, doc_end)
        array = _readonly_bytes(data)
        doc_start, doc_end = _document_ranges(doc_start, doc_end, array.size)
        layout = self._vocab.layout
        threads = _thread_count(num_threads, array.size)
        self._raise_on_disallowed(array, doc_start, doc_end, disallowed, threads)
        on_device = self._device_batches(array.size)
        piece_threads = 1 if on_device else threads
        array, doc_start, doc_end, matches = self._normal_text_and_specials(
            array, doc_start, doc_end, allowed, piece_threads)
        pieces, doc_first_piece = self._pieces(array, doc_start, doc_end, matches, piece_threads)
        if self._source_layout is not None:
            array, pieces = _source_pieces(array, pieces, doc_first_piece, layout,
                                           piece_threads, self._always_matched_ids)
            pieces, doc_first_piece = self._cut_source_pieces(array, pieces, doc_first_piece,
                                                              piece_threads)
        if on_device:
            found = self._device.encode_pieces(self._device.upload(array), pieces,
                                               doc_first_piece, *self._scan_args(), out_dtype,
                                               device)
            if found is not None:  # None: a hash collision among long words; the host does it
                return RaggedBatch(*found)
        words = self._words_of(array, pieces)
        with self._reading_cache() as cache:
            ids, piece_offsets, new_words = _encode_pieces(
                array, pieces, words, cache, self._word_encoder(threads), threads,
                lambda new: self._admit_while_scattering(array, new))
        if new_words is not None:  # not admitted while the ids were written
            self._admit(array, new_words)
        return self._placed(ids, piece_offsets[doc_first_piece], out_dtype, device)

    def _device_batches(self, n_bytes: int) -> bool:
        """Whether the device runs the whole batch (a named pattern, enough work for auto)."""
        return (self._device is not None and self._scanner is not None
                and n_bytes >= self._device_min_work)

    def _output_placement(self, device: bool, dtype) -> np.dtype:
        """The checked output dtype; ConfigError when ids should stay on a device there is not."""
        try:
            out_dtype = np.dtype(dtype)
        except TypeError:
            out_dtype = None
        if out_dtype not in _ID_DTYPES:
            raise ConfigError(f"dtype={dtype!r} is not an id type; use one of numpy's uint32 "
                              "(the default), int32 or int64")
        if device and self._device is None:
            raise ConfigError(f"device=True keeps ids on a CUDA device, but this tokenizer's "
                              f"backend is {self.backend!r}; use backend='cuda', or device=False")
        return out_dtype

    def _placed(self, ids, offsets, dtype, device: bool) -> RaggedBatch:
        """Host results in the asked dtype, on the device when asked."""
        ids = ids.astype(dtype, copy=False)
        if device:
            return RaggedBatch(self._device.upload(ids), self._device.upload(offsets))
        return RaggedBatch(ids, offsets)

    def _encode_device_text(self, data, doc_start, doc_end, allowed: frozenset[str],
                            disallowed: frozenset[str], dtype, device: bool) -> RaggedBatch | None:
        """Text already on the device, encoded there; None when the host must see it (a custom
        pattern, a normalizer, a prefix space, HF special-token flags, a disallowed special token
        found: the host path raises, or a hash collision)."""
        if data.dtype != np.uint8 or data.ndim != 1:
            raise InputTypeError(f"device text must be a 1-D uint8 array of UTF-8 bytes, not "
                                 f"{data.ndim}-D {data.dtype}")
        if not self._device_batches(data.size) or self._host_sees_text(bool(allowed or disallowed)):
            return None
        doc_start, doc_end = (to_host(r, "document ranges") if is_device_array(r) else r
                              for r in (doc_start, doc_end))  # sync (device ranges only)
        doc_start, doc_end = _document_ranges(doc_start, doc_end, data.size)
        if disallowed and self._device.find_specials(
                data, doc_start, doc_end, *self._special_table(disallowed)[:3])[0].size:
            return None
        pieces, doc_first_piece = self._device_text_pieces(data, doc_start, doc_end, allowed)
        found = self._device.encode_pieces(data, pieces, doc_first_piece, *self._scan_args(),
                                           dtype, device)
        return None if found is None else RaggedBatch(*found)

    def _device_text_pieces(self, data, doc_start, doc_end, allowed: frozenset[str]):
        """Host pieces of device text: the documents cut at allowed special tokens found
        on the device (``DeviceCodec.find_specials``)."""
        no_special = np.full(doc_start.size, -1, dtype=np.int64)
        if not allowed:
            return (doc_start, doc_end, no_special), np.arange(doc_start.size + 1)
        token_bytes, token_offsets, first_byte, token_ids, _ = self._special_table(allowed)
        match_at, match_token = self._device.find_specials(data, doc_start, doc_end,
                                                           token_bytes, token_offsets, first_byte)
        return _pieces_around(doc_start, doc_end, match_at,
                              np.diff(token_offsets)[match_token], token_ids[match_token])

    @staticmethod
    def _text_to_host(data, doc_start, doc_end):
        """Device text and ranges copied to the host (the host path's input)."""
        return tuple(to_host(a, "device text to the host") if is_device_array(a) else a
                     for a in (data, doc_start, doc_end))  # sync each

    def _word_encoder(self, threads: int) -> _WordEncoder:
        return _WordEncoder(self._rules, threads, self._device, self._device_min_work)

    def _normal_text_and_specials(self, array, doc_start, doc_end, allowed: frozenset[str],
                                  threads: int):
        """(text, doc_start, doc_end, matches): the text normalized where the vocabulary has a
        normalizer, and the allowed special tokens found in it as HF finds them: those not
        "normalized" in the text as given, the text between them normalized, then the
        "normalized" ones in that, their contents normalized too."""
        form = None if self._vocab.layout is None else self._vocab.layout.normalizer
        if form is None:
            return array, doc_start, doc_end, self._special_matches(array, doc_start, doc_end,
                                                                    allowed, threads)
        normalized = allowed & self._normalized_specials  # (empty but in HF files)
        raw = allowed - normalized if normalized else allowed  # ``allowed``: its table cached
        matches = self._special_matches(array, doc_start, doc_end, raw, threads)
        array, doc_start, doc_end, matches = _normalized_documents(array, doc_start, doc_end,
                                                                   matches, form)
        if normalized:
            seg_start, seg_end = _text_between(doc_start, doc_end, *matches[:2])
            found = self._special_matches(array, seg_start, seg_end, normalized, threads, form)
            order = np.argsort(np.concatenate([matches[0], found[0]]), kind="stable")
            matches = tuple(np.concatenate([old, new])[order] for old, new in zip(matches, found))
        return array, doc_start, doc_end, matches

    def _special_matches(self, array, doc_start, doc_end, allowed: frozenset[str],
                         threads: int, form: str | None = None):
        """(match_at, match_len, match_id) of the allowed special tokens in the documents,
        HF's lstrip / rstrip applied; their contents in normal ``form`` where given."""
        if not allowed:
            none = np.zeros(0, dtype=np.int64)
            return none, none, none
        token_bytes, token_offsets, _, token_ids, by_bytes = self._special_table(allowed, form)
        match_at, match_token = _find_specials(array, doc_start, doc_end,
                                               (token_bytes, token_offsets, by_bytes),
                                               2**62, threads)
        match_len = np.diff(token_offsets)[match_token]
        match_id = token_ids[match_token]
        flags = self._flags_by_id()
        if flags:
            return _apply_special_flags(array, doc_start, doc_end, match_at, match_len,
                                        match_id, flags)
        return match_at, match_len, match_id

    def _pieces(self, array, doc_start, doc_end, matches, threads: int):
        """Cut documents at the special tokens ``matches`` (``_special_matches``), and long
        scanned text near thread shares."""
        match_at, match_len, match_id = matches
        cut_bytes = 0 if self._source_layout is not None else \
            self._cut_bytes(array.size, doc_start, doc_end, threads)  # (else: _cut_source_pieces)
        if match_at.size == 0 and cut_bytes == 0:  # the pieces are the documents
            pieces = (doc_start, doc_end, np.full(doc_start.size, -1, dtype=np.int64))
            return pieces, np.arange(doc_start.size + 1, dtype=np.int64)
        piece_start, piece_end, piece_special, doc_first_piece = build_pieces_cpu(
            array, doc_start, doc_end, match_at, match_len, match_id, cut_bytes,
            *self._scan_args())
        return (piece_start, piece_end, piece_special), doc_first_piece

    def _cut_source_pieces(self, array, pieces, doc_first_piece, threads: int):
        """Long text pieces of a rewritten text (``_source_pieces``) cut at points safe for
        the scanner, for ``threads`` shares; special pieces stay whole, with their ids.

        ``_pieces`` cannot cut these before the rewrite (a cut piece would get a prefix
        space), so a long document of a SentencePiece-style vocabulary was one piece, one
        thread's work. The scanner cuts the rewritten text, the text it splits anyway."""
        piece_start, piece_end, piece_special = pieces
        cut_bytes = self._cut_bytes(array.size, piece_start, piece_end, threads)
        if cut_bytes == 0:
            return pieces, doc_first_piece
        none = np.zeros(0, dtype=np.int64)
        cut_start, cut_end, _, first_cut = build_pieces_cpu(
            array, piece_start, piece_end, none, none, none, cut_bytes, *self._scan_args())
        cut_special = np.repeat(piece_special, np.diff(first_cut))  # -1 for each text part
        return (cut_start, cut_end, cut_special), first_cut[doc_first_piece]

    def _cut_bytes(self, n_bytes: int, starts, ends, threads: int) -> int:
        """The length past which a text range is cut for ``threads`` shares, at points safe
        for the scanner; 0 for no cut: one thread, no scanner (a custom pattern), or no
        range that long (then no pass over them: 16 threads, lines: 1.7 ms)."""
        if threads <= 1 or self._scanner is None or starts.size == 0:
            return 0
        cut_bytes = max(_MIN_CUT_BYTES, n_bytes // (4 * threads))
        return cut_bytes if int((ends - starts).max()) > cut_bytes else 0

    def _scan_args(self) -> _Scanner:
        """The scanner for the kernels (GPT-2's for a custom pattern: its cuts are never used)."""
        return self._scan

    def _flags_by_id(self) -> dict[int, list[str]]:
        """HF's flags that move or drop matches (lstrip, rstrip, single_word) by token id; a
        match of a token without them stays as found (GPT-NeoX's 13.7 K runs of spaces in
        1.14 MB of English went through the Python loop for nothing: 29 ms)."""
        if self._vocab.layout is None:
            return {}
        return {self._special_ids[token]: found
                for token, found in self._vocab.layout.special_flags.items()
                if token in self._special_ids and set(found) & _MATCH_FLAGS}

    def _words_of(self, array, pieces):
        """The ``_Scanner`` for a named pattern (Numba splits), else the ``regex`` words."""
        if self._scanner is not None:
            return self._scan_args()
        return _regex_words(array, pieces, self._pattern)

    @contextmanager
    def _reading_cache(self):
        with self._cache_lock:
            if self._cache is None:
                self._cache = empty_word_cache(_CACHE_WORDS, _CACHE_POOL_BYTES)
            self._cache_readers += 1
        try:
            yield self._cache
        finally:
            with self._cache_lock:
                self._cache_readers -= 1

    def _admit(self, array, new: _NewWords) -> None:
        """Keep the batch's new words, most frequent first; skipped while others read the cache.

        A full cache is emptied for them only when it answered less than
        ``_CACHE_MIN_HIT_RATE`` of this batch's words (the text has moved on).
        """
        if new.word_at.size == 0:
            return
        with self._cache_lock:
            if self._cache_readers:
                return
            self._admit_after(array, new, _admit_new_words(self._cache, array, new))

    def _admit_after(self, array, new: _NewWords, all_fit: bool) -> None:
        """The second pass of admission (cache lock held, no reader): empty a full cache, refill."""
        if not all_fit and new.hit_rate < _CACHE_MIN_HIT_RATE:
            clear_word_cache(self._cache)
            _admit_new_words(self._cache, array, new)

    @contextmanager
    def _admit_while_scattering(self, array, new: _NewWords):
        """Yield the admission of ``new`` (an ``_Admission``), for ``_scatter_ids`` to run
        while the pool writes the ids (this call the cache's only reader); None when it
        cannot admit now (the caller then calls ``_admit``). Issue 18, py-spy on 2
        threads: the ids were written on the calling thread alone while a pool thread
        admitted (~6% of that time; the pool idled ~37%); then the admission ran on a
        third thread beside the two writing (see ``_scatter_ids``).

        The ids read only cache slots older than the call, which admission never
        changes; emptying a full cache waits until the ids are written. The lock is held
        throughout, so no other call reads, admits or clears the cache meanwhile (so the
        batch's new words are still absent from it), and the cache ends as ``_admit``
        would leave it (in parts, but for where a word lands in its table probe run).
        """
        with self._cache_lock:
            if new.word_at.size == 0 or self._cache_readers != 1:
                yield None
                return
            admission = _Admission(self._cache, array, new)
            yield admission  # _scatter_ids runs it once
            self._admit_after(array, new, admission.all_fit)

    # ------------------------------------------------------------ special tokens
    def _special_set(self, value) -> frozenset[str]:
        """The special tokens ``value`` names. "all" is one frozenset kept for every call
        (its hash kept too), and a set of names is checked against it by its own size:
        with Llama 4's 2,048 tokens, sets of all of them made at each call took ~70 us
        of a 2 KB ``encode()`` (cl100k's call: 35 us in all)."""
        if value == "all":
            return self._all_specials
        if isinstance(value, str):
            raise InputTypeError(f"special tokens must be 'all' or a collection of str, not "
                                 f"{value!r}; write {{{value!r}}} for one token")
        try:
            names = frozenset(value)
        except TypeError:  # not a collection: 5, None
            raise InputTypeError(f"special tokens must be 'all' or a collection of str, not "
                                 f"{value!r}") from None
        unknown = names - self._all_specials
        if unknown:
            raise SpecialTokenError(
                f"{sorted(unknown)} are not special tokens of this tokenizer; "
                f"{special_tokens_said(self._special_ids, min(unknown))}"
            )
        return names

    def _special_table(self, tokens: frozenset[str], form: str | None = None):
        """(bytes, offsets, first-byte mask, ids, byte order) of tokens by first byte,
        longest first (as the device's ``special_candidates_kernel`` reads them; the host's
        ``find_specials_cpu`` reads them in byte order), in normal ``form`` where given;
        cached per set."""
        key = tokens if form is None else (tokens, form)
        if key not in self._special_tables:
            text = {t: (t if form is None else hf_normalize(t, form)).encode("utf-8")
                    for t in tokens}
            ordered = sorted(tokens, key=lambda t: (text[t][0], -len(text[t]), t))
            encoded = [text[t] for t in ordered]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum([len(e) for e in encoded], out=offsets[1:])
            first_byte = np.zeros(256, dtype=np.bool_)
            first_byte[[e[0] for e in encoded]] = True
            ids = np.array([self._special_ids[t] for t in ordered], dtype=np.int64)
            by_bytes = np.array(sorted(range(len(encoded)), key=encoded.__getitem__),
                                dtype=np.int64)
            self._special_tables[key] = (np.frombuffer(b"".join(encoded), dtype=np.uint8),
                                         offsets, first_byte, ids, by_bytes)
        return self._special_tables[key]

    def _raise_on_disallowed(self, array, doc_start, doc_end, disallowed: frozenset[str],
                             threads: int) -> None:
        if not disallowed:
            return
        token_bytes, token_offsets, _, token_ids, by_bytes = self._special_table(disallowed)
        match_at, match_token = _find_specials(array, doc_start, doc_end,
                                               (token_bytes, token_offsets, by_bytes), 1,
                                               threads)
        if match_at.size == 0:
            return
        at = int(match_at[0])
        doc = int(np.searchsorted(doc_end, at, side="right"))
        token_id = int(token_ids[match_token[0]])
        token = next(name for name, i in self._special_ids.items() if i == token_id)
        where = len(array[doc_start[doc]:at].tobytes().decode("utf-8", "surrogateescape"))
        raise SpecialTokenError(
            f"document {doc} holds the special token {token!r} at character {where}; "
            f"pass allowed_special={{{token!r}}} to encode it as a special token, or "
            "disallowed_special=() to encode it as ordinary text"
        )

    # ------------------------------------------------------------ decoding
    def decode_bytes(self, ids: Iterable[int], skip_special_tokens: bool = False) -> bytes:
        """The bytes the ids stand for (special tokens as their UTF-8 text, or left out with
        ``skip_special_tokens``: those HF calls special, as HF's ``decode`` leaves them out)."""
        if skip_special_tokens:
            ids = self._without_specials(ids)
        quick = self._quick_bytes(ids)
        if quick is None:
            flat = self._id_array(ids, check=False)  # the gather checks them
            quick = self._gather_bytes(flat, np.array([0, flat.size], dtype=np.int64))[0].tobytes()
        return quick[1:] if self._strips_space and quick[:1] == b" " else quick

    def decode(self, ids: Iterable[int], errors: str = "replace",
               skip_special_tokens: bool = False) -> str:
        """Decode ids to text; invalid UTF-8 becomes U+FFFD unless errors='strict'.
        ``skip_special_tokens``: as in :meth:`decode_bytes`."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors)

    def _without_specials(self, ids):
        """``ids`` without the special tokens ``skip_special_tokens`` leaves out (a list
        stays a list: ``_quick_bytes`` takes it)."""
        if type(ids) is list:
            skipped = self._skipped_ids
            return [i for i in ids if i not in skipped]
        flat = self._id_array(ids, check=False)
        return self._kept_ids(flat, np.array([0, flat.size], dtype=np.int64))[0]

    def _kept_ids(self, flat: np.ndarray, offsets: np.ndarray):
        """(ids, offsets) of a host batch without the special tokens HF calls special; an
        id out of range is kept (the gather names it)."""
        n_ids = self._skip_table.size - 1
        inside = np.where((flat >= 0) & (flat < n_ids), flat, n_ids)
        keep = ~self._skip_table[inside]
        kept_before = np.zeros(flat.size + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        return flat[keep], kept_before[offsets]

    @functools.cached_property
    def _skip_table(self) -> np.ndarray:
        """bool per id, and one more (any id out of range): True for a special token HF
        calls special (``skip_special_tokens`` leaves it out)."""
        table = np.zeros(self.n_vocab + 1, dtype=bool)
        table[list(self._skipped_ids)] = True
        return table

    def decode_arrays(self, ids, offsets=None, skip_special_tokens: bool = False):
        """The bytes of a ragged batch of ids: ``(bytes uint8, byte offsets int64, B+1)``.

        Device ids (CuPy; any integer dtype) with ``backend="cuda"`` give device
        arrays, gathered there with one read (the size); host ids give host arrays,
        gathered on the host.
        ``offsets``: the batch's int64 offsets (default: one sequence).
        ``skip_special_tokens``: as in :meth:`decode_bytes` (device ids are then taken on
        the host: two reads, and the bytes copied back).
        """
        if offsets is None:
            offsets = np.array([0, ids.size], dtype=np.int64)
        on_device = is_device_array(ids) and self._device is not None
        if on_device and not skip_special_tokens:
            found = self._gather_on_device(ids, offsets)
            if not self._strips_space:
                return found
            # A SentencePiece-style vocabulary's prefix spaces are dropped on the host (two
            # syncs and a copy each way; ``decode_batch`` brings the text to the host anyway).
            found = _without_leading_spaces(*self._to_host_pair(found))
            return tuple(self._device.upload(array) for array in found)
        ids, offsets = (to_host(a, "ids to the host") if is_device_array(a) else a
                        for a in (ids, offsets))  # sync each (device ids, host backend)
        if skip_special_tokens:
            ids, offsets = self._kept_ids(self._id_array(ids, check=False),
                                          np.asarray(offsets, dtype=np.int64))
        found = self._gather_bytes(self._id_array(ids), offsets)
        found = _without_leading_spaces(*found) if self._strips_space else found
        return tuple(self._device.upload(array) for array in found) if on_device else found

    def _gather_on_device(self, ids, offsets):
        """Device ids' bytes and byte offsets, gathered on the device."""
        table_bytes, table_offsets = self._byte_table()
        return self._device.gather_device_bytes(ids, offsets, table_bytes, table_offsets,
                                                self._id_gap_table())

    @staticmethod
    def _to_host_pair(found):
        out, bounds = found
        return to_host(out, "decoded bytes"), to_host(bounds, "decoded byte offsets")  # syncs

    def _id_gap_table(self) -> np.ndarray:
        """bool per id: True where no token has it (gaps of imported layouts)."""
        self._byte_table()
        return self._id_gaps

    def decode_batch(self, batch: Iterable[Iterable[int]] | RaggedBatch,
                     errors: str = "replace", num_threads: int | None = None,
                     skip_special_tokens: bool = False) -> list[str]:
        """Decode many id sequences (or a RaggedBatch, its arrays on the host or the device).
        Host ids are decoded on ``num_threads`` threads (default: all cores); invalid
        UTF-8 is handled as ``bytes.decode(..., errors)`` would. ``skip_special_tokens``:
        as in :meth:`decode_bytes` (device ids come to the host for it: two reads)."""
        check_num_threads(num_threads)
        if skip_special_tokens and isinstance(batch, RaggedBatch) and is_device_array(batch.ids):
            batch = RaggedBatch(to_host(batch.ids, "ids to the host"),
                                to_host(batch.offsets, "offsets to the host"))
        if isinstance(batch, RaggedBatch) and is_device_array(batch.ids):
            found = self._to_host_pair(self._gather_on_device(batch.ids, batch.offsets))
            return _utf8_strings(*(_without_leading_spaces(*found) if self._strips_space
                                   else found), errors)
        if isinstance(batch, RaggedBatch):  # the gather checks the ids
            flat, offsets = self._id_array(batch.ids, check=False), batch.offsets
        else:
            flat, offsets = self._flatten_batch(batch)
        offsets = np.asarray(offsets, dtype=np.int64)
        if skip_special_tokens:
            flat, offsets = self._kept_ids(flat, offsets)
        texts = self._decode_texts(flat, offsets, errors, num_threads)
        if texts is None:
            texts = _utf8_strings(*self._gather_bytes(flat, offsets), errors)
        if self._strips_space:  # HF's decoder drops the prefix space its normalizer adds
            texts = [text[1:] if text[:1] == " " else text for text in texts]
        return texts

    def _decode_texts(self, flat: np.ndarray, offsets: np.ndarray, errors: str,
                      num_threads: int | None = 1):
        """``decode_batch`` of host ids written straight into new str objects
        (``_pystr.decode_texts``), the documents it leaves (invalid UTF-8) decoded by
        CPython with ``errors``; None where it cannot run (this interpreter's str layout is
        not the one checked, or there are fewer than ``_TEXT_KERNEL_MIN_IDS`` ids).

        Measured against the byte gather followed by CPython's UTF-8 decoder per document
        (``bench/encode_bench.py --decode``, one core, 8 MB of ~2 KB documents, five runs):
        English under cl100k_base 1.1-1.4x, mixed scripts under a 4,096-id vocabulary
        1.8-1.9x, mixed scripts under cl100k_base 1.05-1.2x (a quarter of its ids split
        CJK characters and take the fill's slower path); on 2 threads 1.5-1.8x more (the
        old path's decoder holds the GIL). bench/RESULTS.md."""
        if flat.size < _TEXT_KERNEL_MIN_IDS:
            return None
        if self._text_tables is None:
            self._text_tables = TextTables(*self._byte_table(), self._gather_tables()[1])
        threads = 1 if flat.size < _TEXT_PARALLEL_MIN_IDS else thread_count(num_threads)
        decoded = decode_texts(flat, offsets, self._text_tables, run_all, threads)
        if decoded is None:
            return None
        texts, left = decoded
        if texts is None:  # left: the position of an id that is no token
            self._id_array(flat)  # raises, naming the id
            raise ValueError(f"id {flat[left]} at position {left} has no bytes to decode")
        if left.size:
            starts, ends = offsets[left], offsets[left + 1]
            parts = [flat[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
            out, bounds = self._gather_bytes(np.concatenate(parts), np.concatenate(
                [[0], np.cumsum(ends - starts)]))
            for d, text in zip(left.tolist(), _utf8_strings(out, bounds, errors)):
                texts[d] = text
        return texts

    def _gather_bytes(self, flat: np.ndarray, doc_offsets) -> tuple[np.ndarray, np.ndarray]:
        """The bytes of a 1-D integer array of host ids and each document's byte offsets;
        ValueError (``_id_array``'s) naming the first id that is no token.

        On the host whatever the backend. Host ids once went to the device (with enough of
        them) and their bytes came back; on an H200 node (2026-11-27, 67 MB of ~54-byte
        lines) decode_batch that way ran at 88 MB/s on 1, 2 and 16 threads alike, the
        strs then made by CPython one document at a time on the calling thread, where
        the host path writes them with the str kernels on every thread (255 MB/s on one
        core of the 2-vCPU build VM). The output is host strs or bytes either way."""
        table_bytes, table_offsets = self._byte_table()
        doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
        out, bounds, bad = gather_token_bytes_cpu(flat, doc_offsets, table_bytes, table_offsets,
                                                  *self._gather_tables())
        if bad >= 0:
            self._id_array(flat)  # raises, naming the id
            raise ValueError(f"id {flat[bad]} at position {bad} has no bytes to decode")
        return out, bounds

    def _flatten_batch(self, batch) -> tuple[np.ndarray, np.ndarray]:
        sequences = [s if isinstance(s, np.ndarray) else list(s) for s in batch]
        lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if all(isinstance(s, np.ndarray) for s in sequences) and sequences:
            parts = [self._id_array(s, document=d) for d, s in enumerate(sequences)]
            return np.concatenate(parts), offsets
        try:
            return self._id_array(list(itertools.chain.from_iterable(sequences))), offsets
        except (TypeError, ValueError):
            for d, sequence in enumerate(sequences):  # name the document of the bad id
                self._id_array(sequence, document=d)
            raise

    def _quick_bytes(self, ids) -> bytes | None:
        """``decode_bytes`` of a short list of ids, their bytes joined in Python; None for
        the general path (a longer list, an array, an id that is negative, past the end,
        a gap or no int: the general path names it). One token at a time, as a streaming
        decoder asks: 3.2 -> ~0.5 us a call (session 16), 0.32 with one index (tiktoken
        0.34; session 20)."""
        if type(ids) is not list or not ids or len(ids) > _QUICK_MAX_IDS \
                or type(ids[0]) is bool:
            return None
        pieces = self._id_pieces
        if pieces is None:
            self._byte_table()
            pieces = self._id_pieces
        try:  # (min() costs 0.4 us at 31 ids; a padding of None past the table would not
            # do: Python wraps any id down to -len, so one below the padding finds a token)
            if min(ids) >= 0:
                if len(ids) == 1:
                    return pieces[ids[0]]  # None in a gap: the general path names it
                # itemgetter gathers in C (a list comprehension before; cl100k, session 20,
                # decode() a call: 1 id 0.53-0.61 -> 0.32 us, tiktoken 0.34; 2 ids 0.62 ->
                # 0.50, tiktoken 0.37; 31 ids 1.7-1.9 -> 1.45, tiktoken 0.85)
                return b"".join(itemgetter(*ids)(pieces))
        except (TypeError, IndexError):  # not an int, past the end, a gap (None)
            pass
        return None

    def _byte_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Flat bytes of every id (normal and special tokens) and their int64 offsets."""
        if self._decode_table is None:
            table = self._vocab.id_table()
            self._id_pieces = table  # bytes by id, None in a gap: _quick_bytes
            self._id_gaps = np.array([piece is None for piece in table], dtype=bool)
            pieces = [b"" if piece is None else piece for piece in table]
            offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)), out=offsets[1:])
            self._decode_table = (np.frombuffer(b"".join(pieces), dtype=np.uint8), offsets)
        return self._decode_table

    def _gather_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Every id's byte count (0 in a gap; uint8 when every token fits) and its
        16-byte slot (``byte_slots``): what the CPU gather and the id check read."""
        if self._slot_table is None:
            table_bytes, table_offsets = self._byte_table()
            lengths = np.diff(table_offsets)
            narrow = np.uint8 if lengths.size and lengths.max() < 256 else np.int64
            self._slot_table = (lengths.astype(narrow), byte_slots(table_bytes, table_offsets))
        return self._slot_table

    def _id_lengths(self) -> np.ndarray:
        """``_gather_tables``' byte counts, as long as ``n_vocab`` (ids past the byte table,
        a bit-level tokenizer's codec ids, count as tokens): what ``_id_array`` checks."""
        lengths = self._gather_tables()[0]
        if lengths.size >= self.n_vocab:
            return lengths
        if self._padded_lengths is None:  # built once, not on every check
            self._padded_lengths = np.concatenate(
                [lengths, np.ones(self.n_vocab - lengths.size, lengths.dtype)])
        return self._padded_lengths

    def _id_array(self, ids, document: int | None = None, check: bool = True) -> np.ndarray:
        """Ids as uint32 (every id of a vocabulary fits), checked: TypeError for non-ints,
        ValueError naming the first bad id. A uint32 array comes back as it is: the CPU
        gather runs 1.3x faster on uint32 ids than on int64 (bench/RESULTS.md). The range
        and gap check is one kernel pass (``first_bad_id``, ~0.3 ns an id; numpy's
        comparisons and fancy-indexed gap lookup took ~4.5 ns an id, as long as the gather).
        ``check=False``: a 1-D integer array, or the array a list of ints packs into,
        comes back as it is, unchecked (for the CPU gather, which checks as it goes)."""
        if not isinstance(ids, np.ndarray | list):
            ids = list(ids)
        array = ids if isinstance(ids, np.ndarray) else _uint32_ids(ids)
        if not check and array.ndim == 1 and array.dtype.kind in "iu" and array.dtype.isnative:
            return array
        if array.size == 0:
            return np.zeros(0, dtype=np.uint32)
        of_doc = "" if document is None else f" of document {document}"
        if array.ndim != 1 or array.dtype.kind not in "iu":
            flat = ids if isinstance(ids, list) else array.ravel().tolist()
            for position, token_id in enumerate(flat):
                if isinstance(token_id, bool) or not isinstance(token_id, int):
                    raise TypeError(f"id at position {position}{of_doc} is {token_id!r}; "
                                    "expected an int")
            array = np.array([min(max(i, -1), 1 << 62) for i in flat], dtype=np.int64)
        elif not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        position = first_bad_id(array, self._id_lengths())
        if position < 0:
            return array.astype(np.uint32, copy=False)
        value = int(array[position])
        if 0 <= value < self.n_vocab:
            raise ValueError(f"id {value} at position {position}{of_doc} is no "
                             "token of this tokenizer (a gap in its id layout)")
        raise ValueError(
            f"id {ids[position] if not isinstance(ids, np.ndarray) else value} at "
            f"position {position}{of_doc} is out of range: this tokenizer has ids "
            f"0..{self.n_vocab - 1}; were the ids made by another vocabulary?"
        )

    def _check_ids(self, ids) -> None:
        self._id_array(list(ids))


# ---------------------------------------------------------------- imported text rules


def _rule_table_of(vocab: Vocabulary):
    """The kernels' tables of a vocabulary: rules, output map, tiktoken/HF lookup options."""
    layout = vocab.layout
    ids, offsets = vocab.output_map()
    if layout is None:
        return rule_table(vocab.rules, ids, offsets)
    return rule_table(vocab.rules, ids, offsets, rank_by_token=layout.rank_by_token,
                      whole_tokens=vocab.token_bytes if layout.whole_tokens else None)


def _pieces_around(doc_start, doc_end, match_at, match_len, match_id):
    """Documents cut at special-token matches (sorted, inside documents, not overlapping):
    ``(piece_start, piece_end, piece_special), doc_first_piece``. A document with k
    matches gives 2k + 1 pieces: text, special, text, ..., text (text may be empty)."""
    match_doc = np.searchsorted(doc_end, match_at, side="right")
    per_doc = np.bincount(match_doc, minlength=doc_start.size).astype(np.int64)
    doc_first_piece = np.zeros(doc_start.size + 1, dtype=np.int64)
    np.cumsum(2 * per_doc + 1, out=doc_first_piece[1:])
    first_match = np.concatenate([[0], np.cumsum(per_doc)[:-1]]).astype(np.int64)
    rank_in_doc = np.arange(match_at.size) - first_match[match_doc]
    special_at = doc_first_piece[match_doc] + 2 * rank_in_doc + 1  # after its text piece
    piece_start = np.empty(doc_first_piece[-1], dtype=np.int64)
    piece_end = np.empty(doc_first_piece[-1], dtype=np.int64)
    piece_special = np.full(doc_first_piece[-1], -1, dtype=np.int64)
    piece_start[doc_first_piece[:-1]] = doc_start
    piece_end[doc_first_piece[1:] - 1] = doc_end
    piece_start[special_at], piece_end[special_at] = match_at, match_at + match_len
    piece_special[special_at] = match_id
    piece_end[special_at - 1] = match_at
    piece_start[special_at + 1] = match_at + match_len
    return (piece_start, piece_end, piece_special), doc_first_piece


def _normalized_documents(array, doc_start, doc_end, matches, form: str):
    """The documents in HF's ``form`` (``hf_normalize``) as a new buffer and ranges, with the
    special token ``matches`` moved along: as HF, only the text between them is normalized.

    The whole documents were normalized before their special tokens were looked for: a
    differential fuzz against HF found Qwen 2's "<|im_start|>" followed by U+0338 turning
    into "<|im_start|" and U+226F (">" and U+0338 composed), no special token left.

    Only documents that hold a character past U+00A0 can change (ASCII and C1 controls
    are in every form); the bytes of the others, and between documents, are copied in
    runs. 100 K short English lines under NFKC (88 with a no-break space or a "²"):
    ``encode_batch`` 13.5-16.4 -> 25.2-25.5 MB/s (27.8-27.9 without the normalizer); the
    normalizing itself 67-113 -> 11-13 ms (a call a document before)."""
    if unicodedata.is_normalized(form, codecs.utf_8_decode(memoryview(array), "surrogateescape",
                                                           True)[0]):
        return array, doc_start, doc_end, matches  # and so is every part of it
    match_at, match_len, match_id = matches
    match_doc = np.searchsorted(doc_end, match_at, side="right")  # ranges are in order
    first_match = np.searchsorted(match_doc, np.arange(doc_start.size + 1))
    data = array.tobytes()
    parts, copied = [], 0
    growth = np.zeros(doc_start.size, dtype=np.int64)
    within = np.full(match_at.size, -1, dtype=np.int64)  # a moved match's place in its document
    for d in _documents_past_ascii(array, doc_start, doc_end).tolist():
        first, end = int(doc_start[d]), int(doc_end[d])
        parts.append(data[copied:first])
        at, length = first, 0
        for k in range(int(first_match[d]), int(first_match[d + 1])):
            special = int(match_at[k])
            parts.append(hf_normalize_bytes(data[at:special], form))
            within[k] = length = length + len(parts[-1])
            at = special + int(match_len[k])
            parts += [data[special:at]]
            length += at - special
        parts.append(hf_normalize_bytes(data[at:end], form))
        growth[d] = length + len(parts[-1]) - (end - first)
        copied = end
    parts.append(data[copied:])
    shift = np.cumsum(growth) - growth  # what the documents before each grew by
    starts, ends = doc_start + shift, doc_end + shift + growth
    moved_at = np.where(within >= 0, starts[match_doc] + within, match_at + shift[match_doc])
    return _readonly_bytes(b"".join(parts)), starts, ends, (moved_at, match_len, match_id)


def _documents_past_ascii(array, doc_start, doc_end) -> np.ndarray:
    """The indices of the non-empty documents holding a byte from C2 A0 (U+00A0) up."""
    filled = np.flatnonzero(doc_end > doc_start)
    if filled.size == 0:
        return filled
    wide = np.logical_or.reduceat(array >= 0xC2, doc_start[filled])  # each to the next start
    return filled[wide]


def _text_between(doc_start, doc_end, match_at, match_len):
    """(start, end) of the non-empty text ranges between the ``matches`` of documents in
    order (after ``_normalized_documents``: each document follows the last)."""
    starts = np.sort(np.concatenate([doc_start, match_at + match_len]))
    ends = np.sort(np.concatenate([match_at, doc_end]))
    filled = ends > starts
    return starts[filled], ends[filled]


def _without_leading_spaces(out: np.ndarray, bounds: np.ndarray):
    """Decoded bytes and offsets without each sequence's first byte where that is a space
    (HF's decoders of SentencePiece-style vocabularies drop the prefix space so)."""
    firsts = bounds[:-1]
    dropped = (bounds[1:] > firsts) & (out[np.minimum(firsts, max(out.size - 1, 0))] == 0x20)
    keep = np.ones(out.size, dtype=bool)
    keep[firsts[dropped]] = False
    shift = np.zeros(bounds.size, dtype=np.int64)
    np.cumsum(dropped, out=shift[1:])
    return out[keep], bounds - shift


def _source_text(data: bytes, layout: IdLayout) -> bytes:
    """One text piece that starts its document, as ``_source_pieces`` writes it."""
    if layout.metaspace:
        data = data.replace(_METASPACE_UTF8, b" ")
    if layout.prefix_space and data and (layout.prefix_rule in ("always", "sentencepiece")
                                         or data[0] != 0x20):
        data = b" " + data
    return data


_METASPACE_UTF8 = "▁".encode()


def _source_pieces(array, pieces, doc_first_piece, layout: IdLayout, threads: int,
                   always_matched_ids: np.ndarray):
    """The pieces as HF's normalizer and pre-tokenizer see them: a space before those
    ``layout.prefix_rule`` names, each "▁" of text a space (metaspace). Returns a new buffer
    and the pieces' ranges in it; two passes (``source_piece_lengths``, then
    ``write_source_pieces``), each on ``threads`` shares of the pieces.

    One pass on the calling thread before: Llama 2's GGUF, 16 MB of ~54-byte lines, 60 ms
    of the 460 of one thread's encode_arrays, all of it on the calling thread at 2 threads."""
    piece_start, piece_end, piece_special = pieces
    first_piece = np.zeros(piece_start.size, dtype=bool)
    first_piece[doc_first_piece[:-1][np.diff(doc_first_piece) > 0]] = True
    if layout.prefix_rule == "sentencepiece":
        first_piece = _sentencepiece_marks(pieces, first_piece, always_matched_ids)
    rule = _PREFIX_CODES[layout.prefix_rule] if layout.prefix_space else PREFIX_NONE
    rewrite = (array, piece_start, piece_end, piece_special, first_piece, rule, layout.metaspace)
    shares = _shares(piece_end - piece_start, threads)
    lengths = np.empty(piece_start.size, dtype=np.int64)
    run_all(source_piece_lengths, [(*rewrite, lo, hi, lengths) for lo, hi in shares])
    new_end = np.cumsum(lengths)
    new_start = new_end - lengths
    out = np.empty(int(new_end[-1]) if new_end.size else 0, dtype=np.uint8)
    run_all(write_source_pieces, [(*rewrite, new_start, out, lo, hi) for lo, hi in shares])
    return _readonly_bytes(out), (new_start, new_end, piece_special)


def _sentencepiece_marks(pieces, starts_document: np.ndarray, always_matched_ids: np.ndarray):
    """The text pieces SentencePiece's rule puts a space before (``PREFIX_RULES``): those
    starting a document or following a special token that is not matched always, holding
    text or followed by a token that is (a user-defined piece, which SentencePiece finds in
    its text after putting the space before it). A document's first piece is text, an
    empty one where it starts with a token."""
    piece_start, piece_end, piece_special = pieces
    user_defined = np.isin(piece_special, always_matched_ids)
    after_special = np.zeros(piece_start.size, dtype=bool)
    after_special[1:] = (piece_special[:-1] >= 0) & ~user_defined[:-1]
    before_user_defined = np.zeros(piece_start.size, dtype=bool)
    before_user_defined[:-1] = user_defined[1:]
    return (piece_special < 0) & (starts_document | after_special) & \
        ((piece_end > piece_start) | before_user_defined)


_PREFIX_CODES = {"unless-space": PREFIX_UNLESS_SPACE, "always": PREFIX_ALWAYS,
                 "first": PREFIX_FIRST, "sentencepiece": PREFIX_MARKED}


# HF's added-token flags that move or drop a match (``_apply_special_flags``).
_MATCH_FLAGS = frozenset(("lstrip", "rstrip", "single_word"))
# Unicode White_Space (what Rust's char::is_whitespace tests, as HF's lstrip/rstrip do).
_WHITESPACE_CHARS = ("\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
                     + "\u2028\u2029\u202f\u205f\u3000")
_WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{N}_]")


def _apply_special_flags(array, doc_start, doc_end, match_at, match_len, match_id, flags):
    """HF's added-token flags on matches: single_word drops a match inside a word, lstrip and
    rstrip widen it over the whitespace beside it (never past the document or the last match)."""
    keep_at, keep_len, keep_id = [], [], []
    data = array.tobytes()
    doc_of = np.searchsorted(doc_end, match_at, side="right")
    last_end, last_doc = -1, -1
    for at, length, token_id, doc in zip(match_at.tolist(), match_len.tolist(),
                                         match_id.tolist(), doc_of.tolist()):
        token_flags = flags.get(token_id, ())
        lo, hi = int(doc_start[doc]), int(doc_end[doc])
        floor = max(lo, last_end) if doc == last_doc else lo
        before = data[floor:at].decode("utf-8", "surrogateescape")
        after = data[at + length:hi].decode("utf-8", "surrogateescape")
        if "single_word" in token_flags and (
                (before and _WORD_CHAR.match(before[-1])) or (after and _WORD_CHAR.match(after[0]))):
            continue
        start, stop = at, at + length
        if "lstrip" in token_flags:
            spaces = len(before) - len(before.rstrip(_WHITESPACE_CHARS))
            start -= len(before[len(before) - spaces:].encode("utf-8", "surrogateescape"))
        if "rstrip" in token_flags:
            spaces = len(after) - len(after.lstrip(_WHITESPACE_CHARS))
            stop += len(after[:spaces].encode("utf-8", "surrogateescape"))
        keep_at.append(start)
        keep_len.append(stop - start)
        keep_id.append(token_id)
        last_end, last_doc = stop, doc
    return (np.array(keep_at, dtype=np.int64), np.array(keep_len, dtype=np.int64),
            np.array(keep_id, dtype=np.int64))



# ---------------------------------------------------------------- documents as bytes


def _readonly_bytes(data) -> np.ndarray:
    """A read-only uint8 view: one array type, so the kernels compile once (bytes are read-only)."""
    array = np.frombuffer(data, dtype=np.uint8)
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def _document_ranges(doc_start, doc_end, size: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 (start, end) arrays, checked: in bounds, in order, not overlapping."""
    doc_start = np.ascontiguousarray(doc_start, dtype=np.int64)
    doc_end = np.ascontiguousarray(doc_end, dtype=np.int64)
    if doc_start.ndim != 1 or doc_start.shape != doc_end.shape:
        raise ValueError(f"doc_start and doc_end must be 1-D and of one length, not "
                         f"{doc_start.shape} and {doc_end.shape}")
    bad = (doc_start > doc_end) | (doc_start < 0) | (doc_end > size)
    bad[1:] |= doc_start[1:] < doc_end[:-1]
    if bad.any():
        d = int(np.flatnonzero(bad)[0])
        raise ValueError(f"document {d} spans bytes [{doc_start[d]}, {doc_end[d]}): ranges must "
                         f"lie in the {size}-byte buffer, in order, without overlapping")
    return doc_start, doc_end


def _utf8_strings(data: np.ndarray, bounds: np.ndarray, errors: str) -> list[str]:
    """One str per document of ``data`` (uint8) cut at ``bounds``, decoded as UTF-8 with
    ``errors``. ``codecs.utf_8_decode`` on memoryview slices: no copy of the buffer or of
    a document (2 KB English documents, per document: ``bytes`` slice + ``.decode`` 943 ns,
    ``str(view slice, ...)`` 978 ns, this 581 ns). CPython's decoder then bounds the step:
    ~3.4 GB/s on English, ~0.55-0.8 GB/s on mixed scripts (bench/RESULTS.md)."""
    view, decode = memoryview(data), codecs.utf_8_decode
    bounds = bounds.tolist()
    return [decode(view[a:b], errors, True)[0] for a, b in zip(bounds, bounds[1:])]


def _compiled_entry(dispatcher, args: tuple):
    """The compiled entry point of ``dispatcher`` for the types of ``args``: called with
    arguments of those same types, it skips the dispatcher's matching of argument types
    (1.3 of the 3.2 us of an ``encode_short_text_cpu`` call on "hello world", where all
    but the text are the same objects every call and the text is always a read-only
    uint8 array). The dispatcher itself where Numba keeps no such entry."""
    try:
        return dispatcher.overloads[tuple(map(dispatcher.typeof_pyval, args))].entry_point
    except (AttributeError, KeyError, TypeError):
        return dispatcher


def _uint32_ids(ids: list) -> np.ndarray:
    """A list of ids as an array: uint32 through ``array.array`` when every item is an
    int in range (2.6 us for 496 ids, ``np.asarray`` 7.5; tiktoken's whole decode of
    them takes 5.7), else ``np.asarray``, whose dtype ``_id_array`` then reads to name
    the bad item (a float, a negative or huge int, a list of bools)."""
    if ids and type(ids[0]) is not bool:
        try:
            return np.frombuffer(py_array.array("I", ids), dtype=np.uint32)
        except (TypeError, OverflowError):
            pass
    return np.asarray(ids)


def _names_no_token(value) -> bool:
    """Whether an ``allowed_special`` / ``disallowed_special`` value is "all" or empty, so
    nothing needs checking for a text that can hold no special token."""
    if type(value) is str:
        return value == "all"
    return type(value) in (tuple, list, set, frozenset) and not value


def _single_document(text) -> bytes:
    """One document (str, a str subclass such as ``np.str_``, or bytes) as UTF-8 bytes."""
    if isinstance(text, str):
        return _utf8(text, "text")
    if isinstance(text, bytes | bytearray | memoryview):
        return bytes(text)
    hint = "; for many documents use encode_batch()" if isinstance(text, list | tuple | np.ndarray) \
        else ""
    raise InputTypeError(f"text is a {type(text).__name__}; expected str or bytes{hint}")


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorpusError(
            f"{where} holds a lone surrogate {text[exc.start]!r} at character {exc.start}: "
            "it is not encodable as UTF-8; remove it, or pass bytes"
        ) from None


def _batch_as_bytes(texts, num_threads=1) -> tuple[bytes, np.ndarray, np.ndarray]:
    """One UTF-8 buffer and document (start, end) offsets; InputTypeError naming a bad index.

    Documents are all str (subclasses such as ``np.str_`` included, so a NumPy
    string array works) or all bytes-like. A long list of str is encoded in runs on
    ``num_threads`` threads (issue 18: it was the serial start of ``encode_arrays``).
    """
    if isinstance(texts, str | bytes | bytearray | memoryview):
        raise InputTypeError("encode_batch takes a list of documents; for one text use encode()")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise InputTypeError(f"texts is a {texts.ndim}-D array; pass a 1-D sequence of documents")
    try:
        texts = texts if isinstance(texts, list | tuple) else list(texts)
    except TypeError:
        raise InputTypeError(f"texts is a {type(texts).__name__}; expected a sequence of str "
                             "or bytes documents") from None
    long_list = len(texts) >= _PARALLEL_MIN_DOCUMENTS
    parts = _thread_count(num_threads, _PARALLEL_MIN_BYTES if long_list else 0)
    documents = utf8_documents(texts, run_all, parts)
    if documents is not None:
        ends = np.cumsum(documents.lengths)
        return documents.data, ends - documents.lengths, ends
    if all(isinstance(text, bytes | bytearray | memoryview) for text in texts):
        encoded = texts
    elif all(isinstance(text, str) for text in texts):
        encoded = [_utf8(text, f"texts[{i}]") for i, text in enumerate(texts)]  # raises
    else:
        _raise_bad_kind(texts)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(lengths)
    return b"".join(encoded), ends - lengths, ends


def _raise_bad_kind(texts):
    """Raise InputTypeError for the first document that is neither str nor bytes, or of the
    other kind than ``texts[0]``."""
    def kind(text):
        return str if isinstance(text, str) else bytes

    for index, text in enumerate(texts):
        if not isinstance(text, str | bytes | bytearray | memoryview):
            raise InputTypeError(f"texts[{index}] is a {type(text).__name__}; expected str or "
                                 "bytes")
        if kind(text) is not kind(texts[0]):
            raise InputTypeError(
                f"texts[{index}] is {type(text).__name__} but texts[0] is "
                f"{type(texts[0]).__name__}; a batch must hold only str or only bytes"
            )
    raise InputTypeError("texts must hold only str or only bytes documents")


# ---------------------------------------------------------------- the batch pipeline

def _thread_count(num_threads, n_bytes: int) -> int:
    threads = thread_count(num_threads)  # checked, at most the cores
    return 1 if n_bytes < _PARALLEL_MIN_BYTES else threads


def _find_specials(array, doc_start, doc_end, table, limit: int, threads: int):
    """``find_specials_cpu`` over the documents on ``threads`` shares of them, at most
    ``limit`` matches a share, joined in the documents' order (a token never spans two
    documents): the first ``limit`` of them are the ones one scan would find.

    One scan on the calling thread before: ~1.4 ms a MB (Llama 2's added tokens, always
    matched), 22 of the 460 ms of a 16 MB batch of lines on one thread."""
    found = run_all(find_specials_cpu, [
        (array, doc_start[lo:hi], doc_end[lo:hi], *table, np.int64(limit))
        for lo, hi in _shares(doc_end - doc_start, threads)])
    return (np.concatenate([at for at, _ in found]),
            np.concatenate([token for _, token in found]))


def _shares(weights: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Contiguous (lo, hi) index ranges of about equal total weight, at most ``threads``."""
    n = weights.size
    if threads <= 1 or n <= 1:
        return [(0, n)]
    cumulative = np.cumsum(weights)
    targets = cumulative[-1] * np.arange(1, threads) / threads
    cuts = np.unique(np.concatenate([[0], np.searchsorted(cumulative, targets) + 1, [n]]))
    cuts = np.minimum(cuts, n)
    return [(int(a), int(b)) for a, b in zip(cuts, cuts[1:]) if b > a] or [(0, n)]


class _Scanner(NamedTuple):
    """A named pattern's Numba scanner: its id (``kernels.pretok.GPT2`` ...) and class table."""

    scanner: int
    table: np.ndarray


def _scanner_of(vocab: Vocabulary, scanner: int | None) -> _Scanner:
    """The scanner of a named pattern; for a vocabulary that splits no text, its own cuts
    (``JOINS``: between bytes no token holds together, which BPE never joins) where the
    whole-word rules of tiktoken or HF's ignore_merges do not read words whole; else
    GPT-2's (its cuts never used: a custom pattern splits in ``regex``).

    Measured (``bench/hf_file_bench.py``, one thread, cold cache), Llama 2's vocabulary:
    each text whole (HF's way) 12.9 / 12.7 / 16.5 / 20.4 MB/s on English / code / zh / ja,
    cut at spaces after other text 32.6 / 22.4 / 22.9 / 24.7 (RESULTS, session 19)."""
    layout = vocab.layout
    if scanner is None and vocab.pattern is None and vocab.bitlevel_leads is None and (
            layout is None or not (layout.whole_tokens or layout.rank_by_token)):
        return _Scanner(JOINS, vocab.join_table)
    scanner = GPT2 if scanner is None else scanner
    return _Scanner(scanner, scanner_table(scanner))


@dataclass
class _NewWords:
    """The batch's distinct words that missed the cache, encoded: what the cache may admit."""

    word_at: np.ndarray  # int64: first occurrence in the batch's bytes
    word_len: np.ndarray  # int64
    word_key: np.ndarray  # uint64 (``kernels.encode.word_key``)
    count: np.ndarray  # int64: occurrences in the batch
    ids: np.ndarray  # uint32: their output ids, end to end
    id_offsets: np.ndarray  # int64, one more than the words
    hit_rate: float  # share of the batch's word occurrences the cache answered


@dataclass
class _WordEncoder:
    """How one call encodes distinct words: CPU threads, or the device for enough work."""

    rules: object  # kernels.encode.RuleTable
    threads: int
    device: DeviceCodec | None
    device_min_work: int  # bytes of words below which the CPU does it anyway

    @property
    def cpu_only(self) -> bool:
        return self.device is None or (self.device_min_work > 0 and self.threads == 1)

    def __call__(self, array, word_at, word_len) -> tuple[np.ndarray, np.ndarray]:
        """BPE on each unique word: (ids, offsets)."""
        if self.device is not None and word_len.sum() >= self.device_min_work:
            if self.rules.whole_table.size:
                return self._whole_tokens_on_cpu(array, word_at, word_len)
            return self.device.encode_words(array, word_at, word_len)
        return _encode_unique_words(array, word_at, word_len, self.rules, self.threads)

    def _whole_tokens_on_cpu(self, array, word_at, word_len):
        """Words that are tokens take the CPU's whole-token lookup; the device merges the rest."""
        whole = whole_tokens_of_words_cpu(array, word_at, word_len, self.rules) >= 0
        if not whole.any():
            return self.device.encode_words(array, word_at, word_len)
        rest = ~whole
        found = encode_word_list_cpu(array, word_at[whole], word_len[whole], self.rules)
        merged = self.device.encode_words(array, word_at[rest], word_len[rest])
        return interleaved_word_lists([(whole, found), (rest, merged)], word_at.size)


def _encode_pieces(array, pieces, words, cache, encoder: _WordEncoder, threads, admitting):
    """Steps 1-4 of ``kernels.encode``: (ids, first id of each piece, the batch's _NewWords).

    ``admitting(new_words)``: a context that yields the admission of the new words to the
    cache, for step 4 to run beside its writes (None when they are not admitted now; else
    _NewWords is None).
    """
    if isinstance(words, _Scanner) and threads == 1 and encoder.cpu_only:
        return _encode_pieces_serial(array, pieces, words, cache, encoder.rules)
    piece_start, piece_end, _ = pieces
    shards = _shares(piece_end - piece_start, threads)
    piece_ref_end = np.empty(piece_start.size, dtype=np.int64)
    shard_refs = _word_refs(array, pieces, words, cache, shards, piece_ref_end)
    all_new = [np.concatenate([refs[k] for refs in shard_refs]) for k in (1, 2, 3, 4)]
    local_to_global, first, count = _distinct_new_words(array, all_new, shard_refs)
    word_at, word_len, word_key = (all_new[k][first] for k in (0, 1, 3))
    new_ids, new_offsets = encoder(array, word_at, word_len)
    n_words = sum(refs[0].size for refs in shard_refs)
    hit_rate = 1.0 - count.sum() / n_words if n_words else 1.0
    new_words = _NewWords(word_at, word_len, word_key, count, new_ids, new_offsets, hit_rate)
    with admitting(new_words) as admit:
        ids, piece_offsets = _scatter_ids(pieces, shards, shard_refs, piece_ref_end,
                                          local_to_global, cache, new_ids, new_offsets, admit)
    return ids, piece_offsets, None if admit else new_words


def _distinct_new_words(array, all_new: list[np.ndarray], shard_refs: list[tuple]):
    """Step 2: the shards' new words (``all_new``: at, len, count, key, end to end) as
    ``(local_to_global, first, count)``: global word g is input word ``first[g]``, in
    order of first occurrence, whatever the shards.

    One part a shard, by word key, each deduplicated on its own thread; then the parts'
    words ranked by first occurrence. Issue 18: deduplicating every shard's words on the
    calling thread was 7.5 ms of 88 for 8.4 MB of lines on 16 threads (1.1 on 2: each
    shard of a cold cache holds most of the batch's distinct words). Now, 16 threads
    forced on the 2-core VM: the calling thread's own steps here ~0.9 ms and its part;
    the 16 parts ~19 ms of CPU in all (~1.2 ms each, cold), so ~2 ms of wall on 16
    cores; 2 threads as fast as before (49-50 ms the call).
    """
    n_parts = len(shard_refs)
    shard_base = np.cumsum([0] + [refs[1].size for refs in shard_refs]).tolist()
    shard_ranges = list(zip(shard_base, shard_base[1:]))
    n_words = all_new[0].size
    order, part_keys, part_count, part_slot = (np.empty(n_words, dtype=dtype) for dtype in
                                               (np.int64, np.uint64, np.int64, np.int64))
    part_runs = np.empty((len(shard_ranges), n_parts + 1), dtype=np.int64)
    run_all(word_parts, [(all_new[3], all_new[2], n_parts, lo, hi, order, part_keys,
                           part_count, runs) for (lo, hi), runs in zip(shard_ranges, part_runs)])
    parts = run_all(new_words_of_part, [
        (array, all_new[0], all_new[1], order, part_keys, part_count, part_runs, part, n_parts,
         part_slot) for part in range(n_parts)])
    first, count = (np.concatenate(columns) for columns in zip(*parts))
    if n_parts == 1:
        return part_slot, first, count  # one part, in the input's order: the batch's
    by_first = np.full(n_words, -1, dtype=np.int64)
    by_first[first] = np.arange(first.size)
    order_of_first = by_first[by_first >= 0]
    rank = np.empty_like(order_of_first)
    rank[order_of_first] = np.arange(order_of_first.size)
    part_base = np.cumsum([0] + [part_first.size for part_first, _ in parts])
    local_to_global = np.empty(n_words, dtype=np.int64)
    run_all(global_word_slots, [(order, part_slot, n_parts, part_base, rank, lo, hi,
                                  local_to_global) for lo, hi in shard_ranges])
    return local_to_global, first[order_of_first], count[order_of_first]


def _word_refs(array, pieces, words, cache, shards, piece_ref_end) -> list[tuple]:
    """Step 1 on every shard: ``(refs, new_at, new_len, new_count, new_key)`` per shard."""
    piece_start, piece_end, piece_special = pieces
    if isinstance(words, _Scanner):
        return run_all(word_refs_scan_cpu, [
            (array, piece_start, piece_end, piece_special, lo, hi, *words, cache, piece_ref_end)
            for lo, hi in shards])
    word_starts, word_ends, piece_word_offsets = words
    return run_all(word_refs_given_cpu, [
        (array, word_starts, word_ends, piece_word_offsets, lo, hi, cache, piece_ref_end)
        for lo, hi in shards])


def _scatter_ids(pieces, shards, shard_refs, piece_ref_end, local_to_global, cache, new_ids,
                 new_offsets, admit: _Admission | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Step 4 on every shard: count each piece's ids, prefix-sum, write them. ``admit``
    (None, or the admission of the batch's new words to the cache) runs while the pool
    writes: on the calling thread, or in parts among the writes; the ids read only cache
    slots older than the call."""
    piece_special = pieces[2]
    new_base = np.cumsum([0] + [refs[1].size for refs in shard_refs])
    shard_args = [(refs[0], piece_ref_end, piece_special, lo, hi, local_to_global[base:])
                  for refs, (lo, hi), base in zip(shard_refs, shards, new_base)]
    piece_tokens = np.empty(piece_special.size, dtype=np.int64)
    run_all(count_piece_tokens_cpu, [(*a, cache, new_offsets, piece_tokens) for a in shard_args])
    piece_offsets = np.zeros(piece_special.size + 1, dtype=np.int64)
    np.cumsum(piece_tokens, out=piece_offsets[1:])
    ids = np.empty(piece_offsets[-1], dtype=np.uint32)
    runs = max(1, _WRITE_RUNS // len(shards)) if len(shards) > 1 else 1
    first, admitting = (None, []) if admit is None else admit.tasks(len(shards))
    _helped([*admitting, *(
        (write_piece_tokens_cpu, refs, ends, special, lo, hi, to_global, cache, new_ids,
         new_offsets, piece_offsets, ids, first_ref)
        for refs, ends, special, shard_lo, shard_hi, to_global in shard_args
        for lo, hi, first_ref in _piece_runs(ends, shard_lo, shard_hi, runs))], len(shards), first)
    return ids, piece_offsets


# Issue 18, encode_arrays of 8.4 MB of lines on 2 threads: the admission ran on a third
# thread beside the two writing the ids, and on 2 cores a pool thread's share then waited
# 2-5 ms for a core (timelines: a write share began when the admission ended). Now the
# calling thread admits while one pool thread a core writes runs of pieces, then writes
# the runs none has started: about this many runs in all (4 a shard on 2 threads). On
# many threads a run a shard: each run is a task handed to the pool, ~10 us of the
# calling thread's time (16 threads: 64 runs were ~1 ms of it).
_WRITE_RUNS = 8


def _piece_runs(piece_ref_end, lo: int, hi: int, runs: int) -> list[tuple[int, int, int]]:
    """About ``runs`` runs ``(lo, hi, first ref)`` of the pieces ``[lo, hi)`` of one shard,
    of about equal refs (``piece_ref_end``: each piece's ref end in its shard's refs)."""
    ends = piece_ref_end[lo:hi]
    if runs <= 1 or ends.size < 2 * runs:
        return [(lo, hi, 0)]
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, runs) / runs) + lo + 1
    bounds = np.unique(np.concatenate([[lo], cuts.clip(lo, hi), [hi]])).tolist()
    return [(a, b, int(piece_ref_end[a - 1]) if a > lo else 0)
            for a, b in zip(bounds, bounds[1:]) if b > a]


def _helped(calls: list[tuple], threads: int, first=None) -> None:
    """``function(*args)`` for every ``(function, *args)`` of ``calls``, on ``threads - 1``
    pool threads and this one, which runs ``first()`` (when given) before it takes, newest
    first, the calls no pool thread has started. Every call handed over has ended when
    this returns or raises (they write into the caller's arrays): a
    ``_threads.HelpedPool``."""
    if threads <= 1 or len(calls) <= 1:
        if first is not None:
            first()
        for function, *args in calls:
            function(*args)
        return
    calls_given = HelpedPool(threads - 1)
    try:
        for call in calls:
            calls_given.submit(*call)
        if first is not None:
            first()
        while calls_given:
            calls_given.oldest_result()  # a call's error, raised here
    finally:
        calls_given.cancel()


@dataclass
class _Admission:
    """The admission of a batch's new words to the cache while its ids are written
    (``_scatter_ids``); ``all_fit`` once it ran: whether every word fit."""

    cache: WordCache
    array: np.ndarray
    new: _NewWords
    all_fit: bool | None = None

    def tasks(self, threads: int) -> tuple:
        """``(first, calls)``: a function for the calling thread to run before it helps
        with the writes (or None), and ``(function, *args)`` tasks to run among them. From
        ``ADMIT_IN_PARTS_FROM`` threads on, when every word fits, the words are admitted
        in a part a thread (their slots given here first): see ``kernels.encode.cache``."""
        new = self.new
        if threads < ADMIT_IN_PARTS_FROM or not cache_has_room(
                self.cache, new.word_at.size, int(new.word_len.sum()), new.ids.size):
            return self._on_this_thread, []
        slots = admission_slots(self.cache, new.word_len, new.id_offsets, _CACHE_WORD_BYTES)
        self.all_fit = True
        cuts = np.linspace(0, slots.size, threads + 1).astype(np.int64).tolist()
        return None, [(cache_admit_part, self.cache, self.array, new.word_at, new.word_key,
                       new.ids, new.id_offsets, slots, lo, hi)
                      for lo, hi in zip(cuts, cuts[1:]) if hi > lo]

    def _on_this_thread(self) -> None:
        self.all_fit = _admit_new_words(self.cache, self.array, self.new)


def _admit_new_words(cache, array, new: _NewWords) -> bool:
    """``cache_admit_cpu`` on the new words, most frequent first: True when all fit.

    When all of them fit for sure the order cannot choose what is kept, and
    first-seen order skips the sort and reads bytes and ids front to back (ja,
    cl100k, 6K words: 0.27 -> 0.24 ms warm, 1.07 -> 1.02 ms after a 64 MB
    sweep; the inserts into the 4 MB table cost the rest).
    """
    if cache_has_room(cache, new.word_at.size, int(new.word_len.sum()), new.ids.size):
        order = np.arange(new.word_at.size)
    else:
        order = np.argsort(-new.count, kind="stable")
    return cache_admit_cpu(cache, array, new.word_at, new.word_len, new.word_key, new.ids,
                           new.id_offsets, order, _CACHE_WORD_BYTES)


def _encode_pieces_serial(array, pieces, scanner: _Scanner, cache, rules):
    """``_encode_pieces`` on the calling thread in one kernel call (a named pattern)."""
    ids, piece_offsets, n_words, new_ids, new_offsets, word_at, word_len, count, word_key = \
        encode_pieces_serial_cpu(array, *pieces, *scanner, cache, rules)
    hit_rate = 1.0 - count.sum() / n_words if n_words else 1.0
    return ids, piece_offsets, _NewWords(word_at, word_len, word_key, count, new_ids, new_offsets,
                                         hit_rate)


def _encode_unique_words(array, word_at, word_len, rules, threads):
    """BPE on each unique word, split over threads by bytes: (ids, offsets)."""
    shares = _shares(word_len, threads if word_len.sum() >= _PARALLEL_MIN_BYTES // 4 else 1)
    parts = run_all(encode_word_list_cpu, [(array, word_at[lo:hi], word_len[lo:hi], rules)
                                            for lo, hi in shares])
    return join_word_lists(parts)


def _regex_words(array, pieces, pattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(word_starts, word_ends, piece_word_offsets)``: each ordinary piece's ``regex`` matches.

    As ``regex.findall``: text no match covers is dropped. Pattern None: a
    piece is one word; a tuple: regexes run in sequence (``pretokenize.split_words``).
    Character offsets become byte offsets through the UTF-8 length of each character
    (1 for a surrogate-escaped raw byte); a sequence with steps on bytes gives bytes.
    """
    piece_start, piece_end, piece_special = pieces
    data = array.tobytes()
    compiled = pattern if isinstance(pattern, tuple) else \
        None if pattern is None else compiled_pattern(pattern)
    in_bytes = isinstance(pattern, tuple) and has_bytes_steps(pattern)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    counts = np.zeros(piece_start.size, dtype=np.int64)
    for p, (start, end, special) in enumerate(zip(piece_start.tolist(), piece_end.tolist(),
                                                  piece_special.tolist())):
        if special >= 0 or start == end:
            continue
        text = data[start:end].decode("utf-8", "surrogateescape")
        spans = _match_spans(compiled, text)
        if len(text) != end - start and not in_bytes:
            spans = utf8_offsets(text)[spans]
        starts.append(start + spans[:, 0])
        ends.append(start + spans[:, 1])
        counts[p] = spans.shape[0]
    offsets = np.zeros(piece_start.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(starts).astype(np.int64) if starts else empty,
            np.concatenate(ends).astype(np.int64) if ends else empty, offsets)


def _match_spans(compiled, text: str) -> np.ndarray:
    """(start, end) character spans of the non-empty matches, shape (n, 2)."""
    if compiled is None:
        return np.array([[0, len(text)]], dtype=np.int64)
    if isinstance(compiled, tuple):  # the regexes of a sequence
        return np.array(step_spans(compiled, text), dtype=np.int64).reshape(-1, 2)
    spans = [m.span() for m in compiled.finditer(text, concurrent=True) if m.end() > m.start()]
    return np.array(spans, dtype=np.int64).reshape(-1, 2)


class BitLevelTokenizer(Tokenizer):
    """A tokenizer whose output passes through a :class:`~gpubpe.bitlevel.BitLevelCodec`.

    Made by :meth:`Tokenizer.with_bitlevel`; ``save`` / ``load`` keep the codec's
    lead bytes. Base ids keep their values; the codec's 256 value ids and one id
    per prefix follow every base id (special tokens included), so ``vocab_size``
    and ``n_vocab`` grow by the codec's ids.
    """

    def __init__(self, vocab: Vocabulary, backend: str = "auto"):
        super().__init__(vocab, backend)
        # The codec's kernels go to the device when it was asked for by name ("auto"
        # keeps them on the CPU: elementwise work that costs a copy each way).
        codec_backend = "cuda" if backend == "cuda" else "cpu"
        self.codec = BitLevelCodec(super().n_vocab, vocab.bitlevel_leads, backend=codec_backend)
        self._byte_order = _codec_byte_order(vocab, self.codec.base_vocab_size)
        self._device_byte_order = None  # the same tables on the device, made when needed

    @property
    def vocab_size(self) -> int:
        return self._vocab.vocab_size + self.codec.vocab_size - self.codec.base_vocab_size

    @property
    def n_vocab(self) -> int:
        return self.codec.vocab_size

    def token_bytes(self, token_id: int) -> bytes:
        if token_id >= self.codec.base_vocab_size:
            raise ValueError(f"id {token_id} is a bit-level codec id ({self.codec.describe(token_id)}"
                             "): it stands for bits of a character, not bytes; decode a "
                             "sequence instead")
        return super().token_bytes(token_id)

    def _quick_scanner(self) -> None:
        return None  # every id passes through the codec: the general path

    def _encode_documents(self, data, doc_start, doc_end, allowed_special, disallowed_special,
                          num_threads, *, device: bool = False, dtype=np.uint32) -> RaggedBatch:
        batch = super()._encode_documents(data, doc_start, doc_end, allowed_special,
                                          disallowed_special, num_threads, device=device)
        ids, offsets = self.codec.encode_batch(self._reordered(batch.ids, 0), batch.offsets,
                                               num_threads=num_threads)
        ids = self._reordered(ids, 1)
        out_dtype = self._output_placement(False, dtype)
        if is_device_array(ids):  # device in, device out
            return RaggedBatch(ids.astype(out_dtype, copy=False), offsets)
        return RaggedBatch(np.asarray(ids, dtype=out_dtype), np.asarray(offsets, dtype=np.int64))

    def decode_bytes(self, ids: Iterable[int], errors: str = "strict",
                     skip_special_tokens: bool = False) -> bytes:
        """The bytes of coded ids; a malformed coded unit raises, or is U+FFFD unless strict."""
        ids = self.codec.decode(self._reordered(self._codec_ids(ids), 0), _codec_errors(errors))
        return super().decode_bytes(self._reordered(np.asarray(ids, np.uint32), 1),
                                    skip_special_tokens)

    def decode(self, ids: Iterable[int], errors: str = "replace",
               skip_special_tokens: bool = False) -> str:
        return self.decode_bytes(ids, errors, skip_special_tokens).decode("utf-8", errors)

    def decode_batch(self, batch, errors: str = "replace", num_threads: int | None = None,
                     skip_special_tokens: bool = False) -> list[str]:
        if isinstance(batch, RaggedBatch) and is_device_array(batch.ids):
            ids, offsets = self.codec.decode_batch(self._reordered(batch.ids.astype(np.uint32), 0),
                                                   batch.offsets, _codec_errors(errors))
            return super().decode_batch(RaggedBatch(self._reordered(ids, 1), offsets), errors,
                                        num_threads, skip_special_tokens)
        if isinstance(batch, RaggedBatch):
            flat, offsets = self._codec_ids(batch.ids), batch.offsets
        else:
            flat, offsets = self._flatten_batch(batch)
        ids, offsets = self.codec.decode_batch(self._reordered(flat.astype(np.uint32), 0), offsets,
                                               _codec_errors(errors), num_threads=num_threads)
        ids = self._reordered(np.asarray(ids, np.uint32), 1)
        return super().decode_batch(RaggedBatch(ids, offsets), errors, num_threads,
                                    skip_special_tokens)

    def codec_order(self, ids) -> np.ndarray:
        """Base ids (a uint32 array) as the codec numbers them: each byte's token at the
        byte's value (0-255), other ids moved to make room; the same ids for gpubpe's own
        vocabularies. What ``metrics.bitlevel_report`` reads (byte tokens: ids < 256)."""
        return self._reordered(np.asarray(ids, dtype=np.uint32), 0)

    def _reordered(self, ids, way: int):
        """Base ids (host or device) into the codec's order (way 0: each byte's token at the
        byte's value) or back (way 1); codec ids unchanged. Identity for gpubpe's own
        vocabularies."""
        if self._byte_order is None:
            return ids
        xp = array_module(ids)
        if xp is not np or is_device_array(ids):
            if self._device_byte_order is None:
                self._device_byte_order = tuple(to_device(xp, table) for table in self._byte_order)
            table = self._device_byte_order[way]
        else:
            table = self._byte_order[way]
        n = self.codec.base_vocab_size
        return xp.where(ids < n, table[xp.minimum(ids, n - 1)], ids).astype(np.uint32)

    def _codec_ids(self, ids) -> np.ndarray:
        return self._id_array(ids).astype(np.uint32)

    def to_hf_json(self):
        raise ConfigError("a bit-level tokenizer cannot be exported: HF tokenizer.json has no "
                          "sub-byte ids; export the base tokenizer and apply the codec apart")

    to_hf = to_hf_json

    def to_tiktoken(self, name: str = "gpubpe"):
        raise ConfigError("a bit-level tokenizer cannot be exported to tiktoken (no sub-byte "
                          "ids); export the base tokenizer and apply the codec apart")


def _codec_byte_order(vocab: Vocabulary, n_ids: int):
    """(into, back): uint32 permutations of the base ids that put each byte's token at the
    byte's value, as the codec reads ids (0-255 the bytes), and back; None where they are
    there already (gpubpe's own vocabularies). Imports number their byte tokens otherwise
    (GPT-2's, cl100k's in GPT-2's character order; Llama 2's <0xXX> at 3-258): before
    this, the codec re-encoded ids 0-255 as if they were the bytes (merged tokens
    included), a reversible id shuffle that left the real byte fallbacks as they were."""
    byte_ids = vocab.byte_ids()
    if np.array_equal(byte_ids, np.arange(256)):
        return None
    if (byte_ids < 0).any():
        missing = int(np.flatnonzero(byte_ids < 0)[0])
        raise ConfigError(f"byte {missing:#04x} has no token in this vocabulary; the bit-level "
                          "codec needs all 256 byte tokens")
    into = np.arange(n_ids, dtype=np.uint32)
    into[byte_ids] = np.arange(256, dtype=np.uint32)
    into[np.setdiff1d(np.arange(256), byte_ids)] = np.setdiff1d(byte_ids, np.arange(256))
    back = np.empty_like(into)
    back[into] = np.arange(n_ids, dtype=np.uint32)
    return into, back


def _codec_errors(errors: str) -> str:
    """The bit-level codec's mode for a ``bytes.decode`` errors name: only 'strict' raises."""
    return "strict" if errors == "strict" else "replace"

"""Lists of str as UTF-8 in one buffer, encoded without the GIL where CPython allows it;
and the reverse: ids decoded straight into the characters of new str objects.

``kernels.str_utf8`` reads CPython's str objects in place (see there for why). This
module decides whether it may: once per process, on probe strings of every storage
kind, it reads each object's header and characters with ``ctypes`` (never past
``sys.getsizeof`` of the object) and a list's item pointers, and checks them against
what the kernels assume; then the kernels must encode the probes as ``str.encode``
does. Any difference (another implementation, a free-threaded build, a future
layout) leaves the kernels unused and the callers on ``str.encode``.

Decoding (``decode_texts``) writes into str objects it has just made (PyUnicode_New: a
fresh object of the right length and width), which the kernel checks before each write
(exact compact str, that length and width, referenced by the list alone). It runs only
where the same layout checks passed and a probe decode gave the probe texts back.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import sysconfig
import time
from concurrent.futures import wait
from functools import lru_cache, partial
from typing import NamedTuple

import numpy as np

from ._threads import helper_pool
from .kernels.encode.decode import byte_slots
from .kernels.encode.texts import (
    NEXT_CHUNK,
    fill_claimed,
    new_texts,
    publish_made,
    text_plan,
    token_text_forms,
)
from .kernels.str_utf8 import (
    ASCII_DATA,
    COMPACT_DATA,
    LENGTH_AT,
    STATE_AT,
    STR_TYPE,
    TYPE_AT,
    str_utf8_bound,
    write_str_utf8,
)
from .kernels.word_tally import filled_dict, new_words

_LIST_ITEMS_AT = 24  # PyListObject: ob_refcnt, ob_type, ob_size, then ob_item
_PROBES = ("", "plain ascii\n", "é", "caf\xe9 \xff", "ĀĂ", "日本語 text", "\U0001F600 \u20ac",
           "x" * 300 + "\u4e2d")


def str_list_utf8(texts, run_all=None, parts: int = 1, private: bool = False,
                  span: tuple[int, int] | None = None) -> tuple[memoryview, np.ndarray] | None:
    """The UTF-8 of ``texts`` (str documents) end to end and each one's byte length
    (int64), or None when the kernels cannot take them: this interpreter is not one whose
    layout was checked, or an item is no exact ``str`` (bytes, a subclass) or holds a lone
    surrogate. The caller then encodes with ``str.encode`` and names any bad item.

    ``parts`` > 1 encodes that many runs of the list at once through ``run_all(function,
    calls)`` (a list of results in order, as ``_threads.run_all`` gives), into one
    buffer: each run writes from the bound of the runs before it, then the runs are moved
    together (a join of separate buffers was a copy of all of it into fresh pages: ~17 ms
    of a 40 MB ``encode_arrays`` on the calling thread alone).

    ``private``: ``texts`` is a list no other code holds (else it is copied first: a pass
    under the GIL, which the counting tasks of many threads took turns at); then ``span``
    (lo, hi) may name the items to read, ``texts[lo:hi]`` without a copy."""
    layout = _checked_layout()
    if layout is None:
        return None
    if not (private and type(texts) is list):
        texts, span = list(texts if span is None else texts[span[0]:span[1]]), None
    return _utf8_of(texts, layout, run_all, parts, *(span or (0, len(texts))))


def utf8_bound_ends(texts: list, step: int = 1) -> np.ndarray | None:
    """``ends[j]``: at least the UTF-8 bytes of ``texts[0]``, ``texts[step]``, ...,
    ``texts[j * step]`` (exact for ASCII, each other character counted at the most bytes
    of its storage width), read from those str headers alone; or None where
    ``str_list_utf8`` would be for them. ``texts``: a list no other code holds."""
    layout = _checked_layout()
    if layout is None:
        return None
    ends = np.empty(-(-len(texts) // step), dtype=np.int64)
    found = str_utf8_bound(_items_at(texts), len(texts), layout, ends, step)
    return ends if found >= 0 else None


def str_span(items: list, lo: int) -> tuple[int, np.ndarray] | None:
    """``(address of items[lo]'s pointer, layout)`` for a kernel that reads the str of a
    list no other code holds in place (``kernels.str_utf8``), or None where this
    interpreter's layout was not checked."""
    layout = _checked_layout()
    return None if layout is None else (_items_at(items) + 8 * lo, layout)


def _items_at(items: list) -> int:
    """The address of a list's item pointers (its ``ob_item``)."""
    return ctypes.c_int64.from_address(id(items) + _LIST_ITEMS_AT).value


def _utf8_of(items: list, layout: np.ndarray, run_all, parts: int, start: int, stop: int):
    """``str_list_utf8`` of ``items[start:stop]``, a list no other code holds (none resizes
    it while the kernels read it)."""
    items_at = _items_at(items) + 8 * start
    cuts = np.linspace(0, stop - start, max(parts, 1) + 1).astype(np.int64).tolist()
    runs = [(items_at + 8 * lo, hi - lo) for lo, hi in zip(cuts, cuts[1:])]
    ends = np.empty(stop - start, dtype=np.int64)  # each run's prefix bounds (unused here)
    bounds = _each(run_all, str_utf8_bound, [(at, n, layout, ends[lo:lo + n], 1)
                                             for (at, n), lo in zip(runs, cuts)])
    if min(bounds) < 0:
        return None
    run_starts = np.cumsum([0] + [bound + 1 for bound in bounds])  # + the byte a run may spill
    out = np.empty(int(run_starts[-1]), dtype=np.uint8)
    lengths = np.empty(stop - start, dtype=np.int64)
    refused = _each(run_all, write_str_utf8, [
        (at, n, layout, out.ctypes.data + int(start), lengths[lo:lo + n])
        for (at, n), start, lo in zip(runs, run_starts, cuts)])
    if max(refused) >= 0:
        return None
    return memoryview(_runs_together(out, run_starts, cuts, lengths)), lengths


def _each(run_all, function, calls: list[tuple]) -> list:
    return run_all(function, calls) if len(calls) > 1 else [function(*calls[0])]


def _runs_together(out: np.ndarray, run_starts: np.ndarray, cuts: list[int],
                   lengths: np.ndarray) -> np.ndarray:
    """The runs' UTF-8 moved end to end to the front of ``out`` (a view of it)."""
    end = 0
    for start, lo, hi in zip(run_starts.tolist(), cuts, cuts[1:]):
        size = int(lengths[lo:hi].sum())
        if start != end:  # memmove: NumPy copied overlapping slices through a temporary
            ctypes.memmove(out.ctypes.data + end, out.ctypes.data + start, size)
        end += size
    return out[:end]


def str_kernels_state() -> str:
    """Whether the kernels read and write str objects here, and if not why (``gpubpe
    doctor`` prints it: the fallback is slower, not wrong, so nothing else shows it)."""
    why = _interpreter_refused()
    if why is None and _checked_layout() is None:
        why = "this CPython's str or list objects are not laid out as the kernels read them"
    if why is None:
        return "in use: lists of str read and ids decoded into str without the GIL"
    return f"not in use ({why}): str.encode and CPython's decoder, under the GIL"


def _interpreter_refused() -> str | None:
    """Why this interpreter is no candidate for the kernels at all, or None."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded CPython"
    return None


@lru_cache(maxsize=1)
def _checked_layout() -> np.ndarray | None:
    """The kernels' layout table if this interpreter stores str and list as they assume."""
    if _interpreter_refused() is not None:
        return None
    layout = np.zeros(3, dtype=np.int64)
    layout[STR_TYPE] = id(str)
    layout[ASCII_DATA] = sys.getsizeof("") - 1
    layout[COMPACT_DATA] = sys.getsizeof(_fresh_latin1()) - 3
    probes = list(_PROBES)
    if not (all(_stored_as_assumed(text, layout) for text in probes)
            and _items_as_assumed(probes)):
        return None
    encoded = _utf8_of(probes, layout, None, 1, 0, len(probes))
    expected = [text.encode() for text in probes]
    if encoded is None or bytes(encoded[0]) != b"".join(expected) or \
            encoded[1].tolist() != list(map(len, expected)):
        return None
    return layout


def _fresh_latin1() -> str:
    """A compact non-ASCII str of 2 characters made now: ``sys.getsizeof`` of it is its
    header, the characters and the terminator. Not a literal: from Python 3.12 on, a
    literal's size counts its cached UTF-8 copy too (``"é"`` measured 3 bytes more on
    3.12.1, and every non-ASCII probe failed, leaving the kernels unused there)."""
    return "".join([chr(0xE9), chr(0xE8)])


def _stored_as_assumed(text: str, layout: np.ndarray) -> bool:
    """Whether ``text``'s type, length, storage kind and characters sit where the kernels
    read them (every read inside the object's ``sys.getsizeof`` bytes)."""
    width = max(map(ord, text), default=0).bit_length() + 7 >> 3
    width = {0: 1, 3: 4}.get(width, width)  # "" is stored 1 byte a character, 3 bytes as 4
    ascii = text.isascii()
    data_at = int(layout[ASCII_DATA] if ascii else layout[COMPACT_DATA])
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[width]
    characters = text.encode(codec)
    read = max(STATE_AT + 4, data_at + len(characters))
    if sys.getsizeof(text) < read:
        return False
    raw = ctypes.string_at(id(text), read)  # not all of getsizeof: a cached UTF-8 copy
    state = struct.unpack_from("<I", raw, STATE_AT)[0]
    return (struct.unpack_from("<q", raw, TYPE_AT)[0] == id(str)
            and struct.unpack_from("<q", raw, LENGTH_AT)[0] == len(text)
            and (state >> 2) & 7 == width and (state >> 5) & 1 == 1
            and (state >> 6) & 1 == ascii
            and raw[data_at:data_at + len(characters)] == characters)


def _items_as_assumed(items: list) -> bool:
    """Whether ``items`` (a list) keeps its item pointers where the kernels read them."""
    header = ctypes.string_at(id(items), _LIST_ITEMS_AT + 8)
    if struct.unpack_from("<qq", header, TYPE_AT) != (id(list), len(items)):
        return False
    items_at = struct.unpack_from("<q", header, _LIST_ITEMS_AT)[0]
    pointers = struct.unpack(f"<{len(items)}q", ctypes.string_at(items_at, 8 * len(items)))
    return list(pointers) == list(map(id, items))


# --- decoding: ids into new str objects ---------------------------------------------------


class TextTables:
    """What ``decode_texts`` reads of a vocabulary: its bytes (``table_bytes`` at int64
    ``table_offsets``, and ``byte_slots``: ``kernels.encode.decode``'s), and each token's
    form, ASCII copy, shape and slot of characters
    (``kernels.encode.texts.token_text_forms``)."""

    def __init__(self, table_bytes: np.ndarray, table_offsets: np.ndarray,
                 byte_slots: np.ndarray):
        self.table_bytes, self.table_offsets, self.byte_slots = (table_bytes, table_offsets,
                                                                 byte_slots)
        (self.forms, self.ascii_copies, self.shapes,
         self.wide_slots) = token_text_forms(table_bytes, table_offsets)
        if self.forms.size and self.forms.max() <= np.iinfo(np.uint16).max:
            self.forms = self.forms.astype(np.uint16)


def decode_texts(ids: np.ndarray, offsets: np.ndarray, tables: TextTables, run_all=None,
                 parts: int = 1):
    """Each document of ``ids`` (a 1-D integer array cut at int64 ``offsets``) as a str:
    ``(texts, left)``, where ``left`` (int64) names the documents not decoded (their bytes
    are not valid UTF-8): the caller decodes those with CPython and puts them in.
    ``(None, k)`` when the id at position k is no token; None when this interpreter's str
    layout was not checked (decode with CPython).

    ``parts`` > 1 plans that many runs of documents (of about equal ids) at once through
    ``run_all`` (as in ``str_list_utf8``); then the calling thread makes the strs chunk by
    chunk while ``parts - 1`` pool threads fill the chunks made (``fill_claimed``), and
    fills what is left once it has made them all."""
    if not _fills_probes():
        return None
    return _decode_with(ids, offsets, tables, _checked_layout(), run_all, parts)


def _decode_with(ids, offsets, tables: TextTables, layout: np.ndarray, run_all=None,
                 parts: int = 1):
    runs = _document_runs(offsets, parts)
    plans = _each(run_all, text_plan, [(ids, offsets[lo:hi + 1], tables.forms)
                                       for lo, hi in runs])
    for _, _, bad in plans:
        if bad >= 0:
            return None, bad
    characters = np.concatenate([plan[0] for plan in plans])
    wide = np.concatenate([plan[1] for plan in plans])
    texts = [None] * characters.size
    items_at = ctypes.c_int64.from_address(id(texts) + _LIST_ITEMS_AT).value
    left = np.empty(len(texts), dtype=np.int64)
    fill_args = (ids, offsets, tables.ascii_copies, tables.shapes,
                 tables.byte_slots, tables.wide_slots, tables.table_bytes, tables.table_offsets,
                 items_at, layout, characters, wide, left)
    chunks = _document_runs(offsets, _FILL_CHUNKS_A_THREAD * parts if parts > 1 else 1)
    chunk_docs = np.array([lo for lo, _ in chunks] + [chunks[-1][1]], dtype=np.int64)
    chunk_left = np.zeros(len(chunks), dtype=np.int64)
    state = np.zeros(2, dtype=np.int64)
    claim = partial(fill_claimed, *fill_args, chunk_docs, chunk_left, state)
    fillers = [helper_pool(parts - 1).submit(claim) for _ in range(parts - 1)]
    try:
        for lo, hi in chunks:
            if new_texts(items_at + 8 * lo, characters[lo:hi], wide[lo:hi], _str_api()) >= 0:
                raise MemoryError(f"no memory for the str objects of {characters.size:,} "
                                  f"decoded documents ({int(characters.sum()):,} characters)")
            publish_made(state, hi)
            if state[NEXT_CHUNK] < len(fillers):  # one has not entered fill_claimed: it needs
                time.sleep(0)  # the GIL for that, held here (else up to 5 ms: 1.84 -> 1.58x)
    except BaseException:
        publish_made(state, -1)  # the fillers stop
        wait(fillers)  # they write into the strs of the list: it outlives them
        raise
    claim()
    for filler in fillers:
        filler.result()
    return texts, np.concatenate([left[lo:lo + n] + lo
                                  for (lo, _), n in zip(chunks, chunk_left.tolist())])


# Issue 18, decode_batch of 157 K lines on 2 threads: the strs were all made on the calling
# thread (PyUnicode_New holds the GIL: 7.9 of the 19 ms), then filled on both threads. Now
# the pool's threads fill chunks of documents as soon as their strs are made (``fill_claimed``:
# one kernel call a thread, each chunk claimed by an atomic count, the strs made so far read
# from a count the calling thread publishes; a filler ahead of them waits without the GIL),
# and the calling thread claims chunks too once it has made every str. Tried before it:
# each chunk's fill handed to the pool as a task of its own: 2 threads 1.32x -> 1.61-1.66x
# one thread (the sweep); a pool thread needs the GIL to start and to end a task, and the
# calling thread holds it while it makes strs, so it gave it away after each chunk
# (``time.sleep(0)``; without, a 1 ms fill ended 4-6 ms late): ~0.1 ms of hand-offs a
# chunk. With one call a thread: 1.81-1.82x (two alternating pairs of sweeps).
_FILL_CHUNKS_A_THREAD = 8


def bytes_objects(pool: np.ndarray, records: np.ndarray, first: int,
                  last: int) -> tuple[list, np.ndarray] | None:
    """The bytes of words ``first`` to ``last - 1`` of a word tally (``kernels.word_tally``:
    word w is ``pool[records[w, 0]:][:records[w, 1]]``) as a list of new bytes objects,
    and their hashes (int64), made by a kernel; None where this interpreter's list layout
    was not checked or a function the kernel calls is missing."""
    api = _bytes_api()
    if _checked_layout() is None or api is None:
        return None
    words, hashes = [None] * (last - first), np.empty(last - first, np.int64)
    items_at = ctypes.c_int64.from_address(id(words) + _LIST_ITEMS_AT).value
    if words and new_words(items_at, len(words), records, pool, first, hashes, api) >= 0:
        raise MemoryError(f"no memory for the bytes of {len(words):,} counted words")
    return words, hashes


def dict_of_words(words: list, hashes: np.ndarray, records: np.ndarray) -> dict | None:
    """``{words[k]: records[k, 2]}`` for the words ``bytes_objects`` made (``hashes``
    theirs), by a kernel, into a dict sized for them up front; None where a function it
    calls is missing."""
    api = _dict_api()
    if api is None:
        return None
    made = api.new_dict(len(words))
    items_at = ctypes.c_int64.from_address(id(words) + _LIST_ITEMS_AT).value
    if words and filled_dict(id(made), items_at, hashes, records, api.calls) >= 0:
        raise MemoryError(f"no memory for the dict of {len(words):,} counted words")
    return made


@lru_cache(maxsize=1)
def _bytes_api() -> tuple[int, ...] | None:
    """The addresses of the CPython functions ``new_words`` calls (None: one is missing)."""
    try:
        return _addresses("PyBytes_FromStringAndSize", "Py_DecRef", "PyErr_Clear",
                          "_Py_HashBytes")
    except AttributeError:  # private functions, there from 3.10 to 3.13 at least
        return None


class _DictApi(NamedTuple):
    new_dict: object  # _PyDict_NewPresized, called from Python
    calls: tuple[int, ...]  # what filled_dict calls


@lru_cache(maxsize=1)
def _dict_api() -> _DictApi | None:
    """CPython's functions for ``dict_of_words`` (None: one is missing)."""
    try:
        new_dict = ctypes.pythonapi._PyDict_NewPresized
        calls = _addresses("PyLong_FromLongLong", "_PyDict_SetItem_KnownHash", "Py_DecRef",
                           "PyErr_Clear")
    except AttributeError:
        return None
    new_dict.restype, new_dict.argtypes = ctypes.py_object, [ctypes.c_ssize_t]
    return _DictApi(new_dict, calls)


def untracked(items: list) -> list:
    """``items`` (a list just made, that no other code holds) left out of the cyclic
    garbage collector's passes (``PyObject_GC_UnTrack``): nothing it holds can hold it
    (no cycle goes through it), and it is freed by its reference count as before.

    Issue 18: counting a list on many threads, a chunk of it is a list of up to ~300 K
    items, young while its shares are counted; each collection of the young generation
    (the tasks' futures and shares allocate ~700 tracked objects a count of 8 MB) read
    every one of its items' types: ~2 ms a collection, under the GIL (bench/RESULTS.md)."""
    if sys.implementation.name == "cpython":
        _gc_untrack()(items)
    return items


@lru_cache(maxsize=1)
def _gc_untrack():
    untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    untrack.restype, untrack.argtypes = None, [ctypes.py_object]
    return untrack


def _addresses(*names: str) -> tuple[int, ...]:
    return tuple(ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
                 for name in names)


@lru_cache(maxsize=1)
def _str_api() -> tuple[int, int, int]:
    """The addresses of the CPython functions ``new_texts`` calls."""
    return _addresses("PyUnicode_New", "Py_DecRef", "PyErr_Clear")


def _document_runs(offsets: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """About ``parts`` runs (lo, hi) of documents holding about equal numbers of ids."""
    n_docs = offsets.size - 1
    if parts <= 1 or n_docs <= 1:
        return [(0, n_docs)]
    targets = offsets[0] + (offsets[-1] - offsets[0]) * np.arange(1, parts) // parts
    cuts = np.unique(np.concatenate([[0], np.searchsorted(offsets, targets), [n_docs]]))
    return [(int(lo), int(hi)) for lo, hi in zip(cuts, cuts[1:])]


@lru_cache(maxsize=1)
def _fills_probes() -> bool:
    """Whether the str layout was checked and ``_decode_with`` gives the probe texts
    back, each decoded once from a token of its own and once from tokens of one byte each
    (both paths of the fill)."""
    layout = _checked_layout()
    if layout is None:
        return False
    probes = [text for text in _PROBES if text]
    pieces = [text.encode() for text in probes] + [bytes([b]) for b in range(256)]
    offsets = np.cumsum([0] + list(map(len, pieces)), dtype=np.int64)
    table_bytes = np.frombuffer(b"".join(pieces), np.uint8)
    tables = TextTables(table_bytes, offsets, byte_slots(table_bytes, offsets))
    documents = [[k] for k in range(len(probes))] + [
        [len(probes) + b for b in text.encode()] for text in probes]
    ids = np.array([i for document in documents for i in document], dtype=np.uint32)
    doc_offsets = np.cumsum([0] + list(map(len, documents)), dtype=np.int64)
    texts, left = _decode_with(ids, doc_offsets, tables, layout)
    return left.size == 0 and texts == probes + probes

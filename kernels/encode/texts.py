"""Decoding to text: ids written as the characters of Python ``str`` objects, in place.

Issue 18: ``decode_batch`` gathered each document's bytes and handed them to CPython's
UTF-8 decoder, which runs ~0.55-0.8 GB/s on mixed scripts: the list of str could not
come faster than that. Here the characters go straight from per-token tables into
str objects the caller made for them, in the storage CPython gives a str (PEP 393:
1, 2 or 4 bytes a character, the width of the widest one), without the GIL.

Steps (``gpubpe._pystr.decode_texts`` runs them):

1. ``token_text_forms`` (once per vocabulary): each token's *form*, ASCII copy and
   *shape* (below), and the characters after the first of every token that has a shape
   (most have; a byte-level vocabulary also has tokens holding part of a character).
2. ``text_plan``: per document, its characters and its storage width, from the forms
   alone: a document's characters are its bytes that start one (not 0x80-0xBF), and its
   widest character's width is set by its greatest start byte (0xC2-0xC3: up to U+00FF,
   0xC4-0xEF: up to U+FFFF). That holds when its bytes are valid UTF-8; the fill checks.
3. ``new_texts`` makes a fresh str of each length and width (PyUnicode_New, its characters
   not set; with the GIL held).
4. ``fill_texts``: each document's characters written into its str. In a document all
   ASCII each token is one 16-byte load from its slot of the byte gather's
   ``byte_slots`` and one store. In any other, each token is applied by its *shape*,
   whole or not, with no branch on which (``_step_run``): the character its head ends
   or its first one (one store), the characters after it (a slot of 16 in
   ``wide_slots``: one vector load, widened or narrowed to the str's width, one store),
   the decoder state it leaves. A token with no shape has its bytes go one at a time
   through a UTF-8 decoder that checks what CPython's does. The last 17 characters (a
   slot store may run past the one it writes) are written the same way into a scratch
   buffer, then copied. A document whose bytes are not valid UTF-8 is left for the caller
   (CPython decodes it with the caller's ``errors``). On several threads steps 3 and 4
   overlap: ``fill_claimed`` fills chunks of documents as soon as the calling thread has
   published that their strs are made (``publish_made``).

The str objects are read and written where CPython keeps them, as ``kernels.str_utf8``
reads them: see there, and ``gpubpe._pystr`` for the checks made before any of this
runs. ``fill_texts`` writes only into an exact compact str of the planned length and
width whose only reference is the caller's list (reference count 1), so never into a
shared or cached object.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from .._jit import hot
from .._raw import call as _call
from .._raw import copy_bytes as _copy_bytes
from .._raw import fetch_add as _fetch_add
from .._raw import load as _load
from .._raw import load_acquire as _load_acquire
from .._raw import put_new_item as _put_new_item
from .._raw import spin_pause as _spin_pause
from .._raw import store as _store
from .._raw import store_release as _store_release
from ..str_utf8 import _str_form
from .decode import SLOT_BYTES

# A token's form (uint32, narrowed to uint16 by the caller when every form fits: the plan
# reads it once an id, and half the table stays in cache better; 0 for an id with no
# bytes, a gap of the id layout): bit 0 set for every token, bits 1-4 one bit
# for the width its widest character start asks for (WIDE_*), bits 5 and up how many
# characters start in it.
FORM_TOKEN, FORM_WIDE_SHIFT, FORM_COUNT_SHIFT = 1, 1, 5
WIDE_ASCII, WIDE_LATIN1, WIDE_UCS2, WIDE_UCS4 = 0, 1, 2, 3
# The fill of a document that is not all ASCII copies runs of ASCII tokens by their byte
# slots (``_copy_ascii_run``) while the tokens that left them are at most STEP_SLACK and
# 1 in STEP_FROM of the tokens so far; then it takes every token by its shape
# (``_step_run``).
STEP_FROM, STEP_SLACK = 32, 2
# A token's ASCII copy (uint8, ``ascii_copies``, for documents all ASCII): 1-16, an ASCII
# token of that many characters, written as its 16-byte slot of ``byte_slots``; 0, any
# other token.
ASCII_COPIES = SLOT_BYTES  # 16: a slot is one vector load (``_put_slot``)
# A token's shape (int64), how the fill of any other document writes it: its first
# character at the position, then a slot of the characters after it. The *head* is the
# 0-3 continuation bytes before its first character start, which end the character open
# before it. Fields: 6 x the head (bits 0-5: the shift that makes room for the head's
# bits in the open character's code), or SHAPE_NONE where the token has no shape (its
# bytes cannot be part of valid UTF-8, a head of more than 3 bytes, more than
# WIDE_SLOT_UNITS characters after the first, or one of them past U+FFFF: it is decoded
# byte by byte); its *first*: the head's 6-bit payloads (first byte highest), or with no
# head its first character (0 if none starts in it); how many characters it moves the
# position; and the UTF-8 decoder's state after its last byte (``_state``). The slot
# (``wide_slots`` at ``id * WIDE_SLOT_UNITS``): the characters after the first one.
WIDE_SLOT_UNITS = SLOT_BYTES
SHAPE_NONE = 63
SHAPE_FIRST, SHAPE_ADVANCE, SHAPE_NEED, SHAPE_RANGE, SHAPE_CODE = 6, 27, 32, 38, 41
# The range the byte after a lead byte must be in: any continuation byte, or after E0,
# ED, F0 and F4 (``_utf8_step``'s low and high).
NEXT_LOW, NEXT_HIGH = (0x80, 0xA0, 0x80, 0x90, 0x80), (0xBF, 0xBF, 0x9F, 0xBF, 0x8F)
_REFCOUNT_AT = 0


@njit(inline="always", cache=True)
def _start_width(byte):
    """WIDE_* of the widest character a UTF-8 start byte can begin."""
    if byte < 0x80:
        return WIDE_ASCII
    if byte < 0xC4:
        return WIDE_LATIN1
    return WIDE_UCS2 if byte < 0xF0 else WIDE_UCS4


@njit(inline="always", cache=True)
def _utf8_step(byte, need, code, low, high):
    """One byte through a UTF-8 decoder that accepts what CPython's accepts (no overlong
    forms, no surrogates, nothing past U+10FFFF). State: ``need`` continuation bytes to
    come, the ``code`` so far, the range [``low``, ``high``] the next one must be in.
    Returns the new state and 1 when a character ended (``code``), 0 when not, -1 when
    the bytes are invalid."""
    if need == 0:
        if byte < 0x80:
            return 0, byte, 0x80, 0xBF, 1
        if byte < 0xC2 or byte > 0xF4:
            return 0, 0, 0x80, 0xBF, -1
        if byte < 0xE0:
            return 1, byte & 0x1F, 0x80, 0xBF, 0
        if byte < 0xF0:
            return (2, byte & 0x0F, 0xA0 if byte == 0xE0 else 0x80,
                    0x9F if byte == 0xED else 0xBF, 0)
        return 3, byte & 0x07, 0x90 if byte == 0xF0 else 0x80, 0x8F if byte == 0xF4 else 0xBF, 0
    if byte < low or byte > high:
        return 0, 0, 0x80, 0xBF, -1
    code = (code << 6) | (byte & 0x3F)
    return need - 1, code, 0x80, 0xBF, 1 if need == 1 else 0


@njit(nogil=True, cache=True)
def token_text_forms(table_bytes, table_offsets):
    """``(forms, ascii_copies uint8, shapes int64, wide_slots uint16)``: every token's
    form, ASCII copy and shape (see the top of the module); the characters after a
    shape's first at ``wide_slots[id * WIDE_SLOT_UNITS:]``, zero-padded (one spare slot
    at the end)."""
    n_ids = table_offsets.size - 1
    forms = np.zeros(n_ids, np.uint32)
    ascii_copies = np.zeros(n_ids, np.uint8)
    shapes = np.zeros(n_ids, np.int64)
    wide_slots = np.zeros((n_ids + 1) * WIDE_SLOT_UNITS, np.uint16)
    longest = np.max(np.diff(table_offsets)) if n_ids else 0
    units = np.empty(max(longest, 1), np.uint32)  # one token's characters
    for token in range(n_ids):
        start, stop = table_offsets[token], table_offsets[token + 1]
        starts, widest, head, payload = 0, 0, 0, 0
        for j in range(start, stop):
            byte = np.int64(table_bytes[j])
            if (byte >> 6) != 2:
                starts += 1
                widest |= 1 << _start_width(byte)
            elif starts == 0:
                head += 1
                payload = (payload << 6) | (byte & 0x3F)
        if stop > start:
            forms[token] = (FORM_TOKEN | (widest << FORM_WIDE_SHIFT)
                            | (starts << FORM_COUNT_SHIFT))
        count, need, code, low, high = _decode_bytes(table_bytes, start + head, stop, 0, 0,
                                                     0x80, 0xBF, units.ctypes.data, 0,
                                                     units.size, np.uint32)
        shapes[token] = SHAPE_NONE
        after = 0 if head else 1  # the characters in its slot: after the first one
        if (stop > start and count >= 0 and head <= 3 and count - after <= WIDE_SLOT_UNITS
                and (count <= after or units[after:count].max() <= 0xFFFF)):
            wide_slots[token * WIDE_SLOT_UNITS:][:max(count - after, 0)] = units[after:count]
            first = payload if head or count == 0 else units[0]
            shapes[token] = _shape(head, first, count, need, code, low, high)
        if stop > start and widest == 1 << WIDE_ASCII and count <= ASCII_COPIES:
            ascii_copies[token] = count
    return forms, ascii_copies, shapes, wide_slots


@hot
def _decode_bytes(table_bytes, start, stop, need, code, low, high, data, pos, length, unit):
    """Run ``table_bytes[start:stop]`` through ``_utf8_step`` from the state (need, code,
    low, high), storing each character that ends as a ``unit`` at ``data + pos *
    width``, ``pos`` counting up; returns ``(pos, need, code, low, high)`` after them, pos
    -1 where the bytes are invalid or a character would land at or past ``length``."""
    width = np.int64(_unit_bytes(unit))
    for j in range(np.uint64(start), np.uint64(stop)):
        need, code, low, high, ended = _utf8_step(np.int64(table_bytes[j]), need, code,
                                                  low, high)
        if ended < 0 or (ended > 0 and pos >= length):
            return -1, 0, 0, 0, 0
        if ended > 0:
            _store(data + pos * width, unit(code))
            pos += 1
    return pos, need, code, low, high


@njit(inline="always", cache=True)
def _shape(head, first, count, need, code, low, high):
    """A token's shape word (see SHAPE_*): ``count`` characters start in it."""
    return (6 * head | first << SHAPE_FIRST | (count + (head != 0)) << SHAPE_ADVANCE
            | _state(need, code, low, high))


@njit(inline="always", cache=True)
def _state(need, code, low, high):
    """The UTF-8 decoder's state (``_utf8_step``'s) as the fields of a shape word after
    the first: 6 x need, 32 more where the next byte's range is narrowed (after E0, ED,
    F0 or F4: then no token's shift field matches it, and ``_step_run`` leaves the next
    token to ``_apply_shape``, which checks the range), the range, the code so far."""
    narrowed = 1 if low == 0xA0 else 2 if high == 0x9F else 3 if low == 0x90 else \
        4 if high == 0x8F else 0
    return ((6 * need + (32 if narrowed else 0)) << SHAPE_NEED | narrowed << SHAPE_RANGE
            | (code if need else 0) << SHAPE_CODE)


@njit(inline="always", cache=True)
def _from_state(state):
    """``(need, code, low, high)`` of a ``_state`` word."""
    narrowed = (state >> SHAPE_RANGE) & 7
    return (((state >> SHAPE_NEED) & 31) // 6, state >> SHAPE_CODE, NEXT_LOW[narrowed],
            NEXT_HIGH[narrowed])


@njit(nogil=True, cache=True)
def text_plan(ids, doc_offsets, forms):
    """``(characters int64, wide uint8, bad)`` per document: how many characters its
    bytes hold and the WIDE_* of its widest one, if they are valid UTF-8. ``bad`` is -1,
    or the position of the first id that is no token (out of range or a gap)."""
    n_docs = doc_offsets.size - 1
    characters = np.empty(n_docs, np.int64)
    wide = np.empty(n_docs, np.uint8)
    n_forms = np.uint64(forms.size)
    for d in range(n_docs):
        first, last = np.uint64(doc_offsets[d]), np.uint64(doc_offsets[d + 1])
        count, seen, every, top = _plan_document(ids, first, last, forms)
        if top >= n_forms or (every & np.uint64(FORM_TOKEN)) == 0:
            return characters, wide, _first_not_token(ids, first, last, forms)
        characters[d] = count
        bits = (seen >> np.uint64(FORM_WIDE_SHIFT)) & np.uint64(15)
        wide[d] = 3 if bits >= 8 else 2 if bits >= 4 else 1 if bits >= 2 else 0
    return characters, wide, -1


@hot
def _plan_document(ids, first, last, forms):
    """``(characters, the forms or-ed, the forms and-ed, the greatest id)`` of the ids at
    [first, last): no branch an id (an id past the forms reads the last; the caller checks
    the greatest id). With a branch an id for a bad id, the plan ran ~1.1 ns an id.
    uint64 positions: with int64 ones Numba adds the negative-index fix-up to every read
    of ids."""
    count, seen, every, top = np.uint64(0), np.uint64(0), np.uint64(FORM_TOKEN), np.uint64(0)
    last_form = np.uint64(forms.size) - np.uint64(1)
    for k in range(first, last):
        token = np.uint64(np.int64(ids[k]))  # a negative id wraps past every id
        top = max(top, token)
        form = np.uint64(forms[min(token, last_form)])
        count += form >> np.uint64(FORM_COUNT_SHIFT)
        seen |= form
        every &= form
    return count, seen, every, top


@hot
def _first_not_token(ids, first, last, forms):
    for k in range(first, last):
        token = np.uint64(np.int64(ids[k]))
        if token >= np.uint64(forms.size) or forms[token] == 0:
            return np.int64(k)
    return np.int64(-1)


# The greatest character of each storage width (WIDE_*): what PyUnicode_New is asked for.
WIDE_MAXCHAR = (0x7F, 0xFF, 0xFFFF, 0x10FFFF)


@njit(cache=True)
def new_texts(items_at, characters, wide, api):
    """Put in item d of the list whose item pointers are at ``items_at`` (a list of None)
    a fresh str of ``characters[d]`` characters of width ``wide[d]``, its characters not
    set: ``fill_texts`` writes them, and the caller replaces every str it did not write.
    ``api``: the addresses of CPython's PyUnicode_New, Py_DecRef and PyErr_Clear. Returns
    -1, or the first document no str could be made for (out of memory; it and those after
    it stay None). Not nogil: it calls CPython, which needs the GIL held.

    Made in Python as a character repeated (``"\x00" * n``), the strs took ~300-460 ns a
    ~2 KB document, writing every character once more; here ~45 ns, and the fill after
    it ran ~5% faster (in-process A/B, 8 MB of ~2 KB documents: English strs + fill
    4.48 -> 3.13 ms, mixed scripts 11.71 -> 9.91)."""
    new_str, decref, clear_error = api
    for d in range(characters.size):
        text = _call(new_str, (characters[d], WIDE_MAXCHAR[wide[d]]))
        if not _put_new_item(items_at, d, text, decref, clear_error):
            return d
    return -1


@njit(nogil=True, cache=True)
def fill_texts(ids, doc_offsets, ascii_copies, shapes, byte_slots, wide_slots,
               table_bytes, table_offsets, items_at, layout, characters, wide, left):
    """Write each document's characters into item d of the list whose item pointers are
    at ``items_at``: a fresh str of ``characters[d]`` characters and width ``wide[d]``
    (``text_plan``'s) that only the list holds. Documents not written (invalid UTF-8, or
    a str that is not such an object: shared, another length or width) go into ``left``;
    returns how many. A document with no ids is skipped (its str is "")."""
    n_left = 0
    tables = (ascii_copies, shapes, byte_slots, wide_slots, table_bytes, table_offsets)
    # a document's last characters (up to ASCII_COPIES + 1) and what a slot store at the
    # last of them may write past it (ASCII_COPIES more), in any width
    scratch = np.empty(3 * ASCII_COPIES, np.uint32)
    for d in range(doc_offsets.size - 1):
        first, last = doc_offsets[d], doc_offsets[d + 1]
        if first == last:  # no ids: the str is "" already
            continue
        address = _load(items_at + 8 * d, np.int64)
        length, width, ascii, data = _str_form(address, layout)
        fits = (length == characters[d] and length >= 1
                and width == (1 << max(np.int64(wide[d]) - 1, 0))
                and ascii == (wide[d] == WIDE_ASCII)
                and _load(address + _REFCOUNT_AT, np.int64) == 1)
        if fits and ascii:
            fits = _fill_text(ids, first, last, tables, scratch, data, length, np.uint8, True)
        elif fits and width == 1:
            fits = _fill_text(ids, first, last, tables, scratch, data, length, np.uint8, False)
        elif fits and width == 2:
            fits = _fill_text(ids, first, last, tables, scratch, data, length, np.uint16, False)
        elif fits:
            fits = _fill_text(ids, first, last, tables, scratch, data, length, np.uint32, False)
        if not fits:
            left[n_left] = d
            n_left += 1
    return n_left


# ``fill_claimed``'s state (int64): the documents whose strs are made, from the first on (-1:
# no more will be, the maker stopped), and the next chunk to claim.
MADE, NEXT_CHUNK = 0, 1


@njit(nogil=True, cache=True)
def fill_claimed(ids, doc_offsets, ascii_copies, shapes, byte_slots, wide_slots,
                 table_bytes, table_offsets, items_at, layout, characters, wide, left,
                 chunk_docs, chunk_left, state):
    """``fill_texts`` of chunks of documents (chunk c: documents ``chunk_docs[c]`` to
    ``chunk_docs[c + 1] - 1``), each claimed by whichever thread calling this takes it
    first (``state[NEXT_CHUNK]``, an atomic count): a thread fills a chunk once its strs
    are made (``state[MADE]`` reaches its end, waiting for it without the GIL while the
    calling thread makes them), and returns when no chunk is left or the maker stopped
    (``state[MADE]`` -1). Chunk c's documents not written go into ``left[chunk_docs[c]:]``,
    relative to it, and their number into ``chunk_left[c]``."""
    at = state.ctypes.data
    while True:
        c = _fetch_add(at + 8 * NEXT_CHUNK, 1)
        if c >= chunk_docs.size - 1:
            return
        lo, hi = chunk_docs[c], chunk_docs[c + 1]
        made = _load_acquire(at + 8 * MADE)
        while 0 <= made < hi:
            _spin_pause()
            made = _load_acquire(at + 8 * MADE)
        if made < 0:
            return
        chunk_left[c] = fill_texts(ids, doc_offsets[lo:hi + 1], ascii_copies, shapes,
                                   byte_slots, wide_slots, table_bytes, table_offsets,
                                   items_at + 8 * lo, layout, characters[lo:hi], wide[lo:hi],
                                   left[lo:hi])


@njit(cache=True)
def publish_made(state, made):
    """``state[MADE] = made`` with release ordering: a thread that reads it in
    ``fill_claimed`` sees every str made before (-1: the maker stopped)."""
    _store_release(state.ctypes.data + 8 * MADE, made)


@hot
def _fill_text(ids, first, last, tables, scratch, data, length, unit, ascii):
    """Write the characters of ``ids[first:last]`` at ``data`` (``length`` of them, each a
    ``unit``); False where their bytes are not valid UTF-8 (the str is then left half
    written, for the caller to drop). ``_fill_span`` writes them up to 17 characters from
    the end, where a slot store may still run past the character it writes; the rest (or
    a document of fewer characters) it writes into ``scratch`` the same way, then they
    are copied into the str. (Those last characters went byte by byte before: 8.7 ns an
    id on lines of ~50 bytes, a third of their characters.)"""
    width = np.int64(_unit_bytes(unit))
    end = np.uint64(last)
    k, pos, need, code, low, high = _fill_span(ids, np.uint64(first), end, tables, data,
                                               np.int64(0), length, length - ASCII_COPIES - 1,
                                               0, 0, 0x80, 0xBF, unit, ascii)
    base = pos
    if pos >= 0 and k < end:
        at = scratch.ctypes.data
        k, pos, need, code, low, high = _fill_span(ids, k, end, tables, at - base * width,
                                                   pos, length, length, need, code, low,
                                                   high, unit, ascii)
        if pos == length:
            _copy_bytes(data + base * width, at, (length - base) * width)
    return k == end and need == 0 and pos == length


@hot
def _fill_span(ids, k, end, tables, data, pos, length, last_slot, need, code, low, high, unit,
               ascii):
    """Write the characters of ``ids[k:end]`` from ``pos`` on while a slot store at ``pos``
    stays at or before ``last_slot``, from the UTF-8 decoder's state (need, code, low,
    high: ``_utf8_step``'s); returns where it stopped and the state there, pos -1 where
    the bytes are not valid UTF-8. Runs of ASCII tokens go to ``_copy_ascii_run``; in a
    document not all ASCII, once more tokens left them than STEP_SLACK and 1 in STEP_FROM
    of the tokens so far, every token goes to ``_step_run``. A token either leaves is
    applied by its shape (``_apply_shape``), or decoded byte by byte when it has none.

    Issue 18: English documents with a few curly quotes or accented letters (6% of the
    demo corpus's ~2 KB documents; more of web text) filled at 1.8-2.2 ns an id by
    ``_step_run`` alone, at 1.1-1.5 by the ASCII runs, leaving them at each such token;
    CJK text the other way round (bench/RESULTS.md, session 12)."""
    ascii_copies, shapes, byte_slots, wide_slots, table_bytes, table_offsets = tables
    steps, start, exits = False, k, np.int64(-STEP_SLACK)
    while k < end and pos <= last_slot:
        if need == 0 and not steps:
            k, pos = _copy_ascii_run(ids, k, end, ascii_copies, byte_slots, data, pos,
                                     last_slot, unit)
        elif steps:
            k, pos, need, code, low, high = _step_run(ids, k, end, shapes, wide_slots, data,
                                                      pos, last_slot, need, code, low, high,
                                                      unit)
        if k == end or pos > last_slot or pos < 0:
            break
        token = np.uint64(ids[k])
        k += np.uint64(1)
        if not (ascii or steps):  # (an ASCII document leaves the runs only past 16 characters)
            exits += 1
            steps = exits * STEP_FROM > np.int64(k - start)
        shape = shapes[token]
        if shape & 63 != SHAPE_NONE:
            pos, need, code, low, high = _apply_shape(shape, token, wide_slots, data, pos,
                                                      need, code, low, high, unit)
        else:
            pos, need, code, low, high = _decode_bytes(
                table_bytes, table_offsets[token], table_offsets[token + np.uint64(1)], need,
                code, low, high, data, pos, length, unit)
        if pos < 0:
            break
    return k, pos, need, code, low, high


@hot
def _apply_shape(shape, token, wide_slots, data, pos, need, code, low, high, unit):
    """Apply a token by its shape at ``pos`` (at least 17 characters from the end) with
    the UTF-8 decoder in state (need, code, low, high): the character its head ends, or
    its first, is one store, the characters after it one slot store, its last state the
    new state. Returns ``(pos, need, code,
    low, high)`` after it, pos -1 where the bytes are invalid. What ``_step_run`` leaves:
    a head that does not end the open character, one after a lead byte that narrows the
    next byte's range, invalid bytes."""
    width = np.int64(_unit_bytes(unit))
    shift = shape & 63
    head = shift // 6
    advance = (shape >> SHAPE_ADVANCE) & 31
    tail = (shape >> SHAPE_NEED) & 63
    if head > need or (head < need and (head == 0 or (advance - 1) | tail != 0)):
        return -1, 0, 0, 0, 0  # (with a head, advance - 1 characters start in the token)
    first = (shape >> SHAPE_FIRST) & 0x1FFFFF
    if head != 0:
        if not low <= 0x80 | ((first >> (shift - 6)) & 0x3F) <= high:
            return -1, 0, 0, 0, 0
        code = (code << shift) | first
        if head < need:  # the token is part of the open character's continuation bytes
            return pos, need - head, code, 0x80, 0xBF
        first = code
    _store(data + pos * width, unit(first))
    _put_slot(data + (pos + 1) * width, wide_slots, token * np.uint64(WIDE_SLOT_UNITS), unit)
    need, code, low, high = _from_state(shape)
    return pos + advance, need, code, low, high


@hot
def _step_run(ids, k, end, shapes, wide_slots, data, pos, last_slot, need, code, low, high,
              unit):
    """Apply tokens from ``ids[k]`` on by their shapes, with no branch on what kind of
    token each is, while each one's head ends the character open before it (or there is
    none and it has no head) and a slot store at ``pos + 1`` stays at or before
    ``last_slot + 1``; returns ``(k, pos, need, code, low, high)`` where it stopped. Each
    token stores one character at ``pos`` (the one its head ends, else its first: the
    shift of the code so far and the first field do both) and its slot after it, and
    moves ``pos`` on; the state is the last token's shape word (``_state``), whose need
    field a token's shift field must equal.

    Issue 18. Before, whole tokens were copied in a loop of their own and a token that
    splits a character (a quarter of the ids of mixed-script text under cl100k_base, in
    runs of 2-3) left it for ``_apply_shape``: ~20 ns a run. The same tokens in a
    regular pattern filled at 1.33 ns an id, at random (as text has them) 3.34: the
    loop's exits were mispredicted branches. Here both 1.12-1.14 ns an id (~27
    instructions a token). Tries of a loop without branches in sessions 6 and 7 lost
    (0.90-1.04x): they checked each byte's range and rebuilt the state's fields at every
    token (~50 instructions); here a state whose next byte's range is narrowed (after
    E0, ED, F0, F4) matches no token and leaves the next one to ``_apply_shape``, and a
    token's first character or the one its head ends is one store from the same fields.
    Fill by document width (``multiscript.txt`` in ~2 KB documents, one core), before /
    after: cl100k_base UCS-2 2.85 / 1.66 ns an id, UCS-4 3.27 / 1.94; a 4,096-id
    vocabulary (few splits) UCS-2 1.23 / 1.16, UCS-4 1.90 / 1.41 (this loop alone; with
    ``_fill_span``'s runs of ASCII tokens first, mixed scripts lose 1-4% and English
    gains 5%). bench/RESULTS.md, session 12."""
    width = np.int64(_unit_bytes(unit))
    state = _state(need, code, low, high)
    while k < end:
        token = np.uint64(ids[k])
        shape = shapes[token]
        if ((state >> SHAPE_NEED) ^ shape) & 63 != 0 or pos > last_slot:
            break
        first = (state >> SHAPE_CODE) << (shape & 63) | ((shape >> SHAPE_FIRST) & 0x1FFFFF)
        _store(data + pos * width, unit(first))
        _put_slot(data + (pos + 1) * width, wide_slots, token * np.uint64(WIDE_SLOT_UNITS),
                  unit)
        pos += (shape >> SHAPE_ADVANCE) & 31
        state = shape
        k += np.uint64(1)
    need, code, low, high = _from_state(state)
    return k, pos, need, code, low, high


@hot
def _copy_ascii_run(ids, k, end, ascii_copies, byte_slots, data, pos, last_slot, unit):
    """Write tokens from ``ids[k]`` on while each is all ASCII and a slot store at ``pos``
    stays at or before ``last_slot``, each its 16-byte slot of ``byte_slots`` widened to
    ``unit``; returns where it stopped ``(k, pos)``. A loop of its own: inside
    ``_fill_text``'s, LLVM kept ``pos`` on the stack (a store and a load on the chain from
    one token to the next: 2.5 ns an id, English, against ~1.5 for the byte gather)."""
    width = np.int64(_unit_bytes(unit))
    while k < end:
        token = np.uint64(ids[k])
        copy = np.int64(ascii_copies[token])
        if copy == 0 or pos > last_slot:
            break
        _put_slot(data + pos * width, byte_slots, token * np.uint64(SLOT_BYTES), unit)
        pos += copy
        k += np.uint64(1)
    return k, pos


@intrinsic
def _unit_bytes(typingctx, unit):
    """The bytes of ``unit`` (a NumPy integer type), a compile-time constant."""
    size = unit.instance_type.bitwidth // 8

    def codegen(context, builder, signature, args):
        return context.get_constant(types.int64, size)

    return types.int64(unit), codegen


def _array_at(context, builder, array_type, array, index):
    """A pointer to ``array[index]``."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def _put_slot(typingctx, destination, slots, at, unit):
    """Store the SLOT_BYTES (16) elements at ``slots[at:]`` (uint8 or uint16) at address
    ``destination`` as that many characters of type ``unit``: one load, a zero extension
    or a truncation (vpmovzxbw, vpmovzxwd, vpmovwb, ...), one store."""
    bits, slot_bits = unit.instance_type.bitwidth, slots.dtype.bitwidth

    def codegen(context, builder, signature, args):
        source = _array_at(context, builder, signature.args[1], args[1], args[2])
        source_type = ir.VectorType(ir.IntType(slot_bits), SLOT_BYTES)
        value = builder.load(builder.bitcast(source, source_type.as_pointer()), align=1)
        target_type = ir.VectorType(ir.IntType(bits), SLOT_BYTES)
        if bits > slot_bits:
            value = builder.zext(value, target_type)
        elif bits < slot_bits:
            value = builder.trunc(value, target_type)
        builder.store(value, builder.inttoptr(args[0], target_type.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(types.int64, slots, types.uint64, unit), codegen

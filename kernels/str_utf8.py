"""Python ``str`` objects as UTF-8, read by a kernel that does not hold the GIL.

Issue 18: a list of str reaching ``count_words`` or ``encode_batch`` was encoded on
the calling thread under the GIL (``str.encode`` per item, ~105 ns a mixed-script
line, plus building and joining the bytes objects): that thread bounded 2-thread
counting at ~1.5x. These loops read each str's characters where CPython keeps them
(PEP 393: one, two or four bytes a character right after the object's header) and
write UTF-8 in one buffer, with no Python object made and the GIL released.

``gpubpe._pystr`` decides whether they may run: it checks, on probe strings and with
reads inside each object (``sys.getsizeof``), that this interpreter lays out str and
list as ``layout`` says; elsewhere (another implementation or version) the caller
encodes with ``str.encode``. The kernels trust that check: they read the item
pointers of a list (``items_at``: its ``ob_item``) and the header of each item, and
read a character array only for an exact ``str`` (type pointer ``layout[STR_TYPE]``)
in the compact form; any other object is "refused" and the caller takes the slow
path, so a bytes item, a ``str`` subclass (not compact) or a lone surrogate (not
encodable) never gets here. The list must be one the caller owns (a private copy):
nothing may resize it while a kernel reads it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import hot
from ._raw import copy_bytes as _copy
from ._raw import load as _load
from ._raw import store as _store

# layout: the address of the str type, then the byte offsets of the characters of an
# ASCII str and of another compact str (sys.getsizeof of "" and of a 2-character
# Latin-1 str made at run time, less the characters and their NUL: a literal's size
# counts its cached UTF-8 copy from Python 3.12 on).
STR_TYPE, ASCII_DATA, COMPACT_DATA = 0, 1, 2
# Field offsets in every CPython with a GIL (3.8-3.14): ob_type, then PyASCIIObject's
# length and state (the bit fields interned:2, kind:3, compact:1, ascii:1).
TYPE_AT, LENGTH_AT, STATE_AT = 8, 16, 32


@hot
def _str_form(address, layout):
    """(characters, bytes a character: 1/2/4, or 0 when refused; ascii; their address)."""
    if _load(address + TYPE_AT, np.int64) != layout[STR_TYPE]:
        return 0, 0, False, 0
    state = _load(address + STATE_AT, np.uint32)
    kind, compact, ascii = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact:
        return 0, 0, False, 0
    length = _load(address + LENGTH_AT, np.int64)
    if ascii:
        return length, 1, True, address + layout[ASCII_DATA]
    return length, kind, False, address + layout[COMPACT_DATA]


_MOST_BYTES = (1, 2, 3, 4, 4)  # UTF-8 bytes a character at most, by bytes a character stored


@njit(nogil=True, cache=True)
def str_utf8_bound(items_at, n_items, layout, ends, step):
    """At least the UTF-8 bytes of one item in each block of ``step`` (``sampled_item``)
    of the list whose item pointers are at ``items_at`` (each str's characters times the
    most bytes one of its width can take), or ``-1 - k`` when such an item k is no exact
    compact str. ``ends[j]``: the bound of those items in blocks 0 to j, by which a caller
    cuts the list into runs of about equal bytes. Reads those headers only.

    ``step`` > 1 samples a list too long to read every header of on one thread: counting
    40 MB of lines on 16 threads, the calling thread's pass over all 742 K headers cut
    the chunks into shares for 7.5 ms (each header a cache miss), 1/3 of what it ran
    alone (bench/RESULTS.md, issue 18, session 14)."""
    bound = 0
    for j in range((n_items + step - 1) // step):
        k = sampled_item(j, step, n_items)
        length, width, ascii, _ = _str_form(_load(items_at + 8 * k, np.int64), layout)
        if width == 0:
            return -1 - k
        bound += length if ascii else length * _MOST_BYTES[width]
        ends[j] = bound
    return bound


@njit(cache=True)
def sampled_item(j, step, n_items):
    """The item ``str_utf8_bound`` reads in block j of ``step`` items: at a scrambled
    place in it, not the first, so that a corpus that repeats itself (the sweep's lines:
    one file copied) is not read at the same place of each copy (its first item of each
    block: shares up to 1.17x the mean bytes, 16 threads, 512 a share)."""
    first = j * step
    return first + (j * 0x9E3779B1) % min(step, n_items - first)


@hot
def put_character(c, out_at):
    """Store the UTF-8 of code point ``c`` (a uint32) at address ``out_at`` in one store
    (a 3-byte character stores 4 bytes); returns the address after its bytes, or -1 for a
    lone surrogate.

    Measured on UCS-2 text (ns a character; CPython's ``str.encode`` beside it): one
    store a byte into a NumPy array ~4; a store a character, branchy as here, 1.1 on pure
    CJK, 1.9 on the CJK / Korean / Cyrillic lines of multiscript.txt (CPython 2.0 / 2.9);
    branch-free (every form built, the right one selected) 2.2-2.4: more work per
    character than the mispredictions it saves.
    """
    if c < 0x80:
        _store(out_at, np.uint8(c))
        return out_at + 1
    low6, mid6 = 0x80 | (c & 0x3F), 0x80 | ((c >> 6) & 0x3F)
    if c < 0x800:
        _store(out_at, np.uint16((0xC0 | (c >> 6)) | low6 << 8))
        return out_at + 2
    if c < 0x10000:
        if (c >> 11) == 0x1B:  # a lone surrogate (0xD800-0xDFFF): no UTF-8
            return -1
        _store(out_at, np.uint32((0xE0 | (c >> 12)) | mid6 << 8 | low6 << 16))
        return out_at + 3
    high6 = 0x80 | ((c >> 12) & 0x3F)
    _store(out_at, np.uint32((0xF0 | (c >> 18)) | high6 << 8 | mid6 << 16 | low6 << 24))
    return out_at + 4


@hot
def _put_utf8(data, length, width, out_at):
    """Write ``length`` characters of ``width`` bytes at ``data`` as UTF-8 at address
    ``out_at``; returns the address after them, or -1 at a lone surrogate. A 3-byte
    character stores 4 bytes, so 1 byte after the end may be overwritten. One loop per
    width (as one loop, LLVM branched on the width at every character)."""
    if width == 1:
        for k in range(length):
            out_at = put_character(np.uint32(_load(data + k, np.uint8)), out_at)
    elif width == 2:
        for k in range(length):
            out_at = put_character(np.uint32(_load(data + 2 * k, np.uint16)), out_at)
            if out_at < 0:
                return -1
    else:
        for k in range(length):
            out_at = put_character(_load(data + 4 * k, np.uint32), out_at)
            if out_at < 0:
                return -1
    return out_at


@njit(nogil=True, cache=True)
def write_str_utf8(items_at, n_items, layout, out_at, lengths):
    """Write the list's items (each accepted by ``str_utf8_bound``) end to end as UTF-8 at
    address ``out_at``, ``lengths[k]`` the bytes of item k; the output must hold their
    bound and a byte more. Returns the first item holding a lone surrogate, -1 if none.

    One pass over the characters: a pass that counted the bytes exactly first, then one
    that wrote them, read every string twice (26 + 36 ns a mixed-script line, against
    ~3 for the bound from the headers)."""
    at = out_at
    for k in range(n_items):
        length, width, ascii, data = _str_form(_load(items_at + 8 * k, np.int64), layout)
        if ascii:
            _copy(at, data, length)
            end = at + length
        else:
            end = _put_utf8(data, length, width, at)
            if end < 0:
                return k
        lengths[k] = end - at
        at = end
    return -1


@njit(nogil=True, cache=True)
def any_ends_with(data, lengths, tails, tail_ends):
    """Whether a document (``lengths[d]`` bytes each, end to end in ``data``) ends with one
    of the byte strings ``tails[tail_ends[k - 1]:tail_ends[k]]`` (a corpus file suffix:
    ``pretokenize`` then looks at the list's items one by one)."""
    end = 0
    for d in range(lengths.size):
        end += lengths[d]
        for k in range(tail_ends.size):
            start = tail_ends[k - 1] if k else 0
            n = tail_ends[k] - start
            if lengths[d] < n or data[end - 1] != tails[start + n - 1]:
                continue
            j = 0
            while j < n and data[end - n + j] == tails[start + j]:
                j += 1
            if j == n:
                return True
    return False

"""Stage 4: ids per piece counted, then written in place (ragged output)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot_nogil
from ..pretok import piece_end
from ._shared import inlined
from .bpe import bpe_word, emit_output_ids, encode_word_list_cpu, word_symbols
from .rules import whole_token
from .words import word_refs_scan_cpu

# ---------------------------------------------------------------- ragged output


@inlined
def _ref_ids(ref, local_to_global, cache, new_offsets):
    """(source is the cache, first id, id count) of a word ref."""
    if ref >= 0:
        at = cache.id_offsets[ref]
        return True, at, cache.id_offsets[ref + 1] - at
    g = local_to_global[-1 - ref]
    return False, new_offsets[g], new_offsets[g + 1] - new_offsets[g]


@hot_nogil
def count_piece_tokens_cpu(refs, piece_ref_end, piece_special, piece_lo, piece_hi,
                           local_to_global, cache, new_offsets, piece_tokens):
    """Step 4a (one shard): ``piece_tokens[p]`` = ids piece p encodes to (a special: 1)."""
    r = 0
    for piece in range(piece_lo, piece_hi):
        if piece_special[piece] >= 0:
            piece_tokens[piece] = 1
            continue
        total = 0
        while r < piece_ref_end[piece]:
            _, _, n = _ref_ids(refs[r], local_to_global, cache, new_offsets)
            total += n
            r += 1
        piece_tokens[piece] = total


@hot_nogil
def write_piece_tokens_cpu(refs, piece_ref_end, piece_special, piece_lo, piece_hi,
                           local_to_global, cache, new_ids, new_offsets, piece_token_offsets,
                           ids, first_ref):
    """Step 4b (a shard, or a run of its pieces whose refs start at ``first_ref``): write
    each piece's ids at ``ids[piece_token_offsets[p]:]``."""
    r = first_ref
    for piece in range(piece_lo, piece_hi):
        out = piece_token_offsets[piece]
        if piece_special[piece] >= 0:
            ids[out] = piece_special[piece]
            continue
        while r < piece_ref_end[piece]:
            from_cache, at, n = _ref_ids(refs[r], local_to_global, cache, new_offsets)
            if from_cache:
                for k in range(n):
                    ids[out + k] = cache.pool_ids[at + k]
            else:
                for k in range(n):
                    ids[out + k] = new_ids[at + k]
            out += n
            r += 1


@njit(cache=True, nogil=True)
def encode_pieces_serial_cpu(data, piece_start, piece_end, piece_special, scanner, table, cache,
                             rules):
    """Steps 1-4 for a named pattern (``scanner``) on one thread, in one call (small batches).

    Returns ``(ids, piece_offsets, n_words, new_ids, new_offsets, new_at,
    new_len, new_count, new_key)``: the batch's ids, each piece's first id, its
    word count, and its new words (already distinct: one shard) for
    ``cache_admit_cpu``.
    """
    n_pieces = piece_start.size
    piece_ref_end = np.empty(n_pieces, np.int64)
    refs, new_at, new_len, new_count, new_key = word_refs_scan_cpu(
        data, piece_start, piece_end, piece_special, 0, n_pieces, scanner, table, cache,
        piece_ref_end)
    new_ids, new_offsets = encode_word_list_cpu(data, new_at, new_len, rules)
    local_to_global = np.arange(new_at.size)
    piece_tokens = np.empty(n_pieces, np.int64)
    count_piece_tokens_cpu(refs, piece_ref_end, piece_special, 0, n_pieces, local_to_global,
                           cache, new_offsets, piece_tokens)
    piece_offsets = np.zeros(n_pieces + 1, np.int64)
    for piece in range(n_pieces):
        piece_offsets[piece + 1] = piece_offsets[piece] + piece_tokens[piece]
    ids = np.empty(piece_offsets[n_pieces], np.uint32)
    write_piece_tokens_cpu(refs, piece_ref_end, piece_special, 0, n_pieces, local_to_global,
                           cache, new_ids, new_offsets, piece_offsets, ids, 0)
    return ids, piece_offsets, refs.size, new_ids, new_offsets, new_at, new_len, new_count, new_key


@njit(cache=True, nogil=True)
def encode_short_text_cpu(data, scanner, table, rules):
    """The ids (uint32) of one short text holding no special token: its words split by a
    named pattern's ``scanner`` and each encoded as ``encode_word_list_cpu`` does, no word
    cache.

    What ``Tokenizer.encode`` runs on a text of up to ~1 KB: one kernel call, no cache
    lock, nothing to admit. The general path (``encode_pieces_serial_cpu`` with the word
    cache, admission, the checks of a batch) took ~20 us a call for "hello world"
    against tiktoken's 0.6; this takes ~3. Without the cache every word is merged, so
    from ~1 KB of English the general path is faster again.

    One pass, each word encoded as it is scanned, and three allocations (the ids, one
    int64 block cut into the BPE's arrays, its int32 keys): the split into a word list
    first, then ``encode_word_list_cpu``, made eleven, and the kernel took 828 ns of a 2.8 us
    ``encode("Hello world")`` under cl100k (session 19, RESULTS).
    """
    size = data.size
    ids = np.empty(size, np.uint32)  # never more ids than bytes
    scratch = np.empty(6 * size + 1, np.int64)
    symbols, nxt, prv, value = (scratch[:size], scratch[size:2 * size],
                                scratch[2 * size:3 * size], scratch[3 * size:4 * size])
    heap = scratch[4 * size:]
    scan_keys = np.empty(size + 16, np.int32)
    count = 0
    start = 0
    # The word's steps are ``encode_word_list_cpu``'s, written out again on purpose: as a
    # shared helper (a call passing ten arrays) "hello world" took 2.34 us and 256 B 6.96
    # against 2.20 and 5.41; inlined at Numba IR level, 17.45 at 256 B (session 19).
    while start < size:
        end = piece_end(scanner, data, start, size, table)
        n = end - start
        token = whole_token(data, start, n, rules)
        if token >= 0:
            symbols[0] = token
            n = 1
        else:
            n = word_symbols(data, start, n, rules, symbols)
            if n > 1:
                n = bpe_word(symbols, n, rules, nxt, prv, heap, value, scan_keys)
        count += emit_output_ids(symbols, n, rules, ids, count)
        start = end
    return ids[:count]


# ---------------------------------------------------------------- framing


def framed(ids, offsets, before, after):
    """(ids, offsets) of a ragged batch with the ids ``before`` put ahead of every document
    and ``after`` behind it. Host ids: one pass of ``frame_documents_cpu``; device ids (CuPy,
    or the simulator's guarded arrays): array operations whose sizes the host knows, so no
    read of the device (a boolean mask's assignment would wait for it).

    Tried on the host (4 M ids in 100 K documents, one thread): ``np.insert`` twice 9.0 ms;
    a boolean mask of the added slots, then ``out[~added] = ids``, 6.9 ms; the device's
    gather (a cumsum over the slots) 17.3 ms; the Numba pass below 5.1 ms."""
    if not before and not after:
        return ids, offsets
    from .._cuda import SimulatedDeviceArray, array_module

    xp = array_module(ids)
    extra = len(before) + len(after)
    if xp is np and not isinstance(ids, SimulatedDeviceArray):
        out = np.empty(ids.size + (offsets.size - 1) * extra, dtype=ids.dtype)
        new_offsets = np.empty_like(offsets)
        frame_documents_cpu(ids, offsets, np.asarray(before, ids.dtype),
                            np.asarray(after, ids.dtype), out, new_offsets)
        return out, new_offsets
    return _framed_on_device(xp, ids, offsets, before, after)


@hot_nogil
def frame_documents_cpu(ids, offsets, before, after, out, new_offsets):
    """Each document's ids into ``out`` with ``before`` and ``after`` around them."""
    at = 0
    for doc in range(offsets.size - 1):
        new_offsets[doc] = at
        for k in range(before.size):
            out[at + k] = before[k]
        at += before.size
        for j in range(offsets[doc], offsets[doc + 1]):
            out[at] = ids[j]
            at += 1
        for k in range(after.size):
            out[at + k] = after[k]
        at += after.size
    new_offsets[offsets.size - 1] = at


def _framed_on_device(xp, ids, offsets, before, after):
    """``framed`` by array operations: the added slots marked, every other slot gathers
    the id a running count of unmarked slots points at."""
    from .._cuda import device_zeros

    extra = len(before) + len(after)
    offsets = offsets + xp.arange(offsets.size, dtype=np.int64) * extra
    total = ids.size + (offsets.size - 1) * extra
    added = device_zeros(xp, total, bool)
    values = device_zeros(xp, total, ids.dtype)
    slots = [(offsets[:-1] + k, token) for k, token in enumerate(before)] + \
        [(offsets[1:] - len(after) + k, token) for k, token in enumerate(after)]
    for at, token in slots:
        added[at] = True
        values[at] = token
    if ids.size == 0:
        return values, offsets
    source = xp.minimum(xp.cumsum(~added) - 1, ids.size - 1)
    xp.copyto(values, ids[source], where=~added)
    return values, offsets

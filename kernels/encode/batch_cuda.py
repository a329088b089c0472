"""CUDA target of a whole batch: words from start flags, dedupe, device word cache, scatter.

The input is a batch's bytes on the device, a uint8 flag per byte (1 where a
word or a special token starts) and the batch's *pieces* (runs of ordinary
text, or one special token each: ``piece_special`` >= 0 holds its id; int64,
in byte order). Every step is a kernel or an array primitive (scan, gather);
``gpubpe.device`` runs them in this order and reads the host only for sizes:

1. ``item_index = exclusive_scan(flags)``; ``item_starts_kernel`` scatters each
   flagged byte to ``item_start[item_index[i]]`` (an *item*: a word or a special).
2. ``item_spans_kernel``: an item ends at the next item or at its piece's end
   (binary search in ``piece_end``); a special piece gives its id.
3. ``item_lookup_kernel``: each word's key (as ``words.word_key``: a word of up
   to 7 bytes is its own key, a longer one a 56-bit hash, tagged) and its slot in
   the device word cache (bytes compared for long words), or -1.
4. ``claim_new_words_kernel``: cache misses claim a cell of a batch hash table
   (atomicCAS on the uint64 key); ``atomic.min`` keeps the first occurrence as
   the cell's representative, so the result does not depend on thread order.
   The table is sized for the misses the caller expects (``gpubpe.device``:
   the last chunk's miss rate, no sync); a claim that probes ``MAX_PROBES``
   taken cells gives up and flags the table as too small, and the caller runs
   this step again with room for every item.
   ``check_new_words_kernel`` counts long words whose key matches a different
   word (a 56-bit hash collision); the caller then takes the host path.
5. ``list_new_words_kernel`` numbers the claimed cells (exclusive scan of the
   used cells), ``pack_new_words_kernel`` packs their bytes end to end, and
   ``cuda.encode_word_list_cuda`` runs BPE on them.
6. ``item_id_counts_kernel``, an exclusive scan, ``write_item_ids_kernel``: each
   item's ids written at its offset; ``piece_offsets_kernel`` gives each piece's
   first id (documents' offsets are a gather of those).
7. ``cache_admit_kernel``: the batch's new words enter the device cache (a
   ``WordCache`` of device arrays, same layout as the host's), keys claimed with
   atomicCAS. The caller decides whether they fit, or restarts the cache.

Launch shape of every kernel: a thread per item, cell, word or piece, grid-stride.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, njit

from .._cuda import device_function
from ..hashing import EMPTY_KEY, claim_cell_within, mix64, word_key
from .words import equal_bytes, interleaved_find

NO_ITEM = np.int64(1) << np.int64(62)
# The batch table: control[] of the claim and check kernels, and the probes a claim makes.
COLLISIONS, TABLE_FULL = 0, 1
MAX_PROBES = 64

# Device bytes a batch plans per input byte (flags, scan, per-item arrays, the batch
# table at up to 4 cells per item, packed words and BPE scratch; one item per byte is
# the worst case), and per piece.
BATCH_DEVICE_BYTES_PER_BYTE = 320
BATCH_DEVICE_BYTES_PER_PIECE = 64


# ---------------------------------------------------------------- device helpers
# ``@njit`` helpers as the kernels call them (``_cuda.device_function``): built for a
# GPU, Numba compiles them into the kernel (``cuda_kernels.compile_ptx`` names the
# architecture where there is no device); the simulator runs them compiled for the CPU.


@njit(inline="always", cache=True)
def _search_sorted(values, value, right):
    """``np.searchsorted(values, value, side)`` (values ascending): the first index i with
    values[i] > value when ``right``, values[i] >= value otherwise."""
    lo = 0
    hi = values.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < value or (right and values[mid] == value):
            lo = mid + 1
        else:
            hi = mid
    return lo


# The CPU's own helpers (``words``): one source for both targets.
word_key_on_device = device_function(word_key)
_same_bytes_on_device = device_function(equal_bytes)
interleaved_find_on_device = device_function(interleaved_find)
_search_sorted_on_device = device_function(_search_sorted)


# ---------------------------------------------------------------- 1-2: items


@cuda.jit
def mark_special_starts_kernel(piece_start, piece_special, flags):
    """flags[piece_start[p]] = 1 for every special piece. Launch: a thread per piece."""
    for p in range(cuda.grid(1), piece_start.size, cuda.gridsize(1)):
        if piece_special[p] >= 0:
            flags[piece_start[p]] = 1


@cuda.jit
def item_starts_kernel(flags, item_index, item_start):
    """item_start[item_index[i]] = i for every flagged byte. Launch: a thread per byte."""
    for i in range(cuda.grid(1), flags.size, cuda.gridsize(1)):
        if flags[i] != 0:
            item_start[item_index[i]] = i


@cuda.jit
def item_spans_kernel(item_start, piece_end, piece_special, item_len, item_special):
    """Each item's length (to the next item or its piece's end) and special id (-1: a word).

    Launch: a thread per item; a binary search in ``piece_end`` each.
    """
    n = item_start.size
    for k in range(cuda.grid(1), n, cuda.gridsize(1)):
        start = item_start[k]
        p = _search_sorted_on_device(piece_end, start, True)
        stop = piece_end[p]
        if k + 1 < n and item_start[k + 1] < stop:
            stop = item_start[k + 1]
        item_len[k] = stop - start
        item_special[k] = piece_special[p]


# ---------------------------------------------------------------- 3-4: keys, cache, dedupe


@cuda.jit
def item_lookup_kernel(data, item_start, item_len, item_special, cache_table, cache_byte_offsets,
                       cache_pool_bytes, item_key, item_slot):
    """Each word's key and device-cache slot (-1: a miss, or a special). A thread per item."""
    for k in range(cuda.grid(1), item_start.size, cuda.gridsize(1)):
        item_slot[k] = -1
        item_key[k] = EMPTY_KEY
        if item_special[k] >= 0:
            continue
        # np.uint64: under the simulator the helper returns a Python int, which would
        # type the lookup's key as int64 (another hash); on a GPU it is a no-op.
        key = np.uint64(word_key_on_device(data, item_start[k], item_start[k] + item_len[k]))
        item_key[k] = key
        item_slot[k] = interleaved_find_on_device(data, item_start[k], item_len[k], key,
                                                  cache_table, cache_pool_bytes,
                                                  cache_byte_offsets)


@cuda.jit
def claim_new_words_kernel(item_key, item_slot, item_special, new_keys, new_rep, item_cell,
                           control):
    """Cache misses claim a cell of the batch table by key; the first occurrence represents it.

    Launch: a thread per item. ``new_keys`` starts all EMPTY_KEY (a power of two
    cells, sized for the misses the caller expects), ``new_rep`` all NO_ITEM.
    Linear probing; atomicCAS claims a free cell, ``atomic.min`` keeps the
    smallest item index. A miss that finds ``MAX_PROBES`` cells taken by other
    keys gives up and sets ``control[TABLE_FULL]``: the caller runs the step
    again with a larger table (a half-full table needs ~2.5 probes on average).
    """
    for k in range(cuda.grid(1), item_key.size, cuda.gridsize(1)):
        item_cell[k] = -1
        if item_special[k] >= 0 or item_slot[k] >= 0:
            continue
        cell, outcome = claim_cell_within(new_keys, item_key[k], MAX_PROBES)
        if outcome < 0:
            control[TABLE_FULL] = 1
            continue
        cuda.atomic.min(new_rep, cell, k)
        item_cell[k] = np.int64(cell)


@cuda.jit
def check_new_words_kernel(data, item_start, item_len, item_cell, new_rep, control):
    """control[COLLISIONS] += 1 for each long word whose cell's representative is another word.

    Launch: a thread per item. Words of up to 7 bytes are their own key: no compare.
    """
    for k in range(cuda.grid(1), item_cell.size, cuda.gridsize(1)):
        cell = item_cell[k]
        if cell < 0 or item_len[k] <= 7:
            continue
        rep = new_rep[cell]
        if rep != k and (item_len[rep] != item_len[k] or not _same_bytes_on_device(
                data, item_start[k], data, item_start[rep], item_len[k])):
            cuda.atomic.add(control, COLLISIONS, 1)


@cuda.jit
def list_new_words_kernel(new_keys, new_rep, distinct_index, item_len, word_rep, word_len,
                          word_key, cell_word):
    """Number the claimed cells (``distinct_index``, a scan of the used cells): each new
    word's representative item, length and key, and each cell's word. A thread per cell."""
    for c in range(cuda.grid(1), new_keys.size, cuda.gridsize(1)):
        if new_keys[c] == EMPTY_KEY:
            continue
        j = distinct_index[c]
        rep = new_rep[c]
        word_rep[j] = rep
        word_len[j] = item_len[rep]
        word_key[j] = new_keys[c]
        cell_word[c] = j


@cuda.jit
def pack_new_words_kernel(data, item_start, word_rep, word_start, packed):
    """Word j's bytes at packed[word_start[j]:word_start[j + 1]]. A thread per new word."""
    for j in range(cuda.grid(1), word_start.size - 1, cuda.gridsize(1)):
        source = item_start[word_rep[j]]
        at = word_start[j]
        for i in range(word_start[j + 1] - at):
            packed[at + i] = data[source + i]


# ---------------------------------------------------------------- 6: scatter


@cuda.jit
def item_id_counts_kernel(item_special, item_slot, item_cell, cell_word, cache_id_offsets,
                          new_offsets, item_n_ids):
    """Ids each item writes: 1 for a special, its cached or new word's count. A thread per item."""
    for k in range(cuda.grid(1), item_special.size, cuda.gridsize(1)):
        if item_special[k] >= 0:
            item_n_ids[k] = 1
        elif item_slot[k] >= 0:
            slot = item_slot[k]
            item_n_ids[k] = cache_id_offsets[slot + 1] - cache_id_offsets[slot]
        else:
            j = cell_word[item_cell[k]]
            item_n_ids[k] = new_offsets[j + 1] - new_offsets[j]


@cuda.jit
def write_item_ids_kernel(item_special, item_slot, item_cell, cell_word, cache_id_offsets,
                          cache_pool_ids, new_offsets, new_ids, item_out, out):
    """Write each item's ids at out[item_out[k]:] (any integer dtype). A thread per item."""
    for k in range(cuda.grid(1), item_special.size, cuda.gridsize(1)):
        at = item_out[k]
        if item_special[k] >= 0:
            out[at] = item_special[k]
        elif item_slot[k] >= 0:
            slot = item_slot[k]
            for i in range(cache_id_offsets[slot], cache_id_offsets[slot + 1]):
                out[at] = cache_pool_ids[i]
                at += 1
        else:
            j = cell_word[item_cell[k]]
            for i in range(new_offsets[j], new_offsets[j + 1]):
                out[at] = new_ids[i]
                at += 1


@cuda.jit
def piece_offsets_kernel(item_start, piece_start, item_out, piece_out):
    """piece_out[p] = first id of piece p (its first item at or after its start), and
    piece_out[P] = the total. A thread per piece."""
    n_pieces = piece_start.size
    for p in range(cuda.grid(1), n_pieces + 1, cuda.gridsize(1)):
        if p == n_pieces:
            piece_out[p] = item_out[item_out.size - 1]
        else:
            piece_out[p] = item_out[_search_sorted_on_device(item_start, piece_start[p], False)]


# ---------------------------------------------------------------- 0: special tokens in device text


@cuda.jit
def special_candidates_kernel(data, doc_start, doc_end, token_bytes, token_offsets, first_byte,
                              match_token):
    """match_token[i] = the first token (the caller orders them longest first for each first
    byte) spelled at byte i inside its document, or -1. Launch: a thread per byte; a binary
    search in ``doc_end``.

    Candidates may overlap; the caller keeps the leftmost non-overlapping ones, as
    ``pieces.find_specials_cpu`` does.
    """
    for i in range(cuda.grid(1), data.size, cuda.gridsize(1)):
        match_token[i] = -1
        if first_byte[data[i]] == 0:
            continue
        d = _search_sorted_on_device(doc_end, i, True)
        if d >= doc_end.size or doc_start[d] > i:
            continue
        for t in range(token_offsets.size - 1):
            length = token_offsets[t + 1] - token_offsets[t]
            if i + length <= doc_end[d] and _same_bytes_on_device(data, i, token_bytes,
                                                                  token_offsets[t], length):
                match_token[i] = t
                break


@cuda.jit
def list_candidates_kernel(match_token, match_index, match_at, match_which):
    """The candidates in byte order: position and token. A thread per byte."""
    for i in range(cuda.grid(1), match_token.size, cuda.gridsize(1)):
        if match_token[i] >= 0:
            match_at[match_index[i]] = i
            match_which[match_index[i]] = match_token[i]


# ---------------------------------------------------------------- 7: the device word cache


@cuda.jit
def cache_admit_kernel(packed, word_start, word_key, new_ids, new_offsets, used, byte_base,
                       id_base, table, byte_offsets, id_offsets, pool_bytes, pool_ids):
    """New word j becomes cache slot ``used + j``: its bytes, ids, offsets and table cell.

    Launch: a thread per new word. The caller checked that they fit; keys are
    distinct (cache misses, no collision), so a claimed cell is never shared.
    """
    wrap = np.uint64(table.size - 1)
    half = np.uint64((table.size >> 1) - 1)
    for j in range(cuda.grid(1), word_key.size, cuda.gridsize(1)):
        slot = used + j
        byte_offsets[slot + 1] = byte_base + word_start[j + 1]
        id_offsets[slot + 1] = id_base + new_offsets[j + 1]
        for i in range(word_start[j], word_start[j + 1]):
            pool_bytes[byte_base + i] = packed[i]
        for i in range(new_offsets[j], new_offsets[j + 1]):
            pool_ids[id_base + i] = new_ids[i]
        key = word_key[j]
        cell = (mix64(key) & half) << np.uint64(1)
        while cuda.atomic.cas(table, cell, EMPTY_KEY, key) != EMPTY_KEY:
            cell = (cell + np.uint64(2)) & wrap
        table[cell + np.uint64(1)] = np.uint64(slot)


# Every kernel of this module with the signature it is launched with (PTX test).
_I64 = "int64[::1]"
BATCH_CUDA_SIGNATURES = {
    mark_special_starts_kernel: f"void({_I64}, {_I64}, uint8[::1])",
    item_starts_kernel: f"void(uint8[::1], {_I64}, {_I64})",
    item_spans_kernel: f"void({_I64}, {_I64}, {_I64}, {_I64}, {_I64})",
    item_lookup_kernel: f"void(uint8[::1], {_I64}, {_I64}, {_I64}, uint64[::1], {_I64}, "
                        f"uint8[::1], uint64[::1], {_I64})",
    claim_new_words_kernel: f"void(uint64[::1], {_I64}, {_I64}, uint64[::1], {_I64}, {_I64}, "
                              f"{_I64})",
    check_new_words_kernel: f"void(uint8[::1], {_I64}, {_I64}, {_I64}, {_I64}, {_I64})",
    list_new_words_kernel: f"void(uint64[::1], {_I64}, {_I64}, {_I64}, {_I64}, {_I64}, "
                           f"uint64[::1], {_I64})",
    pack_new_words_kernel: f"void(uint8[::1], {_I64}, {_I64}, {_I64}, uint8[::1])",
    item_id_counts_kernel: f"void({_I64}, {_I64}, {_I64}, {_I64}, {_I64}, {_I64}, {_I64})",
    write_item_ids_kernel: f"void({_I64}, {_I64}, {_I64}, {_I64}, {_I64}, uint32[::1], {_I64}, "
                           f"uint32[::1], {_I64}, uint32[::1])",
    piece_offsets_kernel: f"void({_I64}, {_I64}, {_I64}, {_I64})",
    special_candidates_kernel: f"void(uint8[::1], {_I64}, {_I64}, uint8[::1], {_I64}, "
                               f"uint8[::1], {_I64})",
    list_candidates_kernel: f"void({_I64}, {_I64}, {_I64}, {_I64})",
    cache_admit_kernel: f"void(uint8[::1], {_I64}, uint64[::1], uint32[::1], {_I64}, int64, "
                        f"int64, int64, uint64[::1], {_I64}, {_I64}, uint8[::1], uint32[::1])",
}

"""BPE and Scaffold-BPE training that stays on the device: K merges per host round trip.

State (every array on the device, see ``STATE``): the word table as linked
positions (``tokens`` uint32, ``next_pos``/``prev_pos`` int64 within the word,
-1 at its ends, ``position_count`` the word's int64 count; a merged-away
position becomes a HOLE and leaves the list), an open-addressing pair table
(``table_keys`` uint64 -> the cell is the pair's slot, ``slot_count`` int64),
the tokens made (bytes pool, starts, lengths, hashes, the hash -> id table),
f(t) and scaffold flags, per-chunk maxima of the candidates, an int64
``control`` array (counters, parameters, stop reason) and the batch's rules
and events. ``control``, ``rules`` and ``events`` are views of one array, so
the host reads a batch's results in one copy.

One iteration is five phases separated by grid-wide syncs:

1. ``refresh_chunks``: candidates (pair slots, then scaffold tokens) are cut
   into chunks of ``CHUNK`` whose maxima are kept; each block reduces the
   chunk maxima its threads own to one block maximum. The argmax never
   rescans the table: only chunks a merge touched are rescanned (step 5).
2. ``decide`` (one block): the best over the block maxima (HF's order), then
   one thread takes ``train_policy``'s decisions: last merge's scaffold marks
   (threshold: this head's priority, i.e. after the last merge's count updates
   and before its marks, DESIGN §3), stop, re-admit, existing or new token,
   the rule and its events.
3. ``find_starts``: where the merge begins. ``left != right``: every
   ``left right``; ``left == right``: the first position of each run walks it
   and pairs it up left to right (``a a a a a`` -> ``aa aa a``), as the CPU.
4. ``count_deltas``: every pair next to a merge: the old one subtracted, the
   new one added (int64 atomics; new keys claimed with atomicCAS); thread 0
   updates f(t). Since the counts are a function of the words, this equals
   the CPU's sequential deltas, whatever the order. Every chunk whose
   candidates changed is listed once (``mark_dirty``).
5. ``write_merges``: the left half takes the merged id and skips its partner;
   ``rescan_dirty``: a block per listed chunk recomputes its maximum.

Two launchers run the same phases: ``train_steps_kernel`` is a persistent
cooperative kernel (``grid.sync()`` between phases, up to K iterations per
launch), and the phased launcher (``run_phased``) launches each phase as its
own kernel, K times, with no host read in between. The simulator runs blocks
one after another and its ``grid.sync()`` waits for nothing but its own
block: there the cooperative kernel runs with one block only.

Performance notes (no GPU in the session that wrote this; counts, not times):
- Per batch: 1 launch (cooperative) or 1 + 5K launches (phased), 1 sync.
- A dirty chunk was first rescanned by one thread walking its 64 candidates:
  64 memory round trips in sequence on the critical path (~13-30 us on an
  H100 by GPU_FACTS' floors). Now a block rescans it, a thread a candidate:
  one round trip and a block reduction.
- Per merge the position phases read every position (4 bytes of token and
  1 of mark, ~5 MB for 1 M positions): ~2 us each on an H100 at 3 TB/s.
  A list of the positions holding each pair (the CPU's postings) would cut
  that; not done yet.
"""

from __future__ import annotations

import time

import numba
import numpy as np
from numba import cuda, njit

from ._cuda import (
    MAX_BLOCKS,
    SIMULATOR_THREADS,
    THREADS_PER_BLOCK,
    device_function,
    device_phase,
    launch,
    to_device,
)
from .hashing import EMPTY_KEY, claim_cell, empty_table, hash_bytes, table_put
from .train_policy import (
    EVENT_MARK,
    EVENT_READMIT,
    EVENT_RULE,
    STOP_NONE,
    append_token_inline,
    is_rare_child_inline,
    pair_order_inline,
    ranks_above_inline,
    stop_reason_inline,
    token_for_merge_inline,
)

HOLE = np.uint32(0xFFFFFFFF)
LOW32 = np.uint64(0xFFFFFFFF)
# Candidates per chunk of the argmax: a block's threads rescan one chunk together.
CHUNK = 64 if numba.config.ENABLE_CUDASIM else THREADS_PER_BLOCK
COOPERATIVE_MAX_BLOCKS = 4096
STOP_NEED_POOL = 9  # not a stop: the pool needs room; the host grows it and goes on

# Indices into ``control``.
(STOP, N_NORMAL, N_TOKENS, POOL_USED, LEFT, RIGHT, MERGED, APPLY, MERGED_COUNT, PENDING_MARKS,
 N_RULES, N_EVENTS, NEED, RULES_TOTAL, VOCAB_SIZE, MIN_COUNT, SCAFFOLD_MODE,
 REFRESH_BLOCKS, N_DIRTY) = range(19)
CONTROL_LENGTH = 20
EVENTS_PER_ITERATION = 3  # a rule and two marks, or one re-admit

STATE = {  # name -> Numba type, in kernel argument order
    "tokens": "uint32[::1]", "next_pos": "int64[::1]", "prev_pos": "int64[::1]",
    "position_count": "int64[::1]", "mark": "uint8[::1]",
    "table_keys": "uint64[::1]", "slot_count": "int64[::1]", "byte_rank": "int64[::1]",
    "pool": "uint8[::1]", "token_start": "int64[::1]", "token_len": "int64[::1]",
    "token_hash": "uint64[::1]", "vocab_keys": "uint64[::1]", "vocab_values": "int64[::1]",
    "token_freq": "int64[::1]", "scaffold": "uint8[::1]",
    "chunk_priority": "int64[::1]", "chunk_order": "uint64[::1]", "chunk_item": "int64[::1]",
    "chunk_dirty": "uint32[::1]", "dirty_chunks": "int64[::1]", "control": "int64[::1]", "rules": "int64[::1]",
    "events": "int64[::1]",
}

if numba.config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def grid_sync():
        """Wait for every thread of the grid (the simulator's waits for its block only)."""
        cuda.cg.this_grid().sync()
else:
    # The intrinsics under ``cuda.cg.this_grid().sync()``: its overloads are compiled as
    # device functions, which needs a device, so a PTX build without one could not use them.
    from numba.cuda.cg import _grid_group_sync, _this_grid

    @njit(inline="always")
    def grid_sync():
        """Wait for every thread of the grid (cooperative launch; links libcudadevrt)."""
        _grid_group_sync(_this_grid())


_pair_order = device_function(pair_order_inline)
_ranks_above = device_function(ranks_above_inline)


# ------------------------------------------------------------ shared pieces


@device_phase
def candidate(item, table_keys, slot_count, byte_rank, token_freq, scaffold):
    """(priority, order) of candidate ``item``: a pair slot below the table's size, else a
    scaffold token; priority 0 when it is not a candidate now."""
    if item < table_keys.size:
        key = table_keys[item]
        count = slot_count[item]
        if key == EMPTY_KEY or count <= 0:
            return np.int64(0), np.uint64(0)
        return count, _pair_order(np.int64(key >> np.uint64(32)), np.int64(key & LOW32),
                                  byte_rank)
    token = item - table_keys.size
    if scaffold[token] != 0 and token_freq[token] > 0:
        return token_freq[token], np.uint64(token)
    return np.int64(0), np.uint64(0)


@device_phase
def add_pair(left, right, delta, table_keys, slot_count, chunk_dirty, dirty_chunks, control):
    """Add ``delta`` to pair (left, right), claiming its cell with atomicCAS when new."""
    key = (np.uint64(left) << np.uint64(32)) | np.uint64(right)
    cell, _ = claim_cell(table_keys, key)
    cuda.atomic.add(slot_count, cell, delta)
    mark_dirty(np.int64(cell // np.uint64(CHUNK)), chunk_dirty, dirty_chunks, control)


@device_phase
def mark_dirty(chunk, chunk_dirty, dirty_chunks, control):
    """List a chunk for rescanning, once (the first thread to flag it lists it)."""
    if chunk_dirty[chunk] == 0 and cuda.atomic.cas(chunk_dirty, chunk, 0, 1) == 0:
        dirty_chunks[cuda.atomic.add(control, N_DIRTY, 1)] = chunk


# ------------------------------------------------------------ the phases


@device_phase
def count_pairs(thread, n_threads, tokens, next_pos, position_count, table_keys, slot_count,
                chunk_dirty, dirty_chunks, control):
    """Initial pair counts: every adjacent pair of every word, weighted by its count."""
    for i in range(thread, tokens.size, n_threads):
        after = next_pos[i]
        if tokens[i] != HOLE and after >= 0:
            add_pair(tokens[i], tokens[after], position_count[i], table_keys, slot_count,
                     chunk_dirty, dirty_chunks, control)


@device_phase
def refresh_chunks(thread, n_threads, chunk_priority, chunk_order, chunk_item, chunk_dirty,
                   control, shared_priority, shared_order, shared_item):
    """Phase 1: each block's best over the chunk maxima its threads own, written at
    ``n_chunks + block``; the chunks were rescanned at the end of the last iteration.

    Every thread of every block must call it (it syncs its block).
    """
    n_chunks = chunk_dirty.size
    best_priority = np.int64(0)
    best_order = np.uint64(0)
    best_item = np.int64(-1)
    for chunk in range(thread, n_chunks, n_threads):
        if chunk_item[chunk] >= 0 and (best_item < 0 or _ranks_above(
                chunk_priority[chunk], chunk_order[chunk], best_priority, best_order)):
            best_priority, best_order = chunk_priority[chunk], chunk_order[chunk]
            best_item = chunk_item[chunk]
    block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                 shared_item)
    at = n_chunks + cuda.blockIdx.x
    if thread == 0:
        control[REFRESH_BLOCKS] = cuda.gridDim.x  # how many block maxima phase 2 reads
        control[N_DIRTY] = 0  # the list was drained by the last rescan
    if cuda.threadIdx.x == 0 and at < chunk_item.size:
        chunk_priority[at] = shared_priority[0]
        chunk_order[at] = shared_order[0]
        chunk_item[at] = shared_item[0]


@device_phase
def rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                 chunk_order, chunk_item, chunk_dirty, dirty_chunks, control, shared_priority,
                 shared_order, shared_item):
    """End of an iteration: the best candidate of every listed chunk (item -1: none).

    A block per listed chunk (grid-stride over the list), a thread per candidate:
    one memory round trip and a block reduction, where one thread walking the
    chunk would pay CHUNK round trips in sequence. Every thread of every block
    must call it (the list's length is the same for all, so the block syncs
    stay uniform).
    """
    n_items = table_keys.size + token_freq.size
    for k in range(cuda.blockIdx.x, control[N_DIRTY], cuda.gridDim.x):
        chunk = dirty_chunks[k]
        best_priority = np.int64(0)
        best_order = np.uint64(0)
        best_item = np.int64(-1)
        end = (chunk + 1) * CHUNK
        if end > n_items:  # (not min(): a builtin overload would need a device to compile)
            end = n_items
        for item in range(chunk * CHUNK + cuda.threadIdx.x, end, cuda.blockDim.x):
            priority, order = candidate(item, table_keys, slot_count, byte_rank, token_freq,
                                        scaffold)
            if priority > 0 and (best_item < 0 or _ranks_above(priority, order, best_priority,
                                                               best_order)):
                best_priority, best_order, best_item = priority, order, item
        block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                     shared_item)
        if cuda.threadIdx.x == 0:
            chunk_priority[chunk] = shared_priority[0]
            chunk_order[chunk] = shared_order[0]
            chunk_item[chunk] = shared_item[0]
            chunk_dirty[chunk] = 0
        cuda.syncthreads()  # the shared arrays are reused by the next chunk


@device_phase
def block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                 shared_item):
    """The block's best of its threads' (priority, order, item) lands in the shared [0].

    Every thread of the block must call it (it syncs the block); the block size
    is a power of two.
    """
    tid = cuda.threadIdx.x
    shared_priority[tid], shared_order[tid], shared_item[tid] = best_priority, best_order, best_item
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            other = tid + stride
            if shared_item[other] >= 0 and (shared_item[tid] < 0 or _ranks_above(
                    shared_priority[other], shared_order[other], shared_priority[tid],
                    shared_order[tid])):
                shared_priority[tid] = shared_priority[other]
                shared_order[tid] = shared_order[other]
                shared_item[tid] = shared_item[other]
        cuda.syncthreads()
        stride //= 2


@njit(inline="always")
def _log_event(control, events, kind, value):
    at = 2 * control[N_EVENTS]
    events[at] = kind
    events[at + 1] = value
    control[N_EVENTS] += 1


@njit(inline="always")
def _list_dirty(chunk, chunk_dirty, dirty_chunks, control):
    """``mark_dirty`` for the one deciding thread (no other thread lists in phase 2)."""
    if chunk_dirty[chunk] == 0:
        chunk_dirty[chunk] = 1
        dirty_chunks[control[N_DIRTY]] = chunk
        control[N_DIRTY] += 1


@njit(inline="always")
def _mark_if_rare(child, threshold, control, events, table_size, token_freq, scaffold,
                  chunk_dirty, dirty_chunks):
    if is_rare_child_inline(child, threshold, token_freq, scaffold):
        scaffold[child] = 1
        control[N_NORMAL] -= 1
        _list_dirty((table_size + child) // CHUNK, chunk_dirty, dirty_chunks, control)
        _log_event(control, events, EVENT_MARK, child)


@njit(inline="always")
def _readmit(token, control, events, table_size, scaffold, chunk_dirty, dirty_chunks):
    scaffold[token] = 0
    control[N_NORMAL] += 1
    _list_dirty((table_size + token) // CHUNK, chunk_dirty, dirty_chunks, control)
    _log_event(control, events, EVENT_READMIT, token)


@njit(inline="always")
def decide_merge(head_item, head_priority, table_keys, pool, token_start, token_len, token_hash,
                 vocab_keys, vocab_values, token_freq, scaffold, chunk_dirty, dirty_chunks,
                 control, rules,
                 events):
    """Phase 2b, one thread: ``train_policy``'s decisions for the head; sets control[APPLY]."""
    table_size = table_keys.size
    control[APPLY] = 0
    if control[STOP] != STOP_NONE:
        return
    if control[PENDING_MARKS] != 0:  # the last merge's children, against this head
        control[PENDING_MARKS] = 0
        _mark_if_rare(control[LEFT], head_priority, control, events, table_size, token_freq,
                      scaffold, chunk_dirty, dirty_chunks)
        if control[RIGHT] != control[LEFT]:
            _mark_if_rare(control[RIGHT], head_priority, control, events, table_size,
                          token_freq, scaffold, chunk_dirty, dirty_chunks)
    stop = stop_reason_inline(control[N_NORMAL], control[VOCAB_SIZE], head_priority,
                              control[MIN_COUNT])
    if stop != STOP_NONE:
        control[STOP] = stop
        return
    if head_item >= table_size:  # a scaffold token at the head is re-admitted
        _readmit(head_item - table_size, control, events, table_size, scaffold, chunk_dirty, dirty_chunks)
        return
    left = np.int64(table_keys[head_item] >> np.uint64(32))
    right = np.int64(table_keys[head_item] & LOW32)
    merged, merged_hash = token_for_merge_inline(left, right, pool, token_start, token_len,
                                                 token_hash, vocab_keys, vocab_values)
    if merged >= 0 and scaffold[merged] != 0:  # re-admitted; the pair stays at the head
        _readmit(merged, control, events, table_size, scaffold, chunk_dirty, dirty_chunks)
        return
    if merged < 0:
        if control[POOL_USED] + token_len[left] + token_len[right] > pool.size:
            control[NEED] = control[POOL_USED] + token_len[left] + token_len[right]
            control[STOP] = STOP_NEED_POOL
            return
        merged = control[N_TOKENS]
        control[N_TOKENS] += 1
        control[POOL_USED] = append_token_inline(left, right, merged_hash, merged,
                                                 control[POOL_USED], pool, token_start,
                                                 token_len, token_hash, vocab_keys,
                                                 vocab_values)
        token_freq[merged] = 0
        scaffold[merged] = 0
        control[N_NORMAL] += 1
    at = 3 * control[N_RULES]
    rules[at], rules[at + 1], rules[at + 2] = left, right, merged
    control[N_RULES] += 1
    _log_event(control, events, EVENT_RULE, control[RULES_TOTAL])
    control[RULES_TOTAL] += 1
    control[LEFT], control[RIGHT], control[MERGED] = left, right, merged
    control[MERGED_COUNT] = 0
    control[PENDING_MARKS] = control[SCAFFOLD_MODE]
    control[APPLY] = 1


_decide_merge = device_function(decide_merge)


@device_phase
def decide(table_keys, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
           token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
           dirty_chunks, control, rules, events, shared_priority, shared_order, shared_item):
    """Phase 2, one block: the head over phase 1's block maxima, then thread 0 decides."""
    best_priority = np.int64(0)
    best_order = np.uint64(0)
    best_item = np.int64(-1)
    first = chunk_dirty.size
    for at in range(first + cuda.threadIdx.x, first + control[REFRESH_BLOCKS], cuda.blockDim.x):
        if chunk_item[at] >= 0 and (best_item < 0 or _ranks_above(
                chunk_priority[at], chunk_order[at], best_priority, best_order)):
            best_priority, best_order, best_item = chunk_priority[at], chunk_order[at], \
                chunk_item[at]
    block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                 shared_item)
    if cuda.threadIdx.x == 0:
        head_priority = shared_priority[0] if shared_item[0] >= 0 else np.int64(0)
        _decide_merge(shared_item[0], head_priority, table_keys, pool, token_start, token_len,
                      token_hash, vocab_keys, vocab_values, token_freq, scaffold, chunk_dirty,
                      dirty_chunks, control, rules, events)


@device_phase
def find_starts(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark, control):
    """Phase 3: mark[i] = 1 where a merge begins, 2 on its right half; sums the merged count."""
    if control[APPLY] == 0:
        return
    left = control[LEFT]
    right = control[RIGHT]
    for i in range(thread, tokens.size, n_threads):
        if tokens[i] != left:
            continue
        if left != right:
            after = next_pos[i]
            if after >= 0 and tokens[after] == right:
                mark[i], mark[after] = 1, 2
                cuda.atomic.add(control, MERGED_COUNT, position_count[i])
            continue
        before = prev_pos[i]
        if before >= 0 and tokens[before] == left:
            continue  # not the first of its run: the first one walks the run
        at = i
        while at >= 0:
            after = next_pos[at]
            if after < 0 or tokens[after] != left:
                break
            mark[at], mark[after] = 1, 2
            cuda.atomic.add(control, MERGED_COUNT, position_count[at])
            at = next_pos[after]
            if at >= 0 and tokens[at] != left:
                break


@device_phase
def count_deltas(thread, n_threads, tokens, next_pos, position_count, mark, table_keys,
                 slot_count, token_freq, chunk_dirty, dirty_chunks, control):
    """Phase 4: each pair next to a merge leaves (old) or arrives (new), once per position;
    thread 0 updates f(t) of the merged token and its parts."""
    if control[APPLY] == 0:
        return
    merged = control[MERGED]
    if thread == 0:
        table_size = table_keys.size
        merged_count = control[MERGED_COUNT]
        token_freq[merged] += merged_count
        token_freq[control[LEFT]] -= merged_count
        token_freq[control[RIGHT]] -= merged_count
        mark_dirty((table_size + merged) // CHUNK, chunk_dirty, dirty_chunks, control)
        mark_dirty((table_size + control[LEFT]) // CHUNK, chunk_dirty, dirty_chunks, control)
        mark_dirty((table_size + control[RIGHT]) // CHUNK, chunk_dirty, dirty_chunks, control)
    for k in range(thread, tokens.size, n_threads):
        if tokens[k] == HOLE:
            continue
        here = mark[k]
        after = next_pos[k]
        if after >= 0 and (here != 0 or mark[after] == 1):
            add_pair(tokens[k], tokens[after], -position_count[k], table_keys, slot_count,
                     chunk_dirty, dirty_chunks, control)
        if here == 2:
            continue  # merged away: no new pair starts here
        if here == 1:
            after = next_pos[after]
        if after >= 0 and (here == 1 or mark[after] == 1):
            left = merged if here == 1 else np.int64(tokens[k])
            right = merged if mark[after] == 1 else np.int64(tokens[after])
            add_pair(left, right, position_count[k], table_keys, slot_count, chunk_dirty,
                     dirty_chunks, control)


@device_phase
def write_merges(thread, n_threads, tokens, next_pos, prev_pos, mark, control):
    """Phase 5 (with ``rescan_dirty``): merged ids written, right halves unlinked."""
    if control[APPLY] == 0:
        return
    merged = control[MERGED]
    for i in range(thread, tokens.size, n_threads):
        if mark[i] == 1:
            after = next_pos[next_pos[i]]
            tokens[i] = merged
            next_pos[i] = after
            if after >= 0:
                prev_pos[after] = i
            mark[i] = 0
        elif mark[i] == 2:
            tokens[i] = HOLE
            mark[i] = 0


# ------------------------------------------------------------ kernels
# Every kernel takes the whole state (STATE's order), so they share one signature.
# Those that sync a block: blocks of a power of two threads, at most THREADS_PER_BLOCK,
# and three shared arrays of THREADS_PER_BLOCK entries as scratch.


@cuda.jit
def count_pairs_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a thread per position, grid-stride. The initial pair table."""
    count_pairs(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, position_count, table_keys,
                slot_count, chunk_dirty, dirty_chunks, control)


@cuda.jit
def rescan_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a block per listed chunk, grid-stride over the list. The chunk maxima."""
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                 chunk_order, chunk_item, chunk_dirty, dirty_chunks, control, shared_priority,
                 shared_order, shared_item)


@cuda.jit
def begin_batch_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: one thread. Empties the batch's rules and events; lifts a pool-room stop."""
    if cuda.grid(1) == 0:
        control[N_RULES] = 0
        control[N_EVENTS] = 0
        if control[STOP] == STOP_NEED_POOL:
            control[STOP] = STOP_NONE


@cuda.jit
def refresh_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a thread per chunk, grid-stride (phase 1)."""
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    if control[STOP] == STOP_NONE:  # the same for every thread: the block syncs stay uniform
        refresh_chunks(cuda.grid(1), cuda.gridsize(1), chunk_priority, chunk_order, chunk_item,
                       chunk_dirty, control, shared_priority, shared_order, shared_item)


@cuda.jit
def decide_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: exactly one block (phase 2)."""
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    decide(table_keys, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
           token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
           dirty_chunks, control, rules, events, shared_priority, shared_order, shared_item)


@cuda.jit
def find_starts_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 3)."""
    find_starts(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, prev_pos, position_count,
                mark, control)


@cuda.jit
def count_deltas_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 4)."""
    count_deltas(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, position_count, mark,
                 table_keys, slot_count, token_freq, chunk_dirty, dirty_chunks, control)


@cuda.jit
def write_merges_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 5: the merges written, the listed
    chunks rescanned, a block per chunk)."""
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    write_merges(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, prev_pos, mark, control)
    rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                 chunk_order, chunk_item, chunk_dirty, dirty_chunks, control, shared_priority,
                 shared_order, shared_item)


@cuda.jit
def train_steps_kernel(
        n_steps, tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, control, rules, events):
    """Up to ``n_steps`` iterations in one launch: the five phases, ``grid_sync()`` between.

    Launch: a cooperative grid (every block resident); grid-stride over
    positions and chunks. Block 0 decides. On the simulator: one block only
    (its grid sync waits for nothing else).
    """
    thread = cuda.grid(1)
    n_threads = cuda.gridsize(1)
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    for _ in range(n_steps):
        if control[STOP] != STOP_NONE:  # read by all after the same sync: a uniform exit
            break
        refresh_chunks(thread, n_threads, chunk_priority, chunk_order, chunk_item, chunk_dirty,
                       control, shared_priority, shared_order, shared_item)
        grid_sync()
        if cuda.blockIdx.x == 0:
            decide(table_keys, pool, token_start, token_len, token_hash, vocab_keys,
                   vocab_values, token_freq, scaffold, chunk_priority, chunk_order, chunk_item,
                   chunk_dirty, dirty_chunks, control, rules, events, shared_priority,
                   shared_order, shared_item)
        grid_sync()
        find_starts(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark,
                    control)
        grid_sync()
        count_deltas(thread, n_threads, tokens, next_pos, position_count, mark, table_keys,
                     slot_count, token_freq, chunk_dirty, dirty_chunks, control)
        grid_sync()
        write_merges(thread, n_threads, tokens, next_pos, prev_pos, mark, control)
        rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                     chunk_order, chunk_item, chunk_dirty, dirty_chunks, control,
                     shared_priority, shared_order, shared_item)
        grid_sync()


_STATE_SIGNATURE = ", ".join(STATE.values())
TRAIN_CUDA_SIGNATURES = {
    kernel: f"void({_STATE_SIGNATURE})"
    for kernel in (count_pairs_kernel, rescan_kernel, begin_batch_kernel, refresh_kernel,
                   decide_kernel, find_starts_kernel, count_deltas_kernel, write_merges_kernel)
}
TRAIN_CUDA_SIGNATURES[train_steps_kernel] = f"void(int64, {_STATE_SIGNATURE})"


# ------------------------------------------------------------ host side


def block_threads() -> int:
    """Threads per block of these kernels (a power of two)."""
    return SIMULATOR_THREADS if numba.config.ENABLE_CUDASIM else THREADS_PER_BLOCK


def table_size_for(n_positions: int, n_words: int) -> int:
    """Pair table cells: room for every pair the run can ever hold, at most half full.

    Each merge of a position adds at most two pairs and removes one position, so
    at most 3 x (positions - words) distinct pairs ever exist.
    """
    return 1 << max(6, int(2 * 3 * max(n_positions - n_words, 1) - 1).bit_length())


def device_bytes(n_positions: int, n_words: int, max_tokens: int, pool_bytes: int,
                 rows: int) -> int:
    """Device bytes of the training state (what ``init_state`` allocates)."""
    table = table_size_for(n_positions, n_words)
    vocab_table = 1 << max(4, int(4 * max_tokens - 1).bit_length())
    chunks = (table + max_tokens + CHUNK - 1) // CHUNK
    return (n_positions * (4 + 8 + 8 + 8 + 1) + table * 16 + 256 * 8 + pool_bytes
            + max_tokens * (8 + 8 + 8 + 8 + 1) + vocab_table * 16
            + chunks * 25 + refresh_blocks(chunks) * 24
            + 8 * (CONTROL_LENGTH + rows * (3 + 2 * EVENTS_PER_ITERATION)))


def refresh_blocks(n_chunks: int) -> int:
    """The most blocks phase 1 runs with under either launcher (``launch``'s grid over the
    chunks, or the cooperative grid, at most one block per multiprocessor)."""
    by_launch = min((n_chunks + block_threads() - 1) // block_threads(),
                    2 if numba.config.ENABLE_CUDASIM else MAX_BLOCKS)
    return max(by_launch, 1 if numba.config.ENABLE_CUDASIM else COOPERATIVE_MAX_BLOCKS)


def host_word_positions(tokens, word_start, word_len, word_count):
    """Host arrays of the linked positions: next_pos, prev_pos, position_count."""
    n = tokens.size
    next_pos = np.arange(1, n + 1, dtype=np.int64)
    prev_pos = np.arange(-1, n - 1, dtype=np.int64)
    ends = word_start + word_len
    next_pos[ends[word_len > 0] - 1] = -1
    prev_pos[word_start[word_len > 0]] = -1
    return next_pos, prev_pos, np.repeat(word_count, word_len)


def host_token_tables(max_tokens: int, pool_bytes: int):
    """The 256 byte tokens: pool, token_start, token_len, token_hash, vocab_keys/values."""
    pool = np.zeros(pool_bytes, np.uint8)
    pool[:256] = np.arange(256)
    token_start = np.zeros(max_tokens, np.int64)
    token_start[:256] = np.arange(256)
    token_len = np.zeros(max_tokens, np.int64)
    token_len[:256] = 1
    token_hash = np.zeros(max_tokens, np.uint64)
    vocab_keys, vocab_values = empty_table(4 * max_tokens)
    for byte in range(256):
        token_hash[byte] = hash_bytes(pool, byte, 1)
        table_put(vocab_keys, vocab_values, token_hash[byte], byte)
    return pool, token_start, token_len, token_hash, vocab_keys, vocab_values


def init_state(xp, host: dict, n_words: int, rows: int) -> dict:
    """Device state from host arrays (``host``: the word positions, byte ranks, token tables,
    f(t), scaffold flags and the initial ``control``); counts the pairs on the device.

    ``rows`` is the most iterations one batch may run. No host read.
    """
    state = {name: to_device(xp, array) for name, array in host.items() if name != "control"}
    n_positions = host["tokens"].size
    table = table_size_for(n_positions, n_words)
    state["table_keys"] = xp.full(table, EMPTY_KEY, dtype=xp.uint64)
    state["slot_count"] = xp.zeros(table, dtype=xp.int64)
    chunks = (table + host["token_freq"].size + CHUNK - 1) // CHUNK
    entries = chunks + refresh_blocks(chunks)  # the chunk maxima, then phase 1's block maxima
    state["chunk_priority"] = xp.zeros(entries, dtype=xp.int64)
    state["chunk_order"] = xp.zeros(entries, dtype=xp.uint64)
    state["chunk_item"] = xp.full(entries, -1, dtype=xp.int64)
    state["chunk_dirty"] = xp.ones(chunks, dtype=xp.uint32)  # every chunk listed, once
    state["dirty_chunks"] = xp.arange(chunks, dtype=xp.int64)
    state["mark"] = xp.zeros(n_positions, dtype=xp.uint8)
    control = host["control"].copy()
    control[N_DIRTY] = chunks
    out = to_device(xp, np.concatenate([control, np.zeros(
        rows * (3 + 2 * EVENTS_PER_ITERATION), np.int64)]))
    state["out"] = out
    state["control"] = out[:CONTROL_LENGTH]
    state["rules"] = out[CONTROL_LENGTH:CONTROL_LENGTH + 3 * rows]
    state["events"] = out[CONTROL_LENGTH + 3 * rows:]
    launch(count_pairs_kernel, n_positions, *state_args(state))
    launch(rescan_kernel, chunks * block_threads(), *state_args(state))
    return state


def state_args(state: dict) -> list:
    return [state[name] for name in STATE]


def run_phased(state: dict, n_iterations: int) -> None:
    """A batch as separate launches: 1 + 5 per iteration, no host read."""
    args = state_args(state)
    n_positions, n_chunks = state["tokens"].size, state["chunk_dirty"].size
    launch(begin_batch_kernel, 1, *args)
    for _ in range(n_iterations):
        launch(refresh_kernel, n_chunks, *args)
        launch(decide_kernel, block_threads(), *args)
        launch(find_starts_kernel, n_positions, *args)
        launch(count_deltas_kernel, n_positions, *args)
        launch(write_merges_kernel, n_positions, *args)


def cooperative_blocks(n_positions: int) -> int:
    """Blocks of the persistent kernel before it is built: one per multiprocessor (always
    co-resident at THREADS_PER_BLOCK threads), fewer for small inputs; one on the simulator."""
    if numba.config.ENABLE_CUDASIM:
        return 1
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return max(1, min(sms, (n_positions + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK))


def resident_blocks(n_blocks: int, n_positions: int) -> int:
    """Once the persistent kernel is built: as many blocks as can be co-resident (more warps
    per multiprocessor hide more memory latency), within what the input can use."""
    if numba.config.ENABLE_CUDASIM:
        return 1
    try:
        built = next(iter(train_steps_kernel.overloads.values()))
        most = built.max_cooperative_grid_blocks(THREADS_PER_BLOCK)
    except Exception:  # no build yet, or a driver without the query: keep the safe grid
        return n_blocks
    useful = (n_positions + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    return max(1, min(most, useful, COOPERATIVE_MAX_BLOCKS))


def wait_until_done(xp, seconds: float) -> bool:
    """Whether the work queued so far ends within ``seconds`` (polls an event; no sync is
    counted here: the caller's read that follows is the step's one sync)."""
    if xp is np:
        return True  # the simulator ran every launch to its end already
    import cupy

    event = cupy.cuda.Event(disable_timing=True)
    event.record()
    deadline = time.monotonic() + seconds
    while not event.done:
        if time.monotonic() > deadline:
            return False
        time.sleep(50e-6)
    return True


def run_cooperative(state: dict, n_iterations: int, n_blocks: int) -> None:
    """A batch as one persistent cooperative launch of ``n_blocks`` blocks (1 on the simulator)."""
    args = state_args(state)
    launch(begin_batch_kernel, 1, *args)
    launch(train_steps_kernel, n_blocks * block_threads(), np.int64(n_iterations), *args)

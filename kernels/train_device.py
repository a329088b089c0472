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

One iteration is two or three phases separated by grid-wide syncs:

1. ``next_decision``: the last iteration's merges written (a thread a listed start: the
   start takes the merged id and skips its partner), the listed groups rescanned (a
   block per group: its listed chunks, a thread a candidate, then the group's maximum),
   and the last block to finish (``last_block_here``: a fence and a ticket a block, no
   grid sync) decides: the head is the best of the groups' maxima (HF's order;
   candidates, pair slots then scaffold tokens, are cut into chunks of ``CHUNK`` and the
   chunks into about ``GROUPS`` groups, each keeping its maximum, so the argmax never
   rescans the table), then one thread takes ``train_policy``'s decisions: last merge's
   scaffold marks (threshold: this head's priority, i.e. after the last merge's count
   updates and before its marks, DESIGN §3), stop, re-admit, existing or new token (its
   place, length, hash and table entry; its bytes are copied by phase 3's threads), the
   rule and its events.
2. ``find_runs``, only when ``left == right`` (~2% of merges): the first
   position of each run walks it and pairs it up left to right (``a a a a a``
   -> ``aa aa a``), as the CPU. When ``left != right`` no two merges overlap
   and phase 3 finds them itself, so a merge pays one grid sync and one pass
   over the positions fewer.
3. ``count_deltas``: a thread that finds a merge's start (only positions holding
   the left token are read past their token) makes its pair deltas: the pair
   merged and the pairs on its two sides leave, the pairs with the merged token
   arrive (int64 atomics; new keys claimed with atomicCAS; of two merges side
   by side the left one owns the pair between them, as the CPU's occurrences),
   and lists the start; f(t) of the merged token and its parts (atomics of each
   thread's sum). Since the counts are a function of the words, this equals the
   CPU's sequential deltas, whatever the order. Every chunk whose candidates
   changed is listed once, in its group's list (``mark_dirty``).

The last iteration of a launch leaves its merges to be written by the next launch's
first phase (the host reads only the rules, events and scaffold flags); the training
state's first iteration rescans every chunk (all listed at the start).

Two launchers run the same phases: ``train_steps_kernel`` is a persistent
cooperative kernel (``grid.sync()`` between phases, up to K iterations per
launch), and the phased launcher (``run_phased``) launches each phase as its
own kernel, K times, with no host read in between. The simulator runs blocks
one after another and its ``grid.sync()`` waits for nothing but its own
block: there the cooperative kernel runs with one block only.

Performance notes (counts, not times; the one timing is in bench/GPU_NOTES.md):
- Per batch: 1 launch (cooperative) or 1 + 3K launches (phased), 1 sync.
- Per merge, in the persistent kernel: 2 grid syncs (3 when left == right) and one pass
  over the positions that reads 4 bytes of each (the token), more only at the merge's
  starts. Until session 21 it was 5 syncs and 3 passes of ~5-17 bytes a position: a
  phase that reduced every chunk maximum to a block maximum before the decision (its own
  sync; now the groups' maxima are kept by the rescan, one group a block), a phase that
  found the starts for every merge (now only for runs), deltas taken position by position
  (each read its neighbours' links and marks) and the merges written by another pass over
  every position's mark (now by a thread a listed start). The new token's bytes were
  copied by the deciding thread, one dependent load and store a byte while every other
  block waited; now the next phase's threads copy them, a byte each. Until session 22
  the decision was its own phase (block 0, after a grid sync that ended the rescan);
  now the rescan's last block takes it, one grid sync fewer a merge. On an H200 the
  five-phase kernel took 50.4 us a merge (demo corpus); this one is not timed yet.
- A dirty chunk was first rescanned by one thread walking its 64 candidates:
  64 memory round trips in sequence on the critical path (~13-30 us on an
  H100 by GPU_FACTS' floors). Now a block rescans it, a thread a candidate:
  one round trip and a block reduction.
- The pass over the positions could go too with a list of the positions holding each
  token (the CPU's postings); not done.
"""

from __future__ import annotations

import time

import numba
import numpy as np
from numba import cuda, njit

from ._cuda import (
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
    counted_pair_inline,
    is_rare_child_inline,
    pair_order_inline,
    ranks_above_inline,
    register_token_inline,
    stop_reason_inline,
    token_for_merge_inline,
)

HOLE = np.uint32(0xFFFFFFFF)
LOW32 = np.uint64(0xFFFFFFFF)
# Candidates per chunk of the argmax: a block's threads rescan one chunk together.
CHUNK = 64 if numba.config.ENABLE_CUDASIM else THREADS_PER_BLOCK
COOPERATIVE_MAX_BLOCKS = 4096
STOP_NEED_POOL = 9  # not a stop: the pool needs room; the host grows it and goes on

# Indices into ``control`` (MAX_TOKEN_LEN: HF's max_token_length, 0 for none).
(STOP, N_NORMAL, N_TOKENS, POOL_USED, LEFT, RIGHT, MERGED, APPLY, NEW_TOKEN, PENDING_MARKS,
 N_RULES, N_EVENTS, NEED, RULES_TOTAL, VOCAB_SIZE, MIN_COUNT, SCAFFOLD_MODE, GRID_BLOCKS,
 N_DIRTY, GROUP_CHUNKS, N_STARTS, BLOCKS_DONE, MAX_TOKEN_LEN) = range(23)
CONTROL_LENGTH = 23
EVENTS_PER_ITERATION = 3  # a rule and two marks, or one re-admit
# About this many groups of chunks: the head is the best of their maxima, which the deciding
# block reads (a few loads a thread); more groups would make that longer, fewer would make
# a group's rescan (its chunks one after another, on one block) longer.
GROUPS = 512

STATE = {  # name -> Numba type, in kernel argument order
    "tokens": "uint32[::1]", "next_pos": "int64[::1]", "prev_pos": "int64[::1]",
    "position_count": "int64[::1]", "mark": "uint8[::1]",
    "table_keys": "uint64[::1]", "slot_count": "int64[::1]", "byte_rank": "int64[::1]",
    "pool": "uint8[::1]", "token_start": "int64[::1]", "token_len": "int64[::1]",
    "token_hash": "uint64[::1]", "vocab_keys": "uint64[::1]", "vocab_values": "int64[::1]",
    "token_freq": "int64[::1]", "scaffold": "uint8[::1]",
    "chunk_priority": "int64[::1]", "chunk_order": "uint64[::1]", "chunk_item": "int64[::1]",
    "chunk_dirty": "uint32[::1]", "dirty_chunks": "int64[::1]", "group_fill": "int64[::1]",
    "dirty_groups": "int64[::1]", "starts": "int64[::1]", "control": "int64[::1]",
    "rules": "int64[::1]",
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
_counted_pair = device_function(counted_pair_inline)


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
def add_pair(left, right, delta, table_keys, slot_count, chunk_dirty, dirty_chunks,
             group_fill, dirty_groups, control):
    """Add ``delta`` to pair (left, right), claiming its cell with atomicCAS when new."""
    key = (np.uint64(left) << np.uint64(32)) | np.uint64(right)
    cell, _ = claim_cell(table_keys, key)
    cuda.atomic.add(slot_count, cell, delta)
    mark_dirty(np.int64(cell // np.uint64(CHUNK)), chunk_dirty, dirty_chunks, group_fill,
               dirty_groups, control)


@device_phase
def add_counted_pair(left, right, delta, token_len, table_keys, slot_count, chunk_dirty,
                     dirty_chunks, group_fill, dirty_groups, control):
    """``add_pair`` for a pair ``counted_pair`` counts (HF's max_token_length), as the CPU
    loop's ``_add_delta``."""
    if _counted_pair(left, right, token_len, control[MAX_TOKEN_LEN]):
        add_pair(left, right, delta, table_keys, slot_count, chunk_dirty, dirty_chunks,
                 group_fill, dirty_groups, control)


@device_phase
def mark_dirty(chunk, chunk_dirty, dirty_chunks, group_fill, dirty_groups, control):
    """List a chunk for rescanning, once (the first thread to flag it lists it), in its
    group's list; the chunk that opens a group's list lists the group."""
    if chunk_dirty[chunk] == 0 and cuda.atomic.cas(chunk_dirty, chunk, 0, 1) == 0:
        group_size = control[GROUP_CHUNKS]
        group = chunk // group_size
        at = cuda.atomic.add(group_fill, group, 1)
        dirty_chunks[group * group_size + at] = chunk
        if at == 0:
            dirty_groups[cuda.atomic.add(control, N_DIRTY, 1)] = group


@device_phase
def thread_best(first, end, chunk_priority, chunk_order, chunk_item):
    """This thread's best of the maxima at first + threadIdx.x, + blockDim.x, ... below end:
    (priority, order, item), item -1 when none holds a candidate."""
    best_priority = np.int64(0)
    best_order = np.uint64(0)
    best_item = np.int64(-1)
    for at in range(first + cuda.threadIdx.x, end, cuda.blockDim.x):
        if chunk_item[at] >= 0 and (best_item < 0 or _ranks_above(
                chunk_priority[at], chunk_order[at], best_priority, best_order)):
            best_priority, best_order, best_item = chunk_priority[at], chunk_order[at], \
                chunk_item[at]
    return best_priority, best_order, best_item


@device_phase
def rescan_chunk(chunk, table_keys, slot_count, byte_rank, token_freq, scaffold,
                 chunk_priority, chunk_order, chunk_item, chunk_dirty, shared_priority,
                 shared_order, shared_item):
    """One block: the best candidate of ``chunk`` (item -1: none), a thread a candidate
    (one memory round trip and a block reduction, where one thread walking the chunk would
    pay CHUNK round trips in sequence). Every thread of the block must call it."""
    n_items = table_keys.size + token_freq.size
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
    cuda.syncthreads()  # the shared arrays are reused; the maximum is read by the block


@device_phase
def rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                 chunk_order, chunk_item, chunk_dirty, dirty_chunks, group_fill, dirty_groups,
                 control, shared_priority, shared_order, shared_item):
    """Phase 1: a block per listed group (grid-stride over the list) rescans the
    group's listed chunks, then takes the group's maximum over its chunks' (written at
    ``n_chunks + group``), so the next head is read from the groups' maxima alone.

    Every thread of every block must call it (the lists' lengths are the same for all, so
    the block syncs stay uniform).
    """
    n_chunks = chunk_dirty.size
    group_size = control[GROUP_CHUNKS]
    for k in range(cuda.blockIdx.x, control[N_DIRTY], cuda.gridDim.x):
        group = dirty_groups[k]
        first = group * group_size
        for j in range(group_fill[group]):
            rescan_chunk(dirty_chunks[first + j], table_keys, slot_count, byte_rank,
                         token_freq, scaffold, chunk_priority, chunk_order, chunk_item,
                         chunk_dirty, shared_priority, shared_order, shared_item)
        end = first + group_size
        if end > n_chunks:
            end = n_chunks
        best_priority, best_order, best_item = thread_best(first, end, chunk_priority,
                                                           chunk_order, chunk_item)
        block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                     shared_item)
        if cuda.threadIdx.x == 0:
            chunk_priority[n_chunks + group] = shared_priority[0]
            chunk_order[n_chunks + group] = shared_order[0]
            chunk_item[n_chunks + group] = shared_item[0]
            group_fill[group] = 0
        cuda.syncthreads()  # the shared arrays are reused by the next group


@device_phase
def last_block_here(control, shared_flag):
    """Whether this block is the last of the grid to get here; when it is, what every other
    block wrote before getting here is visible to it. Every thread of the block must call
    it. (The CUDA guide's "last block" reduction: a fence, then a ticket a block; the
    block that draws the last ticket resets the count and fences again before reading.)
    No block waits for another, so it needs no cooperative launch: the phased launcher's
    grid uses it too."""
    cuda.threadfence()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        ticket = cuda.atomic.add(control, BLOCKS_DONE, 1)
        shared_flag[0] = 1 if ticket == cuda.gridDim.x - 1 else 0
        if shared_flag[0] != 0:
            control[BLOCKS_DONE] = 0
    cuda.syncthreads()
    last = shared_flag[0] != 0
    if last:
        cuda.threadfence()
    return last


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
def _list_dirty(chunk, chunk_dirty, dirty_chunks, group_fill, dirty_groups, control):
    """``mark_dirty`` for the one deciding thread (no other thread lists then), without
    atomics: ``decide_merge`` runs compiled for the CPU in the simulator, where CUDA's
    atomics do not exist."""
    if chunk_dirty[chunk] == 0:
        chunk_dirty[chunk] = 1
        group_size = control[GROUP_CHUNKS]
        group = chunk // group_size
        dirty_chunks[group * group_size + group_fill[group]] = chunk
        group_fill[group] += 1
        if group_fill[group] == 1:
            dirty_groups[control[N_DIRTY]] = group
            control[N_DIRTY] += 1


@njit(inline="always")
def _mark_if_rare(child, threshold, control, events, table_size, token_freq, scaffold,
                  chunk_dirty, dirty_chunks, group_fill, dirty_groups):
    if is_rare_child_inline(child, threshold, token_freq, scaffold):
        scaffold[child] = 1
        control[N_NORMAL] -= 1
        _list_dirty((table_size + child) // CHUNK, chunk_dirty, dirty_chunks, group_fill,
                    dirty_groups, control)
        _log_event(control, events, EVENT_MARK, child)


@njit(inline="always")
def _readmit(token, control, events, table_size, scaffold, chunk_dirty, dirty_chunks,
             group_fill, dirty_groups):
    scaffold[token] = 0
    control[N_NORMAL] += 1
    _list_dirty((table_size + token) // CHUNK, chunk_dirty, dirty_chunks, group_fill,
                dirty_groups, control)
    _log_event(control, events, EVENT_READMIT, token)


@njit(inline="always")
def decide_merge(head_item, head_priority, table_keys, pool, token_start, token_len, token_hash,
                 vocab_keys, vocab_values, token_freq, scaffold, chunk_dirty, dirty_chunks,
                 group_fill, dirty_groups, control, rules, events):
    """Phase 1's end, one thread: ``train_policy``'s decisions for the head; sets control[APPLY]
    (and control[NEW_TOKEN] when the merge makes a token: its bytes are copied by phase 3's
    threads, not by this one thread, byte after byte)."""
    table_size = table_keys.size
    control[APPLY] = 0
    control[NEW_TOKEN] = 0
    control[N_STARTS] = 0
    if control[STOP] != STOP_NONE:
        return
    if control[PENDING_MARKS] != 0:  # the last merge's children, against this head
        control[PENDING_MARKS] = 0
        _mark_if_rare(control[LEFT], head_priority, control, events, table_size, token_freq,
                      scaffold, chunk_dirty, dirty_chunks, group_fill, dirty_groups)
        if control[RIGHT] != control[LEFT]:
            _mark_if_rare(control[RIGHT], head_priority, control, events, table_size,
                          token_freq, scaffold, chunk_dirty, dirty_chunks, group_fill,
                          dirty_groups)
    stop = stop_reason_inline(control[N_NORMAL], control[VOCAB_SIZE], head_priority,
                              control[MIN_COUNT])
    if stop != STOP_NONE:
        control[STOP] = stop
        return
    if head_item >= table_size:  # a scaffold token at the head is re-admitted
        _readmit(head_item - table_size, control, events, table_size, scaffold, chunk_dirty,
                 dirty_chunks, group_fill, dirty_groups)
        return
    left = np.int64(table_keys[head_item] >> np.uint64(32))
    right = np.int64(table_keys[head_item] & LOW32)
    merged, merged_hash, hash_listed = token_for_merge_inline(
        left, right, pool, token_start, token_len, token_hash, vocab_keys, vocab_values)
    if merged >= 0 and scaffold[merged] != 0:  # re-admitted; the pair stays at the head
        _readmit(merged, control, events, table_size, scaffold, chunk_dirty, dirty_chunks,
                 group_fill, dirty_groups)
        return
    if merged < 0:
        if control[POOL_USED] + token_len[left] + token_len[right] > pool.size:
            control[NEED] = control[POOL_USED] + token_len[left] + token_len[right]
            control[STOP] = STOP_NEED_POOL
            return
        merged = control[N_TOKENS]
        control[N_TOKENS] += 1
        control[POOL_USED] = register_token_inline(left, right, merged_hash, hash_listed,
                                                   merged, control[POOL_USED], token_start,
                                                   token_len, token_hash, vocab_keys,
                                                   vocab_values)
        control[NEW_TOKEN] = 1
        token_freq[merged] = 0
        scaffold[merged] = 0
        control[N_NORMAL] += 1
    at = 3 * control[N_RULES]
    rules[at], rules[at + 1], rules[at + 2] = left, right, merged
    control[N_RULES] += 1
    _log_event(control, events, EVENT_RULE, control[RULES_TOTAL])
    control[RULES_TOTAL] += 1
    control[LEFT], control[RIGHT], control[MERGED] = left, right, merged
    control[PENDING_MARKS] = control[SCAFFOLD_MODE]
    control[APPLY] = 1


_decide_merge = device_function(decide_merge)


# ------------------------------------------------------------ the phases


@device_phase
def count_pairs(thread, n_threads, tokens, next_pos, position_count, table_keys, slot_count,
                chunk_dirty, dirty_chunks, group_fill, dirty_groups, control):
    """Initial pair counts: every adjacent pair of every word, weighted by its count."""
    for i in range(thread, tokens.size, n_threads):
        after = next_pos[i]
        if tokens[i] != HOLE and after >= 0:
            add_pair(tokens[i], tokens[after], position_count[i], table_keys, slot_count,
                     chunk_dirty, dirty_chunks, group_fill, dirty_groups, control)


@device_phase
def decide(table_keys, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
           token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
           dirty_chunks, group_fill, dirty_groups, control, rules, events, shared_priority,
           shared_order, shared_item):
    """Phase 1's end, in the last block: the head over the groups' maxima, then thread 0
    decides."""
    n_chunks = chunk_dirty.size
    n_groups = (n_chunks + control[GROUP_CHUNKS] - 1) // control[GROUP_CHUNKS]
    best_priority, best_order, best_item = thread_best(n_chunks, n_chunks + n_groups,
                                                       chunk_priority, chunk_order, chunk_item)
    block_reduce(best_priority, best_order, best_item, shared_priority, shared_order,
                 shared_item)
    if cuda.threadIdx.x == 0:
        control[N_DIRTY] = 0  # the listed groups were rescanned at the end of the last one
        head_priority = shared_priority[0] if shared_item[0] >= 0 else np.int64(0)
        _decide_merge(shared_item[0], head_priority, table_keys, pool, token_start, token_len,
                      token_hash, vocab_keys, vocab_values, token_freq, scaffold, chunk_dirty,
                      dirty_chunks, group_fill, dirty_groups, control, rules, events)


@device_phase
def add_merged_count(count, token_freq, control):
    """f(t) of the merged token and its parts, for ``count`` merged positions (int64 atomics:
    the same sums in any order)."""
    if count != 0:
        cuda.atomic.add(token_freq, control[MERGED], count)
        cuda.atomic.add(token_freq, control[LEFT], -count)
        cuda.atomic.add(token_freq, control[RIGHT], -count)


@device_phase
def find_runs(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark, token_freq,
              control):
    """Phase 2, only when left == right: the first position of each run walks it and pairs
    it up left to right (``a a a a a`` -> ``aa aa a``, as the CPU): mark[i] = 1 where a
    merge begins, 2 on its right half. (When left != right no two merges overlap, and
    ``count_deltas`` finds them itself: one grid sync and one pass fewer.)"""
    left = control[LEFT]
    if control[APPLY] == 0 or control[RIGHT] != left:
        return
    merged_count = np.int64(0)
    for i in range(thread, tokens.size, n_threads):
        if tokens[i] != left:
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
            merged_count += position_count[at]
            at = next_pos[after]
            if at >= 0 and tokens[at] != left:
                break
    add_merged_count(merged_count, token_freq, control)


@device_phase
def merge_starts_at(at, runs, tokens, next_pos, mark, left, right):
    """Whether a merge begins at position ``at`` (>= 0): read from ``find_runs``' marks when
    left == right (``runs``), else from the tokens."""
    if runs:
        return mark[at] == 1
    after = next_pos[at]
    return tokens[at] == left and after >= 0 and tokens[after] == right


@device_phase
def merge_ends_at(at, runs, tokens, prev_pos, mark, left, right):
    """Whether position ``at`` (>= 0) is a merge's right half (as ``merge_starts_at``)."""
    if runs:
        return mark[at] == 2
    before = prev_pos[at]
    return tokens[at] == right and before >= 0 and tokens[before] == left


@device_phase
def copy_new_token(thread, n_threads, pool, token_start, token_len, control):
    """The bytes of the token the decision made (``NEW_TOKEN``), a thread a byte."""
    if control[NEW_TOKEN] == 0:
        return
    left, right, merged = control[LEFT], control[RIGHT], control[MERGED]
    n_left = token_len[left]
    start = token_start[merged]
    for i in range(thread, token_len[merged], n_threads):
        source = token_start[left] + i if i < n_left else token_start[right] + i - n_left
        pool[start + i] = pool[source]


@device_phase
def count_deltas(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark,
                 table_keys, slot_count, token_freq, chunk_dirty, dirty_chunks, group_fill,
                 dirty_groups, starts, control, token_len):
    """Phase 3: each merge's pair deltas, by the thread that finds its start (a position
    holding the left token: every other position costs its token's 4 bytes, no more): the
    pair merged and the pairs on its two sides leave, the pairs with the merged token
    arrive. Of two merges side by side (``L R L R``) the left one owns the pair between
    them. The start is listed (``starts``) for ``write_merges``; f(t) of the merged token
    and its parts updated."""
    if control[APPLY] == 0:
        return
    merged, left, right = control[MERGED], control[LEFT], control[RIGHT]
    runs = left == right
    if thread == 0:
        control[GRID_BLOCKS] = cuda.gridDim.x
        table_size = table_keys.size
        for token in (merged, left, right):
            mark_dirty((table_size + token) // CHUNK, chunk_dirty, dirty_chunks, group_fill,
                       dirty_groups, control)
    merged_count = np.int64(0)
    for k in range(thread, tokens.size, n_threads):
        if tokens[k] != left or not merge_starts_at(k, runs, tokens, next_pos, mark, left,
                                                    right):
            continue
        count = position_count[k]
        merged_count += count
        starts[cuda.atomic.add(control, N_STARTS, 1)] = k
        add_pair(left, right, -count, table_keys, slot_count, chunk_dirty, dirty_chunks,
                 group_fill, dirty_groups, control)
        before = prev_pos[k]
        if before >= 0 and not merge_ends_at(before, runs, tokens, prev_pos, mark, left,
                                             right):
            add_counted_pair(tokens[before], left, -count, token_len, table_keys, slot_count,
                             chunk_dirty, dirty_chunks, group_fill, dirty_groups, control)
            add_counted_pair(tokens[before], merged, count, token_len, table_keys, slot_count,
                             chunk_dirty, dirty_chunks, group_fill, dirty_groups, control)
        after = next_pos[next_pos[k]]
        if after >= 0:
            add_counted_pair(right, tokens[after], -count, token_len, table_keys, slot_count,
                             chunk_dirty, dirty_chunks, group_fill, dirty_groups, control)
            then = merged if merge_starts_at(after, runs, tokens, next_pos, mark, left,
                                             right) else np.int64(tokens[after])
            add_counted_pair(merged, then, count, token_len, table_keys, slot_count, chunk_dirty,
                             dirty_chunks, group_fill, dirty_groups, control)
    if not runs:
        add_merged_count(merged_count, token_freq, control)


@device_phase
def write_merges(thread, n_threads, tokens, next_pos, prev_pos, mark, starts, control):
    """Phase 1's start, for the last decision: at each listed start the merged id, its right
    half unlinked (a thread a start: no pass over the positions); ``find_runs``' marks
    cleared after a run's merge (no other merge sets them)."""
    if control[APPLY] == 0:
        return
    merged, runs = control[MERGED], control[LEFT] == control[RIGHT]
    for j in range(thread, control[N_STARTS], n_threads):
        k = starts[j]
        partner = next_pos[k]
        after = next_pos[partner]
        tokens[k] = merged
        tokens[partner] = HOLE
        next_pos[k] = after
        if after >= 0:
            prev_pos[after] = k
        if runs:  # only find_runs marks
            mark[k] = 0
            mark[partner] = 0


@device_phase
def next_decision(tokens, next_pos, prev_pos, mark, starts, table_keys, slot_count, byte_rank,
                  pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
                  token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
                  dirty_chunks, group_fill, dirty_groups, control, rules, events,
                  shared_priority, shared_order, shared_item, shared_flag):
    """Phase 1: the last decision's merges written (``write_merges``), the listed groups
    rescanned (``rescan_dirty``, a block a group), then the grid's last block to finish
    takes the next decision (``decide``): no grid sync between the rescan and the
    decision. Every thread of every block must call it. (Its arguments stop at 30: CPython
    passes a call of more as a tuple, which Numba cannot inline.)"""
    write_merges(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, prev_pos, mark, starts,
                 control)
    rescan_dirty(table_keys, slot_count, byte_rank, token_freq, scaffold, chunk_priority,
                 chunk_order, chunk_item, chunk_dirty, dirty_chunks, group_fill, dirty_groups,
                 control, shared_priority, shared_order, shared_item)
    if last_block_here(control, shared_flag):
        decide(table_keys, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
               token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
               dirty_chunks, group_fill, dirty_groups, control, rules, events,
               shared_priority, shared_order, shared_item)


# ------------------------------------------------------------ kernels
# Every kernel takes the whole state (STATE's order), so they share one signature.
# Those that sync a block: blocks of a power of two threads, at most THREADS_PER_BLOCK,
# and three shared arrays of THREADS_PER_BLOCK entries as scratch.


@cuda.jit
def count_pairs_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Launch: a thread per position, grid-stride. The initial pair table."""
    count_pairs(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, position_count, table_keys,
                slot_count, chunk_dirty, dirty_chunks, group_fill, dirty_groups, control)


@cuda.jit
def begin_batch_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Launch: one thread. Empties the batch's rules and events; lifts a pool-room stop."""
    if cuda.grid(1) == 0:
        control[N_RULES] = 0
        control[N_EVENTS] = 0
        if control[STOP] == STOP_NEED_POOL:
            control[STOP] = STOP_NONE


@cuda.jit
def decide_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 1: the last merges written, the
    listed groups rescanned, a block per group; the last block decides)."""
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_flag = cuda.shared.array(1, numba.int64)
    next_decision(tokens, next_pos, prev_pos, mark, starts, table_keys, slot_count, byte_rank,
                  pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
                  token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
                  dirty_chunks, group_fill, dirty_groups, control, rules, events,
                  shared_priority, shared_order, shared_item, shared_flag)


@cuda.jit
def find_runs_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 2; it returns at once unless the
    merge's two tokens are one)."""
    find_runs(cuda.grid(1), cuda.gridsize(1), tokens, next_pos, prev_pos, position_count,
              mark, token_freq, control)


@cuda.jit
def count_deltas_kernel(
        tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Launch: a thread per position, grid-stride (phase 3, and the new token's bytes)."""
    thread, n_threads = cuda.grid(1), cuda.gridsize(1)
    copy_new_token(thread, n_threads, pool, token_start, token_len, control)
    count_deltas(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark,
                 table_keys, slot_count, token_freq, chunk_dirty, dirty_chunks, group_fill,
                 dirty_groups, starts, control, token_len)


@cuda.jit
def train_steps_kernel(
        n_steps, tokens, next_pos, prev_pos, position_count, mark, table_keys, slot_count,
        byte_rank, pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
        token_freq, scaffold, chunk_priority, chunk_order, chunk_item, chunk_dirty,
        dirty_chunks, group_fill, dirty_groups, starts, control, rules, events):
    """Up to ``n_steps`` iterations in one launch: the phases, ``grid_sync()`` between
    (two a merge, three when its two tokens are one). An iteration begins with the last
    one's merges written and its groups rescanned, which the next launch does for the
    last iteration of this one.

    Launch: a cooperative grid (every block resident); grid-stride over
    positions and groups. The last block to finish the rescan decides. On the
    simulator: one block only (its grid sync waits for nothing else).
    """
    thread = cuda.grid(1)
    n_threads = cuda.gridsize(1)
    shared_priority = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_order = cuda.shared.array(THREADS_PER_BLOCK, numba.uint64)
    shared_item = cuda.shared.array(THREADS_PER_BLOCK, numba.int64)
    shared_flag = cuda.shared.array(1, numba.int64)
    for _ in range(n_steps):
        next_decision(tokens, next_pos, prev_pos, mark, starts, table_keys, slot_count,
                      byte_rank, pool, token_start, token_len, token_hash, vocab_keys,
                      vocab_values, token_freq, scaffold, chunk_priority, chunk_order,
                      chunk_item, chunk_dirty, dirty_chunks, group_fill, dirty_groups,
                      control, rules, events, shared_priority, shared_order, shared_item,
                      shared_flag)
        grid_sync()
        if control[STOP] != STOP_NONE:  # read by all after the same sync: a uniform exit
            break
        if control[APPLY] != 0 and control[LEFT] == control[RIGHT]:  # the same for all
            find_runs(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark,
                      token_freq, control)
            grid_sync()
        copy_new_token(thread, n_threads, pool, token_start, token_len, control)
        count_deltas(thread, n_threads, tokens, next_pos, prev_pos, position_count, mark,
                     table_keys, slot_count, token_freq, chunk_dirty, dirty_chunks, group_fill,
                     dirty_groups, starts, control, token_len)
        grid_sync()


_STATE_SIGNATURE = ", ".join(STATE.values())
TRAIN_CUDA_SIGNATURES = {
    kernel: f"void({_STATE_SIGNATURE})"
    for kernel in (count_pairs_kernel, begin_batch_kernel, decide_kernel, find_runs_kernel,
                   count_deltas_kernel)
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
    chunks, _, groups = chunk_layout(table, max_tokens)
    return (n_positions * (4 + 8 + 8 + 8 + 1) + max(n_positions // 2, 1) * 8
            + table * 16 + 256 * 8 + pool_bytes
            + max_tokens * (8 + 8 + 8 + 8 + 1) + vocab_table * 16
            + chunks * 36 + groups * 40
            + 8 * (CONTROL_LENGTH + rows * (3 + 2 * EVENTS_PER_ITERATION)))


def chunk_layout(table: int, max_tokens: int) -> tuple[int, int, int]:
    """(chunks, chunks a group, groups) of the candidates: the pair table's cells, then one
    a token; a group's chunks are a power of two, for about GROUPS groups."""
    chunks = (table + max_tokens + CHUNK - 1) // CHUNK
    group_size = 1 << max(0, int(-(-chunks // GROUPS) - 1).bit_length())
    return chunks, group_size, -(-chunks // group_size)


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
    chunks, group_size, groups = chunk_layout(table, host["token_freq"].size)
    entries = chunks + groups  # the chunk maxima, then the groups' maxima
    state["chunk_priority"] = xp.zeros(entries, dtype=xp.int64)
    state["chunk_order"] = xp.zeros(entries, dtype=xp.uint64)
    state["chunk_item"] = xp.full(entries, -1, dtype=xp.int64)
    state["chunk_dirty"] = xp.ones(chunks, dtype=xp.uint32)  # every chunk listed, once
    state["dirty_chunks"] = xp.arange(chunks, dtype=xp.int64)  # group g's from g * size
    fill = np.full(groups, group_size, np.int64)
    fill[-1] = chunks - (groups - 1) * group_size
    state["group_fill"] = to_device(xp, fill)
    state["dirty_groups"] = xp.arange(groups, dtype=xp.int64)
    state["mark"] = xp.zeros(n_positions, dtype=xp.uint8)
    state["starts"] = xp.zeros(max(n_positions // 2, 1), dtype=xp.int64)  # a merge's starts
    control = host["control"].copy()
    control[N_DIRTY] = groups
    control[GROUP_CHUNKS] = group_size
    out = to_device(xp, np.concatenate([control, np.zeros(
        rows * (3 + 2 * EVENTS_PER_ITERATION), np.int64)]))
    state["out"] = out
    state["control"] = out[:CONTROL_LENGTH]
    state["rules"] = out[CONTROL_LENGTH:CONTROL_LENGTH + 3 * rows]
    state["events"] = out[CONTROL_LENGTH + 3 * rows:]
    launch(count_pairs_kernel, n_positions, *state_args(state))  # every chunk listed: the
    return state  # first iteration rescans them all before its decision


def state_args(state: dict) -> list:
    return [state[name] for name in STATE]


def run_phased(state: dict, n_iterations: int) -> None:
    """A batch as separate launches: 1 + 3 per iteration, no host read."""
    args = state_args(state)
    n_positions = state["tokens"].size
    launch(begin_batch_kernel, 1, *args)
    for _ in range(n_iterations):
        launch(decide_kernel, n_positions, *args)
        launch(find_runs_kernel, n_positions, *args)
        launch(count_deltas_kernel, n_positions, *args)


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

"""Pair histogram over the flattened word table, and the pair index for training.

Words are one ``uint32`` token array: word ``w`` occupies
``tokens[word_start[w] : word_start[w] + word_len[w]]`` and occurs
``word_count[w]`` times. A pair key is ``(left << 32) | right`` (uint64).

The pair index the CPU trainer keeps (built by ``build_pair_index_cpu``):

- a hash table ``pair key -> slot``;
- per slot: its key, its count (int64), its tie order (the pair in HF's id
  space) and the head of a singly linked list of postings;
- postings: ``post_word[node]``, ``post_next[node]``: the words that held the
  pair when it was last seen forming. A posting may be stale (the word lost the
  pair since); merging rescans the word, so stale postings cost time, never
  correctness.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, njit

from ._cuda import array_module, launch, sum_by_key
from .hashing import empty_table, table_find, table_put
from .train_policy import pair_order

# Indices into the int64 ``sizes`` array that travels with the index (MAX_TOKEN_LEN: HF's
# max_token_length, 0 for none; read by ``kernels.merge.counted_pair``).
(N_SLOTS, N_POSTINGS, HEAP_SIZE, N_TOKENS, POOL_USED, ITERATION, N_TOUCHED, STOP, NEED,
 N_NORMAL, N_EVENTS, N_RULES_TOTAL, MAX_TOKEN_LEN) = range(13)
SIZES_LENGTH = 13


@njit(inline="always", cache=True)
def pair_key(left, right):
    return (np.uint64(left) << np.uint64(32)) | np.uint64(right)


@njit(cache=True)
def pair_keys_cpu(tokens, word_start, word_len, word_count):
    """Every adjacent pair of every word, as (keys, weights): one entry per occurrence."""
    n_words = word_start.size
    pairs_before = np.zeros(n_words + 1, dtype=np.int64)
    for w in range(n_words):
        pairs_before[w + 1] = pairs_before[w] + max(word_len[w] - 1, 0)
    keys = np.empty(pairs_before[n_words], dtype=np.uint64)
    weights = np.empty(pairs_before[n_words], dtype=np.int64)
    for w in range(n_words):
        start = word_start[w]
        out = pairs_before[w]
        for i in range(word_len[w] - 1):
            keys[out + i] = pair_key(tokens[start + i], tokens[start + i + 1])
            weights[out + i] = word_count[w]
    return keys, weights


def count_pairs_cpu(tokens, word_start, word_len, word_count):
    """Bulk pair histogram: (unique pair keys ascending, int64 counts)."""
    keys, weights = pair_keys_cpu(tokens, word_start, word_len, word_count)
    order = np.argsort(keys, kind="stable")
    keys, weights = keys[order], weights[order]
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, np.int64)
    return keys[first], np.add.reduceat(weights, first) if keys.size else np.zeros(0, np.int64)


@njit(cache=True)
def _index_words(tokens, word_start, word_len, word_count, byte_rank, table_keys, table_values,
                 slot_key, slot_count, slot_order, slot_head, post_word, post_next):
    """Count every pair into slots and post each word once per pair it holds."""
    n_slots = 0
    n_postings = 0
    for w in range(word_start.size):
        start = word_start[w]
        for i in range(word_len[w] - 1):
            left, right = tokens[start + i], tokens[start + i + 1]
            key = pair_key(left, right)
            slot = table_find(table_keys, table_values, key)
            if slot < 0:
                slot = n_slots
                n_slots += 1
                table_put(table_keys, table_values, key, slot)
                slot_key[slot] = key
                slot_count[slot] = 0
                slot_order[slot] = pair_order(left, right, byte_rank)
                slot_head[slot] = -1
            slot_count[slot] += word_count[w]
            head = slot_head[slot]
            if head < 0 or post_word[head] != w:
                post_word[n_postings] = w
                post_next[n_postings] = head
                slot_head[slot] = n_postings
                n_postings += 1
    return n_slots, n_postings


def build_pair_index_cpu(tokens, word_start, word_len, word_count, byte_rank):
    """The pair index of a word table (see the module docstring), as a dict of arrays."""
    n_pairs = int(np.maximum(word_len - 1, 0).sum())
    capacity = max(2 * n_pairs, 1024)
    table_keys, table_values = empty_table(2 * capacity)
    index = {
        "table_keys": table_keys,
        "table_values": table_values,
        "slot_key": np.zeros(capacity, np.uint64),
        "slot_count": np.zeros(capacity, np.int64),
        "slot_order": np.zeros(capacity, np.uint64),
        "slot_head": np.full(capacity, -1, np.int64),
        "slot_touch": np.full(capacity, -1, np.int64),
        "post_word": np.zeros(capacity, np.int64),
        "post_next": np.zeros(capacity, np.int64),
    }
    n_slots, n_postings = _index_words(
        tokens, word_start, word_len, word_count, byte_rank, table_keys, table_values,
        index["slot_key"], index["slot_count"], index["slot_order"], index["slot_head"],
        index["post_word"], index["post_next"],
    )
    return index, n_slots, n_postings


@njit(cache=True)
def token_frequencies_cpu(tokens, word_start, word_len, word_count, n_tokens):
    """f(t) for every token id below ``n_tokens``: occurrences weighted by word counts."""
    freq = np.zeros(n_tokens, dtype=np.int64)
    for w in range(word_start.size):
        for i in range(word_start[w], word_start[w] + word_len[w]):
            freq[tokens[i]] += word_count[w]
    return freq


# ---------------------------------------------------------------- CUDA target
# The GPU trainer keeps the word table as positions: ``tokens`` (uint32),
# ``last_in_word`` (uint8: no pair starts here) and ``position_count`` (int64:
# the count of the word the position belongs to).

NO_PAIR = np.uint64(0xFFFFFFFFFFFFFFFF)


@cuda.jit
def pair_keys_kernel(tokens, last_in_word, position_count, keys, weights):
    """Launch: a thread per position, grid-stride. Writes the pair starting there, or NO_PAIR."""
    for i in range(cuda.grid(1), tokens.size, cuda.gridsize(1)):
        if last_in_word[i]:
            keys[i] = NO_PAIR
            weights[i] = 0
        else:
            keys[i] = (np.uint64(tokens[i]) << np.uint64(32)) | np.uint64(tokens[i + 1])
            weights[i] = position_count[i]


def count_pairs_cuda(tokens, last_in_word, position_count, xp=None):
    """Bulk pair histogram on the device: (unique pair keys ascending, int64 counts).

    Sort-and-reduce rather than a device hash table: it moves ~3 passes of
    16 bytes per position through CuPy's radix sort with no atomics, and its
    output is already in key order (see bench/GPU_NOTES.md).
    """
    xp = array_module(tokens) if xp is None else xp
    keys = xp.empty(tokens.size, dtype=xp.uint64)
    weights = xp.empty(tokens.size, dtype=xp.int64)
    launch(pair_keys_kernel, tokens.size, tokens, last_in_word, position_count, keys, weights)
    present = keys != NO_PAIR
    return sum_by_key(xp, keys[present], weights[present])


PAIRS_CUDA_SIGNATURES = {
    pair_keys_kernel: "void(uint32[::1], uint8[::1], int64[::1], uint64[::1], int64[::1])",
}

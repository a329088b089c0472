"""The per-merge rules of training, written once for the CPU loop and the CUDA step.

HF's tie-break, the stop test (vocabulary reached, no pair, min frequency),
Scaffold-BPE's mark test and the "merged bytes already are a token" lookup
are plain Python functions compiled twice: ``hot`` for the Numba CPU loop
(``kernels/merge.py``) and ``njit(inline="always")`` for the CUDA kernels
(``kernels/train_device.py``). A kernel built for PTX without a device can call
only helpers inlined at Numba IR level (see ``kernels/hashing.py``), so a rule
that calls another rule gets the callee of its own build passed in (a closure).

The event log both backends write, one int64 row ``(kind, value)`` per event
in order of occurrence: ``EVENT_RULE`` (value: the rule's index among all
rules), ``EVENT_MARK`` (a token became scaffold; value: its id),
``EVENT_READMIT`` (a scaffold token became normal again; value: its id).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import hot
from .hashing import hash_concat, table_find, table_find_inline, table_put

STOP_NONE, STOP_VOCAB, STOP_NO_PAIR, STOP_MIN_FREQUENCY = 0, 1, 2, 3
EVENT_RULE, EVENT_MARK, EVENT_READMIT = 0, 1, 2
TOP_BIT = np.uint64(1) << np.uint64(63)

inline = njit(inline="always")


def _ranks_above(priority_a, order_a, priority_b, order_b):
    """True when candidate a is chosen before candidate b: the larger priority, then the
    smaller order (a pair's order is the pair in HF's id space with bit 63 set, a scaffold
    token's its id, so a token goes first at equal priority)."""
    return priority_a > priority_b or (priority_a == priority_b and order_a < order_b)


def _pair_order(left, right, byte_rank):
    """The pair in HF's id space (bytes by their GPT-2 character's rank, merged ids after),
    with bit 63 set; ids stay below 2**31."""
    left_hf = byte_rank[left] if left < 256 else left
    right_hf = byte_rank[right] if right < 256 else right
    return TOP_BIT | (np.uint64(left_hf) << np.uint64(32)) | np.uint64(right_hf)


def _counted_pair(left, right, token_len, max_len):
    """HF's ``max_token_length`` (``Word::merge``): a pair is counted when its merged token
    would be shorter than ``max_len`` (0: no limit), or when both are single bytes (HF
    counts the text's first pairs whatever the limit). A pair not counted is never merged;
    its length never changes, so neither its gains nor its losses matter."""
    n = token_len[left] + token_len[right]
    return max_len == 0 or n < max_len or n == 2


def _stop_reason(n_normal, vocab_size, head_priority, min_count):
    """Why training stops before this iteration (STOP_NONE: it goes on).

    ``head_priority`` is 0 when no candidate is left (the queue holds positive ones only).
    """
    if n_normal >= vocab_size:
        return STOP_VOCAB
    if head_priority <= 0:
        return STOP_NO_PAIR
    if head_priority < min_count:
        return STOP_MIN_FREQUENCY
    return STOP_NONE


def _is_rare_child(child, threshold, token_freq, scaffold):
    """Scaffold-BPE's test: a normal non-byte token rarer than the new head becomes scaffold."""
    return child >= 256 and scaffold[child] == 0 and token_freq[child] < threshold


def _token_rules(find, put, concat, build):
    """``token_for_merge``, ``register_token`` and ``append_token`` over the given table and
    hash helpers, each compiled by ``build``."""

    def token_for_merge(left, right, pool, token_start, token_len, token_hash, vocab_keys,
                        vocab_values):
        """The id of bytes(left) + bytes(right): (an existing token or -1 if new, its hash,
        whether the hash is in the table already: a new token then stays out of it)."""
        merged_hash = concat(token_hash[left], token_hash[right], token_len[right])
        found = find(vocab_keys, vocab_values, merged_hash)
        if found < 0 or token_len[found] != token_len[left] + token_len[right]:
            return -1, merged_hash, found >= 0
        at = token_start[found]
        for i in range(token_len[left]):
            if pool[at] != pool[token_start[left] + i]:
                return -1, merged_hash, True  # a 64-bit hash collision: treat as new
            at += 1
        for i in range(token_len[right]):
            if pool[at] != pool[token_start[right] + i]:
                return -1, merged_hash, True
            at += 1
        return found, merged_hash, True

    def register_token(left, right, merged_hash, hash_listed, new_id, pool_used, token_start,
                       token_len, token_hash, vocab_keys, vocab_values):
        """Token ``new_id`` = bytes(left) + bytes(right), its bytes to go at pool[pool_used:]
        (which must have room): its start, length, hash and table entry, not the bytes;
        returns the pool's new fill."""
        token_start[new_id] = pool_used
        token_len[new_id] = token_len[left] + token_len[right]
        token_hash[new_id] = merged_hash
        if not hash_listed:
            put(vocab_keys, vocab_values, merged_hash, new_id)
        return pool_used + token_len[new_id]

    register = build(register_token)

    def append_token(left, right, merged_hash, hash_listed, new_id, pool_used, pool,
                     token_start, token_len, token_hash, vocab_keys, vocab_values):
        """``register_token``, and its bytes written; returns the pool's new fill."""
        end = register(left, right, merged_hash, hash_listed, new_id, pool_used, token_start,
                       token_len, token_hash, vocab_keys, vocab_values)
        at = pool_used
        for i in range(token_len[left]):
            pool[at] = pool[token_start[left] + i]
            at += 1
        for i in range(token_len[right]):
            pool[at] = pool[token_start[right] + i]
            at += 1
        return end

    return build(token_for_merge), register, build(append_token)


# CPU builds (the Numba merge loop).
ranks_above = hot(_ranks_above)
pair_order = hot(_pair_order)
stop_reason = hot(_stop_reason)
is_rare_child = hot(_is_rare_child)
counted_pair = hot(_counted_pair)
token_for_merge, _, append_token = _token_rules(table_find, table_put, hash_concat,
                                                njit(_nrt=False))

# CUDA builds (inlined into the kernels; the simulator runs them compiled for the CPU).
ranks_above_inline = inline(_ranks_above)
pair_order_inline = inline(_pair_order)
stop_reason_inline = inline(_stop_reason)
is_rare_child_inline = inline(_is_rare_child)
counted_pair_inline = inline(_counted_pair)
token_for_merge_inline, register_token_inline, _ = _token_rules(
    table_find_inline, inline(table_put.py_func), inline(hash_concat.py_func), inline)

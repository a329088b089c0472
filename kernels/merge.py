"""Merge application with pair-count deltas, and the CPU training loop.

``merge_batch_cpu`` runs a batch of BPE iterations entirely in Numba:
pick the best pair from the heap (lazy invalidation: an entry whose count is
stale is re-pushed with the current count), merge it in the words that post
it, and apply the count deltas of the affected positions only. The caller
(``gpubpe.trainer``) calls it in batches to drive a progress bar and keeps the
state between calls and grows any array that runs short of room.

Deltas of one merge at a position (as HF's ``Word::merge``): with ``prev`` the
token already written before the pair and ``next`` the one after it,
``(prev, x) -c, (prev, z) +c, (y, next) -c, (z, next) +c`` for a word counted
``c`` times. The merged pair's own count is set to 0 afterwards: every
occurrence is gone (a run ``a a a`` leaves ``aa a``).

Performance notes (50 MB English, 2 cores; see bench/RESULTS.md):
- The whole loop lives in one Numba call per batch; a Python controller calling
  one kernel per merge paid ~40 us of dispatch per merge, more than the work.
- Postings are a linked list in two flat arrays instead of a per-pair set:
  duplicates within a merge are skipped with a per-word stamp.
- A single thread: per merge the touched words are few (median tens), so a
  parallel region's start-up cost more than it saved.
"""

from __future__ import annotations

import numpy as np

from ._jit import hot
from .hashing import table_find, table_put
from .pairs import (
    HEAP_SIZE,
    ITERATION,
    MAX_TOKEN_LEN,
    N_EVENTS,
    N_NORMAL,
    N_POSTINGS,
    N_RULES_TOTAL,
    N_SLOTS,
    N_TOKENS,
    N_TOUCHED,
    NEED,
    POOL_USED,
    STOP,
    pair_key,
    pair_order,
)
from .pqueue import heap_pop, heap_push
from .train_policy import (  # noqa: F401  (the stop codes are re-exported)
    EVENT_MARK,
    EVENT_READMIT,
    EVENT_RULE,
    STOP_MIN_FREQUENCY,
    STOP_NO_PAIR,
    STOP_NONE,
    STOP_VOCAB,
    append_token,
    counted_pair,
    is_rare_child,
    stop_reason,
    token_for_merge,
)


@hot
def slot_of(left, right, sizes, byte_rank, table_keys, table_values, slot_key, slot_count,
            slot_order, slot_head, slot_touch):
    """The slot of pair (left, right), made (count 0) when the pair is new."""
    key = pair_key(left, right)
    slot = table_find(table_keys, table_values, key)
    if slot < 0:
        slot = sizes[N_SLOTS]
        sizes[N_SLOTS] += 1
        table_put(table_keys, table_values, key, slot)
        slot_key[slot] = key
        slot_count[slot] = 0
        slot_order[slot] = pair_order(left, right, byte_rank)
        slot_head[slot] = -1
        slot_touch[slot] = -1
    return slot


@hot
def _add_delta(left, right, delta, word, sizes, byte_rank, table_keys, table_values,
               slot_key, slot_count, slot_order, slot_head, slot_touch, post_word, post_next,
               touched, token_len):
    """Add ``delta`` to the pair's count; on a gain, post the word and mark the slot touched.
    A pair ``counted_pair`` (``train_policy``) leaves out is not counted at all."""
    if not counted_pair(left, right, token_len, sizes[MAX_TOKEN_LEN]):
        return
    slot = slot_of(left, right, sizes, byte_rank, table_keys, table_values, slot_key,
                   slot_count, slot_order, slot_head, slot_touch)
    slot_count[slot] += delta
    if delta > 0:
        head = slot_head[slot]
        if head < 0 or post_word[head] != word:
            node = sizes[N_POSTINGS]
            sizes[N_POSTINGS] += 1
            post_word[node] = word
            post_next[node] = head
            slot_head[slot] = node
        if slot_touch[slot] != sizes[ITERATION]:
            slot_touch[slot] = sizes[ITERATION]
            touched[sizes[N_TOUCHED]] = slot
            sizes[N_TOUCHED] += 1


@hot
def merge_word_cpu(word, left, right, merged, tokens, word_start, word_len, word_count, sizes,
                   byte_rank, table_keys, table_values, slot_key, slot_count, slot_order,
                   slot_head, slot_touch, post_word, post_next, touched, token_len):
    """Merge (left, right) -> merged in one word, in place, left to right; emit deltas.

    Returns the number of occurrences merged (0 for a stale posting).
    """
    start = word_start[word]
    length = word_len[word]
    count = word_count[word]
    n_merged = 0
    read = 0
    write = 0
    while read < length:
        token = np.int64(tokens[start + read])
        if token == left and read + 1 < length and tokens[start + read + 1] == right:
            n_merged += 1
            if write > 0:
                before = np.int64(tokens[start + write - 1])
                if not (before == left and left == right):
                    _add_delta(before, left, -count, word, sizes, byte_rank, table_keys,
                               table_values, slot_key, slot_count, slot_order, slot_head,
                               slot_touch, post_word, post_next, touched, token_len)
                _add_delta(before, merged, count, word, sizes, byte_rank, table_keys,
                           table_values, slot_key, slot_count, slot_order, slot_head,
                           slot_touch, post_word, post_next, touched, token_len)
            if read + 2 < length:
                after = np.int64(tokens[start + read + 2])
                if not (after == right and left == right):
                    _add_delta(right, after, -count, word, sizes, byte_rank, table_keys,
                               table_values, slot_key, slot_count, slot_order, slot_head,
                               slot_touch, post_word, post_next, touched, token_len)
                _add_delta(merged, after, count, word, sizes, byte_rank, table_keys,
                           table_values, slot_key, slot_count, slot_order, slot_head,
                           slot_touch, post_word, post_next, touched, token_len)
            tokens[start + write] = merged
            read += 2
        else:
            tokens[start + write] = token
            read += 1
        write += 1
    word_len[word] = write
    return n_merged


@hot
def settle_head(heap_priority, heap_order, heap_item, sizes, slot_count, slot_order,
                token_freq, scaffold):
    """Re-push or drop stale entries until the top is current; returns its priority.

    Items >= 0 are pair slots (priority: the pair's count); items < 0 are
    scaffold tokens ``-(id + 1)`` (priority: f(id), while the token is
    scaffold). An entry's priority is never below its item's current one
    unless a newer entry holds the current one, so the first current entry is
    the true maximum. Returns 0 when the heap is empty.
    """
    while sizes[HEAP_SIZE] > 0:
        item = heap_item[0]
        if item >= 0:
            current = slot_count[item]
            order = slot_order[item]
        else:
            token = -item - 1
            current = token_freq[token] if scaffold[token] else 0
            order = np.uint64(token)
        if heap_priority[0] == current:
            return current
        sizes[HEAP_SIZE] = heap_pop(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE])
        if current > 0:
            sizes[HEAP_SIZE] = heap_push(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE],
                                         current, order, item)
    return 0


@hot
def room_for_merge(slot, word_len, post_word, post_next, slot_head):
    """Upper bound on new slots, postings and touches one merge of ``slot`` can make."""
    room = 0
    node = slot_head[slot]
    while node >= 0:
        room += word_len[post_word[node]]
        node = post_next[node]
    return room


@hot
def merge_batch_cpu(rules, events, vocab_size, min_count, scaffold_mode, sizes, byte_rank,
                    tokens, word_start, word_len, word_count, word_stamp,
                    table_keys, table_values, slot_key, slot_count, slot_order, slot_head,
                    slot_touch, post_word, post_next, touched,
                    heap_priority, heap_order, heap_item,
                    pool, token_start, token_len, token_hash, vocab_keys, vocab_values,
                    token_freq, scaffold):
    """Run BPE (or Scaffold-BPE) iterations into ``rules`` (n x 3: left, right, result)
    and ``events`` (m x 2: kind, value; see ``train_policy``) until ``rules`` is full,
    ``events`` lacks room for one more iteration, training stops (``sizes[STOP]``), or an
    array lacks room (``sizes[NEED]`` > 0).

    The decisions are ``train_policy``'s, the ones the CUDA step takes. No array is
    allocated or rebound here: growth is the caller's (``_grow`` in ``gpubpe.trainer``),
    so this loop runs without the Numba runtime. Returns the number of rules written.
    """
    n_rules = 0
    sizes[NEED] = 0
    while n_rules < rules.shape[0] and sizes[N_EVENTS] + 3 <= events.shape[0]:
        priority = 0
        if sizes[N_NORMAL] < vocab_size:
            priority = settle_head(heap_priority, heap_order, heap_item, sizes, slot_count,
                                   slot_order, token_freq, scaffold)
        stop = stop_reason(sizes[N_NORMAL], vocab_size, priority, min_count)
        if stop != STOP_NONE:
            sizes[STOP] = stop
            break
        best = heap_item[0]
        if best < 0:  # a scaffold token at the head is re-admitted
            sizes[HEAP_SIZE] = heap_pop(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE])
            readmit(-best - 1, sizes, events, scaffold)
            continue
        left = np.int64(slot_key[best] >> np.uint64(32))
        right = np.int64(slot_key[best] & np.uint64(0xFFFFFFFF))
        room = room_for_merge(best, word_len, post_word, post_next, slot_head)
        if not has_room(room, sizes, table_keys, slot_key, post_word, touched, heap_item,
                        token_start, pool, token_len[left] + token_len[right], vocab_keys):
            sizes[NEED] = room + token_len[left] + token_len[right] + 3
            break
        merged, merged_hash, hash_listed = token_for_merge(left, right, pool, token_start,
                                                           token_len, token_hash, vocab_keys,
                                                           vocab_values)
        if merged >= 0 and scaffold[merged]:
            # The pair would make a scaffold token: re-admit it; the pair stays at the head.
            readmit(merged, sizes, events, scaffold)
            continue
        sizes[HEAP_SIZE] = heap_pop(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE])
        if merged < 0:
            merged = sizes[N_TOKENS]
            sizes[N_TOKENS] += 1
            sizes[POOL_USED] = append_token(left, right, merged_hash, hash_listed, merged,
                                            sizes[POOL_USED], pool, token_start, token_len,
                                            token_hash, vocab_keys, vocab_values)
            token_freq[merged] = 0
            scaffold[merged] = 0
            sizes[N_NORMAL] += 1
        rules[n_rules, 0] = left
        rules[n_rules, 1] = right
        rules[n_rules, 2] = merged
        n_rules += 1
        log_event(events, sizes, EVENT_RULE, sizes[N_RULES_TOTAL])
        sizes[N_RULES_TOTAL] += 1
        merged_count = apply_merge(best, left, right, merged, sizes, byte_rank, tokens,
                                   word_start, word_len, word_count, word_stamp, table_keys,
                                   table_values, slot_key, slot_count, slot_order, slot_head,
                                   slot_touch, post_word, post_next, touched,
                                   heap_priority, heap_order, heap_item, token_len)
        token_freq[merged] += merged_count
        token_freq[left] -= merged_count
        token_freq[right] -= merged_count
        if scaffold_mode:
            mark_scaffold_children(left, right, sizes, events, heap_priority, heap_order,
                                   heap_item, slot_count, slot_order, token_freq, scaffold)
    return n_rules


@hot
def log_event(events, sizes, kind, value):
    """Append one (kind, value) row to the event log (it must have room)."""
    events[sizes[N_EVENTS], 0] = kind
    events[sizes[N_EVENTS], 1] = value
    sizes[N_EVENTS] += 1


@hot
def readmit(token, sizes, events, scaffold):
    """A scaffold token becomes normal again and counts toward |V|."""
    scaffold[token] = 0
    sizes[N_NORMAL] += 1
    log_event(events, sizes, EVENT_READMIT, token)


@hot
def mark_scaffold_children(left, right, sizes, events, heap_priority, heap_order, heap_item,
                           slot_count, slot_order, token_freq, scaffold):
    """Scaffold-BPE's step: a normal non-byte child rarer than the new head becomes scaffold.

    The head's priority is read once, after this merge's count updates and
    before either child is marked (DESIGN §3).
    """
    threshold = settle_head(heap_priority, heap_order, heap_item, sizes, slot_count,
                            slot_order, token_freq, scaffold)
    mark_if_rare(left, threshold, sizes, events, heap_priority, heap_order, heap_item,
                 token_freq, scaffold)
    if right != left:
        mark_if_rare(right, threshold, sizes, events, heap_priority, heap_order, heap_item,
                     token_freq, scaffold)


@hot
def mark_if_rare(child, threshold, sizes, events, heap_priority, heap_order, heap_item,
                 token_freq, scaffold):
    """Mark a normal non-byte token scaffold when f(child) < threshold; queue it if f > 0."""
    if not is_rare_child(child, threshold, token_freq, scaffold):
        return
    scaffold[child] = 1
    sizes[N_NORMAL] -= 1
    log_event(events, sizes, EVENT_MARK, child)
    if token_freq[child] > 0:
        sizes[HEAP_SIZE] = heap_push(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE],
                                     token_freq[child], np.uint64(child), -child - 1)


@hot
def has_room(room, sizes, table_keys, slot_key, post_word, touched, heap_item, token_start,
             pool, new_token_length, vocab_keys):
    """Whether every array can take one merge that touches ``room`` positions."""
    return not (2 * (sizes[N_SLOTS] + room) > table_keys.size
                or sizes[N_SLOTS] + room > slot_key.size
                or sizes[N_POSTINGS] + room > post_word.size
                or room > touched.size
                or sizes[HEAP_SIZE] + room + 3 > heap_item.size
                or sizes[N_TOKENS] + 1 > token_start.size
                or sizes[POOL_USED] + new_token_length > pool.size
                or 2 * (sizes[N_TOKENS] + 1) > vocab_keys.size)


@hot
def apply_merge(best, left, right, merged, sizes, byte_rank, tokens, word_start, word_len,
                word_count, word_stamp, table_keys, table_values, slot_key, slot_count,
                slot_order, slot_head, slot_touch, post_word, post_next, touched,
                heap_priority, heap_order, heap_item, token_len):
    """Merge the pair of ``best`` in every word that posts it; push the pairs that gained.

    Returns how many occurrences were merged, weighted by word counts.
    """
    merged_count = 0
    sizes[ITERATION] += 1
    sizes[N_TOUCHED] = 0
    node = slot_head[best]
    while node >= 0:
        word = post_word[node]
        node = post_next[node]
        if word_stamp[word] == sizes[ITERATION]:
            continue
        word_stamp[word] = sizes[ITERATION]
        merged_count += word_count[word] * merge_word_cpu(
            word, left, right, merged, tokens, word_start, word_len, word_count, sizes,
            byte_rank, table_keys, table_values, slot_key, slot_count, slot_order, slot_head,
            slot_touch, post_word, post_next, touched, token_len)
    slot_count[best] = 0
    slot_head[best] = -1
    for i in range(sizes[N_TOUCHED]):
        slot = touched[i]
        if slot_count[slot] > 0:
            sizes[HEAP_SIZE] = heap_push(heap_priority, heap_order, heap_item, sizes[HEAP_SIZE],
                                         slot_count[slot], slot_order[slot], slot)
    return merged_count

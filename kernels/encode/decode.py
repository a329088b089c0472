"""Decoding: ids to bytes, a gather of token byte strings."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

# ---------------------------------------------------------------- decoding


SLOT_BYTES = 16  # each token's first bytes, padded, in one fixed-size slot of byte_slots


@njit(cache=True, nogil=True)
def byte_slots(table_bytes, table_offsets):
    """Every token's first ``SLOT_BYTES`` bytes at ``SLOT_BYTES * id``, zero-padded (uint8,
    one slot per id and one spare, so a 16-byte load at any slot stays inside)."""
    n_ids = table_offsets.size - 1
    slots = np.zeros((n_ids + 1) * SLOT_BYTES, np.uint8)
    for token in range(n_ids):
        start = table_offsets[token]
        for j in range(min(table_offsets[token + 1] - start, SLOT_BYTES)):
            slots[token * SLOT_BYTES + j] = table_bytes[start + j]
    return slots


@njit(cache=True, nogil=True)
def first_bad_id(ids, lengths):
    """The position of the first id that is no token (outside ``0..lengths.size - 1``, or a
    gap of the id layout: no bytes), else -1. One pass over the ids and ``lengths`` (uint8
    for most vocabularies: 100-200 KB, cache-resident), ~0.3 ns an id."""
    n_ids = lengths.size
    for k in range(ids.size):
        token = np.int64(ids[k])
        if token < 0 or token >= n_ids or lengths[token] == 0:
            return k
    return -1


@njit(cache=True, nogil=True)
def gather_token_bytes_cpu(ids, doc_offsets, table_bytes, table_offsets, lengths, slots):
    """The bytes of every document's ids: ``(bytes uint8, doc_byte_offsets int64, bad)``.

    ``bad`` is -1, or the position of the first id that is no token (out of range or a
    gap: ``first_bad_id``'s test, made in the length pass at no measurable cost), and
    then the arrays are empty. Ids of any integer dtype. Two passes: the total
    length from ``lengths`` (the tokens' byte counts), then one copy in which every token
    is one unaligned 16-byte move from its slot of ``byte_slots`` (a token of up to 16
    bytes, nearly all, is then done; a longer one is copied whole from the flat table).
    The bytes a move writes past its token are overwritten by the next token's, or lie
    in the 16 spare bytes past the output.

    Measured (bench/RESULTS.md, one core, cl100k, 2 KB English documents): the old copy
    from the flat table (an 8-byte move at ``table_offsets[id]``, its length from two int64
    offsets) ran 4.7-6 ns an id, two dependent random reads per token into 1.5 MB of
    tables; the slot copy reads one 16-byte slot (the hot tokens' slots stay in cache)
    and a byte count from a 100 KB array: ~1.8-2.4 ns an id, 2.0-2.6x. The length pass on
    uint8 lengths is 0.3 ns an id (0.8-1.4 on int64 offsets). Tried: one pass into an
    output grown by doubling (no length pass): slower (the bound check each token).
    """
    n_docs = doc_offsets.size - 1
    n_ids = np.uint64(lengths.size)
    total = 0
    for k in range(ids.size):
        token = np.uint64(np.int64(ids[k]))  # a negative id wraps past every id
        if token >= n_ids or lengths[token] == 0:
            return np.empty(0, np.uint8), np.zeros(1, np.int64), k
        total += lengths[token]
    out = np.empty(total + SLOT_BYTES, np.uint8)
    doc_byte_offsets = np.empty(n_docs + 1, np.int64)
    doc_byte_offsets[0] = 0
    at = np.uint64(0)
    slot, short = np.uint64(SLOT_BYTES), np.uint64(SLOT_BYTES)
    for d in range(n_docs):
        for k in range(np.uint64(doc_offsets[d]), np.uint64(doc_offsets[d + 1])):
            token = np.uint64(ids[k])  # uint64 k: no negative-index fix-up on the read
            length = np.uint64(lengths[token])
            _move_slot(slots, token * slot, out, at)
            if length > short:
                start = np.uint64(table_offsets[token])
                length = np.uint64(table_offsets[token + 1]) - start
                for j in range(short, length):
                    out[at + j] = table_bytes[start + j]
            at += length
        doc_byte_offsets[d + 1] = at
    return out[:total], doc_byte_offsets, -1


@intrinsic
def _move_slot(typingctx, source, source_at, dest, dest_at):
    """dest[dest_at:dest_at + 16] = source[source_at:source_at + 16] (uint8 arrays, uint64
    positions) as one unaligned 16-byte load and store: written as a loop of 16 bytes,
    LLVM keeps 16 byte moves, not knowing that the two arrays never overlap."""
    def codegen(context, builder, signature, args):
        word = ir.IntType(8 * SLOT_BYTES).as_pointer()
        pointers = []
        for array_type, array, at in ((signature.args[0], args[0], args[1]),
                                      (signature.args[2], args[2], args[3])):
            data = context.make_array(array_type)(context, builder, array).data
            pointers.append(builder.bitcast(builder.gep(data, [at]), word))
        value = builder.load(pointers[0], align=1)
        builder.store(value, pointers[1], align=1)
        return context.get_dummy_value()
    return types.void(source, source_at, dest, dest_at), codegen

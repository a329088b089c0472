"""Loads, stores and copies at raw addresses, for kernels that read memory NumPy does not
describe (``str_utf8``: CPython's str objects) or read it wider than its type
(``jsonl``: 8 bytes at a time); calls of C functions at an address (CPython's, to make
objects: ``put_new_item``); and the atomics of threads that share a count
(``encode.texts.fill_claimed``)."""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def load(typingctx, address, element):
    """The ``element`` (a NumPy scalar type) stored at ``address`` (an int64), unaligned."""
    value_type = element.instance_type

    def codegen(context, builder, signature, args):
        pointer_type = context.get_value_type(types.CPointer(value_type))
        return builder.load(builder.inttoptr(args[0], pointer_type), align=1)

    return value_type(types.int64, element), codegen


@intrinsic
def store(typingctx, address, value):
    """Store ``value`` at ``address`` (an int64), unaligned."""
    def codegen(context, builder, signature, args):
        pointer_type = context.get_value_type(types.CPointer(signature.args[1]))
        builder.store(args[1], builder.inttoptr(args[0], pointer_type), align=1)
        return context.get_dummy_value()

    return types.none(types.int64, value), codegen


@intrinsic
def copy_bytes(typingctx, destination, source, size):
    """memcpy of ``size`` bytes between two addresses (a byte loop with int64 indices
    ran ~0.7 ns a byte: 28 ns an English line)."""
    def codegen(context, builder, signature, args):
        byte_pointer = context.get_value_type(types.CPointer(types.uint8))
        cgutils.raw_memcpy(builder, builder.inttoptr(args[0], byte_pointer),
                           builder.inttoptr(args[1], byte_pointer), args[2], 1)
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64), codegen


@intrinsic
def call(typingctx, address, arguments):
    """Call the C function at ``address`` (an int64) with ``arguments`` (a tuple of
    integers, each passed as a 64-bit integer: right for integer and pointer parameters
    up to 64 bits on x86-64 and AArch64, where a narrower parameter reads the low bits);
    its int64 result (meaningless for a function returning nothing)."""
    count = len(arguments)

    def codegen(context, builder, signature, args):
        word = ir.IntType(64)
        function = ir.FunctionType(word, [word] * count)
        values = [context.cast(builder, builder.extract_value(args[1], k), kind, types.int64)
                  for k, kind in enumerate(signature.args[1])]
        return builder.call(builder.inttoptr(args[0], function.as_pointer()), values)

    return types.int64(types.int64, arguments), codegen


@intrinsic
def prefetch(typingctx, address):
    """Ask for the cache line at ``address`` (an int64) to be loaded, for reading; a hint
    (llvm.prefetch), never a fault."""
    def codegen(context, builder, signature, args):
        byte_pointer = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [byte_pointer, word, word, word]), "llvm.prefetch.p0")
        builder.call(function, [builder.inttoptr(args[0], byte_pointer), ir.Constant(word, 0),
                                ir.Constant(word, 3), ir.Constant(word, 1)])
        return context.get_dummy_value()

    return types.none(types.int64), codegen


@njit(inline="always", cache=True)
def put_new_item(items_at, k, item, decref, clear_error):
    """Put ``item`` (the address of a new object, its reference given to the list; 0 when
    CPython could not make it) at item k of a list of None whose item pointers are at
    ``items_at``, giving back the None's reference (``decref``: Py_DecRef's address).
    False when ``item`` is 0, CPython's error then cleared (``clear_error``: PyErr_Clear's
    address) and the item left None."""
    if item == 0:
        call(clear_error, ())
        return False
    at = items_at + 8 * k
    call(decref, (load(at, np.int64),))
    store(at, item)
    return True


@intrinsic
def fetch_add(typingctx, address, value):
    """Add ``value`` to the int64 at ``address`` atomically (sequentially consistent); the
    value it held before."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", pointer, args[1], "seq_cst")

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def compare_swap(typingctx, address, expected, value):
    """Store ``value`` at the 64-bit ``address`` if it holds ``expected``, atomically
    (sequentially consistent): whether it did. uint64 values."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        swapped = builder.cmpxchg(pointer, args[1], args[2], "seq_cst", "seq_cst")
        return builder.extract_value(swapped, 1)

    return types.boolean(types.int64, types.uint64, types.uint64), codegen


@intrinsic
def load_acquire(typingctx, address):
    """The int64 at ``address``, read with acquire ordering: what was written before a
    ``store_release`` of the value read is seen too (and the read is never hoisted out of
    a loop)."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(pointer, "acquire", 8)

    return types.int64(types.int64), codegen


@intrinsic
def store_release(typingctx, address, value):
    """Store the int64 ``value`` at ``address`` with release ordering (every write before
    it is seen by a ``load_acquire`` that reads it)."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(args[1], pointer, "release", 8)
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def spin_pause(typingctx):
    """A hint that this thread spins waiting (x86's ``pause``: it then yields the core's
    shared resources to a hyper-thread sibling, which may be the thread it waits for);
    nothing on other CPUs."""
    def codegen(context, builder, signature, args):
        if _X86:
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
            builder.call(function, [])
        return context.get_dummy_value()

    return types.none(), codegen

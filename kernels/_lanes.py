"""16-lane vector code for Numba ``@intrinsic`` functions, written as LLVM IR.

LLVM's loop vectoriser leaves a loop alone when each position writes a varying
number of outputs, so the CPU bit-level codec says the vector code directly:
load 16 ids, compute on all of them at once, then keep some lanes and store
them packed (``llvm.experimental.vector.compress``: one ``vpcompressd`` with
AVX-512, a short branch-free sequence on other CPUs). The IR is
target-independent, so the same code compiles for every CPU Numba supports, except
``permuted`` (a table lookup in one vpermw / vpermd) and ``deposit`` (BMI2's pdep), which
callers use only where ``can_permute`` / ``can_deposit`` say the CPU has them.

``LaneBuilder`` wraps an ``llvmlite`` IR builder; ``Lanes`` (16 uint32 values, or
``LaneBuilder(builder, 32, 16)``: 32 uint16 values in the same 512 bits) and ``Flags``
(one boolean a lane) wrap its values, with operators, so that a step reads like the
NumPy code of the same step. Every comparison is unsigned. Narrow lanes load and store
uint32 ids: a load saturates each id to the lane width (ids above it read as the
largest value), a store widens the kept lanes back to uint32.
Logic on Flags compiles to mask-register instructions, which run on one port of
an AVX-512 core: heavy logic is cheaper done on Lanes of 0/1 bits.
"""

from __future__ import annotations

import functools

from llvmlite import ir

LANES = 16
_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
# One instruction that permutes a whole 512-bit vector by a vector of lane numbers, by
# lane shape, and the CPU feature it needs (target-specific IR, used only where present).
_PERMUTES = {(32, 16): ("llvm.x86.avx512.permvar.hi.512", "+avx512bw"),
             (16, 32): ("llvm.x86.avx512.permvar.si.512", "+avx512f")}


@functools.cache
def cpu_features() -> str:
    """The features Numba compiles for (``NUMBA_CPU_FEATURES``, else the host's), as
    LLVM spells them: "+avx512bw,+avx512f,...". Kept once asked: asking LLVM for the
    host's took ~0.25 ms, which every codec call paid."""
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return config.CPU_FEATURES
    from llvmlite import binding

    return binding.get_host_cpu_features().flatten()


def can_permute(count: int, bits: int) -> bool:
    """Whether ``LaneBuilder.permuted`` is one instruction for these lanes on this CPU."""
    shape = _PERMUTES.get((count, bits))
    return shape is not None and shape[1] in cpu_features().split(",")


def can_deposit() -> bool:
    """Whether ``LaneBuilder.deposit`` is one instruction (BMI2's pdep) on this CPU."""
    return "+bmi2" in cpu_features().split(",")


class _Vector:
    """An IR vector of ``LaneBuilder.count`` lanes and the builder it is made with; logic operators apply
    lane by lane, with another vector of the same kind or a constant (``_operand``)."""

    def __init__(self, lanes: LaneBuilder, value):
        self.lanes, self.value = lanes, value

    def _apply(self, method, other):
        result = getattr(self.lanes.builder, method)(self.value, self._operand(other))
        return type(self)(self.lanes, result)

    def __and__(self, other):
        return self._apply("and_", other)

    def __or__(self, other):
        return self._apply("or_", other)

    def __xor__(self, other):
        return self._apply("xor", other)


class Lanes(_Vector):
    """uint32 (or narrower) lanes. Operands may be Lanes or Python ints (the same value in every lane)."""

    def _operand(self, other):
        return other.value if isinstance(other, Lanes) else self.lanes.const(other).value

    def __add__(self, other):
        return self._apply("add", other)

    def __sub__(self, other):
        return self._apply("sub", other)

    def __invert__(self):
        return self ^ self.lanes.largest

    def __lshift__(self, other):
        return self._apply("shl", other)

    def __rshift__(self, other):
        return self._apply("lshr", other)

    def _compare(self, operator, other):
        return Flags(self.lanes, self.lanes.builder.icmp_unsigned(operator, self.value,
                                                                  self._operand(other)))

    def eq(self, other):
        return self._compare("==", other)

    def ne(self, other):
        return self._compare("!=", other)

    def lt(self, other):
        return self._compare("<", other)

    def ge(self, other):
        return self._compare(">=", other)

    def bit(self, word: Lanes | int) -> Flags:
        """Whether bit ``self`` (below the lane width, in each lane) of ``word`` is set."""
        word = word if isinstance(word, Lanes) else self.lanes.const(word)
        return ((word >> self) & 1).ne(0)

    def shifted_up(self, fill, distance: int, fill_from: int | None = None) -> Lanes:
        """Lane k takes lane k - distance; the first ``distance`` lanes take ``fill`` (an
        int), or, with ``fill_from``, lanes ``fill_from - distance ..`` of ``fill`` (Lanes
        of the positions ``fill_from`` before these: the lanes are then those of the
        positions ``distance`` before)."""
        back = 0 if fill_from is None else distance - fill_from
        count = self.lanes.count
        order = [k - distance if k >= distance else count + k - back for k in range(count)]
        return Lanes(self.lanes, self.lanes.shuffle(self.value, self._operand(fill), order))

    def last(self):
        """The last lane as an IR integer of the lane width."""
        count = self.lanes.count
        return self.lanes.builder.extract_element(self.value, ir.Constant(_I32, count - 1))


class Flags(_Vector):
    """One boolean a lane, from a comparison of Lanes."""

    def _operand(self, other):
        if isinstance(other, Flags):
            return other.value
        return ir.Constant(self.lanes.flags_type, [other] * self.lanes.count)

    def __invert__(self):
        return Flags(self.lanes, self.lanes.builder.not_(self.value))

    def select(self, if_true, if_false) -> Lanes:
        """Lanes of ``if_true`` where set, of ``if_false`` elsewhere (Lanes or ints)."""
        lanes = self.lanes
        pick = [x.value if isinstance(x, Lanes) else lanes.const(x).value
                for x in (if_true, if_false)]
        return Lanes(lanes, lanes.builder.select(self.value, *pick))

    def bits(self):
        """The flags as the low bits of an i64 IR value (lane k is bit k)."""
        builder = self.lanes.builder
        return builder.zext(builder.bitcast(self.value, ir.IntType(self.lanes.count)), _I64)


class LaneBuilder:
    """Makes Lanes and Flags in the function an ``@intrinsic`` is generating: ``count``
    lanes of ``bits`` bits (16 x 32 or 32 x 16 fill one 512-bit vector)."""

    def __init__(self, builder: ir.IRBuilder, count: int = LANES, bits: int = 32):
        self.builder, self.count, self.bits = builder, count, bits
        self.largest = (1 << bits) - 1
        self.element = ir.IntType(bits)
        self.values_type = ir.VectorType(self.element, count)
        self.flags_type = ir.VectorType(_I1, count)
        self._ids_type = ir.VectorType(_I32, count)

    def const(self, x: int) -> Lanes:
        return Lanes(self, ir.Constant(self.values_type, [x & self.largest] * self.count))

    def lane_numbers(self) -> Lanes:
        return self.constants(range(self.count))

    def constants(self, values) -> Lanes:
        """Lane k holds values[k]."""
        return Lanes(self, ir.Constant(self.values_type, [x & self.largest for x in values]))

    def splat(self, scalar) -> Lanes:
        """An integer IR value (truncated or widened to the lane width) in every lane."""
        builder = self.builder
        width = scalar.type.width
        if width != self.bits:
            scalar = builder.trunc(scalar, self.element) if width > self.bits \
                else builder.zext(scalar, self.element)
        one = builder.insert_element(ir.Constant(self.values_type, ir.Undefined), scalar,
                                     ir.Constant(_I32, 0))
        return Lanes(self, self.shuffle(one, ir.Constant(self.values_type, ir.Undefined),
                                        [0] * self.count))

    def shuffle(self, first, second, order):
        """Lane k takes lane order[k] of ``first`` followed by ``second`` (IR vectors)."""
        mask = ir.Constant(ir.VectorType(_I32, len(order)), list(order))
        return self.builder.shuffle_vector(first, second, mask)

    def load(self, data, index) -> Lanes:
        """data[index : index + count] (``data`` a uint32 pointer, ``index`` an i64 IR
        value); narrow lanes take min(id, largest)."""
        builder = self.builder
        address = builder.bitcast(builder.gep(data, [index]), self._ids_type.as_pointer())
        ids = builder.load(address, align=4)
        if self.bits == 32:
            return Lanes(self, ids)
        largest = ir.Constant(self._ids_type, [self.largest] * self.count)
        saturated = builder.select(builder.icmp_unsigned("<", ids, largest), ids, largest)
        return Lanes(self, builder.trunc(saturated, self.values_type))

    def store_kept(self, values: Lanes, keep: Flags, data, index):
        """Write the kept lanes, in order, to data[index:] as uint32; ``count`` ids are
        stored, so up to ``count`` after the kept ones are overwritten with junk (the
        caller leaves room)."""
        builder = self.builder
        name = f"llvm.experimental.vector.compress.v{self.count}i{self.bits}"
        packed = builder.call(self._intrinsic(name, self.values_type,
                                              [self.values_type, self.flags_type,
                                               self.values_type]),
                              [values.value, keep.value,
                               ir.Constant(self.values_type, ir.Undefined)])
        if self.bits != 32:
            packed = builder.zext(packed, self._ids_type)
        address = builder.bitcast(builder.gep(data, [index]), self._ids_type.as_pointer())
        builder.store(packed, address, align=4)

    def flags_of_bits(self, word, first_bit: int) -> Flags:
        """Flags from bits ``first_bit`` .. ``first_bit + count - 1`` of an integer IR value
        (lane k is bit first_bit + k): a move to a mask register, no vector work."""
        builder = self.builder
        bits = builder.trunc(builder.lshr(word, ir.Constant(word.type, first_bit)),
                             ir.IntType(self.count))
        return Flags(self, builder.bitcast(bits, self.flags_type))

    def count_of(self, flags: Flags):
        """How many of the flags are set, as an i64 IR value."""
        popcount = self._intrinsic("llvm.ctpop.i64", _I64, [_I64])
        return self.builder.call(popcount, [flags.bits()])

    def permuted(self, table: Lanes, index: Lanes) -> Lanes:
        """Lane k takes lane index[k] % count of ``table``: a table lookup in one vpermw /
        vpermd. Only where ``can_permute(count, bits)``: it is target-specific IR."""
        name = _PERMUTES[(self.count, self.bits)][0]
        function = self._intrinsic(name, self.values_type, [self.values_type] * 2)
        return Lanes(self, self.builder.call(function, [table.value, index.value]))

    def deposit(self, word, mask):
        """The low bits of ``word`` put, in order, at the set bits of ``mask`` (i64 IR
        values): BMI2's pdep. Only where ``can_deposit()``: it is target-specific IR."""
        function = self._intrinsic("llvm.x86.bmi.pdep.64", _I64, [_I64, _I64])
        return self.builder.call(function, [word, mask])

    def interleaved(self, first: Lanes, second: Lanes, half: int) -> Lanes:
        """Lanes of half ``half`` (0 or 1) of ``first`` and ``second`` taken in turn:
        (first[h], second[h], first[h + 1], ...) from h = half * count / 2."""
        count = self.count
        lanes = range(half * count // 2, (half + 1) * count // 2)
        order = [k for lane in lanes for k in (lane, lane + count)]
        return Lanes(self, self.shuffle(first.value, second.value, order))

    def _intrinsic(self, name, return_type, argument_types):
        module = self.builder.module
        function = module.globals.get(name)
        if function is None:
            function = ir.Function(module, ir.FunctionType(return_type, argument_types), name)
        return function

"""16-lane vector code for Numba ``@intrinsic`` functions, written as LLVM IR.

LLVM's loop vectoriser leaves a loop alone when each position writes a varying
number of outputs, so the CPU bit-level codec says the vector code directly:
load 16 ids, compute on all of them at once, then keep some lanes and store
them packed (``llvm.experimental.vector.compress``: one ``vpcompressd`` with
AVX-512, a short branch-free sequence on other CPUs). Only target-independent
IR is emitted, so the same code compiles for every CPU Numba supports.

``LaneBuilder`` wraps an ``llvmlite`` IR builder; ``Lanes`` (16 uint32 values)
and ``Flags`` (16 booleans) wrap its values, with operators, so that a step
reads like the NumPy code of the same step. Every comparison is unsigned.
Logic on Flags compiles to mask-register instructions, which run on one port of
an AVX-512 core: heavy logic is cheaper done on Lanes of 0/1 bits.
"""

from __future__ import annotations

from llvmlite import ir

LANES = 16
_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
_VALUES = ir.VectorType(_I32, LANES)
_FLAGS = ir.VectorType(_I1, LANES)


class _Vector:
    """An IR vector of 16 lanes and the builder it is made with; logic operators apply
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
    """16 uint32 lanes. Operands may be Lanes or Python ints (the same value in every lane)."""

    def _operand(self, other):
        return other.value if isinstance(other, Lanes) else self.lanes.const(other).value

    def __add__(self, other):
        return self._apply("add", other)

    def __sub__(self, other):
        return self._apply("sub", other)

    def __invert__(self):
        return self ^ 0xFFFFFFFF

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
        """Whether bit ``self`` (0-31 in each lane) of ``word`` is set."""
        word = word if isinstance(word, Lanes) else self.lanes.const(word)
        return ((word >> self) & 1).ne(0)

    def shifted_up(self, fill, distance: int, fill_from: int | None = None) -> Lanes:
        """Lane k takes lane k - distance; the first ``distance`` lanes take ``fill`` (an
        int), or, with ``fill_from``, lanes ``fill_from - distance ..`` of ``fill`` (Lanes
        of the positions ``fill_from`` before these: the lanes are then those of the
        positions ``distance`` before)."""
        back = 0 if fill_from is None else distance - fill_from
        order = [k - distance if k >= distance else LANES + k - back for k in range(LANES)]
        builder = self.lanes.builder
        return Lanes(self.lanes, builder.shuffle_vector(self.value, self._operand(fill),
                                                        ir.Constant(_VALUES, order)))

    def last(self):
        """Lane 15 as an i32 IR value."""
        return self.lanes.builder.extract_element(self.value, ir.Constant(_I32, LANES - 1))


class Flags(_Vector):
    """16 booleans, from a comparison of Lanes."""

    def _operand(self, other):
        return other.value if isinstance(other, Flags) else ir.Constant(_FLAGS, [other] * LANES)

    def __invert__(self):
        return Flags(self.lanes, self.lanes.builder.not_(self.value))

    def select(self, if_true, if_false) -> Lanes:
        """Lanes of ``if_true`` where set, of ``if_false`` elsewhere (Lanes or ints)."""
        lanes = self.lanes
        pick = [x.value if isinstance(x, Lanes) else lanes.const(x).value
                for x in (if_true, if_false)]
        return Lanes(lanes, lanes.builder.select(self.value, *pick))

    def bits(self):
        """The 16 flags as the low bits of an i64 IR value (lane k is bit k)."""
        builder = self.lanes.builder
        return builder.zext(builder.bitcast(self.value, ir.IntType(LANES)), _I64)


class LaneBuilder:
    """Makes Lanes and Flags in the function an ``@intrinsic`` is generating."""

    def __init__(self, builder: ir.IRBuilder):
        self.builder = builder

    def const(self, x: int) -> Lanes:
        return Lanes(self, ir.Constant(_VALUES, [x & 0xFFFFFFFF] * LANES))

    def lane_numbers(self) -> Lanes:
        return self.constants(range(LANES))

    def constants(self, values) -> Lanes:
        """Lane k holds values[k]."""
        return Lanes(self, ir.Constant(_VALUES, [x & 0xFFFFFFFF for x in values]))

    def splat(self, scalar) -> Lanes:
        """An integer IR value (truncated or widened to 32 bits) in every lane."""
        builder = self.builder
        width = scalar.type.width
        if width != 32:
            scalar = builder.trunc(scalar, _I32) if width > 32 else builder.zext(scalar, _I32)
        one = builder.insert_element(ir.Constant(_VALUES, ir.Undefined), scalar,
                                     ir.Constant(_I32, 0))
        return Lanes(self, builder.shuffle_vector(one, ir.Constant(_VALUES, ir.Undefined),
                                                  ir.Constant(_VALUES, [0] * LANES)))

    def load(self, data, index) -> Lanes:
        """data[index : index + 16] (``data`` a uint32 pointer, ``index`` an i64 IR value)."""
        builder = self.builder
        address = builder.bitcast(builder.gep(data, [index]), _VALUES.as_pointer())
        return Lanes(self, builder.load(address, align=4))

    def store_kept(self, values: Lanes, keep: Flags, data, index):
        """Write the kept lanes, in order, to data[index:]; 16 ids are stored, so up to
        16 after the kept ones are overwritten with junk (the caller leaves room)."""
        builder = self.builder
        packed = builder.call(self._intrinsic("llvm.experimental.vector.compress.v16i32",
                                              _VALUES, [_VALUES, _FLAGS, _VALUES]),
                              [values.value, keep.value, ir.Constant(_VALUES, ir.Undefined)])
        address = builder.bitcast(builder.gep(data, [index]), _VALUES.as_pointer())
        builder.store(packed, address, align=4)

    def flags_of_bits(self, word, first_bit: int) -> Flags:
        """Flags from bits ``first_bit`` .. ``first_bit`` + 15 of an integer IR value (lane k
        is bit first_bit + k): a move to a mask register, no vector work."""
        builder = self.builder
        bits = builder.trunc(builder.lshr(word, ir.Constant(word.type, first_bit)),
                             ir.IntType(LANES))
        return Flags(self, builder.bitcast(bits, _FLAGS))

    def count(self, flags: Flags):
        """How many of the 16 flags are set, as an i64 IR value."""
        popcount = self._intrinsic("llvm.ctpop.i64", _I64, [_I64])
        return self.builder.call(popcount, [flags.bits()])

    def interleaved(self, first: Lanes, second: Lanes, half: int) -> Lanes:
        """Lanes 8 * half .. 8 * half + 7 of ``first`` and ``second`` taken in turn:
        (first[8h], second[8h], first[8h + 1], ...)."""
        order = [k for lane in range(8 * half, 8 * half + 8) for k in (lane, lane + LANES)]
        return Lanes(self, self.builder.shuffle_vector(first.value, second.value,
                                                       ir.Constant(_VALUES, order)))

    def _intrinsic(self, name, return_type, argument_types):
        module = self.builder.module
        function = module.globals.get(name)
        if function is None:
            function = ir.Function(module, ir.FunctionType(return_type, argument_types), name)
        return function

"""Bit-level codec: id layout, the paper's goldens, round trips, malformed input, backends.

Every backend ("numpy", "cpu" = Numba, "cuda" = the real @cuda.jit kernels under
the Numba CUDA simulator, switched on by conftest) must give identical output.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubpe._threads import run_all
from gpubpe.backend import resolve_backend
from gpubpe.bitlevel import (
    BACKENDS,
    HI_VALUES,
    LO_VALUES,
    PAPER_LEAD_BYTES,
    BitLevelCodec,
    BitLevelDecodeError,
    BitLevelEncodeError,
)
from gpubpe.errors import ConfigError, GpubpeError
from gpubpe.kernels import bitpack
from gpubpe.kernels._cuda import to_device, to_host

BASE = 1000  # a small base vocabulary: bytes 0-255, merged tokens 256-997, specials 998-999
FFFD = [0xEF, 0xBF, 0xBD]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def codecs_for(lead_bytes=PAPER_LEAD_BYTES, base=BASE):
    return {name: BitLevelCodec(base, lead_bytes, backend=name) for name in BACKENDS}


PAPER_CODECS = codecs_for()
DEFAULT_CODECS = codecs_for(range(0xE0, 0xF0))
SMALL_CHUNK_IDS = 1 << 16


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 64 K ids (4 M in use, where threads pay): these inputs cut into several."""
    monkeypatch.setattr(bitpack, "MIN_CHUNK_IDS", SMALL_CHUNK_IDS)


# --- id layout ----------------------------------------------------------------------------


def test_hi_and_lo_values_are_the_designed_disjoint_ranges():
    def span(first, last):
        return set(range(first, last + 1))

    assert set(HI_VALUES) == span(0x040, 0x05F) | span(0x0C0, 0x0DF) | span(0x140, 0x15F) | span(
        0x1C0, 0x1DF)
    assert set(LO_VALUES) == span(0x080, 0x0BF) | span(0x180, 0x1BF)
    assert len(HI_VALUES) == len(LO_VALUES) == 128
    assert not set(HI_VALUES) & set(LO_VALUES)


def test_value_ids_are_dense_in_value_order():
    codec = PAPER_CODECS["cpu"]
    # sorted values: hi 040-05F (0-31), lo 080-0BF (32-95), hi 0C0-0DF (96-127),
    # hi 140-15F (128-159), lo 180-1BF (160-223), hi 1C0-1DF (224-255)
    for value, index in [(0x040, 0), (0x05F, 31), (0x080, 32), (0x0BF, 95), (0x0C0, 96),
                         (0x140, 128), (0x180, 160), (0x1BF, 223), (0x1C0, 224), (0x1DF, 255)]:
        assert codec.value_id(value) == BASE + index
    for value in HI_VALUES + LO_VALUES:
        assert codec.value_of(codec.value_id(value)) == value


def test_prefix_ids_follow_the_values_and_never_reuse_base_ids():
    paper, default = PAPER_CODECS["cpu"], DEFAULT_CODECS["cpu"]
    assert paper.prefixes == (0x39, 0x3A, 0x3B)  # the paper's p1, p2, p3
    assert default.prefixes == (0x38, 0x39, 0x3A, 0x3B)
    assert [paper.prefix_id(p) for p in paper.prefixes] == [BASE + 256, BASE + 257, BASE + 258]
    assert paper.vocab_size == BASE + 256 + 3
    assert default.vocab_size == BASE + 256 + 4
    for p in default.prefixes:
        assert default.prefix_of(default.prefix_id(p)) == p


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: BitLevelCodec(255), "255"),
        (lambda: BitLevelCodec(BASE, lead_bytes=[0xE4, 0xF0]), "0xF0"),
        (lambda: BitLevelCodec(BASE, lead_bytes=[0x41]), "0x41"),
        (lambda: BitLevelCodec(BASE, lead_bytes=[]), "empty"),
        (lambda: BitLevelCodec(BASE, backend="gpu"), "gpu"),
        (lambda: PAPER_CODECS["cpu"].value_id(0x000), "0"),
        (lambda: PAPER_CODECS["cpu"].value_id(0x1E0), "480"),
        (lambda: PAPER_CODECS["cpu"].prefix_id(0x38), "56"),
        (lambda: PAPER_CODECS["cpu"].value_of(5), "5"),
        (lambda: PAPER_CODECS["cpu"].prefix_of(BASE), str(BASE)),
        (lambda: PAPER_CODECS["cpu"].decode([], errors="ignore"), "ignore"),
    ],
)
def test_invalid_arguments_raise_config_error_naming_the_value(make, named):
    with pytest.raises(ConfigError, match=named):
        make()


# --- the paper's goldens ------------------------------------------------------------------

# The paper's §3.3 example, "召唤众" = E4 BC 97  E5 94 A4  E4 BC 97. (In UTF-8 these bytes
# spell 众唤众: 召 is E5 8F AC. The bytes are what the paper works with, so they are the golden.)
PAPER_BYTES = [0xE4, 0xBC, 0x97, 0xE5, 0x94, 0xA4, 0xE4, 0xBC, 0x97]
REN_BYTES = [0xE8, 0xAA, 0x8D]  # 認


def test_paper_golden_one_prefix(backend):
    codec = PAPER_CODECS[backend]
    # E4 >> 2 = E5 >> 2 = 0b111001 = 0x39 (p1), written once: no other id comes between.
    # E4 BC 97: hi = (0b00 << 7) | (0xBC >> 1) = 0x05E   lo = (0 << 8) | 0x97 = 0x097
    # E5 94 A4: hi = (0b01 << 7) | (0x94 >> 1) = 0x0CA   lo = (0 << 8) | 0xA4 = 0x0A4
    values = [0x05E, 0x097, 0x0CA, 0x0A4, 0x05E, 0x097]
    expected = [codec.prefix_id(0x39)] + [codec.value_id(v) for v in values]
    assert codec.encode(PAPER_BYTES) == expected
    assert codec.decode(expected) == PAPER_BYTES
    # The paper: "p1 5E 97 CA A4 5E 97 ... a 22.22% reduction from the original input":
    # 9 byte tokens become 7 tokens, 1 - 7/9 = 2/9 = 22.22%.
    assert round(100 * (1 - len(expected) / len(PAPER_BYTES)), 2) == 22.22


def test_paper_golden_prefix_switch(backend):
    codec = PAPER_CODECS[backend]
    # 認 = E8 AA 8D: E8 >> 2 = 0b111010 = 0x3A (p2) differs from p1, so it is written;
    # hi = (0b00 << 7) | (0xAA >> 1) = 0x055, lo = (0 << 8) | 0x8D = 0x08D.
    values = [0x05E, 0x097, 0x0CA, 0x0A4, 0x05E, 0x097]
    expected = ([codec.prefix_id(0x39)] + [codec.value_id(v) for v in values]
                + [codec.prefix_id(0x3A), codec.value_id(0x055), codec.value_id(0x08D)])
    assert codec.encode(PAPER_BYTES + REN_BYTES) == expected
    # "p1 5E 97 CA A4 5E 97 p2 55 8D ... 16.66% shorter than the original input":
    # 12 byte tokens become 10, 1 - 10/12 = 16.67% (the paper truncates it to 16.66%).
    reduction = 100 * (1 - len(expected) / len(PAPER_BYTES + REN_BYTES))
    assert math.floor(reduction * 100) / 100 == 16.66
    assert codec.decode(expected) == PAPER_BYTES + REN_BYTES


def test_prefix_in_force_ends_at_any_other_id(backend):
    codec = PAPER_CODECS[backend]
    p1, hi, lo = codec.prefix_id(0x39), codec.value_id(0x05E), codec.value_id(0x097)
    zhong = [0xE4, 0xBC, 0x97]
    assert codec.encode(zhong + [65] + zhong) == [p1, hi, lo, 65, p1, hi, lo]
    assert codec.encode(zhong + [700] + zhong) == [p1, hi, lo, 700, p1, hi, lo]
    assert codec.encode(zhong + [BASE - 1] + zhong) == [p1, hi, lo, BASE - 1, p1, hi, lo]


def test_characters_never_span_sequences_of_a_batch(backend):
    codec = PAPER_CODECS[backend]
    p1, hi, lo = codec.prefix_id(0x39), codec.value_id(0x05E), codec.value_id(0x097)
    ids = np.array([0xE4, 0xBC, 0x97, 0xE4, 0xBC, 0x97, 0xE4, 0xBC, 0x97], dtype=np.uint32)
    offsets = np.array([0, 3, 3, 5, 9], dtype=np.int64)  # an empty sequence, a split character
    coded, coded_offsets = codec.encode_batch(ids, offsets)
    assert coded.tolist() == [p1, hi, lo, 0xE4, 0xBC, 0x97, p1, hi, lo]
    assert coded_offsets.tolist() == [0, 3, 3, 5, 9]
    assert coded.dtype == np.uint32 and coded_offsets.dtype == np.int64
    decoded, decoded_offsets = codec.decode_batch(coded, coded_offsets)
    assert decoded.tolist() == ids.tolist() and decoded_offsets.tolist() == offsets.tolist()


def test_lead_bytes_outside_the_set_pass_through(backend):
    codec = PAPER_CODECS[backend]  # E4-EF: E0-E3 characters stay bytes
    ids = list("ࠀ".encode()) + list("一".encode())  # E0 A0 80, E4 B8 80
    assert codec.encode(ids)[:3] == [0xE0, 0xA0, 0x80]
    assert len(codec.encode(ids)) == 6


def test_types_are_kept(backend):
    codec = PAPER_CODECS[backend]
    assert codec.encode([]) == [] and codec.decode([]) == []
    array_out = codec.encode(np.array(PAPER_BYTES, dtype=np.int64))
    assert isinstance(array_out, np.ndarray) and array_out.dtype == np.uint32
    assert isinstance(codec.encode(tuple(PAPER_BYTES)), list)
    assert isinstance(codec.decode(array_out), np.ndarray)


# --- malformed coded input ----------------------------------------------------------------


def malformed_cases(codec):
    """(coded ids, position of the first malformed unit, replace output, words in the error)."""
    p1, p2 = codec.prefix_id(0x39), codec.prefix_id(0x3A)
    hi, lo = codec.value_id(0x05E), codec.value_id(0x097)
    zhong = [0xE4, 0xBC, 0x97]
    return [
        ([hi, lo], 0, FFFD, "no prefix in force"),  # a 9-bit pair with no prefix
        ([p1, hi, lo, 65, hi, lo], 4, zhong + [65] + FFFD, "no prefix in force"),
        ([p1, hi, lo, lo], 3, zhong + FFFD, "no hi value id"),  # lo without hi
        ([lo, 5], 0, FFFD + [5], "no hi value id"),
        ([p1, hi, 65], 1, FFFD + [65], "not by a lo"),  # hi not followed by lo
        ([p1, hi], 1, FFFD, "end of the sequence"),
        ([p1, hi, hi, lo], 1, FFFD + zhong, "not by a lo"),
        ([65, codec.vocab_size], 1, [65] + FFFD, "not below vocab_size"),  # out of range
        ([p1, 65], 0, FFFD + [65], "not by a hi"),  # a prefix must be followed by hi
        ([p2, p1, hi, lo], 0, FFFD + zhong, "not by a hi"),
    ]


@pytest.mark.parametrize("case", range(10))
def test_malformed_input_raises_or_gives_fffd(backend, case):
    codec = PAPER_CODECS[backend]
    coded, position, replaced, cause = malformed_cases(codec)[case]
    with pytest.raises(BitLevelDecodeError, match=f"position {position}: id {coded[position]}"
                       ) as info:
        codec.decode(coded)
    assert cause in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, GpubpeError)
    assert codec.decode(coded, errors="replace") == replaced


def test_redundant_prefix_is_accepted(backend):
    codec = PAPER_CODECS[backend]
    p1, hi, lo = codec.prefix_id(0x39), codec.value_id(0x05E), codec.value_id(0x097)
    assert codec.decode([p1, hi, lo, p1, hi, lo]) == [0xE4, 0xBC, 0x97] * 2


def test_batch_errors_name_the_sequence(backend):
    codec = PAPER_CODECS[backend]
    coded = np.array([65, 66, codec.value_id(0x097)], dtype=np.uint32)
    with pytest.raises(BitLevelDecodeError, match="sequence 1, position 0"):
        codec.decode_batch(coded, np.array([0, 2, 3]))
    with pytest.raises(BitLevelEncodeError, match=f"id {BASE} at sequence 1, position 1"):
        codec.encode_batch(np.array([1, 2, BASE]), np.array([0, 1, 3]))


def test_bad_encode_input(backend):
    codec = PAPER_CODECS[backend]
    with pytest.raises(BitLevelEncodeError, match=f"id {BASE + 5} at position 2"):
        codec.encode([1, 2, BASE + 5])
    with pytest.raises(ValueError):
        codec.encode([1, 2, BASE + 5])
    with pytest.raises(ConfigError, match="-1"):
        codec.encode([1, -1])
    with pytest.raises(ConfigError, match="1-D"):
        codec.encode(np.zeros((2, 2), dtype=np.uint32))
    with pytest.raises(ConfigError, match="dtype float64"):
        codec.encode(np.zeros(2))
    with pytest.raises(ConfigError, match="offsets"):
        codec.encode_batch(np.zeros(4, dtype=np.uint32), np.array([0, 3, 2, 4]))
    with pytest.raises(ConfigError, match="offsets"):
        codec.encode_batch(np.zeros(4, dtype=np.uint32), np.array([0, 3]))


# --- round trips and backend agreement ----------------------------------------------------

three_byte_chars = st.integers(0x800, 0xFFFF).map(
    lambda cp: list(chr(cp).encode("utf-8", "surrogatepass")))
id_atoms = st.one_of(
    three_byte_chars,  # every 3-byte character, surrogate bit patterns (ED A0..) included
    st.text(min_size=1, max_size=3).map(lambda s: list(s.encode("utf-8", "surrogatepass"))),
    st.sampled_from(["😀", "👍🏽", "é", "한국어", "日本語", "中文"]).map(lambda s: [*s.encode()]),
    st.tuples(three_byte_chars, st.integers(1, 2)).map(lambda t: t[0][: t[1]]),  # truncated
    st.binary(min_size=1, max_size=4).map(list),  # anything, invalid UTF-8 included
    st.lists(st.integers(256, BASE - 1), min_size=1, max_size=2),  # normal and special tokens
)
id_sequences = st.lists(id_atoms, max_size=10).map(lambda parts: [x for p in parts for x in p])
lead_sets = st.sampled_from([range(0xE0, 0xF0), PAPER_LEAD_BYTES, [0xE4], [0xE0, 0xE5, 0xED]])


def random_offsets(data, n):
    cuts = data.draw(st.lists(st.integers(0, n), max_size=4))
    return np.array([0, *sorted(cuts), n], dtype=np.int64)


def assert_same(results):
    first = results[0]
    for other in results[1:]:
        assert len(other) == len(first)
        for a, b in zip(first, other, strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b)), (a, b)


@given(ids=id_sequences, lead_bytes=lead_sets, data=st.data())
def test_round_trip_on_every_backend(ids, lead_bytes, data):
    codecs = PAPER_CODECS if lead_bytes == PAPER_LEAD_BYTES else codecs_for(lead_bytes)
    flat = np.array(ids, dtype=np.uint32)
    offsets = random_offsets(data, flat.size)
    encoded = [codec.encode_batch(flat, offsets) for codec in codecs.values()]
    assert_same(encoded)
    coded, coded_offsets = encoded[0]
    assert coded.size <= flat.size
    for codec in codecs.values():
        decoded, decoded_offsets = codec.decode_batch(coded, coded_offsets)
        assert decoded.tolist() == ids and decoded_offsets.tolist() == offsets.tolist()
    assert codecs["cpu"].decode(codecs["cpu"].encode(ids)) == ids


@given(data=st.data())
def test_arbitrary_coded_input_decodes_alike_on_every_backend(data):
    codec = PAPER_CODECS["cpu"]
    pool = ([5, 65, 0xE4, 0xBC, 300, BASE - 1, codec.vocab_size, codec.vocab_size + 9]
            + [codec.value_id(v) for v in (0x05E, 0x097, 0x1DF, 0x1BF, 0x0CA)]
            + [codec.prefix_id(p) for p in codec.prefixes])
    coded = np.array(data.draw(st.lists(st.sampled_from(pool), max_size=16)), dtype=np.uint32)
    offsets = random_offsets(data, coded.size)
    t = codec._tables
    results = [bitpack.bitlevel_decode_numpy(coded, offsets, t["decode_table"], BASE),
               bitpack.bitlevel_decode_cpu(coded, offsets, t["decode_table"], BASE),
               _decode_on_device(coded, offsets, t["decode_table"])]
    assert_same([r[:2] for r in results])
    assert len({r[2:] for r in results}) == 1
    replaced, replaced_offsets = codec.decode_batch(coded, offsets, errors="replace")
    assert replaced.tolist() == results[0][0].tolist()
    if results[0][2]:
        with pytest.raises(BitLevelDecodeError):
            codec.decode_batch(coded, offsets)
    else:
        assert codec.decode_batch(coded, offsets)[0].tolist() == replaced.tolist()


def _long_coded_input(codec, rng):
    """Coded input long enough for the CPU's 64-position steps: 1-6 documents of
    characters and base ids, well formed (a character's prefix id where none is in
    force, else now and then), then 0-2 malformed units put in anywhere, a third of them
    at a document's end: a lone value or prefix id, an id past the codec's, or a base id
    and a character with no prefix id (none is in force then), each as likely."""
    hi_ids = [codec.value_id(v) for v in HI_VALUES]
    lo_ids = [codec.value_id(v) for v in LO_VALUES]
    prefix_ids = [codec.prefix_id(p) for p in codec.prefixes]
    documents = []
    for _ in range(rng.integers(1, 7)):
        units, in_force = [], False
        for _ in range(rng.integers(5, 60)):
            if rng.random() < 0.3:
                units.append([int(rng.integers(0, BASE))])
                in_force = False
            else:
                prefix = [int(rng.choice(prefix_ids))] if not in_force or rng.random() < 0.4 \
                    else []
                units.append(prefix + [int(rng.choice(hi_ids)), int(rng.choice(lo_ids))])
                in_force = True
        documents.append(units)
    malformed = [lambda: [int(rng.choice(hi_ids + lo_ids))],
                 lambda: [int(rng.choice(prefix_ids))],
                 lambda: [int(rng.integers(codec.vocab_size, codec.vocab_size + 4))],
                 lambda: [65, int(rng.choice(hi_ids)), int(rng.choice(lo_ids))]]
    for _ in range(rng.integers(0, 3)):
        units = documents[rng.integers(0, len(documents))]
        at = len(units) if rng.random() < 1 / 3 else int(rng.integers(0, len(units) + 1))
        units.insert(at, malformed[rng.integers(0, len(malformed))]())
    lengths = [sum(map(len, units)) for units in documents]
    coded = np.array([x for units in documents for unit in units for x in unit], np.uint32)
    return coded, np.cumsum([0] + lengths).astype(np.int64)


def test_long_coded_input_decodes_alike_on_the_cpu_steps_and_numpy():
    """Inputs long enough for the CPU's 64-position steps, where the short property tests
    above never reach (400 seeded inputs): mostly well-formed units, so that the wide
    steps' own checks must find the malformed ones (more of them would send nearly every
    step to the one-unit-at-a-time redo); the CPU backend's output, malformed count and
    first malformed unit are the NumPy backend's."""
    rng = np.random.default_rng(18)
    for codec in (DEFAULT_CODECS["cpu"], PAPER_CODECS["cpu"]):
        table = codec._tables["decode_table"]
        for _ in range(200):
            coded, offsets = _long_coded_input(codec, rng)
            expected = bitpack.bitlevel_decode_numpy(coded, offsets, table, BASE)
            got = bitpack.bitlevel_decode_cpu(coded, offsets, table, BASE, n_chunks=1)
            assert_same([expected[:2], got[:2]])
            assert got[2:] == expected[2:]


def _decode_on_device(coded, offsets, decode_table):
    """bitlevel_decode_cuda on device copies (guarded arrays in the simulator), results on the host."""
    xp = resolve_backend("cuda").xp
    out, out_offsets, *summary = bitpack.bitlevel_decode_cuda(
        to_device(xp, coded), to_device(xp, offsets), to_device(xp, decode_table), BASE, xp=xp)
    return (to_host(out), to_host(out_offsets), *summary)


def test_cpu_chunks_split_long_inputs_and_agree_with_numpy():
    """More chunks than cores still runs (on the process's threads); the splits move to safe
    spots."""
    rng = np.random.default_rng(7)
    pool = np.array([0xE4, 0xE8, 0xBC, 0x97, 0x80, 0x41, 300, 0xF0, 0xBF], dtype=np.uint32)
    ids = pool[rng.integers(0, pool.size, 6 * bitpack.MIN_CHUNK_IDS)]
    offsets = np.unique(np.r_[0, rng.integers(0, ids.size, 40), ids.size]).astype(np.int64)
    t = PAPER_CODECS["cpu"]._tables
    lead, values, table = t["lead_prefix_ids"], t["value_ids"], t["decode_table"]
    bounds = bitpack._plan_chunks(ids, offsets, 6, False, lead, BASE, 0)
    assert bounds.size - 1 >= 4
    expected = bitpack.bitlevel_encode_numpy(ids, offsets, lead, values, BASE)
    got = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE, n_chunks=6, run=run_all)
    assert_same([expected, got])
    decoded = bitpack.bitlevel_decode_cpu(got[0], got[1], table, BASE, n_chunks=6, run=run_all)
    assert decoded[0].tolist() == ids.tolist() and decoded[1].tolist() == offsets.tolist()
    assert decoded[2:] == (0, -1)
    noisy = got[0].copy()
    noisy[rng.integers(0, noisy.size, 50)] = BASE + 1  # lone lo ids: malformed
    assert_same([bitpack.bitlevel_decode_numpy(noisy, got[1], table, BASE),
                 bitpack.bitlevel_decode_cpu(noisy, got[1], table, BASE, n_chunks=6,
                                             run=run_all)])


# --- the fast paths really run ------------------------------------------------------------


def test_cuda_backend_runs_the_cuda_kernels(monkeypatch):
    # The simulator's kernels, or on a GPU node (NUMBA_ENABLE_CUDASIM=0) the compiled ones.
    kind = "FakeCUDAKernel" if numba.config.ENABLE_CUDASIM else "CUDADispatcher"
    assert type(bitpack.encode_scatter_kernel).__name__ == kind

    def forbidden(*args, **kwargs):
        raise AssertionError("the cuda backend ran a non-CUDA kernel")

    for name in ("encode", "decode"):
        for target in ("numpy", "cpu"):
            monkeypatch.setattr(bitpack, f"bitlevel_{name}_{target}", forbidden)
    codec = BitLevelCodec(BASE, PAPER_LEAD_BYTES, backend="cuda")
    before = dict(bitpack.cuda_launch_counts)
    assert codec.decode(codec.encode(PAPER_BYTES + REN_BYTES)) == PAPER_BYTES + REN_BYTES
    launched = {k: v - before.get(k, 0) for k, v in bitpack.cuda_launch_counts.items()
                if v != before.get(k, 0)}
    assert launched.pop("mark_boundaries_kernel") == 2
    assert launched == {name: 1 for name in bitpack.CUDA_KERNEL_SIGNATURES
                        if name != "mark_boundaries_kernel"}


def test_cpu_backend_runs_compiled_numba():
    codec = PAPER_CODECS["cpu"]
    codec.decode(codec.encode(PAPER_BYTES))
    assert bitpack._encode_chunk.nopython_signatures and bitpack._decode_chunk.nopython_signatures


PTX_SCRIPT = textwrap.dedent("""
    import sys
    from numba import cuda
    from numba.cuda.cudadrv import nvvm
    from numba.cuda.dispatcher import CUDADispatcher
    if not nvvm.is_available():
        print("NVVM is not available"); sys.exit(3)
    from gpubpe.kernels import bitpack
    kernels = {k for k, v in vars(bitpack).items() if isinstance(v, CUDADispatcher)}
    assert kernels == set(bitpack.CUDA_KERNEL_SIGNATURES), kernels
    for name, signature in bitpack.CUDA_KERNEL_SIGNATURES.items():
        for cc in [(8, 0), (9, 0)]:
            ptx, _ = cuda.compile_ptx(getattr(bitpack, name).py_func, signature, cc=cc)
            assert ".target sm_%d%d" % cc in ptx
        print(name)
""")


def test_every_cuda_kernel_compiles_to_ptx():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    result = subprocess.run([sys.executable, "-c", PTX_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=600)
    # No NVVM means no PTX check: that fails the build rather than passing unchecked.
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == list(bitpack.CUDA_KERNEL_SIGNATURES)


def _density_segments(rng, n_segments: int) -> np.ndarray:
    """Runs of very different density of 3-byte characters (all, some, none), thousands of
    ids each: characters cross the CPU's 16-position steps at every lane."""
    lead = rng.integers(0xE3, 0xF0, 40_000)
    chars = np.stack([lead, rng.integers(0x80, 0xC0, lead.size),
                      rng.integers(0x80, 0xC0, lead.size)], axis=1).ravel()
    plain = rng.integers(256, BASE, 40_000)
    parts = []
    for _ in range(n_segments):
        length = int(rng.integers(100, 9000))
        kind = rng.integers(0, 4)
        if kind == 0:  # nearly every id a character byte
            part = chars[:3 * (length // 3)].copy()
        elif kind == 1:  # merged tokens only, with ASCII
            part = np.where(rng.random(length) < 0.1, rng.integers(0x20, 0x7F, length),
                            plain[:length])
        else:  # characters and tokens mixed at random, with stray continuation bytes
            take = rng.random(length // 3) < (0.3 if kind == 2 else 0.7)
            part = np.concatenate([chars[3 * k:3 * k + 3] if t else plain[k:k + 1]
                                   for k, t in enumerate(take)])
            part[rng.integers(0, part.size, 3)] = 0x85
        parts.append(part)
    return np.concatenate(parts).astype(np.uint32)


@pytest.mark.parametrize("codecs", [PAPER_CODECS, DEFAULT_CODECS], ids=["E4-EF", "E0-EF"])
@pytest.mark.parametrize("n_chunks", [1, 3, 7])
def test_cpu_steps_equal_numpy_on_long_runs_of_every_density(codecs, n_chunks):
    rng = np.random.default_rng(n_chunks)
    ids = _density_segments(rng, 60)
    ids[rng.integers(0, ids.size, 4)] = BASE + 3  # bad ids: reported at the first one
    offsets = np.unique(np.r_[0, rng.integers(0, ids.size, 12), ids.size]).astype(np.int64)
    t = codecs["cpu"]._tables
    lead, values, table = t["lead_prefix_ids"], t["value_ids"], t["decode_table"]
    expected = bitpack.bitlevel_encode_numpy(ids, offsets, lead, values, BASE)
    got = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE, n_chunks=n_chunks)
    assert_same([expected, got])
    ids[ids >= BASE] = 0x41
    coded, coded_offsets, _ = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE,
                                                         n_chunks=n_chunks)
    assert coded.size < ids.size
    decoded = bitpack.bitlevel_decode_cpu(coded, coded_offsets, table, BASE, n_chunks=n_chunks)
    assert decoded[0].tolist() == ids.tolist() and decoded[2:] == (0, -1)
    noisy = coded.copy()
    noisy[rng.integers(0, noisy.size, 40)] = BASE + 1 + rng.integers(0, 300, 40)
    assert_same([bitpack.bitlevel_decode_numpy(noisy, coded_offsets, table, BASE),
                 bitpack.bitlevel_decode_cpu(noisy, coded_offsets, table, BASE,
                                             n_chunks=n_chunks)])


@pytest.mark.parametrize("spacing", ["dense", "sparse", "empty", "sparse empty"])
def test_cpu_wide_steps_and_sequence_records_equal_numpy(spacing):
    """Sequence starts at every spacing: several (and empty sequences) in one 32-position
    step take the records' loop, at most one (two for encoding) its branch-free path,
    and empty sequences among sparse ones share a start bit with the next (the records
    from the bits are redone); documents end inside the wide steps and the 16-lane steps
    alike. Encoding and decoding both."""
    rng = np.random.default_rng(len(spacing))
    codec = DEFAULT_CODECS["cpu"]
    t = codec._tables
    lead, values, table = t["lead_prefix_ids"], t["value_ids"], t["decode_table"]
    ids = _density_segments(rng, 8)
    gaps = {"dense": (0, 6), "sparse": (20, 90), "empty": (0, 3), "sparse empty": (20, 90)}[
        spacing]
    cuts = np.cumsum(rng.integers(*gaps, ids.size // max(1, sum(gaps) // 2)))
    if spacing.endswith("empty"):
        cuts = np.repeat(cuts, rng.integers(1, 4, cuts.size))  # empty sequences
    offsets = np.r_[0, cuts[cuts < ids.size], ids.size].astype(np.int64)
    expected = bitpack.bitlevel_encode_numpy(ids, offsets, lead, values, BASE)
    got = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE, n_chunks=1)
    assert_same([expected, got])
    coded, coded_offsets, _ = got
    assert_same([bitpack.bitlevel_decode_numpy(coded, coded_offsets, table, BASE),
                 bitpack.bitlevel_decode_cpu(coded, coded_offsets, table, BASE)])


@pytest.mark.parametrize("codecs", [PAPER_CODECS, DEFAULT_CODECS], ids=["E4-EF", "E0-EF"])
def test_cpu_wide_encode_steps_carry_characters_across_their_edges(codecs):
    """A wide encoding step takes the character starts of the three positions before it
    from the step before (or works them out where 32-bit steps ran before it: at the
    start, after a bad id): characters of the same or another prefix start at every
    position around a step's edge, with a sequence start, or a bad id, at every position
    near it; the NumPy backend's output, the first bad id and the round trip."""
    t = codecs["cpu"]._tables
    lead, values, table = t["lead_prefix_ids"], t["value_ids"], t["decode_table"]
    same, other, kana = "众唤众".encode(), "众一众".encode(), "あ众".encode()
    for text in (same, other, kana):
        for shift in range(0, bitpack.WIDE_ENCODE_POSITIONS + 8):
            ids = np.array([0x41] * shift + list(text) * 12 + [0x41] * 40, dtype=np.uint32)
            for extra in range(0, 70, 3):
                offsets = np.array([0, extra, ids.size] if 0 < extra < ids.size
                                   else [0, ids.size], dtype=np.int64)
                expected = bitpack.bitlevel_encode_numpy(ids, offsets, lead, values, BASE)
                got = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE, n_chunks=1)
                assert_same([expected, got])
                decoded = bitpack.bitlevel_decode_cpu(got[0], got[1], table, BASE)
                assert decoded[0].tolist() == ids.tolist()
                bad = ids.copy()
                bad[extra] = BASE + 7  # 32-bit steps there, then wide steps again
                assert_same([bitpack.bitlevel_encode_numpy(bad, offsets, lead, values, BASE),
                             bitpack.bitlevel_encode_cpu(bad, offsets, lead, values, BASE,
                                                         n_chunks=1)])


def test_cpu_wide_steps_hand_ids_above_16_bits_to_32_bit_steps():
    """A wide step holds ids in 16-bit lanes; an id of 0xFFFF or more (here: bad ids,
    above the base vocabulary) makes its 32 positions run as two 32-bit steps when
    encoding, and is malformed when decoding (redone one unit at a time). 0x100E4 would
    read as the lead byte 0xE4 if the lanes truncated instead of saturating."""
    rng = np.random.default_rng(5)
    t = DEFAULT_CODECS["cpu"]._tables
    lead, values = t["lead_prefix_ids"], t["value_ids"]
    ids = _density_segments(rng, 6)
    offsets = np.array([0, ids.size // 3, ids.size], dtype=np.int64)
    for large in (0xFFFF, 0x10000 + 0xE4, 0x10000 + 0x80, 0xFFFFFFFF):
        sprinkled = ids.copy()
        where = np.sort(rng.integers(0, ids.size - 2, 30))
        sprinkled[where] = large
        sprinkled[where + 1] = 0xBC  # as if a character began at the large id
        expected = bitpack.bitlevel_encode_numpy(sprinkled, offsets, lead, values, BASE)
        got = bitpack.bitlevel_encode_cpu(sprinkled, offsets, lead, values, BASE)
        assert_same([expected, got])
        assert got[2] == where[0]
    coded, coded_offsets, _ = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE)
    table = t["decode_table"]
    for large in (0xFFFF, 0x10000 + BASE + 5, 0x10000 + 65):  # truncated: a value id, 'A'
        sprinkled = coded.copy()
        sprinkled[np.sort(rng.integers(0, coded.size, 30))] = large
        expected = bitpack.bitlevel_decode_numpy(sprinkled, coded_offsets, table, BASE)
        got = bitpack.bitlevel_decode_cpu(sprinkled, coded_offsets, table, BASE)
        assert_same([expected[:2], got[:2]])
        assert got[2:] == expected[2:] and got[2] >= 30


def test_cpu_steps_pass_ids_above_16_bits_below_a_large_base_vocabulary():
    """base_vocab_size above 0xFFFF: the codec's ids need 32-bit lanes, which then run
    everything, and ids such as 0x100E4 pass through."""
    base = 70_000
    codecs = codecs_for(range(0xE0, 0xF0), base=base)
    rng = np.random.default_rng(6)
    ids = _density_segments(rng, 4)
    ids[rng.integers(0, ids.size, 200)] = 0x100E4
    offsets = np.array([0, ids.size // 2, ids.size], dtype=np.int64)
    encoded = [codecs[name].encode_batch(ids, offsets) for name in ("numpy", "cpu")]
    assert_same(encoded)
    assert codecs["cpu"].decode_batch(*encoded[1])[0].tolist() == ids.tolist()


# --- the CPU's vector steps: every lane, every malformation, any CPU -------------------------


def _dense_coded(codec, n_chars: int, seed: int) -> np.ndarray:
    """A well-formed coded sequence: CJK characters whose prefix switches often, a few
    base ids between them."""
    rng = np.random.default_rng(seed)
    code_points = rng.choice([0x4E00, 0x5000, 0x8000, 0x9F00, 0x3042, 0xAC00], n_chars)
    code_points = code_points + rng.integers(0, 0x80, n_chars)
    text = "".join(chr(c) + ("a" if rng.random() < 0.1 else "") for c in code_points)
    return codec.encode(np.frombuffer(text.encode(), dtype=np.uint8).astype(np.uint32))


def _malformed_pieces(codec):
    """Short id runs, each malformed in one way only (names as the decoder sees them)."""
    prefix, hi, lo = codec.prefix_id(0x39), codec.value_id(0x5E), codec.value_id(0x97)
    return {"lone lo": [lo], "hi then hi": [prefix, hi, hi, lo], "hi without prefix": [65, hi, lo],
            "prefix then base": [prefix, 65], "prefix then lo": [prefix, lo],
            "past vocab": [codec.vocab_size + 3], "hi at the end": [prefix, hi],
            "prefix at the end": [prefix]}


def _malformed_variants(coded, codec):
    """(name, where, ids, offsets): a malformed piece put in at each unit boundary of the
    first 200 ids (a base or prefix id starts there), and after 0-63 base ids, so that it
    meets every lane of the CPU's 16-lane and 64-position steps; pieces named "at the end"
    end a sequence."""
    is_value = (coded >= BASE) & (coded < BASE + 256)
    boundaries = [b for b in range(min(coded.size, 200)) if not is_value[b]]
    padded = np.concatenate([np.full(bitpack.WIDE_DECODE_POSITIONS, 65), coded])  # every lane
    for name, piece in _malformed_pieces(codec).items():
        for stream, b in [(coded, b) for b in boundaries] + [
                (padded, k) for k in range(bitpack.WIDE_DECODE_POSITIONS)]:
            ids = np.concatenate([stream[:b], piece, stream[b:]]).astype(np.uint32)
            cut = [b + len(piece)] if name.endswith("at the end") else []
            yield name, b, ids, np.array([0, *cut, ids.size], dtype=np.int64)


@pytest.mark.parametrize("codecs", [PAPER_CODECS, DEFAULT_CODECS], ids=["E4-EF", "E0-EF"])
def test_cpu_steps_redo_every_malformation_at_every_lane(codecs):
    """Each malformation at each lane of the 16-lane and 64-position steps: the step is
    redone one unit at a time, from the unit the step before left open, to exactly the
    NumPy backend's output."""
    codec = codecs["cpu"]
    coded = _dense_coded(codec, 120, seed=len(codec.prefixes))
    table = codec._tables["decode_table"]
    lanes_met = set()
    for name, where, ids, offsets in _malformed_variants(coded, codec):
        expected = bitpack.bitlevel_decode_numpy(ids, offsets, table, BASE)
        got = bitpack.bitlevel_decode_cpu(ids, offsets, table, BASE)
        assert got[2:] == expected[2:], (name, where)
        assert expected[2] >= 1
        assert_same([expected[:2], got[:2]])
        lanes_met.add(where % bitpack.WIDE_DECODE_POSITIONS)
    assert lanes_met == set(range(bitpack.WIDE_DECODE_POSITIONS))


@pytest.mark.parametrize("n_chunks", [1, 2])
def test_cpu_decode_faults_its_output_in_ahead_without_touching_what_it_wrote(n_chunks):
    """Decoding touches its output's pages in bursts of FAULT_IN_IDS ahead of the steps
    (zeros written once every 4 KB): an output of several bursts, on one and two
    chunks, still decodes to the ids encoded."""
    codec = DEFAULT_CODECS["cpu"]
    t = codec._tables
    coded = _dense_coded(codec, 4000, seed=2)
    repeats = 3 * bitpack.FAULT_IN_IDS // coded.size
    ids = np.tile(codec.decode_batch(coded, np.array([0, coded.size]))[0], repeats)
    offsets = np.linspace(0, ids.size, 1000).astype(np.int64)
    encoded, encoded_offsets, _ = bitpack.bitlevel_encode_cpu(
        ids, offsets, t["lead_prefix_ids"], t["value_ids"], BASE)
    decoded, decoded_offsets, n_bad, _ = bitpack.bitlevel_decode_cpu(
        encoded, encoded_offsets, t["decode_table"], BASE, n_chunks=n_chunks)
    assert decoded.size > 2 * bitpack.FAULT_IN_IDS and n_bad == 0
    assert np.array_equal(decoded, ids) and np.array_equal(decoded_offsets, offsets)


@numba.njit
def _wide_decode_steps_from(ids, layout):
    """Run the wide decoding steps over one sequence, each taking what the one before
    carried, until a step finds a malformed unit; returns the position it stopped at."""
    n = ids.size
    cuts = bitpack._cut_map(np.array([0, n], dtype=np.int64), n)
    out = np.empty(3 * n + 256, dtype=np.uint32)
    carried = (np.int64(bitpack._NONE), np.int64(bitpack._PLAIN), np.int64(0))
    p, o = 0, 0
    while p + bitpack.WIDE_DECODE_POSITIONS < n:
        starts = bitpack._cut_window(cuts, p + bitpack.EDGE)
        written, malformed, carried, _, _, _ = bitpack._decode_wide_step(
            ids, p, starts, layout, BASE, carried, out, o)
        if malformed != 0:
            return p
        p, o = p + bitpack.WIDE_DECODE_POSITIONS, o + written
    return p


@pytest.mark.skipif(not bitpack._fits_wide_lanes(BASE), reason="wide steps need AVX-512BW")
def test_cpu_wide_decode_steps_carry_the_prefix_across_their_edges():
    """A wide decoding step takes the prefix in force and the class of the id before it
    from the step before: on well-formed input whose prefix switches often, shifted by
    0-63 base ids so that every switch meets every position of a step, no step finds a
    malformed unit. (A step that did would be redone one unit at a time to the same
    output, only slower: the output tests cannot see it.)"""
    codec = DEFAULT_CODECS["cpu"]
    coded = _dense_coded(codec, 2000, seed=11)
    layout = bitpack._lane_table(bitpack._decode_lane_table, codec._tables["decode_table"])
    prefixes = np.isin(coded, [codec.prefix_id(p) for p in codec.prefixes])
    assert prefixes.sum() > 500  # the prefix switches at ~1 character in 3
    for shift in range(bitpack.WIDE_DECODE_POSITIONS):
        ids = np.concatenate([np.full(shift, 65), coded]).astype(np.uint32)
        stopped = _wide_decode_steps_from(ids, layout)
        assert stopped + bitpack.WIDE_DECODE_POSITIONS >= ids.size, (shift, stopped)


def test_lane_tables_refuse_tables_of_another_layout():
    """The vector steps compute lookups from the layout; tables that do not follow it are
    refused, not misread."""
    t = PAPER_CODECS["cpu"]._tables
    swapped = t["value_ids"].copy()
    swapped[[0x40, 0x41]] = swapped[[0x41, 0x40]]
    with pytest.raises(ValueError, match="layout"):
        bitpack.bitlevel_encode_cpu(np.zeros(4, np.uint32), np.array([0, 4]),
                                    t["lead_prefix_ids"], swapped, BASE)
    table = t["decode_table"].copy()
    table[[3, 40]] = table[[40, 3]]
    with pytest.raises(ValueError, match="layout"):
        bitpack.bitlevel_decode_cpu(np.zeros(4, np.uint32), np.array([0, 4]), table, BASE)


OTHER_CPU_SCRIPT = textwrap.dedent("""
    import numpy as np
    from gpubpe.bitlevel import BitLevelCodec
    rng = np.random.default_rng(0)
    text = "".join(chr(c) for c in rng.integers(0x4E00, 0x9FFF, 3000)) + "abc 한국어"
    ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.uint32)
    offsets = np.array([0, 1000, 5000, ids.size])
    cpu, reference = BitLevelCodec(1000, backend="cpu"), BitLevelCodec(1000, backend="numpy")
    coded = cpu.encode_batch(ids, offsets)
    expected = reference.encode_batch(ids, offsets)
    assert all(np.array_equal(a, b) for a, b in zip(coded, expected))
    noisy = coded[0].copy()
    noisy[::97] = 1001
    decoded = cpu.decode_batch(noisy, coded[1], errors="replace")
    expected = reference.decode_batch(noisy, coded[1], errors="replace")
    assert all(np.array_equal(a, b) for a, b in zip(decoded, expected))
    assert np.array_equal(cpu.decode_batch(*coded)[0], ids)
    print("same")
""")


@pytest.mark.parametrize("cpu_name", ["haswell", "x86-64"])
def test_cpu_steps_compile_for_cpus_without_avx512(cpu_name, tmp_path):
    """Built for an AVX2 CPU and for baseline x86-64 (NUMBA_CPU_NAME, and no AVX-512
    features; this machine runs either), the steps leave out their AVX-512 table lookups
    and wide steps and give the NumPy output."""
    env = dict(os.environ, NUMBA_CPU_NAME=cpu_name, NUMBA_CPU_FEATURES="",
               NUMBA_CACHE_DIR=str(tmp_path))  # no features: the CPU's own, no AVX-512
    result = subprocess.run([sys.executable, "-c", OTHER_CPU_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["same"]

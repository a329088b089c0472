"""``gpubpe.device_stats()``: exact counts of launches, syncs and bytes, and the simulator guard.

The counts are the cost a GPU pays per host round trip (an H100: a launch
7-43 us, a sync 17 us), countable here without one. The guard makes a hidden
host read of simulated device data fail (a GPU would silently sync there).
Every test but the guard's runs against a real device too
(``NUMBA_ENABLE_CUDASIM=0`` on a GPU node).
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest

import gpubpe
from gpubpe.backend import resolve_backend
from gpubpe.bitlevel import BitLevelCodec
from gpubpe.kernels import _cuda, bitpack

CUDA = resolve_backend("cuda")
XP = CUDA.xp
DATA = Path(__file__).parent / "data" / "multiscript.txt"
simulator_only = pytest.mark.skipif(not numba.config.ENABLE_CUDASIM,
                                    reason="the guard is the simulator's; CuPy syncs instead")


def test_forced_syncs_are_counted_exactly():
    offsets = np.array([0, 2, 5], dtype=np.int64)
    with gpubpe.device_stats() as stats:
        device_offsets = _cuda.to_device(XP, offsets)  # 24 bytes up
        boundary = _cuda.device_zeros(XP, 6, XP.uint8)
        _cuda.launch(bitpack.mark_boundaries_kernel, 3, device_offsets, boundary)
        values = [_cuda.read_scalar(boundary, i, "one flag") for i in (0, 1, 2)]  # 3 syncs
        flags = _cuda.to_host(boundary, "all flags")  # 1 sync, 6 bytes down
        _cuda.synchronize(XP, "the end")  # 1 sync
    assert values == [1, 0, 1] and flags.tolist() == [1, 0, 1, 0, 0, 1]
    assert stats.syncs == 5
    assert stats.sync_sites == {"one flag": 3, "all flags": 1, "the end": 1}
    assert stats.launches == {"mark_boundaries_kernel": 1} and stats.n_launches == 1
    assert (stats.bytes_to_device, stats.bytes_to_host) == (24, 3 + 6)
    assert stats.per(5)["syncs"] == 1.0


def test_nested_blocks_each_count_their_own_work():
    with gpubpe.device_stats() as outer:
        _cuda.to_host(_cuda.to_device(XP, np.zeros(4, np.int32)), "a")
        with gpubpe.device_stats() as inner:
            _cuda.synchronize(XP, "b")
    assert (outer.syncs, inner.syncs) == (2, 1) and inner.bytes_to_device == 0


@pytest.fixture(scope="module")
def tok() -> gpubpe.Tokenizer:
    lines = DATA.read_text(encoding="utf-8").split("\n")[:300]
    return gpubpe.train([line.encode() for line in lines], 600, progress=False, backend="cpu")


# The syncs of one batch on the device, beside the pre-tokenizer's: the item count, the
# new words' sizes, the id count, then the ids and offsets coming down.
BATCH_SYNCS = {"batch items": 1, "batch new words": 1, "batch id count": 1, "batch ids": 1,
               "batch offsets": 1}


def pipeline_syncs(stats) -> dict:
    """Sync sites of the batch (the device pre-tokenizer reads nothing)."""
    return dict(stats.sync_sites)


def test_a_batch_costs_the_same_syncs_for_3_or_60_documents(tok):
    gpu_tok = tok.with_backend("cuda")
    gpu_tok.encode("warm")  # the rule and class tables go to the device once per tokenizer
    seen = {}
    for n_docs in (3, 60):
        texts = [f"doc {i} has words, new ones: w{i}x." for i in range(n_docs)]
        gpu_tok.clear_cache()
        with gpubpe.device_stats() as stats:
            batch = gpu_tok.encode_arrays(texts)
        assert batch.ids.tolist() == tok.encode_arrays(texts).ids.tolist()
        assert batch.offsets.tolist() == tok.encode_arrays(texts).offsets.tolist()
        seen[n_docs] = stats
    few, many = seen[3], seen[60]
    assert few.sync_sites == many.sync_sites and few.launches == many.launches
    assert pipeline_syncs(few) == BATCH_SYNCS
    assert few.launches["encode_words_kernel"] == 1 and few.launches["cache_admit_kernel"] == 1
    with gpubpe.device_stats() as warm:
        gpu_tok.encode_arrays(texts)  # every word cached: no BPE, the same syncs
    assert pipeline_syncs(warm) == BATCH_SYNCS and "encode_words_kernel" not in warm.launches
    with gpubpe.device_stats() as on_device:
        gpu_tok.encode_arrays(texts, device=True)  # ids stay: two reads fewer
    assert pipeline_syncs(on_device) == {"batch items": 1, "batch new words": 1,
                                         "batch id count": 1}


def test_chunked_encoding_counts_per_chunk(tok, chunk_budget):
    from gpubpe.kernels.encode import batch_cuda

    texts = DATA.read_text(encoding="utf-8").split("\n")[340:352]
    gpu_tok = tok.with_backend("cuda")
    gpu_tok.decode_batch(gpu_tok.encode_arrays(["warm up"]))
    gpu_tok.clear_cache()
    chunk_budget(max(len(t.encode()) for t in texts) * batch_cuda.BATCH_DEVICE_BYTES_PER_BYTE
                 + 200)
    with gpubpe.device_stats() as encoding:
        batch = gpu_tok.encode_arrays(texts)
    chunks = encoding.launches["item_lookup_kernel"]
    assert chunks >= 3
    sites = pipeline_syncs(encoding)
    assert (sites["batch items"], sites["batch new words"], sites["batch id count"]) == \
        (chunks, chunks, chunks)
    assert (sites["batch ids"], sites["batch offsets"]) == (1, 1)  # the chunks join on the device
    with gpubpe.device_stats() as decoding:
        assert gpu_tok.decode_batch(batch) == texts
    assert decoding.launches == {} and decoding.sync_sites == {}  # host ids: on the host


def test_bitlevel_codec_reads_the_device_once_per_call_and_copies_results_back():
    codec = BitLevelCodec(1000, range(0xE4, 0xF0), backend="cuda")
    ids = list("\u4e2d\u6587 text".encode())
    with gpubpe.device_stats() as stats:
        coded = codec.encode(ids)
    assert codec.decode(coded) == ids
    assert stats.sync_sites == {"bit-level encode size": 1, "bit-level encode ids": 1,
                                "bit-level encode offsets": 1}
    assert stats.n_launches == 4 and stats.bytes_to_device == len(ids) * 4 + 2 * 8


# --- the simulator guard -----------------------------------------------------------------

HIDDEN_READS = {
    "int of an element": lambda a: int(a[-1]),
    "bool of a reduction": lambda a: bool(a.any()),
    "if on a comparison": lambda a: 1 if a[0] == 0 else 2,
    "item": lambda a: a.item(0),
    "get": lambda a: a.get(),
    "tolist": lambda a: a.tolist(),
    "an index": lambda a: [0, 1, 2][a[0]],
    "iteration": lambda a: list(a),
    "float of a sum": lambda a: float(a.sum()),
    "boolean mask": lambda a: a[a > 1],
    "flatnonzero": lambda a: np.flatnonzero(a),
    "nonzero": lambda a: a.nonzero(),
    "argwhere": lambda a: np.argwhere(a),
    "one-argument where": lambda a: np.where(a > 1),
    "unique": lambda a: np.unique(a),
    "compress": lambda a: np.compress(a > 1, a),
}


@simulator_only
@pytest.mark.parametrize("read", HIDDEN_READS.values(), ids=HIDDEN_READS.keys())
@pytest.mark.parametrize("source", ["to_device", "device_zeros", "kernel output"])
def test_a_hidden_read_of_device_data_fails_in_the_simulator(read, source):
    if source == "to_device":
        array = _cuda.to_device(np, np.arange(5, dtype=np.int64))
    elif source == "device_zeros":
        array = _cuda.device_zeros(np, 5, np.int64) + 1  # what is computed from it is guarded too
    else:
        array = _cuda.device_zeros(np, 6, np.uint8)
        _cuda.launch(bitpack.mark_boundaries_kernel, 2,
                     _cuda.to_device(np, np.array([0, 4], dtype=np.int64)), array)
    with pytest.raises(_cuda.HiddenDeviceRead, match="outside kernels._cuda.to_host"):
        read(array)


@simulator_only
def test_the_counted_reads_and_device_side_work_pass_the_guard():
    array = _cuda.to_device(np, np.array([3, 0, 5, 1], dtype=np.int64))
    kept = np.where(array > 1, array, 0)  # three arguments: the size is known, no read
    order = np.argsort(array)
    total = _cuda.exclusive_scan(np, array)
    assert isinstance(total, _cuda.SimulatedDeviceArray)
    assert _cuda.to_host(kept).tolist() == [3, 0, 5, 0]
    assert _cuda.to_host(array[order]).tolist() == [0, 1, 3, 5]
    assert _cuda.read_scalar(total, -1) == 9
    assert type(_cuda.to_host(array)) is np.ndarray


@simulator_only
def test_code_that_allocates_with_plain_numpy_is_left_alone(monkeypatch):
    # Opting in is allocating through to_device / device_empty; other arrays are NumPy's.
    assert type(np.zeros(3) + 1) is np.ndarray
    assert type(_cuda.exclusive_scan(np, np.ones(3, np.int64))) is np.ndarray
    monkeypatch.setenv("GPUBPE_SIM_GUARD", "0")
    assert type(_cuda.to_device(np, np.arange(3))) is np.ndarray
    assert int(_cuda.device_zeros(np, 2, np.int64)[0]) == 0


@pytest.mark.skipif(numba.config.ENABLE_CUDASIM, reason="needs a GPU: Numba's stream sync")
def test_launch_hands_cupy_arrays_to_numba_without_a_stream_sync():
    import cupy

    wrapped = _cuda._without_stream_sync((cupy.zeros(3), 7))
    assert type(wrapped[0]).__module__.startswith("numba") and wrapped[1] == 7


@simulator_only
def test_encoding_decoding_and_the_codec_run_on_guarded_arrays(tok, monkeypatch):
    # The paths above ran under the guard: what they hand their kernels is guarded.
    from gpubpe import device

    seen = []

    def spy(function):
        def wrapped(*args, **kwargs):
            seen.append((function.__name__, type(args[0]).__name__))
            return function(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(device, "encode_word_list_cuda", spy(device.encode_word_list_cuda))
    for name in ("bitlevel_encode_cuda", "bitlevel_decode_cuda"):
        monkeypatch.setattr(bitpack, name, spy(getattr(bitpack, name)))
    gpu_tok = tok.with_backend("cuda")
    gpu_tok.clear_cache()
    assert gpu_tok.decode(gpu_tok.encode("guarded words, every one")) == "guarded words, every one"
    codec = BitLevelCodec(1000, backend="cuda")
    assert codec.decode(codec.encode([0xE4, 0xB8, 0xAD, 65])) == [0xE4, 0xB8, 0xAD, 65]
    assert seen == [(name, "SimulatedDeviceArray") for name in (
        "encode_word_list_cuda", "bitlevel_encode_cuda",
        "bitlevel_decode_cuda")]

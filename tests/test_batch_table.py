"""The device batch's dedupe table is sized by the expected cache misses (``gpubpe.device``).

On a warm device cache the table is sized by the last chunk's miss rate, not
by the batch's word count; when a batch misses far more than that predicts, a
claim gives up (``batch_cuda.MAX_PROBES``) and the step runs again with room
for every word. Ids equal the CPU's either way. Runs in the CUDA simulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import gpubpe
from gpubpe import device
from gpubpe.kernels._cuda import device_stats
from gpubpe.pretokenize import split_words

DATA = Path(__file__).parent / "data" / "multiscript.txt"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return DATA.read_text(encoding="utf-8").split("\n")[:400]


@pytest.fixture(scope="module")
def cpu_tok(lines) -> gpubpe.Tokenizer:
    return gpubpe.train([line.encode() for line in lines[:200]], 400, progress=False,
                        backend="cpu")


@pytest.fixture()
def table_sizes(monkeypatch) -> list[int]:
    """Cells of every batch table made, in order; no slack above the expected misses."""
    sizes = []
    dedupe = device.DeviceCodec._dedupe

    def recording(self, chunk, items, n_items, n_cells):
        sizes.append(n_cells)
        return dedupe(self, chunk, items, n_items, n_cells)

    monkeypatch.setattr(device.DeviceCodec, "_dedupe", recording)
    monkeypatch.setattr(device, "BATCH_TABLE_SLACK", 0)
    return sizes


def test_a_warm_cache_gets_a_table_sized_by_its_misses(cpu_tok, lines, table_sizes):
    texts = lines[200:206]
    expected = cpu_tok.encode_batch(texts)
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    assert gpu_tok.encode_batch(texts) == expected  # cold: room for every word
    assert gpu_tok.encode_batch(texts) == expected  # the last chunk missed every word
    with device_stats() as warm:
        assert gpu_tok.encode_batch(texts) == expected  # the last chunk missed none
    n_words = sum(len(split_words(text, cpu_tok.vocabulary.pattern)) for text in texts)
    assert table_sizes[0] == table_sizes[1] >= 2 * n_words
    assert table_sizes[2:] == [16]  # no miss expected: the smallest table
    with device_stats() as cold_again:
        gpu_tok.clear_cache()
        gpu_tok.encode_batch(texts)
    assert warm.syncs == cold_again.syncs  # sizing by misses costs no sync


def test_more_misses_than_expected_run_the_step_again(cpu_tok, lines, table_sizes):
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    warm_texts = lines[200:203]
    gpu_tok.encode_batch(warm_texts)
    gpu_tok.encode_batch(warm_texts)  # the last chunk missed nothing
    new_texts = lines[300:330]  # hundreds of words the cache has not seen
    del table_sizes[:]
    with device_stats() as stats:
        assert gpu_tok.encode_batch(new_texts) == cpu_tok.encode_batch(new_texts)
    assert table_sizes[0] == 16 and table_sizes[1] > 16  # gave up, then room for all
    with device_stats() as planned:
        gpu_tok.clear_cache()
        gpu_tok.encode_batch(new_texts)
    assert stats.syncs == planned.syncs + 1  # the retry's one sync

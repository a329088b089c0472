"""encode_files streamed through the device (#17 item 4), in Numba's CUDA simulator.

``backend="cuda"`` runs batches through ``gpubpe.device.DeviceBatchStream``:
text up through reused pinned buffers on the reader thread, the batch encoded
on a stream of its own, ids down into pinned buffers and written on a writer
thread (the CPU path writes on that thread too). The simulator has no
concurrency, so these tests hold what must stay true whatever overlaps: the
files are the CPU path's byte for byte, failures behave as documented in
``gpubpe.encode_files``, and the syncs per batch are a constant.
"""

from __future__ import annotations

import json
from pathlib import Path

import numba
import numpy as np
import pytest

import gpubpe
from gpubpe import device
from gpubpe.encode_files import _TokenFileWriter, encode_files, read_batches, read_token_file
from gpubpe.errors import DeviceError

DATA = Path(__file__).parent / "data" / "multiscript.txt"
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return DATA.read_text(encoding="utf-8").split("\n")[:400]


@pytest.fixture(scope="module")
def tok(lines) -> gpubpe.Tokenizer:
    return gpubpe.train([line.encode() for line in lines[:300]], 600, special_tokens=[EOT],
                        progress=False, backend="cpu")


@pytest.fixture
def corpus(tmp_path, lines) -> list[Path]:
    """A line file (empty lines, invalid UTF-8, special-token text) and a .jsonl file
    (empty documents, special-token text), each a few small batches."""
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"".join(line.encode()[:60] + b"\n" for line in lines[300:330])
                     + b"\n\n\xff\xfe bad \xc3( bytes\n" + f"a{EOT}b\n".encode()
                     + b"no final newline")
    records = [{"text": ""}, {"text": f"one{EOT}two"}, {"text": ""}] + \
        [{"text": line[:50]} for line in lines[330:345]] + [{"text": ""}]
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n",
                     encoding="utf-8")
    return [text, jsonl]


def written_files(output: Path) -> dict[str, bytes]:
    """Every file of a run by name; the manifest without the files' inode and mtime."""
    files = {}
    for path in sorted(output.parent.glob(f"{output.stem}*")):
        data = path.read_bytes()
        if path.name.endswith(".manifest.json"):
            manifest = json.loads(data)
            del manifest["ids_file"], manifest["offsets_file"]
            data = json.dumps(manifest, sort_keys=True).encode()
        files[path.name] = data
    return files


@pytest.mark.parametrize("suffix", [".npy", ".bin"])
def test_cuda_writes_the_cpu_files_byte_for_byte(tok, corpus, tmp_path, suffix):
    n_batches = sum(1 for _ in read_batches(corpus, batch_bytes=400))
    assert n_batches >= 6  # several batches, so slots are reused and buffers grow
    outputs = {}
    for backend in ("cpu", "cuda"):
        folder = tmp_path / backend
        folder.mkdir()
        outputs[backend] = folder / f"tokens{suffix}"
        with gpubpe.device_stats() as stats:
            encode_files(tok, corpus, outputs[backend], progress=False, batch_bytes=400,
                         allowed_special=[EOT], append_special=EOT, backend=backend)
    # the text went up once per batch and stayed there (no copy back for the host path)
    assert stats.sync_sites["stream: text buffer free"] == n_batches
    assert "device text to the host" not in stats.sync_sites
    assert stats.launches["special_candidates_kernel"] >= n_batches - 1
    cpu, cuda = (written_files(outputs[b]) for b in ("cpu", "cuda"))
    assert len(cpu) == 3 and cuda == cpu
    ids, offsets = read_token_file(outputs["cuda"], n_vocab=tok.n_vocab)
    documents = [b for batch in read_batches(corpus) for b in _documents(batch)]
    eot = tok.special_tokens[EOT]
    assert offsets.size == len(documents) + 1 and (np.diff(offsets) >= 1).all()
    assert np.asarray(ids)[offsets[1:] - 1].tolist() == [eot] * len(documents)
    assert len(documents[-1]) == 0  # the last .jsonl document is empty: only the appended id


def _documents(batch) -> list[bytes]:
    return [batch.data[a:b] for a, b in zip(batch.doc_starts, batch.doc_ends)]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_writer_failure_reaches_the_caller_and_leaves_no_file(tok, corpus, tmp_path,
                                                                monkeypatch, backend):
    real_append = _TokenFileWriter.append
    calls = []

    def failing_append(self, ids, offsets):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_append(self, ids, offsets)

    monkeypatch.setattr(_TokenFileWriter, "append", failing_append)
    with pytest.raises(OSError, match="No space left on device") as failure:
        encode_files(tok, corpus, tmp_path / "tokens.npy", progress=False, batch_bytes=400,
                     backend=backend)
    assert failure.value.errno == 28
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "corpus.txt"]


def test_a_device_failure_on_the_way_down_keeps_the_written_batches(tok, corpus, tmp_path,
                                                                    monkeypatch):
    """A fault reported when a batch's ids are waited for (on the writer thread)."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    real_wait = device.wait_event
    waits = []

    def failing_wait(event, what="wait"):
        if what == "stream: batch ids on the host":
            waits.append(1)
            if len(waits) == 3:
                raise CudaAPIError(700, "an illegal memory access was encountered")
        real_wait(event, what)

    monkeypatch.setattr(device, "wait_event", failing_wait)
    output = tmp_path / "tokens.npy"
    with pytest.raises(DeviceError, match="illegal memory access") as failure:
        encode_files(tok, corpus, output, progress=False, batch_bytes=400, backend="cuda")
    assert not output.exists()
    kept_ids, kept_offsets = read_token_file(tmp_path / "tokens.partial.npy")
    kept = kept_offsets.size - 1
    first_two = [b for batch in list(read_batches(corpus, batch_bytes=400))[:2]
                 for b in _documents(batch)]
    assert kept == len(first_two) and f"skip_documents={kept}" in str(failure.value)
    monkeypatch.setattr(device, "wait_event", real_wait)
    encode_files(tok, corpus, tmp_path / "rest.npy", skip_documents=kept, progress=False,
                 batch_bytes=400, backend="cuda")
    encode_files(tok, corpus, tmp_path / "whole.npy", progress=False, backend="cpu")
    rest_ids, _ = read_token_file(tmp_path / "rest.npy")
    whole_ids, _ = read_token_file(tmp_path / "whole.npy")
    assert np.concatenate([kept_ids, rest_ids]).tolist() == whole_ids.tolist()


# The syncs of one streamed batch: the batch's three reads (item count, new words'
# sizes, id count; test_device_stats.py), the reader's wait for a free text buffer and
# the writer's wait for the batch's ids. The stream's close adds one per run.
STREAM_BATCH_SYNCS = {"batch items": 1, "batch new words": 1, "batch id count": 1,
                      "stream: text buffer free": 1, "stream: batch ids on the host": 1}


def test_a_streamed_run_costs_a_constant_number_of_syncs_per_batch(tok, tmp_path):
    gpu_tok = tok.with_backend("cuda")
    gpu_tok.encode("warm up")  # tables to the device once per tokenizer
    seen = {}
    for n_lines in (12, 36):  # short words only (no long-word reads)
        corpus = tmp_path / f"lines{n_lines}.txt"
        corpus.write_text("".join(f"doc {i} has words, new ones: w{i}x.\n"
                                  for i in range(n_lines)), encoding="utf-8")
        n_batches = sum(1 for _ in read_batches([corpus], batch_bytes=200))
        with gpubpe.device_stats() as stats:
            encode_files(gpu_tok, [corpus], tmp_path / f"t{n_lines}.npy", progress=False,
                         batch_bytes=200)
        expected = {site: n * n_batches for site, n in STREAM_BATCH_SYNCS.items()}
        assert dict(stats.sync_sites) == {**expected, "stream: closed": 1}
        assert stats.syncs == 5 * n_batches + 1
        seen[n_lines] = n_batches
    assert seen[36] >= 2 * seen[12] >= 4


def test_a_custom_pattern_streams_through_the_host_and_writes_the_same_files(lines, corpus,
                                                                             tmp_path):
    """A pattern the device cannot run: the text stays on the host (no copy up and back)."""
    custom = gpubpe.train([line.encode() for line in lines[:200]], 400, pattern=r"\S+|\s+",
                          progress=False, backend="cpu")
    assert type(custom.with_backend("cuda").batch_stream()) is device.HostBatchStream
    assert type(custom.batch_stream()) is device.HostBatchStream
    outputs = {}
    for backend in ("cpu", "cuda"):
        outputs[backend] = tmp_path / backend / "tokens.npy"
        outputs[backend].parent.mkdir()
        with gpubpe.device_stats() as stats:
            encode_files(custom, corpus, outputs[backend], progress=False, batch_bytes=400,
                         backend=backend)
        assert not any(site.startswith("stream:") for site in stats.sync_sites)
    assert written_files(outputs["cuda"]) == written_files(outputs["cpu"])


def test_cli_encode_with_backend_cuda_writes_the_cpu_files(tok, corpus, tmp_path):
    from gpubpe.cli import main

    tok_path = tmp_path / "tok.json"
    tok.save(tok_path)
    for backend in ("cpu", "cuda"):
        (tmp_path / backend).mkdir()
        with gpubpe.device_stats() as stats:
            assert main(["encode", "-t", str(tok_path), *map(str, corpus), "-o",
                         str(tmp_path / backend / "tokens.bin"), "--backend", backend,
                         "--append-special", EOT, "--no-progress"]) == 0
        assert ("stream: batch ids on the host" in stats.sync_sites) == (backend == "cuda")
    assert written_files(tmp_path / "cuda" / "tokens.bin") == \
        written_files(tmp_path / "cpu" / "tokens.bin")


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_an_interrupted_stream_leaves_no_file_and_no_thread(tok, corpus, tmp_path,
                                                            interrupt_encoding, backend):
    import threading

    streaming = tok.with_backend(backend)
    interrupt_encoding(streaming)
    with pytest.raises(KeyboardInterrupt):
        encode_files(streaming, corpus, tmp_path / "tokens.npy", progress=False,
                     batch_bytes=400)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "corpus.txt"]
    for thread in threading.enumerate():
        if thread.name in ("gpubpe-reader", "gpubpe-writer"):
            thread.join(timeout=5)
            assert not thread.is_alive(), thread.name


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_an_unknown_allowed_special_fails_before_any_file_is_opened(tok, corpus, tmp_path,
                                                                    backend):
    from gpubpe.errors import SpecialTokenError

    with pytest.raises(SpecialTokenError, match="<nope>"):
        encode_files(tok, corpus, tmp_path / "tokens.npy", progress=False,
                     allowed_special=["<nope>"], backend=backend)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "corpus.txt"]


def test_skipping_whole_batches_gives_the_rest(tok, corpus, tmp_path):
    """Skipped batches come through as batches of no documents (once an error)."""
    skipped = sum(b.doc_ends.size for b in list(read_batches(corpus, batch_bytes=400))[:2])
    encode_files(tok, corpus, tmp_path / "rest.npy", progress=False, batch_bytes=400,
                 skip_documents=skipped, backend="cpu")
    encode_files(tok, corpus, tmp_path / "whole.npy", progress=False, backend="cpu")
    rest_ids, rest_offsets = read_token_file(tmp_path / "rest.npy")
    whole_ids, whole_offsets = read_token_file(tmp_path / "whole.npy")
    start = whole_offsets[skipped]
    assert rest_ids.tolist() == whole_ids[start:].tolist()
    assert rest_offsets.tolist() == (whole_offsets[skipped:] - start).tolist()


def test_launch_queues_on_cupys_current_stream(monkeypatch):
    """``launch`` passes CuPy's current stream to Numba (wrapped once per stream); the
    default stream is 0. A stand-in cupy module here; on a GPU the test below runs."""
    import sys
    import types

    from numba import cuda

    from gpubpe.kernels import _cuda

    current = types.SimpleNamespace(ptr=0)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: current))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_cuda, "_numba_streams", {})
    wrapped = []
    monkeypatch.setattr(cuda, "external_stream", lambda ptr: wrapped.append(ptr) or f"s{ptr}",
                        raising=False)  # the simulator's numba.cuda has none
    assert _cuda._current_numba_stream() == 0
    current.ptr = 0x1234
    assert _cuda._current_numba_stream() == "s4660" == _cuda._current_numba_stream()
    assert wrapped == [0x1234]


@pytest.mark.skipif(numba.config.ENABLE_CUDASIM, reason="needs a GPU")
def test_a_device_stream_round_trips_through_pinned_buffers_on_a_gpu():
    import cupy

    from gpubpe.backend import resolve_backend

    stream = device.DeviceBatchStream(resolve_backend("cuda"))
    assert stream.compute.ptr != 0
    for size in (5, 3, 40):  # reuse, then growth
        data = bytes(range(size))
        slot = stream.upload(data)
        with stream.encoding(slot) as text:
            doubled = text.astype(cupy.uint32) * 2
            offsets = cupy.arange(3, dtype=cupy.int64)
        down = stream.download(doubled, offsets)
        ids, got_offsets = down.wait()
        assert ids.tolist() == [2 * b for b in data] and got_offsets.tolist() == [0, 1, 2]
        down.release()
    stream.close()


def test_pinned_buffers_are_reused_not_allocated_per_batch(tok, tmp_path, monkeypatch):
    allocated = []
    real_pinned = device.pinned_empty

    def counting(xp, n, dtype):
        allocated.append(np.dtype(dtype).name)
        return real_pinned(xp, n, dtype)

    monkeypatch.setattr(device, "pinned_empty", counting)
    corpus = tmp_path / "same.txt"
    corpus.write_text("".join(f"line {i:04d} of words\n" for i in range(120)), encoding="utf-8")
    n_batches = sum(1 for _ in read_batches([corpus], batch_bytes=240))
    encode_files(tok, [corpus], tmp_path / "tokens.npy", progress=False, batch_bytes=240,
                 backend="cuda")
    assert n_batches >= 10
    # two text slots, two id slots of (ids, offsets): allocated once each
    assert sorted(allocated) == ["int64"] * 2 + ["uint16"] * 2 + ["uint8"] * 2

"""Encode corpus files into token files, streamed: bounded memory, every core, atomic output.

Inputs are read by gpubpe's one corpus reader (``gpubpe.pretokenize``, the
same as training and every command): ``.jsonl`` (the ``text_field`` of each
line, blank lines skipped), ``.parquet`` (the ``text_field`` column; needs
``pyarrow``), and any other file as bytes where each line is a document, its
"\\n" kept (document d is line d + 1, and the documents end to end are the
file: "\\r\\n", a BOM and a missing final newline come back exactly). A
``.gz`` file is read decompressed, by the suffix before it (``a.jsonl.gz``).

Outputs, chosen by the suffix of ``output``:

- ``tokens.npy``: every document's ids end to end, a 1-D ``.npy`` array;
  ``tokens.offsets.npy``: int64, one more than the documents, starting at 0:
  document d is ``ids[offsets[d]:offsets[d + 1]]``. Load both with
  ``np.load(..., mmap_mode="r")``.
- ``tokens.bin``: the same ids as raw little-endian values with no header
  (nanoGPT reads it with ``np.memmap(path, dtype=np.uint16)``);
  ``tokens.idx``: the same offsets as raw little-endian int64.

The id dtype is uint16 when every id of the tokenizer fits (``n_vocab`` <=
65536, special tokens included), else uint32, unless ``dtype`` says otherwise.

Three threads overlap: a reader reads (and parses) the next batch of whole
documents (about ``batch_bytes`` each), the caller's thread encodes one, and a
writer writes the ids and offsets of the one before to disk. With
``backend="cuda"`` (a :class:`~gpubpe.device.DeviceBatchStream`) the reader also
copies each batch's text into a reused pinned host buffer and queues its copy to
the device, the batch is encoded on a device stream of its own, and its ids come
back into reused pinned buffers on a third stream: batch n+1's copy up and batch
n-1's copy down run beside batch n's kernels. Five syncs per batch, plus one per
run (``gpubpe.device`` says which).

Memory stays bounded, whatever the input's size. With B the largest batch (about
``batch_bytes``; more only when one document is larger) and I its ids: at most 3
batches read (one encoding, one waiting, one the reader holds), the ids of at most
3 batches (one being written, one waiting, one encoded), so on the CPU about
3 B + 3 x (id bytes + 8 per document). With ``backend="cuda"`` add, reused and never
allocated per batch: 2 pinned text buffers (2 B) and 2 pinned id buffers (2 x I ids
in the file's dtype, converted on the device, + offsets) on the host; on the device the same 2 text buffers, the ids of at
most 3 batches, one batch's working memory (``BATCH_DEVICE_BYTES_PER_BYTE`` = 320 per
input byte, in chunks that fit the free memory) and the device word cache (~34 MB).
For the default 16 MB batches and ~4 bytes a token: about 200 MB of host memory
and ~5.3 GB of device memory at most. Output is written under
temporary names in the output's folder and renamed at the end, so an
interrupted run leaves no half-written file under the final names; a small
manifest (``tokens.npy.manifest.json``) written last commits the ids/offsets
pair, and :func:`load_tokens` reads a pair only when it matches (see
"Committing a pair" below).

If the GPU fails mid-run (``DeviceError``), the documents finished before the
failed batch are kept, complete and valid, under the *partial* names
(``tokens.partial.npy`` + ``tokens.partial.offsets.npy``), and the error says
how many; ``skip_documents=N`` (``--skip-documents N``) then encodes the rest
into another file. The two files end to end are the whole output.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._threads import check_num_threads
from .atomic import (
    check_output,
    finish,
    folder_lock,
    open_new,
    temporary_path,
    write_text_atomically,
)
from .errors import ConfigError, CorpusError, DeviceError, special_tokens_said
from .kernels.encode import framed
from .model import Template
from .pretokenize import (
    Batch,
    content_suffix,
    corpus_paths,
    iter_batches,
    read_file,
)

# Input bytes per encoded batch: large enough to keep every core busy, small
# enough that a batch and its scratch (about 10x) stay far below 2 GB.
BATCH_BYTES = 16 << 20
# .npy header length: fixed, so the shape can be filled in at the end.
_NPY_HEADER_BYTES = 128
SUFFIXES = (".npy", ".bin")


@dataclass
class EncodedFiles:
    """What :func:`encode_files` wrote."""

    ids_path: Path
    offsets_path: Path
    dtype: np.dtype
    documents: int
    tokens: int
    input_bytes: int
    seconds: float


def encode_files(tokenizer, paths, output, dtype=None, num_threads: int | None = None,
                 progress: bool = True, text_field: str = "text", allowed_special=(),
                 append_special: str | None = None, batch_bytes: int = BATCH_BYTES,
                 skip_documents: int = 0, backend: str | None = None,
                 prepend_special: str | None = None,
                 add_special_tokens: bool = False) -> EncodedFiles:
    """Encode the documents of ``paths`` into ``output`` (``.npy`` or ``.bin``, see above).

    ``tokenizer`` is a :class:`~gpubpe.Tokenizer` or the path of a tokenizer
    file. Special-token text is ordinary text unless listed in
    ``allowed_special``; ``append_special`` (e.g. ``"<|endoftext|>"``) is a
    special token appended to every document, as nanoGPT does, and ``prepend_special``
    one put before each. ``add_special_tokens=True`` puts the tokenizer's
    :attr:`~gpubpe.Tokenizer.template` around each (Llama 3's ``"<|begin_of_text|>"``, which
    its HF post-processor adds), inside those two.
    ``skip_documents``: leave out the first N documents (to finish a run a
    device failure stopped). ``backend``: 'auto', 'cpu' or 'cuda' (default: the
    tokenizer's own). Reading, encoding and writing overlap on three threads, and
    with a device its copies overlap its kernels (see the module docstring, which
    also gives the memory bound). A failure of the writer thread is raised here with
    its type and message.
    """
    from .tokenizer import Tokenizer

    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    if backend is not None:
        tok = tok.with_backend(backend)
    paths = corpus_paths(paths)
    output = _checked_output(output, paths)
    id_dtype = token_dtype(tok.n_vocab, dtype)
    framing = _framing(tok, prepend_special, append_special, add_special_tokens)
    check_num_threads(num_threads)
    started = time.perf_counter()
    batches = read_batches(paths, text_field, batch_bytes, skip_documents)
    bar = _progress_bar(sum(p.stat().st_size for p in paths), progress)
    stream = tok.batch_stream(allowed_special)  # checks allowed_special before files open
    writing = _InOrder(lambda down: _write(writer, down, framing), "gpubpe-writer")
    input_bytes = 0
    writer = None
    try:  # from before the temporary files are made: a signal then leaves none either
        writer = _TokenFileWriter(output, id_dtype, lines=_all_line_files(paths))
        for batch, staged in _read_ahead(batches, stream.upload):
            with stream.encoding(staged) as text:
                encoded = tok.encode_buffer(text, batch.doc_starts, batch.doc_ends,
                                            num_threads=num_threads, device=stream.device,
                                            allowed_special=allowed_special)
            writing.put(stream.download(encoded.ids, encoded.offsets, id_dtype))
            bar.update(batch.input_bytes)
            input_bytes += batch.input_bytes
        writing.finish()
        stream.close()
        writer.commit()
    except DeviceError as exc:
        failed = _stop(stream, writing, finish=True)  # what was encoded is written, then kept
        if failed is not None and not isinstance(failed, DeviceError):
            writer.abort()
            raise failed from exc
        raise _kept_partial(writer, skip_documents, exc) from exc
    except BaseException:
        _stop(stream, writing, finish=False)
        if writer is not None:  # (else it removed its files itself)
            writer.abort()
        raise
    finally:
        bar.close()
    return EncodedFiles(output, writer.offsets_path, id_dtype, writer.documents, writer.tokens,
                        input_bytes, time.perf_counter() - started)


def _write(writer: _TokenFileWriter, down, framing: _Framing) -> None:
    """Write one batch's ids (writer thread): wait for them, append, give the buffers back."""
    try:
        ids, offsets = down.wait()
        writer.append(*_framed(ids, offsets, framing))
    finally:
        down.release()


def _stop(stream, writing: _InOrder, finish: bool) -> BaseException | None:
    """After a failure: the writer thread works off (``finish``) or drops what is queued,
    then the stream closes. Returns the writer thread's failure, if any."""
    failed = writing.stop(finish)
    try:
        stream.close()
    except DeviceError:
        pass  # the device already failed: that error is being raised
    return failed


def _checked_output(output, inputs: list[Path]) -> Path:
    output = Path(output)
    if output.suffix not in SUFFIXES:
        raise ConfigError(f"output {output} must end in .npy or .bin (flat ids + offsets)")
    check_output(output, inputs)
    check_output(offsets_path_of(output), inputs, "offsets file")
    return output


def _all_line_files(paths: list[Path]) -> bool:
    """Whether every document keeps its own "\\n" (line files), so they join into the input."""
    return all(content_suffix(p) not in (".jsonl", ".parquet") for p in paths)


def _kept_partial(writer: _TokenFileWriter, skipped: int, exc: DeviceError) -> DeviceError:
    """Keep the finished documents under the partial names; the error that says so."""
    ids_path, offsets_path = writer.commit_partial()
    done = skipped + writer.documents
    return DeviceError(
        f"{exc}\nThe {writer.documents:,} documents finished before the failure were kept in "
        f"{ids_path} and {offsets_path} (documents {skipped:,} to {done - 1:,} of the input); "
        f"encode the rest with skip_documents={done} (gpubpe encode --skip-documents {done}) "
        "and put the two files end to end.")


def partial_path_of(output: Path) -> Path:
    """``tokens.npy`` -> ``tokens.partial.npy``: where a run stopped by the device keeps its work."""
    output = Path(output)
    return output.with_name(f"{output.stem}.partial{output.suffix}")


def offsets_path_of(output: Path) -> Path:
    """``tokens.npy`` -> ``tokens.offsets.npy``; ``tokens.bin`` -> ``tokens.idx``."""
    output = Path(output)
    return output.with_suffix(".offsets.npy" if output.suffix == ".npy" else ".idx")


def token_dtype(n_vocab: int, dtype=None) -> np.dtype:
    """uint16 when ``n_vocab`` ids fit, else uint32; a given dtype must hold every id."""
    if dtype is None:
        return np.dtype(np.uint16 if n_vocab <= 1 << 16 else np.uint32)
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        raise ConfigError(f"dtype {dtype!r} is not a NumPy dtype; use uint16 or uint32") from None
    if chosen.kind not in "iu" or np.iinfo(chosen).max < n_vocab - 1:
        raise ConfigError(f"dtype {chosen} cannot hold the ids of this tokenizer "
                          f"(0..{n_vocab - 1}); use uint32")
    return chosen


# ---------------------------------------------------------------- reading


def read_batches(paths, text_field: str = "text", batch_bytes: int = BATCH_BYTES,
                 skip_documents: int = 0) -> Iterator[Batch]:
    """Batches of whole documents from files (all checked readable first).

    The documents are those of gpubpe's one corpus reader
    (:func:`gpubpe.pretokenize.iter_batches`). The first ``skip_documents``
    documents are left out (their bytes still count as consumed).
    """
    _check_skip(skip_documents)
    paths = corpus_paths(paths)
    files = (batch for path in paths for batch in read_file(path, text_field, batch_bytes))
    return _skipping(files, skip_documents)


def stream_batches(stream, skip_documents: int = 0) -> Iterator[Batch]:
    """``read_batches`` of a binary stream (standard input): each line a document, its
    newline kept, as a text file's."""
    _check_skip(skip_documents)
    return _skipping(iter_batches(stream), skip_documents)


def _check_skip(skip_documents) -> None:
    if isinstance(skip_documents, bool) or not isinstance(skip_documents, int) \
            or skip_documents < 0:
        raise ConfigError(f"skip_documents must be an int >= 0, not {skip_documents!r}")


def _skipping(batches: Iterator[Batch], n_documents: int) -> Iterator[Batch]:
    """The batches without their first ``n_documents`` documents (their bytes still count)."""
    for batch in batches:
        if n_documents >= batch.doc_ends.size:
            n_documents -= batch.doc_ends.size
            yield Batch(b"", batch.doc_ends[:0], batch.input_bytes)
            continue
        if n_documents:
            cut = int(batch.doc_ends[n_documents - 1])
            batch = Batch(batch.data[cut:], batch.doc_ends[n_documents:] - cut, batch.input_bytes)
            n_documents = 0
        yield batch


def _read_ahead(batches: Iterator[Batch], stage) -> Iterator[tuple[Batch, object]]:
    """``(batch, stage(batch.data))``, read and staged on a thread while the caller encodes
    the batch before (at most one waits in between)."""
    slots: queue.Queue = queue.Queue(maxsize=1)
    done = object()
    stop = threading.Event()

    def offer(item) -> None:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def produce():
        try:
            for batch in batches:
                offer((batch, stage(batch.data)))
                if stop.is_set():
                    return
            offer(done)
        except BaseException as exc:  # handed to the consumer, raised there
            offer(exc)

    reader = threading.Thread(target=produce, name="gpubpe-reader", daemon=True)
    reader.start()
    try:
        while (item := slots.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()  # it stops after the batch it reads: no thread left in a kernel at exit


class _InOrder:
    """Runs ``work(item)`` for each item put, in order, on a thread of its own.

    At most one item waits while one is worked on (``put`` blocks beyond that). The
    first exception of ``work`` is raised by the next ``put`` or by ``finish``, with
    its type and message; later items are then only released (``item.release()``), so
    the thread never stops taking items and ``put`` never waits forever. The thread
    starts with the first ``put`` (making one waits, and a wait can take an interrupt).
    """

    _END = object()

    def __init__(self, work, name: str):
        self._work = work
        self._items: queue.Queue = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._dropping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while (item := self._items.get()) is not self._END:
            if self._error is not None or self._dropping:
                item.release()
                continue
            try:
                self._work(item)
            except BaseException as exc:  # raised on the caller's thread
                self._error = exc

    def put(self, item) -> None:
        if self._error is not None:
            item.release()
            raise self._error
        if self._thread.ident is None:
            self._thread.start()
        self._items.put(item)

    def finish(self) -> None:
        """Wait until every item is done; raise the first failure."""
        error = self.stop(finish=True)
        if error is not None:
            raise error

    def stop(self, finish: bool) -> BaseException | None:
        """Work off (``finish``) or drop what is queued, end the thread; its first failure."""
        if self._thread.is_alive():
            self._dropping = not finish
            self._items.put(self._END)
            self._thread.join()
        return self._error


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc="encoding",
                disable=not enabled, leave=False)


class _Framing(NamedTuple):
    """The special ids put before and after every document."""

    before: tuple[int, ...]
    after: tuple[int, ...]


def _framing(tok, prepend_special: str | None, append_special: str | None,
             add_special_tokens: bool = False) -> _Framing:
    """The ids of ``prepend_special`` (outermost), the tokenizer's template with
    ``add_special_tokens``, and ``append_special`` (outermost), checked."""
    template = tok.template if add_special_tokens and tok.template is not None else Template()
    first, last = (_special_id(tok, name, special) for name, special in
                   (("prepend_special", prepend_special), ("append_special", append_special)))
    return _Framing((*first, *map(tok.special_tokens.get, template.before)),
                    (*map(tok.special_tokens.get, template.after), *last))


def _special_id(tok, name: str, special: str | None) -> tuple[int, ...]:
    if special is None:
        return ()
    if special not in tok.special_tokens:
        raise ConfigError(f"{name}={special!r} is not a special token of this tokenizer; "
                          f"{special_tokens_said(tok.special_tokens, special)}")
    return (tok.special_tokens[special],)


def _framed(ids: np.ndarray, offsets: np.ndarray, framing: _Framing):
    """(ids, offsets) with ``framing``'s ids before and after every document."""
    return framed(ids, offsets, framing.before, framing.after)


# ---------------------------------------------------------------- writing
#
# Committing a pair. Ids and offsets are written under temporary names, then
# renamed into place (offsets first, then ids), then a small manifest naming
# both files by inode, size and mtime is written (atomically) last; the three
# steps run under an exclusive flock of the output folder, so two runs never
# interleave them (the last run's pair is what stays). A reader
# (``load_tokens``) holds the lock shared while it opens the manifest and both
# files, and trusts the pair only when the files it holds open are the ones
# the manifest names (where locking is not possible it retries briefly while a
# commit is under way). Two runs writing one output thus never hand a reader
# ids of one run with offsets of the other.

MANIFEST_FORMAT = "gpubpe-tokens/1"
# A reader that finds a pair mid-commit retries this many times, this far apart.
_READ_ATTEMPTS = 200
_READ_RETRY_SECONDS = 0.005


def manifest_path_of(output: Path) -> Path:
    """``tokens.npy`` -> ``tokens.npy.manifest.json``: what commits the ids/offsets pair."""
    output = Path(output)
    return output.with_name(f"{output.name}.manifest.json")


class _TokenFileWriter:
    """Appends ids and offsets to temporary files; ``commit`` renames them and writes the manifest."""

    def __init__(self, output: Path, dtype: np.dtype, lines: bool = False):
        self.ids_path = output
        self.offsets_path = offsets_path_of(output)
        self.npy = output.suffix == ".npy"
        self.dtype = dtype
        self.lines = lines
        self.documents = 0
        self.tokens = 0
        self._ids_temp = temporary_path(output)
        self._offsets_temp = temporary_path(self.offsets_path)
        self._ids = self._offsets = None
        try:  # an interrupt or a full disk from here on leaves no temporary file
            self._ids = open_new(self._ids_temp)
            self._offsets = open_new(self._offsets_temp)
            if self.npy:
                self._ids.write(npy_header(dtype, 0))
                self._offsets.write(npy_header(np.dtype("<i8"), 0))
            self._offsets.write(np.zeros(1, dtype="<i8").tobytes())
        except BaseException:
            self.abort()
            raise

    def append(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        # Arrays are written through their buffers: ``tobytes()`` copied each batch once
        # more (4 M ids to a uint16 file, side by side on the build VM: 6.2 -> 4.6 ms
        # best, 8.5 -> 6.0 ms median; the rest is the copy into the page cache).
        self._ids.write(np.ascontiguousarray(
            ids.astype(self.dtype.newbyteorder("<"), copy=False)).data)
        ends = (offsets[1:] + self.tokens).astype("<i8")
        self._offsets.write(ends.data)
        self.tokens += int(ids.size)
        self.documents += int(offsets.size - 1)

    def commit(self) -> None:
        self._finish(self.ids_path, self.offsets_path)

    def commit_partial(self) -> tuple[Path, Path]:
        """Keep what was appended under the partial names; returns them."""
        ids_path = partial_path_of(self.ids_path)
        offsets_path = offsets_path_of(ids_path)
        self._finish(ids_path, offsets_path)
        return ids_path, offsets_path

    def _finish(self, ids_path: Path, offsets_path: Path) -> None:
        if self.npy:
            self._ids.seek(0)
            self._ids.write(npy_header(self.dtype, self.tokens))
            self._offsets.seek(0)
            self._offsets.write(npy_header(np.dtype("<i8"), self.documents + 1))
        ids_stat, offsets_stat = finish(self._ids), finish(self._offsets)
        manifest = {"format": MANIFEST_FORMAT, "ids": ids_path.name,
                    "offsets": offsets_path.name, "dtype": str(self.dtype),
                    "documents": self.documents, "tokens": self.tokens, "lines": self.lines,
                    "ids_file": _identity(ids_stat), "offsets_file": _identity(offsets_stat)}
        manifest_text = json.dumps(manifest, indent=1) + "\n"
        with folder_lock(ids_path.parent):
            os.replace(self._offsets_temp, offsets_path)
            os.replace(self._ids_temp, ids_path)
            write_text_atomically(manifest_path_of(ids_path), manifest_text)

    def abort(self) -> None:
        """Close and remove the temporary files, a file too whose ``open_new`` an interrupt
        cut short after it was made (its handle never came back; the names hold this
        process's id and a random part, so no other writer's file has them)."""
        for handle, path in ((self._ids, self._ids_temp), (self._offsets, self._offsets_temp)):
            if handle is not None:
                handle.close()
            path.unlink(missing_ok=True)


def _identity(stat: os.stat_result) -> list[int]:
    """What tells one written file from another: device, inode, size, mtime (ns)."""
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns]


def npy_header(dtype: np.dtype, length: int) -> bytes:
    """A version 1.0 ``.npy`` header for a 1-D array, always ``_NPY_HEADER_BYTES`` long."""
    fields = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype).newbyteorder("<")),
              "fortran_order": False, "shape": (int(length),)}
    body = repr(fields).encode("latin1")
    padding = _NPY_HEADER_BYTES - 10 - len(body) - 1
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _NPY_HEADER_BYTES - 10) + body + \
        b" " * padding + b"\n"


# ---------------------------------------------------------------- reading token files back


def load_tokens(path, dtype=None, n_vocab: int | None = None):
    """``(ids, offsets)`` of a token file written by :func:`encode_files`, memory-mapped.

    Document d is ``ids[offsets[d]:offsets[d + 1]]``. The pair is trusted only
    when its manifest (``tokens.npy.manifest.json``, written last) names the
    very files read, so a run that is replacing the output, or two runs
    writing it at once, never give ids of one run with offsets of another.
    ``.npy`` files carry their dtype; ``.bin`` files take ``dtype`` (default:
    the rule of :func:`token_dtype` for ``n_vocab``). A lone ids file (no
    offsets file, no manifest, e.g. an array saved with ``np.save``) is one
    document: ``offsets`` is None. A truncated, inconsistent or unmatched
    pair raises CorpusError saying what is wrong.

    A folder written by ``gpubpe.dask.encode_files`` (a finished job: its
    ``manifest.json``) gives its shards end to end in input order: ``ids`` a
    :class:`gpubpe.shards.ShardedIds` (each shard memory-mapped), ``offsets``
    one int64 array over all documents.
    """
    path = Path(path)
    if path.is_dir():
        from .shards import load_shards

        return load_shards(path)
    if path.suffix not in SUFFIXES:
        raise CorpusError(f"{path}: token files end in .npy or .bin")
    for _ in range(_READ_ATTEMPTS):
        with folder_lock(path.parent, shared=True):
            pair = _read_pair(path, dtype, n_vocab)
        if pair is not None:
            return pair
        time.sleep(_READ_RETRY_SECONDS)
    raise CorpusError(f"{path} and {offsets_path_of(path)} are not the files its manifest "
                      f"{manifest_path_of(path).name} names (changed by hand, or another run "
                      "keeps writing them); re-run gpubpe encode")


def read_manifest(path: Path) -> dict | None:
    """The manifest of token file ``path``, or None when there is none."""
    where = manifest_path_of(path)
    try:
        manifest = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError, UnicodeDecodeError, OSError) as exc:
        raise CorpusError(f"{where} is not a token-file manifest ({exc}); re-run gpubpe "
                          "encode") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise CorpusError(f"{where} is not a {MANIFEST_FORMAT!r} manifest; re-run gpubpe encode")
    return manifest


def _read_pair(path: Path, dtype, n_vocab):
    """The checked pair, or None when the files are not (yet) the manifest's."""
    manifest = read_manifest(path)
    offsets_path = offsets_path_of(path)
    try:
        ids_handle = path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such token file") from None
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror})") from None
    with ids_handle:
        try:
            offsets_handle = offsets_path.open("rb")
        except FileNotFoundError:
            if manifest is not None:
                return None
            return _open_ids(path, ids_handle, dtype, n_vocab), None
        with offsets_handle:
            if manifest is None:
                raise CorpusError(f"{path} and {offsets_path} have no manifest "
                                  f"({manifest_path_of(path).name}), so nothing says they belong "
                                  "together (an older gpubpe, or a run that did not finish); "
                                  "re-run gpubpe encode")
            ids = _open_ids(path, ids_handle, dtype, n_vocab)
            offsets = _open_array(offsets_path, offsets_handle, path.suffix == ".npy",
                                  np.dtype("<i8"))
            if _identity(os.fstat(ids_handle.fileno())) != manifest.get("ids_file") or \
                    _identity(os.fstat(offsets_handle.fileno())) != manifest.get("offsets_file"):
                return None
    if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != ids.size \
            or np.any(np.diff(offsets) < 0):
        raise CorpusError(f"{offsets_path} does not match {path}: offsets must rise from 0 to "
                          f"{ids.size}; re-run gpubpe encode")
    return ids, offsets


read_token_file = load_tokens


def _open_ids(path: Path, handle, dtype, n_vocab) -> np.ndarray:
    if path.suffix == ".npy":
        return _open_array(path, handle, True, None)
    return _open_array(path, handle, False, token_dtype(n_vocab or 1 << 16, dtype))


def _open_array(path: Path, handle, npy: bool, dtype: np.dtype | None) -> np.ndarray:
    """Memory-map the 1-D integer array in the open file ``handle`` (a .npy or raw values)."""
    header_end, count = 0, None
    if npy:
        header_end, count, dtype = _npy_layout(path, handle)
    size = os.fstat(handle.fileno()).st_size - header_end
    if count is None:
        if size % dtype.itemsize:
            raise CorpusError(f"{path} is truncated: {size} bytes is not a whole number of "
                              f"{dtype} values; re-run gpubpe encode (or pass the right --dtype)")
        count = size // dtype.itemsize
    elif size < count * dtype.itemsize:
        raise CorpusError(f"{path} is truncated: its header promises {count} values "
                          f"({header_end + count * dtype.itemsize:,} bytes) but the file holds "
                          f"{header_end + size:,} bytes; re-run gpubpe encode")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(handle, dtype=dtype, mode="r", offset=header_end, shape=(count,))


def _npy_layout(path: Path, handle) -> tuple[int, int, np.dtype]:
    """(header bytes, values, dtype) of a 1-D integer .npy file."""
    try:
        version = np.lib.format.read_magic(handle)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read_header(handle)
    except ValueError as exc:
        raise CorpusError(f"{path} is not a valid .npy file ({exc})") from None
    if dtype.kind not in "iu" or dtype.hasobject:
        raise CorpusError(f"{path} holds {dtype} values; a token file holds integer ids "
                          "(uint16 or uint32)")
    if len(shape) != 1:
        raise CorpusError(f"{path} holds an array of shape {shape}; a token file is 1-D")
    return handle.tell(), int(shape[0]), dtype


def iter_documents(ids: np.ndarray, offsets: np.ndarray | None,
                   ids_per_chunk: int = 1 << 20) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """Chunks ``(ids, local_offsets)`` of whole documents, about ``ids_per_chunk`` ids each."""
    if offsets is None:
        offsets = np.array([0, ids.size], dtype=np.int64)
    first = 0
    n_docs = offsets.size - 1
    while first < n_docs:
        last = int(np.searchsorted(offsets, offsets[first] + ids_per_chunk, side="right")) - 1
        last = min(max(last, first + 1), n_docs)
        lo, hi = int(offsets[first]), int(offsets[last])
        yield np.asarray(ids[lo:hi]), np.asarray(offsets[first:last + 1]) - lo
        first = last


def decode_token_file(tokenizer, path, dtype=None, errors: str = "replace") -> Iterator[str]:
    """The text of each document of a token file, in order (a chunk of documents at a time).

    Ids the tokenizer does not have raise CorpusError naming the first one and
    its position. ``errors="surrogateescape"`` keeps bytes that are not UTF-8
    (``text.encode("utf-8", "surrogateescape")`` gives them back exactly).
    """
    from .tokenizer import RaggedBatch

    for chunk_ids, chunk_offsets in _token_file_chunks(tokenizer, path, dtype):
        yield from tokenizer.decode_batch(RaggedBatch(chunk_ids, chunk_offsets), errors)


def decode_token_file_bytes(tokenizer, path, dtype=None, skip_special_tokens: bool = False
                            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The bytes of a token file's documents, a chunk of documents at a time: ``(bytes
    uint8, byte offsets int64)`` per chunk (``Tokenizer.decode_arrays``). No str is made:
    ``gpubpe decode`` wrote 8 MB of lines (210 K documents, cl100k) in 97 ms making each
    document's str and encoding it back, in 12 ms from the bytes. Checks as
    ``decode_token_file``."""
    for chunk_ids, chunk_offsets in _token_file_chunks(tokenizer, path, dtype):
        yield tokenizer.decode_arrays(chunk_ids, chunk_offsets, skip_special_tokens)


def _token_file_chunks(tokenizer, path, dtype) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A token file's ids (uint32) and local offsets a chunk of documents at a time;
    CorpusError naming the first id the tokenizer does not have."""
    ids, offsets = load_tokens(path, dtype=dtype, n_vocab=tokenizer.n_vocab)
    bad = np.flatnonzero(np.asarray(ids) >= tokenizer.n_vocab)
    if bad.size:
        raise CorpusError(f"{path}: id {ids[bad[0]]} at position {bad[0]} is out of range: this "
                          f"tokenizer has ids 0..{tokenizer.n_vocab - 1}; was the file made "
                          "with another tokenizer?")
    for chunk_ids, chunk_offsets in iter_documents(ids, offsets):
        yield chunk_ids.astype(np.uint32), chunk_offsets

"""Encode corpus files into token files, streamed: bounded memory, every core, atomic output.

Inputs: ``.jsonl`` (the ``text_field`` of each line, blank lines skipped),
``.parquet`` (the ``text_field`` column; needs ``pyarrow``), and any other
file as text where each line is a document, its "\\n" removed (empty lines are
empty documents, so document d is line d + 1).

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

Memory stays bounded: input is read in batches of whole documents (about
``batch_bytes`` each, one batch read ahead while the previous one encodes),
and ids and offsets go to disk batch by batch. Output is written under
temporary names in the output's folder and renamed at the end, so an
interrupted run leaves no half-written file under the final names.

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

import numpy as np

from .errors import ConfigError, CorpusError, DeviceError
from .pretokenize import check_readable

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


@dataclass
class _Batch:
    """UTF-8 bytes and document byte ranges ``data[doc_start[d]:doc_end[d]]``."""

    data: bytes | memoryview
    doc_start: np.ndarray
    doc_end: np.ndarray
    input_bytes: int  # bytes of the input files this batch consumed (progress)


def encode_files(tokenizer, paths, output, dtype=None, num_threads: int | None = None,
                 progress: bool = True, text_field: str = "text", allowed_special=(),
                 append_special: str | None = None, batch_bytes: int = BATCH_BYTES,
                 skip_documents: int = 0, backend: str | None = None) -> EncodedFiles:
    """Encode the documents of ``paths`` into ``output`` (``.npy`` or ``.bin``, see above).

    ``tokenizer`` is a :class:`~gpubpe.Tokenizer` or the path of a tokenizer
    file. Special-token text is ordinary text unless listed in
    ``allowed_special``; ``append_special`` (e.g. ``"<|endoftext|>"``) is a
    special token appended to every document, as nanoGPT does.
    ``skip_documents``: leave out the first N documents (to finish a run a
    device failure stopped). ``backend``: 'auto', 'cpu' or 'cuda' (default: the
    tokenizer's own).
    """
    from .tokenizer import Tokenizer

    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    if backend is not None:
        tok = tok.with_backend(backend)
    paths = _input_paths(paths)
    output = Path(output)
    if output.suffix not in SUFFIXES:
        raise ConfigError(f"output {output} must end in .npy or .bin (flat ids + offsets)")
    id_dtype = token_dtype(tok.n_vocab, dtype)
    appended = _appended_id(tok, append_special)
    started = time.perf_counter()
    batches = read_batches(paths, text_field, batch_bytes, skip_documents)
    bar = _progress_bar(sum(p.stat().st_size for p in paths), progress)
    writer = _TokenFileWriter(output, id_dtype)
    input_bytes = 0
    try:
        for batch in _read_ahead(batches):
            encoded = tok.encode_buffer(batch.data, batch.doc_start, batch.doc_end,
                                        num_threads=num_threads, allowed_special=allowed_special)
            ids, offsets = _with_appended(encoded.ids, encoded.offsets, appended)
            writer.append(ids, offsets)
            bar.update(batch.input_bytes)
            input_bytes += batch.input_bytes
        writer.commit()
    except DeviceError as exc:
        raise _kept_partial(writer, skip_documents, exc) from exc
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    return EncodedFiles(output, writer.offsets_path, id_dtype, writer.documents, writer.tokens,
                        input_bytes, time.perf_counter() - started)


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


def _input_paths(paths) -> list[Path]:
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no input files given")
    for path in paths:
        if path.suffix == ".parquet":
            if not path.is_file():
                raise CorpusError(f"{path}: no such file")
        else:
            check_readable(path)
    return paths


def read_batches(paths, text_field: str = "text", batch_bytes: int = BATCH_BYTES,
                 skip_documents: int = 0) -> Iterator[_Batch]:
    """Batches of whole documents from files (checked readable first), as described above.

    The first ``skip_documents`` documents are left out (their bytes still count
    as consumed).
    """
    if isinstance(skip_documents, bool) or not isinstance(skip_documents, int) \
            or skip_documents < 0:
        raise ConfigError(f"skip_documents must be an int >= 0, not {skip_documents!r}")
    return _skipping(_file_batches(_input_paths(paths), text_field, batch_bytes), skip_documents)


def _file_batches(paths: list[Path], text_field: str, batch_bytes: int) -> Iterator[_Batch]:
    for path in paths:
        if path.suffix == ".jsonl":
            yield from _jsonl_batches(path, text_field, batch_bytes)
        elif path.suffix == ".parquet":
            yield from _parquet_batches(path, text_field, batch_bytes)
        else:
            yield from _line_batches(path, batch_bytes)


def _line_batches(path: Path, batch_bytes: int) -> Iterator[_Batch]:
    """Whole lines, about ``batch_bytes`` at a time; each line minus its "\\n" is a document."""
    with path.open("rb") as handle:
        while True:
            data = handle.read(batch_bytes) + handle.readline()
            if not data:
                return
            newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
            ends = newlines if data.endswith(b"\n") else np.append(newlines, len(data))
            starts = np.concatenate([[0], newlines + 1])[:ends.size]
            yield _Batch(data, starts.astype(np.int64), ends.astype(np.int64), len(data))


def _jsonl_batches(path: Path, text_field: str, batch_bytes: int) -> Iterator[_Batch]:
    documents: list[bytes] = []
    size = 0
    consumed = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            consumed += len(line)
            if not line.strip():
                continue
            documents.append(_jsonl_text(line, path, number, text_field))
            size += len(documents[-1])
            if size >= batch_bytes:
                yield _documents_batch(documents, consumed)
                documents, size, consumed = [], 0, 0
    if documents or consumed:
        yield _documents_batch(documents, consumed)


def _jsonl_text(line: bytes, path: Path, number: int, text_field: str) -> bytes:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise CorpusError(f"{path}:{number}: not valid JSON ({exc})") from None
    if not isinstance(record, dict) or text_field not in record:
        raise CorpusError(f"{path}:{number}: no {text_field!r} field; choose the field with "
                          "text_field= (--text-field)")
    text = record[text_field]
    if not isinstance(text, str):
        raise CorpusError(f"{path}:{number}: field {text_field!r} is a {type(text).__name__}, "
                          "not a string")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorpusError(f"{path}:{number}: field {text_field!r} holds a lone surrogate at "
                          f"character {exc.start}; it is not encodable as UTF-8") from None


def _documents_batch(documents: list[bytes], input_bytes: int) -> _Batch:
    lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
    ends = np.cumsum(lengths)
    return _Batch(b"".join(documents), ends - lengths, ends, input_bytes)


def _parquet_batches(path: Path, text_field: str, batch_bytes: int) -> Iterator[_Batch]:
    """Record batches of a string column, read from Arrow's buffers without a str per row."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(f"{path}: reading .parquet needs pyarrow; pip install "
                          "'gpubpe[parquet]' (or pyarrow)") from None
    try:
        reader = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise CorpusError(f"{path}: not a readable Parquet file ({exc})") from None
    if text_field not in reader.schema_arrow.names:
        raise CorpusError(f"{path}: no column {text_field!r} (columns: "
                          f"{reader.schema_arrow.names}); choose it with text_field=")
    file_bytes = path.stat().st_size
    total_rows = max(reader.metadata.num_rows, 1)
    first_row = 0
    for record_batch in reader.iter_batches(batch_size=8192, columns=[text_field]):
        column = record_batch.column(0)
        yield _arrow_strings_batch(column, path, text_field, first_row,
                                   file_bytes * len(column) // total_rows)
        first_row += len(column)


def _arrow_strings_batch(column, path: Path, text_field: str, first_row: int,
                         input_bytes: int) -> _Batch:
    import pyarrow as pa

    if column.null_count:
        row = first_row + column.is_null().to_numpy(zero_copy_only=False).argmax()
        raise CorpusError(f"{path}: column {text_field!r} is null at row {row}")
    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        offset_type = np.int32
    elif pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        offset_type = np.int64
    else:
        raise CorpusError(f"{path}: column {text_field!r} holds {column.type}, not strings")
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[column.offset:]
    offsets = offsets[:len(column) + 1].astype(np.int64)
    data = memoryview(data_buffer) if data_buffer is not None else b""
    return _Batch(data, offsets[:-1], offsets[1:], input_bytes)


def _skipping(batches: Iterator[_Batch], n_documents: int) -> Iterator[_Batch]:
    """The batches without their first ``n_documents`` documents (their bytes still count)."""
    for batch in batches:
        if n_documents >= batch.doc_start.size:
            n_documents -= batch.doc_start.size
            yield _Batch(b"", batch.doc_start[:0], batch.doc_end[:0], batch.input_bytes)
            continue
        if n_documents:
            batch = _Batch(batch.data, batch.doc_start[n_documents:],
                           batch.doc_end[n_documents:], batch.input_bytes)
            n_documents = 0
        yield batch


def _read_ahead(batches: Iterator[_Batch]) -> Iterator[_Batch]:
    """Read the next batch on a thread while the caller encodes this one."""
    slots: queue.Queue = queue.Queue(maxsize=1)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        slots.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slots.put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            slots.put(exc)

    reader = threading.Thread(target=produce, name="gpubpe-reader", daemon=True)
    reader.start()
    try:
        while (item := slots.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc="encoding",
                disable=not enabled, leave=False)


def _appended_id(tok, special: str | None) -> int | None:
    if special is None:
        return None
    if special not in tok.special_tokens:
        raise ConfigError(f"append_special={special!r} is not a special token of this tokenizer; "
                          f"it has {sorted(tok.special_tokens)}")
    return tok.special_tokens[special]


def _with_appended(ids: np.ndarray, offsets: np.ndarray, appended: int | None):
    if appended is None:
        return ids, offsets
    return (np.insert(ids, offsets[1:], appended),
            offsets + np.arange(offsets.size, dtype=np.int64))


# ---------------------------------------------------------------- writing


class _TokenFileWriter:
    """Appends ids and offsets to temporary files; ``commit`` renames them into place."""

    def __init__(self, output: Path, dtype: np.dtype):
        self.ids_path = output
        self.offsets_path = offsets_path_of(output)
        self.npy = output.suffix == ".npy"
        self.dtype = dtype
        self.documents = 0
        self.tokens = 0
        tag = f".tmp-{os.getpid()}-{threading.get_ident()}"
        self._ids_temp = output.with_name(f".{output.name}{tag}")
        self._offsets_temp = output.with_name(f".{self.offsets_path.name}{tag}")
        self._ids = open(self._ids_temp, "wb")  # noqa: SIM115 - closed in commit/abort
        self._offsets = open(self._offsets_temp, "wb")  # noqa: SIM115
        if self.npy:
            self._ids.write(npy_header(dtype, 0))
            self._offsets.write(npy_header(np.dtype("<i8"), 0))
        self._offsets.write(np.zeros(1, dtype="<i8").tobytes())

    def append(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self._ids.write(ids.astype(self.dtype.newbyteorder("<"), copy=False).tobytes())
        ends = (offsets[1:] + self.tokens).astype("<i8")
        self._offsets.write(ends.tobytes())
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
        for handle in (self._ids, self._offsets):
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        os.replace(self._offsets_temp, offsets_path)
        os.replace(self._ids_temp, ids_path)

    def abort(self) -> None:
        for handle, path in ((self._ids, self._ids_temp), (self._offsets, self._offsets_temp)):
            handle.close()
            path.unlink(missing_ok=True)


def npy_header(dtype: np.dtype, length: int) -> bytes:
    """A version 1.0 ``.npy`` header for a 1-D array, always ``_NPY_HEADER_BYTES`` long."""
    fields = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype).newbyteorder("<")),
              "fortran_order": False, "shape": (int(length),)}
    body = repr(fields).encode("latin1")
    padding = _NPY_HEADER_BYTES - 10 - len(body) - 1
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _NPY_HEADER_BYTES - 10) + body + \
        b" " * padding + b"\n"


# ---------------------------------------------------------------- reading token files back


def read_token_file(path, dtype=None, n_vocab: int | None = None):
    """``(ids, offsets)`` of a token file written by :func:`encode_files`, memory-mapped.

    ``.npy`` files carry their dtype; ``.bin`` files take ``dtype`` (default:
    the rule of :func:`token_dtype` for ``n_vocab``). ``offsets`` is None when
    the companion file is missing. A truncated or inconsistent file raises
    CorpusError saying what is wrong.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such token file")
    if path.suffix == ".npy":
        ids = _load_npy(path)
    elif path.suffix == ".bin":
        ids = _load_raw(path, token_dtype(n_vocab or 1 << 16, dtype))
    else:
        raise CorpusError(f"{path}: token files end in .npy or .bin")
    offsets_path = offsets_path_of(path)
    if not offsets_path.exists():
        return ids, None
    offsets = _load_npy(offsets_path) if path.suffix == ".npy" else _load_raw(
        offsets_path, np.dtype("<i8"))
    if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != ids.size \
            or np.any(np.diff(offsets) < 0):
        raise CorpusError(f"{offsets_path} does not match {path}: offsets must rise from 0 to "
                          f"{ids.size}; re-run gpubpe encode")
    return ids, offsets


def _load_npy(path: Path) -> np.ndarray:
    with path.open("rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(handle)
        except ValueError as exc:
            raise CorpusError(f"{path} is not a valid .npy file ({exc})") from None
        header_end = handle.tell()
    expected = header_end + int(np.prod(shape)) * dtype.itemsize
    actual = path.stat().st_size
    if actual < expected:
        raise CorpusError(f"{path} is truncated: its header promises {int(np.prod(shape))} "
                          f"values ({expected:,} bytes) but the file holds {actual:,} bytes; "
                          "re-run gpubpe encode")
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.load(path, mmap_mode="r")


def _load_raw(path: Path, dtype: np.dtype) -> np.ndarray:
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise CorpusError(f"{path} is truncated: {size} bytes is not a whole number of "
                          f"{dtype} values; re-run gpubpe encode (or pass the right --dtype)")
    if size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


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


def decode_token_file(tokenizer, path, dtype=None) -> Iterator[str]:
    """The text of each document of a token file, in order (a chunk of documents at a time).

    Ids the tokenizer does not have raise CorpusError naming the first one and its position.
    """
    from .tokenizer import RaggedBatch

    ids, offsets = read_token_file(path, dtype=dtype, n_vocab=tokenizer.n_vocab)
    bad = np.flatnonzero(np.asarray(ids) >= tokenizer.n_vocab)
    if bad.size:
        raise CorpusError(f"{path}: id {ids[bad[0]]} at position {bad[0]} is out of range: this "
                          f"tokenizer has ids 0..{tokenizer.n_vocab - 1}; was the file made "
                          "with another tokenizer?")
    for chunk_ids, chunk_offsets in iter_documents(ids, offsets):
        yield from tokenizer.decode_batch(RaggedBatch(chunk_ids.astype(np.uint32), chunk_offsets))

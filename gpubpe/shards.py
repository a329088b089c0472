"""Sharded token outputs: inputs cut into splits, one shard per split, a manifest written last.

The format behind ``gpubpe.dask.encode_files`` (no Dask needed here, so
``gpubpe.load_tokens("out/")`` reads a sharded output without it).

Splits. Inputs are cut into byte ranges on document boundaries: a document
(a line of a text file or a ``.jsonl`` file) belongs to the range holding its
first byte, so ranges that tile a file give every document exactly once,
whichever range a line ends in. Files larger than ``split_bytes`` are cut into
equal ranges, smaller ones are grouped until a split holds about
``split_bytes``; a ``.parquet`` file (compressed pages) and a compressed file
(``.gz``: it cannot be entered at an offset) are one piece each, one task.

A shard, ``shard-00003``: ``shard-00003.npy`` (the split's ids end to end),
``shard-00003.offsets.npy`` (int64, documents + 1, from 0) and
``shard-00003.json``, the shard's record: its job, a key over the tokenizer
fingerprint, the settings and every input piece (path, byte range, size,
mtime), its document and token counts and the SHA-256 of both files. Each
file is written under a temporary name unique to the attempt (pid + random)
and renamed; the record comes last. A task that runs twice (its worker was
lost after writing) writes the same bytes again, so whichever rename lands
last, the shard is the same.

``manifest.json`` (format ``gpubpe-shards/1``) is written after every shard:
the shards in input order with their inputs, byte ranges, counts and
checksums. Until it exists the output is not a finished job (``load_tokens``
refuses it), so a job is all or nothing. Re-running the job skips every shard
whose record matches its key and whose files match their checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .atomic import atomic_output, write_text_atomically
from .errors import ConfigError, CorpusError
from .pretokenize import Batch, content_suffix, is_compressed, read_file

# Input bytes per split: a few seconds of work per task on one core, and a
# shard (ids + offsets) far below a worker's memory.
SPLIT_BYTES = 64 << 20
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "gpubpe-shards/1"
_SHARD_NAME = re.compile(r"^shard-(\d{5,})(\.offsets\.npy|\.npy|\.json)$")
_SHARD_TEMPORARY = re.compile(r"^\.shard-\d{5,}\..*\.tmp$")  # see gpubpe.atomic.temporary_path


@dataclass(frozen=True)
class Piece:
    """Documents of one input file whose first byte lies in ``[start, end)``."""

    path: str
    start: int
    end: int
    size: int  # the file's size and mtime when the job was planned
    mtime_ns: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == self.size


def plan_splits(paths: list[Path], split_bytes: int = SPLIT_BYTES) -> list[list[Piece]]:
    """The inputs as splits of about ``split_bytes``, in input order (see the module notes)."""
    if isinstance(split_bytes, bool) or not isinstance(split_bytes, int) or split_bytes < 1:
        raise ConfigError(f"split_bytes={split_bytes!r} must be a positive int (bytes of input "
                          f"per task; default {SPLIT_BYTES})")
    splits: list[list[Piece]] = []
    current: list[Piece] = []
    current_bytes = 0
    for path in paths:
        for piece in _pieces_of(Path(path), split_bytes):
            length = piece.end - piece.start
            if current and current_bytes + length > split_bytes:
                splits.append(current)
                current, current_bytes = [], 0
            current.append(piece)
            current_bytes += length
    if current:
        splits.append(current)
    return splits


def _pieces_of(path: Path, split_bytes: int) -> list[Piece]:
    stat = path.stat()
    size = stat.st_size
    name = os.path.abspath(path)
    if content_suffix(path) == ".parquet" or is_compressed(path) or size <= split_bytes:
        return [Piece(name, 0, size, size, stat.st_mtime_ns)]
    count = -(-size // split_bytes)
    bounds = [size * i // count for i in range(count + 1)]
    return [Piece(name, start, end, size, stat.st_mtime_ns)
            for start, end in zip(bounds, bounds[1:])]


def split_batches(split: list[Piece], text_field: str, batch_bytes: int) -> Iterator[Batch]:
    """The documents of a split, in order, through the one corpus reader."""
    for piece in split:
        path = Path(piece.path)
        check_unchanged(piece)
        byte_range = None if piece.whole else (piece.start, piece.end)
        yield from read_file(path, text_field, batch_bytes, byte_range)


def check_unchanged(piece: Piece) -> None:
    """CorpusError when an input changed (size or mtime) since the job was planned."""
    try:
        stat = os.stat(piece.path)
    except OSError as exc:
        raise CorpusError(f"{piece.path}: cannot be read on this worker ({exc.strerror}); every "
                          "worker must see the inputs at the same path") from None
    if (stat.st_size, stat.st_mtime_ns) != (piece.size, piece.mtime_ns):
        raise CorpusError(f"{piece.path} changed while the job ran (size or mtime); run the job "
                          "again once it is complete")


# ---------------------------------------------------------------- keys


def tokenizer_fingerprint(tok) -> str:
    """SHA-256 over what decides the ids: pattern, special tokens, rules, scaffold, bit-level,
    and an imported vocabulary's tokens and id layout (two imports may share their rules
    and differ in ids; a vocabulary without a layout hashes as before layouts existed)."""
    data = tok.vocabulary.to_json()
    decisive = {name: data[name] for name in
                ("format", "pattern", "special_tokens", "merges", "scaffold", "bitlevel",
                 "demolish", "tokens", "layout") if name in data}
    return _sha256_json(decisive)


def job_key(fingerprint: str, settings: dict, paths: list[Path]) -> str:
    """What names a job: the tokenizer, the settings and the input paths (not their contents)."""
    return _sha256_json([fingerprint, settings, [os.path.abspath(p) for p in paths]])


def shard_key(fingerprint: str, settings: dict, split: list[Piece]) -> str:
    """What a shard's bytes depend on: the job's tokenizer and settings, its input pieces."""
    return _sha256_json([fingerprint, settings, [asdict(piece) for piece in split]])


def _sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- writing a shard


def shard_paths(out_dir: Path, index: int) -> tuple[Path, Path, Path]:
    """(ids, offsets, record) paths of shard ``index``."""
    stem = out_dir / f"shard-{index:05d}"
    return stem.with_suffix(".npy"), stem.with_suffix(".offsets.npy"), stem.with_suffix(".json")


def write_shard(out_dir: Path, index: int, ids: np.ndarray, offsets: np.ndarray,
                record: dict) -> dict:
    """Write the shard's two arrays, then its record (each atomically); the full record."""
    from .encode_files import npy_header

    ids_path, offsets_path, record_path = shard_paths(out_dir, index)
    ids = np.ascontiguousarray(ids, dtype=np.dtype(record["dtype"]).newbyteorder("<"))
    offsets = np.ascontiguousarray(offsets, dtype="<i8")
    record = dict(record, ids=ids_path.name, offsets=offsets_path.name,
                  documents=int(offsets.size - 1), tokens=int(ids.size),
                  ids_sha256=_write_npy(ids_path, npy_header(ids.dtype, ids.size), ids),
                  offsets_sha256=_write_npy(offsets_path,
                                            npy_header(offsets.dtype, offsets.size), offsets))
    write_text_atomically(record_path, json.dumps(record, indent=1) + "\n")
    return record


def _write_npy(path: Path, header: bytes, values: np.ndarray) -> str:
    digest = hashlib.sha256(header)
    digest.update(memoryview(values).cast("B"))
    with atomic_output(path) as out:
        out.write(header)
        out.write(memoryview(values).cast("B"))
    return digest.hexdigest()


def valid_record(out_dir: Path, index: int, key: str) -> dict | None:
    """Shard ``index``'s record when it is complete and valid for ``key`` (checksums read), else None."""
    ids_path, offsets_path, record_path = shard_paths(out_dir, index)
    record = _read_json(record_path)
    if record is None or record.get("key") != key:
        return None
    for path, checksum in ((ids_path, record.get("ids_sha256")),
                           (offsets_path, record.get("offsets_sha256"))):
        if file_sha256(path) != checksum:
            return None
    return record


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes, or None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------- the output folder


def prepare_output(out_dir, job: str, overwrite: bool) -> Path:
    """The output folder, checked before any work: made if missing; another job's refused.

    Another job's manifest or shard records are refused unless ``overwrite``,
    which removes them (the manifest first, so the folder stops claiming a
    finished job at once).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"output {out_dir} is a file; a sharded output is a folder")
    if not out_dir.parent.is_dir():
        raise ConfigError(f"output {out_dir}: folder {out_dir.parent} does not exist; create it")
    out_dir.mkdir(exist_ok=True)
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder {out_dir} is not writable; choose another")
    others = _other_jobs(out_dir, job)
    if others and not overwrite:
        raise ConfigError(f"{out_dir} holds the output of another job ({others[0].name}: other "
                          "tokenizer, inputs or settings); choose another folder or pass "
                          "overwrite=True (--overwrite) to replace it")
    if overwrite:
        (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
        remove_shards(out_dir, keep=0)
    return out_dir


def _other_jobs(out_dir: Path, job: str) -> list[Path]:
    found = []
    manifest = _read_json(out_dir / MANIFEST_NAME)
    if (out_dir / MANIFEST_NAME).exists() and (manifest is None or manifest.get("job") != job):
        found.append(out_dir / MANIFEST_NAME)
    for path in sorted(out_dir.glob("shard-*.json")):
        record = _read_json(path)
        if record is not None and record.get("job") != job:
            found.append(path)
    return found


def remove_shards(out_dir: Path, keep: int) -> None:
    """Remove shard files numbered ``keep`` and above (left by an earlier, larger job), and
    the temporary files of attempts that died mid-write (every task has finished by now)."""
    for path in out_dir.iterdir():
        match = _SHARD_NAME.match(path.name)
        if match and int(match.group(1)) >= keep or _SHARD_TEMPORARY.match(path.name):
            path.unlink(missing_ok=True)


def write_manifest(out_dir: Path, job: str, fingerprint: str, settings: dict,
                   records: list[dict]) -> dict:
    """The job's manifest, written last: shards in input order, totals."""
    shards = [{name: record[name] for name in
               ("ids", "offsets", "inputs", "documents", "tokens", "ids_sha256",
                "offsets_sha256")} for record in records]
    manifest = {"format": MANIFEST_FORMAT, "job": job, "tokenizer_fingerprint": fingerprint,
                "settings": settings, "dtype": settings["dtype"],
                "documents": sum(s["documents"] for s in shards),
                "tokens": sum(s["tokens"] for s in shards), "shards": shards}
    write_text_atomically(out_dir / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
    remove_shards(out_dir, keep=len(records))
    return manifest


# ---------------------------------------------------------------- reading a sharded output


class ShardedIds:
    """The ids of a sharded output end to end, each shard memory-mapped (nothing copied).

    ``len``, ``dtype``, ``shape``, indexing by int and by slice (a slice
    across shards is copied; within one shard it is a view), and
    ``np.asarray`` (copies every shard into one array).
    """

    ndim = 1

    def __init__(self, shards: list[np.ndarray], dtype: np.dtype):
        self.shards = shards
        self.dtype = np.dtype(dtype)
        sizes = np.array([s.size for s in shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def size(self) -> int:
        return int(self._starts[-1])

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._slice(index)
        position = int(index) + (self.size if int(index) < 0 else 0)
        if not 0 <= position < self.size:
            raise IndexError(f"index {index} is out of range for {self.size} ids")
        shard = int(np.searchsorted(self._starts, position, side="right")) - 1
        return self.shards[shard][position - self._starts[shard]]

    def _slice(self, index: slice) -> np.ndarray:
        start, stop, step = index.indices(self.size)
        if step != 1:
            return np.asarray(self)[index]
        stop = max(start, stop)
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, stop, side="left"))
        parts = [shard[max(start - lo, 0):max(min(stop - lo, shard.size), 0)]
                 for shard, lo in zip(self.shards[first:last], self._starts[first:last])]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def __array__(self, dtype=None, copy=None):
        whole = np.concatenate(self.shards) if self.shards else np.zeros(0, self.dtype)
        return whole if dtype is None else whole.astype(dtype)

    def __repr__(self) -> str:
        return f"ShardedIds({self.size:,} {self.dtype} ids in {len(self.shards)} shards)"


def load_shards(out_dir: Path) -> tuple[ShardedIds, np.ndarray]:
    """``(ids, offsets)`` of a finished sharded output, in input order (see ``load_tokens``)."""
    manifest = _read_json(out_dir / MANIFEST_NAME)
    if manifest is None or manifest.get("format") != MANIFEST_FORMAT:
        raise CorpusError(f"{out_dir} has no {MANIFEST_NAME} of a finished sharded job (the job "
                          "did not finish, or this is not a gpubpe output folder); run it again")
    shard_ids, ends = [], [np.zeros(1, dtype=np.int64)]
    tokens = 0
    for shard in manifest["shards"]:
        ids, offsets = _load_shard(out_dir, shard)
        shard_ids.append(ids)
        ends.append(np.asarray(offsets[1:]) + tokens)
        tokens += ids.size
    return ShardedIds(shard_ids, manifest["dtype"]), np.concatenate(ends)


def _load_shard(out_dir: Path, shard: dict) -> tuple[np.ndarray, np.ndarray]:
    """One shard's (ids, offsets), memory-mapped, checked against the manifest's counts."""
    from .encode_files import _open_array

    arrays = []
    for name in (shard["ids"], shard["offsets"]):
        path = out_dir / name
        try:
            with path.open("rb") as handle:
                arrays.append(_open_array(path, handle, True, None))
        except FileNotFoundError:
            raise CorpusError(f"{path}: missing, though {MANIFEST_NAME} names it; run the job "
                              "again") from None
    ids, offsets = arrays
    if ids.size != shard["tokens"] or offsets.size != shard["documents"] + 1 \
            or offsets[0] != 0 or offsets[-1] != ids.size:
        raise CorpusError(f"{out_dir / shard['ids']}: sizes differ from {MANIFEST_NAME}; the "
                          "folder was changed after the job; run it again")
    return ids, offsets

"""Scale-out on a Dask cluster: count and encode across workers, the same result as one machine.

Imported only when used (``import gpubpe.dask``); needs ``pip install 'gpubpe[dask]'``
(dask + distributed; ``dask-cuda``'s ``LocalCUDACluster`` gives one worker per
GPU). gpubpe runs no scheduler of its own: a :class:`distributed.Client` is
passed in, or the default one is used.

- :func:`count_words`: one task per split counts words with the local fast
  path, partial counts are merged in a tree (``fan_in`` at a time) into a
  :class:`gpubpe.WordCounts`, equal to ``gpubpe.count_words`` on one machine.
- :func:`encode_files`: one task per split writes one shard; the manifest is
  written last (format in :mod:`gpubpe.shards`). ``gpubpe.load_tokens(out_dir)``
  reads the shards memory-mapped, in input order, byte for byte what
  ``gpubpe.encode_files`` writes on one machine.
- :func:`encode_column`: a Dask DataFrame text column (or a Bag of texts)
  encoded partition by partition into token ids (a ``pyarrow`` list column).

Each task uses as many threads as its worker has (``threads_per_worker``),
and the worker's GPU when the tokenizer's backend is 'auto' and it has one.
The tokenizer is scattered to every worker once, not shipped per task.

Failures. A lost worker's tasks are re-run by Dask; a shard is written under
names unique to the attempt and renamed, with the same bytes each time, so a
re-run leaves no duplicated or missing documents. Re-running a job skips the
shards already complete and valid (record key: tokenizer fingerprint,
settings, each input's byte range, size and mtime; checksums re-read).

Performance notes (numbers in ``bench/RESULTS.md``):

- Splits of 64 MiB keep a task at seconds on one core and the per-task
  costs (scheduling, a JSON record, SHA-256 and fsync of the shard) small;
  the tokenizer's word cache lives on each worker across its tasks.
- Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536: +35-50% CPU
  for encoding (every NumPy array a fresh mmap). Fixed by
  :func:`worker_config` at cluster start, or by ``mallopt`` in the first task.
- Tried, no effect here: Numba thread settings, turning off Dask's profiler,
  warm vs cold word caches. Tried and dropped: merging partial counts with
  pyarrow (``group_by`` + ``sort_by`` on binary words): 6.7 us per entry
  against 2 us in Python dicts (same result), so ``WordCounts.merged`` stays. What remains on 2 cores: the two workers' task
  threads use ~1.35x the CPU of one process for the same split while they run
  at once, and each idle worker ~0.03 CPU s per second.
"""

from __future__ import annotations

import ctypes
import os
import uuid
from pathlib import Path

import numpy as np

from .errors import ConfigError, special_tokens_said
from .model import Template
from .shards import SPLIT_BYTES

# Seconds to wait for a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = 10.0

# glibc malloc settings for worker processes. Dask's nanny starts workers with
# MALLOC_TRIM_THRESHOLD_=65536, which also pins glibc's mmap threshold at 128 KiB:
# every batch-sized NumPy array is then a fresh mmap, page-faulted on first
# touch and unmapped on free. Measured on encoding: +35-50% CPU time against
# glibc's defaults; with these two settings, -20% against the defaults. A task
# applies them to its worker (mallopt) when it finds Dask's default there.
WORKER_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": 256 << 20, "MALLOC_MMAP_THRESHOLD_": 32 << 20}


_DASK_TRIM_DEFAULT = "65536"
_malloc_tuned = False


def _tune_malloc() -> None:
    """Once per worker process: glibc's thresholds as :data:`WORKER_ENVIRON`, but only where
    Dask's own default (MALLOC_TRIM_THRESHOLD_=65536) is in force, so a setting the user
    chose is kept. The cost: up to 256 MiB of freed memory stays in the process."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") != _DASK_TRIM_DEFAULT:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: nothing to undo
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    mallopt(m_mmap_threshold, WORKER_ENVIRON["MALLOC_MMAP_THRESHOLD_"])
    mallopt(m_trim_threshold, WORKER_ENVIRON["MALLOC_TRIM_THRESHOLD_"])


def worker_config() -> dict:
    """Dask config for clusters that run gpubpe: ``with dask.config.set(worker_config()):``
    around ``LocalCluster(...)`` (a ``dask worker`` command takes the same as environment
    variables, :data:`WORKER_ENVIRON`)."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.update(WORKER_ENVIRON)
    return {"distributed.nanny.pre-spawn-environ": environ}


def connect(address: str, timeout: float = CONNECT_TIMEOUT):
    """A :class:`distributed.Client` for ``address``; ConfigError (one line) when unreachable."""
    distributed = _distributed()
    try:
        return distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"cannot reach the Dask scheduler at {address!r} ({reason[:200]}); "
                          "start one ('dask scheduler') or check the address") from None


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ConfigError("gpubpe.dask needs dask and distributed: pip install "
                          "'gpubpe[dask]'") from None
    return distributed


def _client(client):
    if client is not None:
        return client
    try:
        return _distributed().default_client()
    except ValueError:
        raise ConfigError("no Dask client: pass client=Client(address) (or create one "
                          "first, which becomes the default)") from None


def _worker_threads() -> int:
    """Threads of the worker running this task (``threads_per_worker``; 1 outside a worker)."""
    from distributed import get_worker

    try:
        threads = max(1, int(get_worker().state.nthreads))
    except ValueError:
        threads = 1
    else:
        _tune_malloc()
    return threads


# ---------------------------------------------------------------- counting


def count_words(paths, *, client=None, pattern: str | None = "gpt2", special_tokens=(),
                text_field: str = "text", split_bytes: int = SPLIT_BYTES, fan_in: int = 8):
    """:func:`gpubpe.count_words` of files on a Dask cluster: the same :class:`WordCounts`.

    One task per split, then a tree of merges ``fan_in`` at a time, so no
    node receives every partial count at once.
    """
    from .counts import WordCounts
    from .pretokenize import corpus_paths, resolve_pattern
    from .shards import plan_splits

    paths = corpus_paths(paths)
    resolve_pattern(pattern)
    special_tokens = list(dict.fromkeys(special_tokens))
    if isinstance(fan_in, bool) or not isinstance(fan_in, int) or fan_in < 2:
        raise ConfigError(f"fan_in={fan_in!r} must be an int >= 2 (counts merged per task)")
    client = _client(client)
    splits = plan_splits(paths, split_bytes)
    run = uuid.uuid4().hex[:12]
    level = [client.submit(_count_split, split, pattern, special_tokens, text_field,
                           key=f"gpubpe-count-{run}-{index:05d}")
             for index, split in enumerate(splits)]
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [client.submit(_merge_counts, *level[at:at + fan_in],
                               key=f"gpubpe-merge-{run}-{depth}-{at:05d}")
                 for at in range(0, len(level), fan_in)]
    counts: WordCounts = level[0].result()
    counts.sources = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    return counts


def _count_split(split, pattern, special_tokens, text_field):
    from .counts import WordCounts
    from .pretokenize import count_batch_words
    from .shards import split_batches

    batches = split_batches(split, text_field, SPLIT_BYTES // 8)
    word_counts = count_batch_words(batches, pattern, special_tokens, _worker_threads())
    return WordCounts.from_dict(word_counts, pattern, special_tokens)


def _merge_counts(first, *rest):
    return first.merged(*rest)


# ---------------------------------------------------------------- encoding files


def encode_files(tokenizer, paths, out_dir, *, client=None, dtype=None, text_field: str = "text",
                 allowed_special=(), append_special: str | None = None,
                 split_bytes: int = SPLIT_BYTES, overwrite: bool = False,
                 prepend_special: str | None = None, add_special_tokens: bool = False) -> dict:
    """Encode files on a Dask cluster into ``out_dir``: one shard per split, a manifest last.

    The same documents and ids as :func:`gpubpe.encode_files` (read them with
    ``gpubpe.load_tokens(out_dir)``). An ``out_dir`` holding another job's
    output is refused unless ``overwrite``; the same job run again re-encodes
    only the shards not complete and valid. Returns the manifest, plus
    ``"encoded"`` and ``"skipped"``: how many shards this run wrote and kept.
    """
    from . import shards
    from .encode_files import _framing, token_dtype
    from .pretokenize import corpus_paths
    from .tokenizer import Tokenizer

    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    paths = corpus_paths(paths)
    _framing(tok, prepend_special, append_special, add_special_tokens)
    settings = {"dtype": str(token_dtype(tok.n_vocab, dtype)), "text_field": text_field,
                "allowed_special": _allowed_list(tok, allowed_special),
                "append_special": append_special}
    if prepend_special is not None:  # (absent otherwise: earlier jobs keep their keys)
        settings["prepend_special"] = prepend_special
    if add_special_tokens:  # the template in the job's key: what it adds decides the ids
        settings["add_special_tokens"] = (tok.template or Template()).to_json()
    fingerprint = shards.tokenizer_fingerprint(tok)
    job = shards.job_key(fingerprint, settings, paths)
    client = _client(client)
    out_dir = shards.prepare_output(out_dir, job, overwrite)
    splits = shards.plan_splits(paths, split_bytes)
    tok_on_workers = client.scatter(tok, broadcast=True, hash=False)
    run = uuid.uuid4().hex[:12]
    futures = [client.submit(_encode_split, tok_on_workers, index, split, str(out_dir), job,
                             fingerprint, settings, key=f"gpubpe-encode-{run}-{index:05d}")
               for index, split in enumerate(splits)]
    records = client.gather(futures)
    manifest = shards.write_manifest(out_dir, job, fingerprint, settings, records)
    skipped = sum(1 for record in records if record.get("skipped"))
    return dict(manifest, encoded=len(records) - skipped, skipped=skipped)


def _allowed_list(tok, allowed_special):
    """``allowed_special`` as JSON for the job key: 'all' or a sorted list (checked)."""
    if allowed_special == "all":
        return "all"
    if isinstance(allowed_special, str):
        raise ConfigError("allowed_special must be 'all' or a collection of special tokens, "
                          f"not the string {allowed_special!r}")
    allowed = sorted(set(allowed_special))
    unknown = [token for token in allowed if token not in tok.special_tokens]
    if unknown:
        raise ConfigError(f"allowed_special {unknown[0]!r} is not a special token of this "
                          f"tokenizer; {special_tokens_said(tok.special_tokens, unknown[0])}")
    return allowed


def _encode_split(tok, index, split, out_dir, job, fingerprint, settings) -> dict:
    """Write shard ``index`` unless a complete, valid one is there; its record."""
    from . import shards
    from .encode_files import BATCH_BYTES, _framed, _framing

    out_dir = Path(out_dir)
    key = shards.shard_key(fingerprint, settings, split)
    kept = shards.valid_record(out_dir, index, key)
    if kept is not None:
        return dict(kept, skipped=True)
    threads = _worker_threads()
    allowed = settings["allowed_special"]
    framing = _framing(tok, settings.get("prepend_special"), settings["append_special"],
                       "add_special_tokens" in settings)
    id_parts, end_parts, tokens = [], [np.zeros(1, dtype=np.int64)], 0
    for batch in shards.split_batches(split, settings["text_field"], BATCH_BYTES):
        encoded = tok.encode_buffer(batch.data, batch.doc_starts, batch.doc_ends,
                                    num_threads=threads,
                                    allowed_special=set(allowed) if allowed != "all" else "all")
        ids, offsets = _framed(encoded.ids, encoded.offsets, framing)
        id_parts.append(ids)
        end_parts.append(offsets[1:] + tokens)
        tokens += int(ids.size)
    ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype=np.uint32)
    record = {"format": "gpubpe-shard/1", "job": job, "key": key, "dtype": settings["dtype"],
              "inputs": [{"path": p.path, "start": p.start, "end": p.end, "size": p.size,
                          "mtime_ns": p.mtime_ns} for p in split]}
    return shards.write_shard(out_dir, index, ids, np.concatenate(end_parts), record)


# ---------------------------------------------------------------- Dask collections


def encode_column(collection, tokenizer, column: str = "text", *, output: str = "ids",
                  allowed_special=()):
    """Token ids of a Dask DataFrame text column, or of a Bag of texts, partition by partition.

    A DataFrame gets a column ``output`` of ``pyarrow`` type ``list<uint32>``
    (pandas ``ArrowDtype``), the same ids as ``tokenizer.encode_batch`` of the
    column; a Series becomes that column alone. A Bag becomes a Bag of uint32
    arrays, one per text. The tokenizer enters the graph once.
    """
    import dask
    import dask.bag

    from .tokenizer import Tokenizer

    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    allowed = _allowed_list(tok, allowed_special)
    shared = dask.delayed(tok, pure=True, name=f"gpubpe-tokenizer-{uuid.uuid4().hex[:12]}")
    if isinstance(collection, dask.bag.Bag):
        return collection.map_partitions(_encode_bag_partition, shared, allowed)
    import dask.dataframe as dd
    import pandas as pd

    meta_type = _ids_dtype()
    if isinstance(collection, dd.Series):
        meta = pd.Series([], dtype=meta_type, name=output)
        return collection.map_partitions(_encode_series, shared, allowed, output, meta=meta)
    if not isinstance(collection, dd.DataFrame):
        raise ConfigError(f"encode_column takes a Dask DataFrame, Series or Bag, not "
                          f"{type(collection).__name__}")
    if column not in collection.columns:
        raise ConfigError(f"no column {column!r} (columns: {list(collection.columns)}); "
                          "choose it with column=")
    meta = collection._meta.assign(**{output: pd.Series([], dtype=meta_type)})
    return collection.map_partitions(_encode_frame, shared, allowed, column, output, meta=meta)


def _ids_dtype():
    import pandas as pd
    import pyarrow as pa

    return pd.ArrowDtype(pa.list_(pa.uint32()))


def _encode_texts(tok, texts, allowed):
    """pyarrow ``list<uint32>`` array of the texts' ids."""
    import pyarrow as pa

    batch = _ragged(tok, texts, allowed)
    if batch.offsets[-1] > np.iinfo(np.int32).max:
        raise ConfigError("a partition holds more than 2^31 ids; repartition into smaller "
                          "partitions (npartitions=...)")
    return pa.ListArray.from_arrays(pa.array(batch.offsets.astype(np.int32)),
                                    pa.array(np.asarray(batch.ids, dtype=np.uint32)))


def _ragged(tok, texts, allowed):
    """The texts' ids as one RaggedBatch; special-token text is ordinary unless allowed."""
    return tok.encode_arrays(list(texts), num_threads=_worker_threads(),
                             allowed_special=set(allowed) if allowed != "all" else "all",
                             disallowed_special=())


def _encode_series(texts, tok, allowed, output):
    import pandas as pd

    return pd.Series(pd.arrays.ArrowExtensionArray(_encode_texts(tok, texts, allowed)),
                     index=texts.index, name=output)


def _encode_frame(frame, tok, allowed, column, output):
    import pandas as pd

    ids = pd.Series(pd.arrays.ArrowExtensionArray(_encode_texts(tok, frame[column], allowed)),
                    index=frame.index)
    return frame.assign(**{output: ids})


def _encode_bag_partition(texts, tok, allowed):
    batch = _ragged(tok, texts, allowed)
    ids = np.asarray(batch.ids, dtype=np.uint32)
    return [ids[a:b].copy() for a, b in zip(batch.offsets[:-1], batch.offsets[1:])]

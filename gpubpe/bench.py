"""``gpubpe bench``: CPU against GPU, and against HF tokenizers and tiktoken, in one run.

Same corpus and settings for every contender; outputs are checked equal
before a time is reported; every clock stops after the device is
synchronised (CuPy's stream synchronize); JIT compile time is taken by a
warm-up run and reported apart. A backend that cannot run here is listed as
"unavailable: <reason>". CUDA rows also give the device round trips that
``gpubpe.device_stats()`` counted: kernel launches and syncs per MB of text
(encoding) and per merge (training), the cost a GPU pays per host round trip.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .backend import BackendUnavailable, resolve_backend
from .kernels._cuda import device_stats


@dataclass
class Row:
    task: str
    contender: str
    seconds: float | None
    mb_per_s: float | None
    note: str = ""
    unit: str = ""  # what the counts below are per: "MB" or "merge" (CUDA rows only)
    launches_per_unit: float | None = None
    syncs_per_unit: float | None = None


def _with_counts(row: Row, backend, stats, unit: str, n_units: float) -> Row:
    if backend.on_device:
        per = stats.per(n_units)
        row.unit, row.launches_per_unit, row.syncs_per_unit = unit, per["launches"], per["syncs"]
    return row


def run_bench(corpus_path, vocab_size: int, backends: list[str]) -> list[Row]:
    """Train and encode with each backend and the reference tools; returns the rows."""
    from .trainer import train

    corpus_path = Path(corpus_path)
    documents = _documents(corpus_path)
    megabytes = sum(len(d.encode("utf-8")) for d in documents) / 1e6
    rows: list[Row] = []
    reference = first_ids = None
    train(documents[:50], 300, progress=False)  # warm-up: JIT load/compile, reported apart
    for name in backends:
        try:
            backend = resolve_backend(name)
        except BackendUnavailable as exc:
            rows.append(Row("train", f"gpubpe {name}", None, None, f"unavailable: {exc}"))
            continue
        started = time.perf_counter()
        with device_stats() as stats:
            tok = train([corpus_path], vocab_size, backend=name, progress=False)
        backend.synchronize("bench clock")
        seconds = time.perf_counter() - started
        reference = reference or tok
        note = "" if tok.merges == reference.merges else "MERGES DIFFER"
        rows.append(_with_counts(Row("train", f"gpubpe {name}", seconds, megabytes / seconds,
                                     note), backend, stats, "merge", len(tok.merges)))
        row, ids = _encode_row(tok, documents, megabytes, f"gpubpe {name}", backend, first_ids)
        first_ids = ids if first_ids is None else first_ids
        rows.append(row)
    if reference is not None:
        rows += _reference_rows(reference, corpus_path, documents, vocab_size, megabytes)
    return rows


def _documents(corpus_path: Path) -> list[str]:
    """The corpus' documents as gpubpe's one reader cuts them (a .txt line keeps its "\\n")."""
    from .pretokenize import iter_batches

    return [str(batch.data[start:end], "utf-8", "replace") for batch in iter_batches([corpus_path])
            for start, end in zip(batch.doc_starts.tolist(), batch.doc_ends.tolist())]


def _encode_row(tok, documents, megabytes, contender, backend, expected) -> tuple[Row, object]:
    """Encode every document with an empty word cache (every distinct word is BPE'd)."""
    tok.encode_batch(documents[:100])
    tok.clear_cache()
    started = time.perf_counter()
    with device_stats() as stats:
        batch = tok.encode_arrays(documents)
    backend.synchronize("bench clock")
    seconds = time.perf_counter() - started
    same = expected is None or np.array_equal(batch.ids, expected)
    note = "cold word cache" + ("" if same else "; IDS DIFFER from the first backend")
    row = Row("encode", contender, seconds, megabytes / seconds, note)
    return _with_counts(row, backend, stats, "MB", megabytes), batch.ids


def _reference_rows(tok, corpus_path, documents, vocab_size, megabytes) -> list[Row]:
    rows = []
    try:
        rows.append(_hf_train_row(tok, corpus_path, vocab_size, megabytes))
    except ImportError:
        rows.append(Row("train", "HF tokenizers", None, None, "unavailable: pip install tokenizers"))
    try:
        rows.extend(_tiktoken_encode_rows(tok, documents, megabytes))
    except ImportError:
        rows.append(Row("encode", "tiktoken", None, None, "unavailable: pip install tiktoken"))
    return rows


def _hf_train_row(tok, corpus_path, vocab_size, megabytes) -> Row:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from .bytes_order import gpt2_byte_to_unicode

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=0, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    started = time.perf_counter()
    hf.train([str(corpus_path)], trainer)
    seconds = time.perf_counter() - started
    chars = gpt2_byte_to_unicode()
    ours = [" ".join("".join(chars[b] for b in part) for part in pair) for pair in tok.merges]
    theirs = json.loads(hf.to_str())["model"]["merges"]
    theirs = [m if isinstance(m, str) else " ".join(m) for m in theirs]
    note = "" if ours == theirs else "MERGES DIFFER from gpubpe"
    return Row("train", "HF tokenizers", seconds, megabytes / seconds, note)


def _tiktoken_encode_rows(tok, documents, megabytes) -> list[Row]:
    """tiktoken on the same ranks: its batch call (a thread pool, a task a document) and
    ``encode_ordinary`` a document at a time (faster on many short ones), ids checked."""
    import tiktoken

    from .pretokenize import GPT2_PATTERN

    ranks = {tok.token_bytes(i): i for i in range(tok.vocab_size)}
    encoding = tiktoken.Encoding("gpubpe-bench", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={})
    sample = documents[:200]
    expected = [tok.encode(d) for d in sample]
    rows = []
    for contender, run in (
            ("tiktoken (encode_ordinary_batch)", encoding.encode_ordinary_batch),
            ("tiktoken (encode_ordinary, a loop)", lambda docs: list(map(encoding.encode_ordinary,
                                                                         docs)))):
        run(documents[:100])
        started = time.perf_counter()
        ids = run(documents)
        seconds = time.perf_counter() - started
        note = "" if expected == ids[:200] else "IDS DIFFER from gpubpe"
        rows.append(Row("encode", contender, seconds, megabytes / seconds, note))
    return rows


def format_rows(rows: list[Row]) -> str:
    lines = ["| task | contender | seconds | MB/s | launches | syncs | note |",
             "|---|---|---:|---:|---:|---:|---|"]
    for row in rows:
        seconds = f"{row.seconds:.2f}" if row.seconds is not None else "-"
        rate = f"{row.mb_per_s:.1f}" if row.mb_per_s is not None else "-"
        launches, syncs = (_per_unit(row.launches_per_unit, row.unit),
                           _per_unit(row.syncs_per_unit, row.unit))
        lines.append(f"| {row.task} | {row.contender} | {seconds} | {rate} | {launches} | "
                     f"{syncs} | {row.note} |")
    return "\n".join(lines)


def _per_unit(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.3g}/{unit}"


def rows_json(rows: list[Row]) -> str:
    return json.dumps([asdict(row) for row in rows], indent=1)

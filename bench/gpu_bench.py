"""CPU against GPU on one corpus: encoding, decoding and the bit-level codec, with device counts.

Run by ``bench/gpu_node.sh`` on a GPU node (it works anywhere: where no device
is usable the cuda rows say why). Every contender encodes the same ~2 KB
documents; outputs are checked equal to the CPU's (and to tiktoken's and HF
``tokenizers``' on a sample) before a time is kept; each operation is warmed
up first (JIT compile), the word cache is emptied before each cold encode, and
the device is synchronised before a clock stops. CUDA rows give the kernel
launches and syncs per MB that ``gpubpe.device_stats()`` counted.

    python bench/gpu_bench.py [--corpus FILE] [--megabytes N] [--vocab-size N]
                              [--repeats N] [--json OUT.json] [--markdown OUT.md]
                              [--doctor doctor.json] [--bench bench.json] [--tests tests.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from encode_bench import hf_tokenizer, machine, tiktoken_encoding  # noqa: E402

import gpubpe  # noqa: E402
from gpubpe.backend import resolve_backend  # noqa: E402
from gpubpe.errors import BackendUnavailable  # noqa: E402


def documents(corpus: Path | None, megabytes: float) -> list[str]:
    """Lines joined into ~2 KB documents, the text repeated up to ``megabytes``."""
    text = (corpus or Path(gpubpe.__file__).parent / "data" / "demo.txt").read_text("utf-8")
    lines = [line for line in text.splitlines(keepends=True) if line.strip()]
    docs, current, size, total = [], [], 0, 0
    while total < megabytes * 1e6:
        for line in lines:
            current.append(line)
            size += len(line.encode())
            if size >= 2000:
                docs.append("".join(current))
                total += size
                current, size = [], 0
                if total >= megabytes * 1e6:
                    break
    return docs


def best(run, repeats: int):
    """(best seconds, last result, counts of the last run); ``run()`` does one pass."""
    times, result = [], None
    for _ in range(repeats):
        with gpubpe.device_stats() as stats:
            started = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - started)
    return min(times), result, stats


def row(task, contender, seconds, megabytes, stats=None, note="") -> dict:
    out = {"task": task, "contender": contender, "seconds": seconds,
           "mb_per_s": megabytes / seconds if seconds else None, "note": note}
    if stats is not None:
        per = stats.per(megabytes)
        out.update(launches_per_mb=per["launches"], syncs_per_mb=per["syncs"],
                   mb_to_device_per_mb=per["bytes_to_device"] / 1e6,
                   mb_to_host_per_mb=per["bytes_to_host"] / 1e6,
                   launches_by_kernel=dict(stats.launches), syncs_by_site=dict(stats.sync_sites))
    return out


def bench_tokenizer(tok, docs, megabytes, repeats) -> list[dict]:
    rows, expected = [], None
    for name in ("cpu", "cuda"):
        try:
            backend = resolve_backend(name)
        except BackendUnavailable as exc:
            rows.append(row("encode", f"gpubpe {name}", None, megabytes, note=f"unavailable: {exc}"))
            continue
        each = tok.with_backend(name)
        each.encode_arrays(docs[:50])  # warm-up: JIT, tables on the device

        def cold(each=each, backend=backend):
            each.clear_cache()
            batch = each.encode_arrays(docs)
            backend.synchronize("bench clock")
            return batch

        seconds, batch, stats = best(cold, repeats)
        same = expected is None or np.array_equal(batch.ids, expected.ids)
        expected = batch if expected is None else expected
        rows.append(row("encode_arrays, cold word cache", f"gpubpe {name}", seconds, megabytes,
                        stats if backend.on_device else None, "" if same else "IDS DIFFER"))
        seconds, text, stats = best(lambda each=each, batch=batch: each.decode_batch(batch), repeats)
        rows.append(row("decode_batch", f"gpubpe {name}", seconds, megabytes,
                        stats if backend.on_device else None,
                        "" if text == docs else "TEXT DIFFERS"))
    rows += reference_rows(tok, docs, megabytes, repeats, expected)
    return rows


def reference_rows(tok, docs, megabytes, repeats, expected) -> list[dict]:
    sample = None if expected is None else \
        [expected[i].tolist() for i in range(min(100, len(expected)))]
    rows = []
    try:
        enc = tiktoken_encoding(tok)
        seconds, ids, _ = best(lambda: enc.encode_ordinary_batch(docs, num_threads=os.cpu_count()),
                               repeats)
        note = "" if sample is None or ids[:100] == sample else "IDS DIFFER from gpubpe"
        rows.append(row("encode", f"tiktoken encode_ordinary_batch ({os.cpu_count()} threads)",
                        seconds, megabytes, note=note))
    except ImportError:
        rows.append(row("encode", "tiktoken", None, megabytes, note="not installed"))
    try:
        hf = hf_tokenizer(tok)
        seconds, out, _ = best(lambda: hf.encode_batch(docs, add_special_tokens=False), repeats)
        note = "" if sample is None or [e.ids for e in out[:100]] == sample \
            else "IDS DIFFER from gpubpe"
        rows.append(row("encode", "HF tokenizers encode_batch", seconds, megabytes, note=note))
    except ImportError:
        rows.append(row("encode", "HF tokenizers", None, megabytes, note="not installed"))
    return rows


def bench_bitlevel(tok, docs, repeats) -> list[dict]:
    """The codec over the corpus' ids (CJK-free text still exercises the scans)."""
    batch = tok.encode_arrays(docs)
    ids, offsets = batch.ids.astype(np.uint32), batch.offsets
    megabytes = ids.nbytes / 1e6
    rows, expected = [], None
    for name in ("cpu", "cuda"):
        try:
            codec = gpubpe.BitLevelCodec(tok.vocab_size, backend=name)
        except BackendUnavailable as exc:
            rows.append(row("bit-level encode", f"gpubpe {name}", None, megabytes,
                            note=f"unavailable: {exc}"))
            continue
        codec.encode_batch(ids[:1000], np.array([0, 1000]))
        seconds, coded, stats = best(lambda codec=codec: codec.encode_batch(ids, offsets), repeats)
        same = expected is None or np.array_equal(coded[0], expected[0])
        expected = coded if expected is None else expected
        rows.append(row("bit-level encode (MB of uint32 ids)", f"gpubpe {name}", seconds,
                        megabytes, stats if name == "cuda" else None, "" if same else "DIFFERS"))
        seconds, decoded, stats = best(lambda codec=codec, coded=coded: codec.decode_batch(*coded),
                                       repeats)
        rows.append(row("bit-level decode (MB of uint32 ids)", f"gpubpe {name}", seconds,
                        megabytes, stats if name == "cuda" else None,
                        "" if np.array_equal(decoded[0], ids) else "ROUND TRIP FAILS"))
    return rows


def markdown(result: dict, bench_rows: list | None, tests: str | None) -> str:
    doctor = result.get("doctor") or {}
    devices = ", ".join(f"{d['name']} ({d['memory_bytes'] / 2**30:.0f} GiB, "
                        f"cc {d['compute_capability']}, {d['sm_count']} SMs)"
                        for d in doctor.get("devices", [])) or "no device listed"
    versions = ", ".join(f"{k} {v}" for k, v in doctor.get("versions", {}).items())
    lines = [f"## GPU node run, {result['date']}", "",
             f"Device: {devices}. Host: {result['machine']}. {versions}.",
             f"Corpus: {result['corpus']} ({result['megabytes']:.1f} MB in "
             f"{result['documents']:,} documents of ~2 KB), vocab_size {result['vocab_size']}, "
             f"best of {result['repeats']}. Probe: {doctor.get('probe', '?')}.", ""]
    if tests:
        lines += [f"Tests on the device: {tests.strip()}", ""]
    lines += ["| task | contender | seconds | MB/s | launches/MB | syncs/MB | note |",
              "|---|---|---:|---:|---:|---:|---|"]
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    for r in result["rows"]:
        lines.append(f"| {r['task']} | {r['contender']} | {fmt(r['seconds'], '.3f')} | "
                     f"{fmt(r['mb_per_s'], '.1f')} | {fmt(r.get('launches_per_mb'), '.3g')} | "
                     f"{fmt(r.get('syncs_per_mb'), '.3g')} | {r['note']} |")
    if bench_rows:
        lines += ["", "`gpubpe bench` (training and encoding, with HF tokenizers and tiktoken):",
                  "", "| task | contender | seconds | MB/s | launches | syncs | note |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r in bench_rows:
            def per(v, r=r):
                return "-" if v is None else f"{v:.3g}/{r['unit']}"
            seconds = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
            rate = "-" if r["mb_per_s"] is None else f"{r['mb_per_s']:.1f}"
            lines.append(f"| {r['task']} | {r['contender']} | {seconds} | {rate} | "
                         f"{per(r.get('launches_per_unit'))} | {per(r.get('syncs_per_unit'))} | "
                         f"{r['note']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, help="a UTF-8 text file (default: the demo corpus)")
    parser.add_argument("--megabytes", type=float, default=32.0)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--doctor", type=Path, help="`gpubpe doctor --json` output to quote")
    parser.add_argument("--bench", type=Path, help="`gpubpe bench --json` output to include")
    parser.add_argument("--tests", type=Path, help="the pytest summary to quote")
    args = parser.parse_args()
    docs = documents(args.corpus, args.megabytes)
    megabytes = sum(len(d.encode()) for d in docs) / 1e6
    tok = gpubpe.train(docs[: max(len(docs) // 8, 1)], args.vocab_size, progress=False,
                       backend="cpu")
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": machine(), "corpus": str(args.corpus or "gpubpe demo corpus"),
              "megabytes": megabytes, "documents": len(docs), "vocab_size": args.vocab_size,
              "repeats": args.repeats,
              "doctor": json.loads(args.doctor.read_text()) if args.doctor else None}
    result["rows"] = bench_tokenizer(tok, docs, megabytes, args.repeats)
    result["rows"] += bench_bitlevel(tok, docs, args.repeats)
    bench_rows = json.loads(args.bench.read_text()) if args.bench and args.bench.exists() else None
    tests = args.tests.read_text().strip().splitlines()[-1] if args.tests and \
        args.tests.exists() and args.tests.read_text().strip() else None
    text = markdown(result, bench_rows, tests)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()

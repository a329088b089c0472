"""Bit-level codec throughput against the machine's copy speed (DESIGN.md §6).

Times ``BitLevelCodec.encode_batch`` / ``decode_batch`` on a synthetic corpus of
byte-level tokenizer output for Chinese text, and ``np.copy`` of the same input
array, on one thread by default (``--threads``). Outputs are checked before
anything is timed (the round trip, and the Numba output against the NumPy
backend's); each operation is warmed up first and the JIT compile time (a fresh
Numba cache) is reported apart. Prints a markdown table.

    python bench/bitlevel_bench.py                  # 20M ids, one thread
    python bench/bitlevel_bench.py --n-ids 50000000 --threads 2

Corpora (seeded, so every run sees the same ids):

- ``mixed``: what a 32k vocabulary with byte fallback (Llama-2 style) gives on
  Chinese: 49% of the ids are byte fallbacks, as in the paper's Table 3 (en-zh,
  64M of 131M); the rest are merged tokens (ids 256-31999) and a little ASCII.
- ``bytes``: a byte-level tokenizer with no CJK merges: nearly every id is a byte
  of a 3-byte character, with some ASCII and merged tokens between.
- ``real``: real text, the Chinese and Japanese lines of ``tests/data/multiscript.txt``
  (LibreOffice help, from Debian's libreoffice-help-zh-cn / -ja; the same pages
  ``bench/corpora.py`` builds its zh and ja corpora from), as byte ids, each line a
  document (~60 ids), repeated up to ``--n-ids``.
- ``pages``: the zh and ja corpora themselves (every line of those help pages that holds
  the language's script, ~5 MB), when ``bench/corpora.py zh ja`` has built them in
  ``--corpora`` (``all`` leaves the corpus out, saying so, when they are not there);
  zh then ja, each line a document, repeated up to ``--n-ids``.

Each operation runs two ways on the same tables: ``lanes``, the CPU backend (vector
steps in LLVM IR, ``kernels/_lanes.py``: 64 positions a step in 16-bit lanes where the
ids fit and the CPU has AVX-512BW, else 16 in 32-bit lanes), and ``plain``, the best plain
Numba loops (``bench/bitlevel_plain.py``); the ratio column says how much faster the
lanes are. The load average is printed before and after: the ratios are taken side by
side in one run because the machine may be shared.

Characters are drawn Zipf-like from the CJK Unified Ideographs (U+4E00-9FFF),
with some CJK punctuation (U+3000-303F) and Hangul (U+AC00-D7A3); documents
are 200-4000 ids long.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ids", type=int, default=20_000_000, help="ids per corpus")
    parser.add_argument("--threads", type=int, default=1, help="threads: the codec's chunks on gpubpe's threads, the plain loops' prange on NUMBA_NUM_THREADS")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs; medians reported")
    parser.add_argument("--corpus", choices=["real", "pages", "mixed", "bytes", "all"],
                        default="all")
    parser.add_argument("--corpora", default=str(Path(__file__).resolve().parent / "corpora"),
                        help="where bench/corpora.py wrote zh.txt and ja.txt (corpus pages)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


ARGS = parse_args()
# Set before numba is imported: the thread count, and a fresh cache so compile time is real.
os.environ["NUMBA_NUM_THREADS"] = str(ARGS.threads)
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpubpe-bench-numba-")

import platform  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import bitlevel_plain  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402

from gpubpe._threads import run_all  # noqa: E402
from gpubpe.bitlevel import BitLevelCodec  # noqa: E402
from gpubpe.kernels import bitpack  # noqa: E402

THREADS = {"n_chunks": ARGS.threads, "run": run_all}  # the codec's chunks on gpubpe's threads

BASE_VOCAB_SIZE = 32000
CORPUS_MIX = {"mixed": (0.74, 0.02), "bytes": (0.02, 0.03)}  # (merged-token units, ASCII units)


def synthetic_corpus(kind, n_ids, seed):
    """Flat uint32 ids and int64 offsets of about ``n_ids`` ids of tokenizer output."""
    rng = np.random.default_rng(seed)
    p_token, p_ascii = CORPUS_MIX[kind]
    n_units = int(n_ids / (3 - 2 * (p_token + p_ascii))) + 1
    units = rng.random(n_units)
    code_points = _zipf_code_points(rng, n_units)
    is_token, is_ascii = units < p_token, (units >= p_token) & (units < p_token + p_ascii)
    is_char = ~(is_token | is_ascii)
    starts = np.concatenate([[0], np.cumsum(np.where(is_char, 3, 1))[:-1]])
    ids = np.empty(starts[-1] + (3 if is_char[-1] else 1), dtype=np.uint32)
    ids[starts] = np.where(is_token, rng.integers(256, BASE_VOCAB_SIZE, n_units),
                           np.where(is_ascii, rng.integers(0x20, 0x7F, n_units),
                                    0xE0 | (code_points >> 12)))
    char_starts = starts[is_char]
    ids[char_starts + 1] = 0x80 | ((code_points[is_char] >> 6) & 0x3F)
    ids[char_starts + 2] = 0x80 | (code_points[is_char] & 0x3F)
    ids = ids[:n_ids]
    cuts = np.cumsum(rng.integers(200, 4000, n_ids // 200 + 2))
    offsets = np.concatenate([[0], cuts[cuts < ids.size], [ids.size]]).astype(np.int64)
    return ids, offsets


def _zipf_code_points(rng, n):
    ranks = rng.zipf(1.1, n) % 20992  # the CJK Unified Ideographs block
    code_points = 0x4E00 + rng.permutation(20992)[ranks]
    other = rng.random(n)
    code_points = np.where(other < 0.08, 0x3000 + rng.integers(0, 0x40, n), code_points)
    return np.where(other > 0.97, 0xAC00 + rng.integers(0, 11172, n), code_points)


def run_times(functions, repeats):
    """CPU times of each function (a list per function), the runs interleaved so that
    load on a shared machine hits all of them alike. CPU time of the process, not wall
    time: on a shared machine a run that waits for a core is not counted."""
    times = [[] for _ in functions]
    for _ in range(repeats):
        for k, function in enumerate(functions):
            start = time.process_time()
            function()
            times[k].append(time.process_time() - start)
    return [np.array(t) for t in times]


def check_outputs(codec, reference_codec, ids, offsets):
    """Round trip on the whole corpus, and Numba output equal to the NumPy backend's."""
    coded, coded_offsets = codec.encode_batch(ids, offsets)
    expected = reference_codec.encode_batch(ids, offsets)
    if not (np.array_equal(coded, expected[0]) and np.array_equal(coded_offsets, expected[1])):
        sys.exit("encode: the Numba output differs from the NumPy backend's")
    decoded, decoded_offsets = codec.decode_batch(coded, coded_offsets)
    if not (np.array_equal(decoded, ids) and np.array_equal(decoded_offsets, offsets)):
        sys.exit("decode(encode(x)) != x")
    return coded, coded_offsets


MULTISCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                           "multiscript.txt")


def real_corpus(n_ids):
    """The Chinese and Japanese lines of tests/data/multiscript.txt as byte ids, one
    document a line, repeated to about ``n_ids`` ids."""
    import re

    han_or_kana = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
    hangul = re.compile("[\uac00-\ud7af]")
    with open(MULTISCRIPT, encoding="utf-8") as handle:
        lines = [line.encode() for line in handle.read().split("\n")
                 if han_or_kana.search(line) and not hangul.search(line)
                 and not line.lstrip().startswith("<annotation")]  # the emoji part
    return lines_as_ids(lines, n_ids)


def page_files():
    """bench/corpora.py's zh and ja corpora in --corpora, or None where one is missing."""
    files = [Path(ARGS.corpora) / f"{language}.txt" for language in ("zh", "ja")]
    return files if all(path.is_file() for path in files) else None


def pages_corpus(n_ids):
    """The zh and ja corpora (``page_files``) as byte ids, one document a line."""
    lines = [line for path in page_files() for line in path.read_bytes().split(b"\n") if line]
    return lines_as_ids(lines, n_ids)


def lines_as_ids(lines, n_ids):
    """Lines (bytes) as byte ids, one document each, repeated to about ``n_ids`` ids."""
    lines = lines * (n_ids // sum(map(len, lines)) + 1)
    offsets = np.concatenate([[0], np.cumsum([len(line) for line in lines])]).astype(np.int64)
    k = int(np.searchsorted(offsets, n_ids))
    ids = np.frombuffer(b"".join(lines), dtype=np.uint8)[:offsets[k]].astype(np.uint32)
    return ids, offsets[:k + 1].copy()


def bench_corpus(kind, codec, reference_codec):
    real = {"real": real_corpus, "pages": pages_corpus}
    ids, offsets = real[kind](ARGS.n_ids) if kind in real else \
        synthetic_corpus(kind, ARGS.n_ids, ARGS.seed)
    coded, coded_offsets = check_outputs(codec, reference_codec, ids, offsets)
    tables, base = codec._tables, codec.base_vocab_size
    lead, values, table = tables["lead_prefix_ids"], tables["value_ids"], tables["decode_table"]
    plain_encoded = bitlevel_plain.bitlevel_encode_cpu_plain(ids, offsets, lead, values, base)
    plain_decoded = bitlevel_plain.bitlevel_decode_cpu_plain(coded, coded_offsets, table, base)
    if not (np.array_equal(plain_encoded[0], coded) and np.array_equal(plain_decoded[0], ids)):
        sys.exit("the plain loops' output differs from the CPU backend's")
    rows = []
    for operation, data, lanes, plain in [
        ("encode", ids, lambda: bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, base,
                                                            **THREADS),
         lambda: bitlevel_plain.bitlevel_encode_cpu_plain(ids, offsets, lead, values, base)),
        ("decode", coded, lambda: bitpack.bitlevel_decode_cpu(coded, coded_offsets, table, base,
                                                              **THREADS),
         lambda: bitlevel_plain.bitlevel_decode_cpu_plain(coded, coded_offsets, table, base)),
    ]:
        lanes(), plain()  # warm-up
        copy_times, lanes_times, plain_times = run_times(
            [lambda data=data: np.copy(data), lanes, plain], ARGS.repeats)
        copy_seconds = np.median(copy_times)
        for variant, times in (("lanes", lanes_times), ("plain", plain_times)):
            ratios = np.percentile(copy_times / times, [25, 50, 75])  # per interleaved round
            rows.append((operation, kind, variant, data.size, np.median(times),
                         data.size / copy_seconds, ratios,
                         np.median(plain_times / lanes_times)))
    byte_share = float(np.mean(ids < 256))
    return rows, f"{kind}: {ids.size:,} ids in {offsets.size - 1:,} documents, " \
                 f"{100 * byte_share:.0f}% byte ids, coded to {coded.size:,} ids"


def compile_seconds(codec):
    """First calls on a tiny input with a fresh Numba cache: the JIT compile time."""
    sample = np.array(list("众唤众".encode()) + [300], dtype=np.uint32)
    start = time.perf_counter()
    coded = codec.encode(sample)
    middle = time.perf_counter()
    codec.decode(coded)
    return middle - start, time.perf_counter() - middle


def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def load_average():
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


LOAD_AT_START = load_average()


def main():
    codec = BitLevelCodec(BASE_VOCAB_SIZE, backend="cpu")
    reference_codec = BitLevelCodec(BASE_VOCAB_SIZE, backend="numpy")
    jit_encode, jit_decode = compile_seconds(codec)
    kinds = ["real", "pages", "mixed", "bytes"] if ARGS.corpus == "all" else [ARGS.corpus]
    if "pages" in kinds and page_files() is None:
        if ARGS.corpus == "pages":
            sys.exit(f"no zh.txt and ja.txt in {ARGS.corpora}: run "
                     f"python bench/corpora.py zh ja --out {ARGS.corpora}")
        print(f"(corpus pages left out: no zh.txt and ja.txt in {ARGS.corpora}; "
              "python bench/corpora.py zh ja builds them)\n")
        kinds.remove("pages")
    results = [bench_corpus(kind, codec, reference_codec) for kind in kinds]
    print("## Bit-level codec throughput (Numba CPU backend)\n")
    print(f"- machine: {machine()}")
    print(f"- threads: {ARGS.threads} (NUMBA_NUM_THREADS={numba.get_num_threads()})")
    print(f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"- load average (1, 5, 15 min): at the start {LOAD_AT_START}, at the end "
          f"{load_average()}")
    print(f"- numpy {np.__version__}, numba {numba.__version__}, "
          f"Python {platform.python_version()}")
    print(f"- JIT compile (first call, fresh cache): encode {jit_encode:.1f} s, "
          f"decode {jit_decode:.1f} s")
    for _, description in results:
        print(f"- corpus {description}")
    print(f"- process CPU time, medians of {ARGS.repeats} interleaved runs after a warm-up "
          "(times and ratios; IQR of the per-round ratio); outputs checked first\n")
    print("| operation | corpus | variant | input ids | time (ms) | Mids/s | np.copy Mids/s "
          "| ratio to copy (median, IQR) | lanes speedup over plain |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for rows, _ in results:
        for operation, kind, variant, n, seconds, copy_rate, ratios, speedup in rows:
            print(f"| {operation} | {kind} | {variant} | {n:,} | {1000 * seconds:.1f} | "
                  f"{n / seconds / 1e6:.0f} | {copy_rate / 1e6:.0f} | {ratios[1]:.2f} "
                  f"({ratios[0]:.2f}-{ratios[2]:.2f}) | {speedup:.2f}x |")


if __name__ == "__main__":
    main()

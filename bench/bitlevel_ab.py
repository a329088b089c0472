"""Bit-level CPU kernels of a git revision against the working tree's, interleaved in one
process (the machine may be shared: only ratios taken side by side hold).

    python bench/bitlevel_ab.py --rev HEAD --corpus real --repeats 11
    python bench/bitlevel_ab.py --compute   # kernels alone, on a pre-faulted output

The revision's ``kernels/bitpack.py`` is imported as ``gpubpe.kernels._bitpack_rev`` (it
shares ``_lanes``, ``_cuda`` and ``_jit`` with the working tree). Outputs are checked equal
(ids, offsets, first bad or malformed) before anything is timed. Each round times np.copy
of the input, the revision's call and the working tree's, in an order that alternates;
reported: medians and IQR of the times and of the per-round ratios. ``--compute`` calls
the chunk loops directly on one pre-faulted output buffer (no page faults, no joining).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="git revision to compare against")
    parser.add_argument("--n-ids", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--corpus", choices=["real", "mixed", "bytes"], default="real")
    parser.add_argument("--op", choices=["encode", "decode", "both"], default="both")
    parser.add_argument("--compute", action="store_true",
                        help="time the chunk loops alone, output pre-faulted")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the output check (for experiments that change the output)")
    return parser.parse_args()


ARGS = parse_args()
os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

from gpubpe.bitlevel import BitLevelCodec  # noqa: E402
from gpubpe.kernels import bitpack as new  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def revision_module(rev):
    source = subprocess.run(["git", "show", f"{rev}:kernels/bitpack.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    folder = tempfile.mkdtemp(prefix="gpubpe-ab-")
    path = os.path.join(folder, "_bitpack_rev.py")
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("gpubpe.kernels._bitpack_rev", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def corpus(kind, n_ids):
    sys.argv = [sys.argv[0], "--n-ids", str(n_ids)]  # bitlevel_bench parses its arguments
    sys.path.insert(0, HERE)
    import bitlevel_bench

    if kind == "real":
        return bitlevel_bench.real_corpus(n_ids)
    return bitlevel_bench.synthetic_corpus(kind, n_ids, 0)


def compute_call(module, operation, data, offsets, tables, base):
    """The chunk loops alone, one chunk, on an output buffer touched once beforehand."""
    if operation == "encode":
        lead, values = tables["lead_prefix_ids"], tables["value_ids"]
        layout = module._lane_table(module._encode_lane_table, lead, values)
        bounds = np.array([0, data.size], dtype=np.int64)
        sources = module._chunk_sources(bounds, 1)
        out = np.ones(data.size + 64, dtype=np.uint32)
        wide = module._fits_wide_lanes(base, lead, values)
        return lambda: module._encode_chunks(data, offsets, bounds, sources, layout, base, wide,
                                             out, *_run_arg(module))
    table = tables["decode_table"]
    layout = module._lane_table(module._decode_lane_table, table)
    bounds = np.array([0, data.size], dtype=np.int64)
    sources = module._chunk_sources(bounds, 3)
    out = np.ones(3 * data.size + 64, dtype=np.uint32)
    wide = module._fits_wide_lanes(base + table.size)
    return lambda: module._decode_chunks(data, offsets, bounds, sources, table, layout, base,
                                         wide, out, *_run_arg(module))


def _run_arg(module) -> tuple:
    """The chunk runner, for a version of the module whose chunk loops take one."""
    return (module._one_by_one,) if hasattr(module, "_one_by_one") else ()


def full_call(module, operation, data, offsets, tables, base):
    if operation == "encode":
        return lambda: module.bitlevel_encode_cpu(data, offsets, tables["lead_prefix_ids"],
                                                  tables["value_ids"], base)
    return lambda: module.bitlevel_decode_cpu(data, offsets, tables["decode_table"], base)


def check_equal(old_call, new_call):
    a, b = old_call(), new_call()
    for x, y in zip(a, b):
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            sys.exit("the revision's output differs from the working tree's")


def main():
    old = revision_module(ARGS.rev)
    codec = BitLevelCodec(32000, backend="cpu")
    tables, base = codec._tables, codec.base_vocab_size
    ids, offsets = corpus(ARGS.corpus, ARGS.n_ids)
    coded, coded_offsets = codec.encode_batch(ids, offsets)
    operations = ["encode", "decode"] if ARGS.op == "both" else [ARGS.op]
    print(f"rev {ARGS.rev} vs working tree, corpus {ARGS.corpus}, {ids.size:,} ids, "
          f"{'compute only' if ARGS.compute else 'whole calls'}, load {os.getloadavg()}")
    for operation in operations:
        data, data_offsets = (ids, offsets) if operation == "encode" else (coded, coded_offsets)
        make = compute_call if ARGS.compute else full_call
        calls = [make(module, operation, data, data_offsets, tables, base)
                 for module in (old, new)]
        if not ARGS.no_check:
            check_equal(*(full_call(m, operation, data, data_offsets, tables, base)
                          for m in (old, new)))
        for call in calls:
            call()
        times = {"copy": [], "old": [], "new": []}
        for round_ in range(ARGS.repeats):
            order = [("copy", lambda data=data: np.copy(data)), ("old", calls[0]),
                     ("new", calls[1])]
            if round_ % 2:
                order = [order[0], order[2], order[1]]
            for name, call in order:
                start = time.process_time()
                call()
                times[name].append(time.process_time() - start)
        t = {k: np.array(v) for k, v in times.items()}
        for name in ("old", "new"):
            q = np.percentile(t["copy"] / t[name], [25, 50, 75])
            ms = np.percentile(t[name], [25, 50, 75]) * 1e3
            print(f"{operation} {name}: {ms[1]:.1f} ms ({ms[0]:.1f}-{ms[2]:.1f}), "
                  f"{ms[1] * 1e6 / data.size:.3f} ns/id, ratio to copy {q[1]:.2f} "
                  f"({q[0]:.2f}-{q[2]:.2f})")
        speed = np.percentile(t["old"] / t["new"], [25, 50, 75])
        print(f"{operation} copy: {np.median(t['copy']) * 1e3:.1f} ms; new over old "
              f"{speed[1]:.2f}x ({speed[0]:.2f}-{speed[2]:.2f})")
    print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()

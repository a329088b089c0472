"""Where a bit-level encoding call spends its time, one thread (bench/RESULTS.md, issue 18
part 3): the whole call, the chunk loop with a fresh and with a pre-faulted output
buffer (the difference is the output's page faults), the cut map, the loop with its
input in L2, and np.copy of the input beside them; interleaved rounds, medians and IQR.

    python bench/bitlevel_breakdown.py --n-ids 20000000 --repeats 11
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ids", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=11)
    return parser.parse_args()


ARGS = parse_args()
os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

from gpubpe.bitlevel import BitLevelCodec  # noqa: E402
from gpubpe.kernels import bitpack  # noqa: E402

BASE = 32000
IN_L2 = 200_000  # ids of the in-cache run, called 100 times


def real_corpus(n_ids):
    sys.argv = [sys.argv[0], "--n-ids", str(n_ids)]  # bitlevel_bench parses its arguments
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bitlevel_bench

    return bitlevel_bench.real_corpus(n_ids)


def chunk_loop(ids, offsets, layout, out):
    bounds = np.array([0, ids.size], dtype=np.int64)
    sources = bitpack._chunk_sources(bounds, 1)
    return lambda: bitpack._encode_chunks(ids, offsets, bounds, sources, layout, BASE, True,
                                          out() if callable(out) else out, bitpack._one_by_one)


def main():
    ids, offsets = real_corpus(ARGS.n_ids)
    tables = BitLevelCodec(BASE)._tables
    lead, values = tables["lead_prefix_ids"], tables["value_ids"]
    layout = bitpack._lane_table(bitpack._encode_lane_table, lead, values)
    n_out = bitpack.bitlevel_encode_cpu(ids, offsets, lead, values, BASE)[0].size
    small = ids[:IN_L2].copy()
    small_offsets = np.r_[offsets[offsets < IN_L2], IN_L2].astype(np.int64)
    in_l2 = chunk_loop(small, small_offsets, layout, np.ones(IN_L2 + 64, dtype=np.uint32))
    calls = {
        "np.copy of the input": lambda: np.copy(ids),
        "whole bitlevel_encode_cpu call": lambda: bitpack.bitlevel_encode_cpu(
            ids, offsets, lead, values, BASE),
        "chunk loop, fresh output": chunk_loop(
            ids, offsets, layout, lambda: np.empty(ids.size + 64, dtype=np.uint32)),
        "chunk loop, output pre-faulted": chunk_loop(
            ids, offsets, layout, np.ones(ids.size + 64, dtype=np.uint32)),
        "cut map": lambda: bitpack._cut_map(offsets, ids.size),
        f"writing {4 * n_out / 1e6:.0f} MB of fresh memory": lambda: np.empty(
            ids.size + 16, dtype=np.uint32)[:n_out].fill(1),
        f"chunk loop, {IN_L2:,} ids in L2, 100 calls": lambda: [in_l2() for _ in range(100)],
    }
    for call in calls.values():
        call()
    times = {name: [] for name in calls}
    for _ in range(ARGS.repeats):
        for name, call in calls.items():
            start = time.process_time()
            call()
            times[name].append(time.process_time() - start)
    print(f"{ids.size:,} real zh+ja ids in {offsets.size - 1:,} documents, coded to "
          f"{n_out:,}; load {os.getloadavg()}")
    for name, t in times.items():
        q = np.percentile(t, [25, 50, 75]) * 1e3
        n = 100 * IN_L2 if "L2" in name else ids.size
        print(f"{name}: {q[1]:.2f} ms ({q[0]:.2f}-{q[2]:.2f}), {q[1] * 1e6 / n:.3f} ns/id")


if __name__ == "__main__":
    main()

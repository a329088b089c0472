"""Streaming files into token files: layouts, readers, atomic output, bounded memory, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpubpe
from gpubpe.cli import main
from gpubpe.encode_files import (
    decode_token_file,
    encode_files,
    npy_header,
    read_token_file,
    token_dtype,
)
from gpubpe.errors import ConfigError, CorpusError

DATA = Path(__file__).parent / "data" / "multiscript.txt"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return DATA.read_text(encoding="utf-8").split("\n")[:3000]


@pytest.fixture(scope="module")
def tok(lines) -> gpubpe.Tokenizer:
    return gpubpe.train([line + "\n" for line in lines[:1500]], 700,
                        special_tokens=["<|endoftext|>"], progress=False)


@pytest.fixture
def corpus(tmp_path, lines):
    """A .txt (one document per line, its "\\n" kept) and a .jsonl file; (paths, documents)."""
    text_path = tmp_path / "corpus.txt"
    text_path.write_text("\n".join(lines[:1200]) + "\n", encoding="utf-8")
    records = [{"id": i, "text": line + "\n<|endoftext|>\ttail"} for i, line in
               enumerate(lines[1200:1700])]
    jsonl_path = tmp_path / "corpus.jsonl"
    jsonl_path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n\n",
                          encoding="utf-8")
    return [text_path, jsonl_path], [line + "\n" for line in lines[:1200]] + \
        [r["text"] for r in records]


def load_npy(path: Path):
    return np.load(path), np.load(path.with_suffix(".offsets.npy"))


def test_npy_output_holds_every_document_in_order(tok, corpus, tmp_path):
    paths, documents = corpus
    out = tmp_path / "tokens.npy"
    done = encode_files(tok, paths, out, progress=False, batch_bytes=4096)
    ids, offsets = load_npy(out)
    assert ids.dtype == np.uint16 and offsets.dtype == np.int64
    assert done.documents == len(documents) == offsets.size - 1 and done.tokens == ids.size
    assert offsets[0] == 0 and offsets[-1] == ids.size
    expected = tok.encode_batch(documents, disallowed_special=())
    assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == expected
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "temp file left"


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_bin_and_idx_are_flat_nanogpt_files(tok, corpus, tmp_path, dtype):
    paths, documents = corpus
    out = tmp_path / "tokens.bin"
    encode_files(tok, paths, out, dtype=dtype, progress=False, append_special="<|endoftext|>")
    ids = np.memmap(out, dtype=dtype, mode="r")
    offsets = np.fromfile(tmp_path / "tokens.idx", dtype="<i8")
    eot = tok.special_tokens["<|endoftext|>"]
    expected = [d + [eot] for d in tok.encode_batch(documents, disallowed_special=())]
    assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == expected
    read_ids, read_offsets = read_token_file(out, dtype=dtype)
    assert np.array_equal(read_ids, ids) and np.array_equal(read_offsets, offsets)


def test_prepended_and_appended_specials_frame_every_document(lines, tmp_path):
    """``prepend_special`` (Llama 3's "<|begin_of_text|>", which HF's post-processor adds)
    and ``append_special`` around every document, empty ones too, in the file and printed."""
    tok = gpubpe.train([line + "\n" for line in lines[:600]], 400, progress=False,
                       special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    first, last = (tok.special_tokens[t] for t in ("<|begin_of_text|>", "<|end_of_text|>"))
    records = [{"text": text} for text in ["", "a b", "", "\u4e2d\u6587 x\n", ""]]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    bodies = tok.encode_batch([r["text"] for r in records])
    for prepend, append, framed in [
            ("<|begin_of_text|>", "<|end_of_text|>", [[first] + b + [last] for b in bodies]),
            ("<|begin_of_text|>", None, [[first] + b for b in bodies])]:
        out = tmp_path / f"framed-{append is None}.npy"
        encode_files(tok, [path], out, progress=False, prepend_special=prepend,
                     append_special=append)
        ids, offsets = load_npy(out)
        assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == framed
        printed = tmp_path / f"framed-{append is None}.txt"
        tok_path = tmp_path / "tok.json"
        tok.save(tok_path)
        assert main(["encode", "-t", str(tok_path), str(path), "-o", str(printed),
                     "--prepend-special", prepend] +
                    (["--append-special", append] if append else [])) == 0
        assert [list(map(int, line.split())) for line in
                printed.read_text().splitlines()] == framed
    with pytest.raises(ConfigError, match="prepend_special='<s>' is not a special token"):
        encode_files(tok, [path], tmp_path / "x.npy", progress=False, prepend_special="<s>")


def test_dtype_follows_the_vocabulary_size():
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
    with pytest.raises(ConfigError, match="cannot hold the ids"):
        token_dtype(70000, "uint16")
    with pytest.raises(ConfigError, match="not a NumPy dtype"):
        token_dtype(100, "nonsense")


def test_parquet_column_is_read_from_arrow_buffers(tok, lines, tmp_path):
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the 'parquet' or 'dev' extra")
    pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs the 'parquet' or 'dev' extra")
    documents = lines[:900]
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": documents, "n": list(range(900))}), path, row_group_size=256)
    out = tmp_path / "tokens.npy"
    encode_files(tok, [path], out, text_field="body", progress=False)
    ids, offsets = load_npy(out)
    assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == \
        tok.encode_batch(documents, disallowed_special=())
    with pytest.raises(CorpusError, match="no column 'text'"):
        encode_files(tok, [path], tmp_path / "x.npy", progress=False)


def test_interrupted_run_leaves_no_file_under_the_final_name(tok, corpus, tmp_path,
                                                              interrupt_encoding):
    interrupt_encoding(tok)
    _assert_interrupted_run_keeps_the_old_output(tok, corpus, tmp_path)


def _assert_interrupted_run_keeps_the_old_output(tok, corpus, tmp_path) -> None:
    """encode_files into tokens.npy raises KeyboardInterrupt (the caller arranged where),
    the old tokens.npy is as it was and no other file is left beside the corpus."""
    paths, _ = corpus
    out = tmp_path / "tokens.npy"
    out.write_bytes(b"previous run")
    with pytest.raises(KeyboardInterrupt):
        encode_files(tok, paths, out, progress=False, batch_bytes=2048)
    assert out.read_bytes() == b"previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "corpus.txt",
                                                          "tokens.npy"]


def test_bad_inputs_give_clear_errors(tok, tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "fine"}\n{"text": \n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid JSON"):
        encode_files(tok, [bad_json], tmp_path / "x.npy", progress=False)
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text('{"body": "x"}\n')
    with pytest.raises(CorpusError, match="no 'text' field"):
        encode_files(tok, [no_field], tmp_path / "x.npy", progress=False)
    with pytest.raises(CorpusError, match="no such file"):
        encode_files(tok, [tmp_path / "missing.txt"], tmp_path / "x.npy", progress=False)
    with pytest.raises(ConfigError, match=r"must end in \.npy or \.bin"):
        encode_files(tok, [bad_json], tmp_path / "x.txt", progress=False)
    with pytest.raises(ConfigError, match="not a special token"):
        encode_files(tok, [bad_json], tmp_path / "x.npy", append_special="<eos>", progress=False)
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob(".*"))


def test_empty_input_gives_empty_arrays(tok, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    encode_files(tok, [empty], tmp_path / "tokens.npy", progress=False)
    ids, offsets = load_npy(tmp_path / "tokens.npy")
    assert ids.size == 0 and offsets.tolist() == [0]


def test_npy_header_has_a_fixed_length():
    for n in (0, 7, 10**15):
        header = npy_header(np.dtype(np.uint32), n)
        assert len(header) == 128 and header.endswith(b"\n")


def test_truncated_token_files_are_clear_errors(tok, corpus, tmp_path):
    paths, _ = corpus
    out = tmp_path / "tokens.npy"
    encode_files(tok, paths, out, progress=False)
    out.write_bytes(out.read_bytes()[:-3])
    with pytest.raises(CorpusError, match="tokens.npy is truncated"):
        read_token_file(out)
    bin_out = tmp_path / "tokens.bin"
    encode_files(tok, paths, bin_out, progress=False)
    bin_out.write_bytes(bin_out.read_bytes()[:-1])
    with pytest.raises(CorpusError, match="truncated"):
        read_token_file(bin_out)


def test_decoding_a_token_file_of_another_vocabulary_is_an_error(tok, corpus, tmp_path):
    out = tmp_path / "tokens.npy"
    encode_files(tok, corpus[0], out, progress=False)
    small = gpubpe.train(["tiny corpus"], 260, progress=False)
    with pytest.raises(CorpusError, match="out of range"):
        list(decode_token_file(small, out))
    assert list(decode_token_file(tok, out)) == corpus[1]


# ---------------------------------------------------------------- memory


_CHILD = """
import resource, sys
import gpubpe
from gpubpe.encode_files import encode_files
tok = gpubpe.load(sys.argv[1])
encode_files(tok, [sys.argv[2]], sys.argv[3], progress=False, batch_bytes=1 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_kib(tok_path, corpus_path, out_path) -> int:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tok_path), str(corpus_path),
                           str(out_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_peak_memory_does_not_grow_with_the_input(tok, tmp_path):
    """8x the input may add at most a few MB of RSS: batches stream, nothing accumulates.

    (A 1 GB run was measured by hand: see the report in bench/RESULTS.md.)
    """
    tok_path = tmp_path / "tok.json"
    tok.save(tok_path)
    block = DATA.read_bytes()
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_bytes(block * 2)
    large.write_bytes(block * 16)
    rss_small = peak_rss_kib(tok_path, small, tmp_path / "small.npy")
    rss_large = peak_rss_kib(tok_path, large, tmp_path / "large.npy")
    growth_mib = (rss_large - rss_small) / 1024
    assert growth_mib < 0.1 * (large.stat().st_size - small.stat().st_size) / 2**20, growth_mib
    assert np.load(tmp_path / "large.offsets.npy").size == 16 * (block.count(b"\n")) + 1


# ---------------------------------------------------------------- command line


def test_cli_encode_files_to_npy_and_decode_them_back(tok, corpus, tmp_path, capsys):
    paths, documents = corpus
    tok_path = tmp_path / "tok.json"
    tok.save(tok_path)
    out = tmp_path / "tokens.npy"
    assert main(["encode", "-t", str(tok_path), *map(str, paths), "-o", str(out),
                 "--no-progress"]) == 0
    assert "encoded 1,700 documents" in capsys.readouterr().err
    assert main(["decode", "-t", str(tok_path), str(out)]) == 0
    # .txt documents keep their own newline; .jsonl documents get one each
    assert capsys.readouterr().out == "".join(d if d.endswith("\n") else d + "\n"
                                              for d in documents)
    out.write_bytes(out.read_bytes()[:200])
    assert main(["decode", "-t", str(tok_path), str(out)]) == 2
    assert "truncated" in capsys.readouterr().err


def test_cli_bin_with_dtype_and_text_output(tok, corpus, tmp_path, capsys):
    paths, documents = corpus
    tok_path = tmp_path / "tok.json"
    tok.save(tok_path)
    out = tmp_path / "tokens.bin"
    assert main(["encode", "-t", str(tok_path), str(paths[0]), "-o", str(out), "--dtype",
                 "uint32", "--no-progress", "--threads", "2"]) == 0
    ids = np.fromfile(out, dtype=np.uint32)
    assert ids.tolist() == [i for d in tok.encode_batch(documents[:1200], disallowed_special=())
                            for i in d]
    assert main(["encode", "-t", str(tok_path), str(paths[1])]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [list(map(int, line.split())) for line in printed] == tok.encode_batch(
        documents[1200:], disallowed_special=())
    assert main(["decode", "-t", str(tok_path), str(out), "--dtype", "uint32"]) == 0
    assert capsys.readouterr().out == paths[0].read_text(encoding="utf-8")  # byte for byte
    assert main(["encode", "-t", str(tok_path), "--text", "x", "-o", str(out)]) == 2


def test_cli_decode_ends_each_document_with_one_newline(tok, tmp_path, capsys):
    """Documents of a .jsonl file (not exact: each gets a newline it lacks), among them
    empty ones and ones ending with one or two newlines, written from their bytes (no
    str made)."""
    texts = ["", "plain", "ends with one\n", "", "中文字符", "two\n\n", "tail ", ""]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                              for t in texts), encoding="utf-8")
    tok_path, out = tmp_path / "tok.json", tmp_path / "docs.npy"
    tok.save(tok_path)
    assert main(["encode", "-t", str(tok_path), str(source), "-o", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["decode", "-t", str(tok_path), str(out)]) == 0
    assert capsys.readouterr().out == "".join(t if t.endswith("\n") else t + "\n" for t in texts)


def _fdopen_interrupted_at(monkeypatch, call: int) -> list:
    """``os.fdopen`` raising KeyboardInterrupt at its ``call``-th call: a signal landing
    after ``os.open`` made a file and before its handle came back. Returns the calls."""
    import os

    real_fdopen, calls = os.fdopen, []

    def fdopen(descriptor, *args, **kwargs):
        calls.append(descriptor)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_fdopen(descriptor, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    return calls


@pytest.mark.parametrize("interrupted_open", [1, 2])
def test_an_interrupt_just_after_a_temporary_file_is_made_leaves_none(tok, corpus, tmp_path,
                                                                      monkeypatch,
                                                                      interrupted_open):
    """A signal can land between ``os.open`` making a temporary file and the handle coming
    back (the signal test in test_bad_input.py met it on a loaded 2-core VM: it sends
    SIGTERM as soon as it sees a temporary file). Interrupted there at the ids file or the
    offsets file, the run leaves no file behind and the old output as it was."""
    calls = _fdopen_interrupted_at(monkeypatch, interrupted_open)
    _assert_interrupted_run_keeps_the_old_output(tok, corpus, tmp_path)
    assert len(calls) == interrupted_open


def test_an_interrupted_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The same for ``atomic_output`` (manifests, saved tokenizers)."""
    from gpubpe.atomic import write_text_atomically

    target = tmp_path / "manifest.json"
    target.write_text("before")
    _fdopen_interrupted_at(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(target, "after")
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    assert target.read_text() == "before"

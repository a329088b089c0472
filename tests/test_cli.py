"""The `gpubpe` command: train, encode, decode, demo, and its exit codes."""

from __future__ import annotations

import io
import subprocess
import sys
from unittest import mock

import pytest

import gpubpe
from gpubpe.cli import main


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "gpubpe", *args], input=stdin,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("low lower lowest\nnewer wider\nlow low low\n" * 50)
    return path


def test_train_encode_decode_round_trip(tmp_path, corpus, capsys):
    out = tmp_path / "tok.json"
    assert main(["train", str(corpus), "-o", str(out), "--vocab-size", "270", "--no-progress"]) == 0
    assert "on cpu (auto picked the CPU: " in capsys.readouterr().err  # auto says what it chose
    tok = gpubpe.load(out)
    assert tok.vocab_size == 270
    assert main(["encode", "-t", str(out), "--text", "lowest newer"]) == 0
    ids = capsys.readouterr().out.split()
    assert [int(i) for i in ids] == tok.encode("lowest newer")
    assert main(["decode", "-t", str(out), *ids]) == 0
    assert capsys.readouterr().out == "lowest newer\n"


def test_encode_files_one_line_per_document(tmp_path, corpus, capsys):
    out = tmp_path / "tok.json"
    gpubpe.train([corpus], 270, progress=False).save(out)
    assert main(["encode", "-t", str(out), str(corpus)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 150
    # each line of a .txt file is a document with its "\n" kept (as train and stats read it)
    assert gpubpe.load(out).decode([int(i) for i in lines[0].split()]) == "low lower lowest\n"


def test_encode_reads_the_lines_piped_on_standard_input(tmp_path, corpus, capsys, monkeypatch):
    """No input files (or '-'): standard input's lines are the documents, as a text file's
    are; its ids print. A terminal there is no input: the usage error says what to give."""
    out = tmp_path / "tok.json"
    gpubpe.train([corpus], 270, progress=False).save(out)
    assert main(["encode", "-t", str(out), str(corpus)]) == 0
    from_file = capsys.readouterr().out
    for files in ([], ["-"]):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(corpus.read_bytes())))
        assert main(["encode", "-t", str(out), *files]) == 0
        assert capsys.readouterr().out == from_file
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
    assert main(["encode", "-t", str(out), "-o", str(tmp_path / "ids.npy")]) == 2
    assert "standard input prints ids; to write .npy pass input files" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", mock.Mock(isatty=lambda: True))
    assert main(["encode", "-t", str(out)]) == 2
    assert "encode needs input files, --text, or text piped on standard input" in \
        capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["train", "missing.txt", "-o", "x.json", "--vocab-size", "300", "--no-progress"], "no such file"),
    (["train", "{corpus}", "-o", "x.json", "--vocab-size", "100", "--no-progress"], "below 256"),
    (["decode", "-t", "missing.json", "1"], "no such tokenizer file"),
    (["encode", "-t", "{tok}", "hello world"], "to encode a string, pass --text 'hello world'"),
    (["encode", "-t", "{tok}", "missing.txt"], "missing.txt: no such file"),
    (["decode", "-t", "{tok}", "1", "x"], "integers"),
    (["decode", "-t", "{tok}", "123456"], "out of range"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, corpus, capsys, args, message):
    tok = tmp_path / "tok.json"
    gpubpe.train([corpus], 260, progress=False).save(tok)
    args = [a.format(corpus=corpus, tok=tok) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_console_entry_point_help_and_usage_errors():
    result = run_cli("--help")
    assert result.returncode == 0 and "train" in result.stdout and "demo" in result.stdout
    assert run_cli("train").returncode == 2


def test_demo_runs_and_round_trips():
    result = run_cli("demo", "--vocab-size", "1024", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "trained 1024 tokens" in result.stdout
    assert "round trip decode(encode(corpus)) == corpus: ok" in result.stdout


def test_python_started_in_the_checkout_finds_the_kernels():
    """``pip install .`` then ``python`` in the checkout imports its gpubpe/ folder, which
    holds no kernels/ (they sit beside it). The editable finder, which maps them, is taken
    away first: the import must find them on its own."""
    from pathlib import Path

    root = Path(gpubpe.__file__).resolve().parent.parent
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
            "if 'editable' not in repr(f).lower()]; import gpubpe; "
            "print(gpubpe.Tokenizer.__name__, gpubpe.kernels.pretok.__file__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Tokenizer", str(root / "kernels" / "pretok.py")]

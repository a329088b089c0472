"""The measuring commands: stats, compare, doctor, bench, and train --scaffold."""

from __future__ import annotations

import json

import pytest

import gpubpe
from gpubpe.cli import main


@pytest.fixture
def corpus(tmp_path):
    lines = (gpubpe.cli.demo_corpus_path().read_text(encoding="utf-8").splitlines(True))[:800]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_train_scaffold_then_stats(tmp_path, corpus, capsys):
    out = tmp_path / "s.json"
    assert main(["train", str(corpus), "-o", str(out), "--vocab-size", "600", "--scaffold",
                 "--no-progress"]) == 0
    tok = gpubpe.load(out)
    assert tok.vocab_size == 600 and tok.scaffold_tokens
    capsys.readouterr()
    assert main(["stats", "-t", str(out), str(corpus)]) == 0
    report = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())
    n_bytes = int(report["bytes".rjust(18)].replace(",", ""))
    n_tokens = int(report["tokens".rjust(18)].replace(",", ""))
    assert n_bytes == corpus.stat().st_size
    assert abs(float(report["bytes_per_token".rjust(18)]) - n_bytes / n_tokens) < 1e-3
    assert 0 < float(report["redundancy".rjust(18)]) < 1


def test_compare_prints_the_papers_tables_and_plots(tmp_path, corpus, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    png = tmp_path / "freq.png"
    assert main(["compare", str(corpus), "--vocab-size", "600", "--plot", str(png),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| Original BPE |" in out and "| Scaffold-BPE |" in out and "drops" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_report_counts_dropped_tokens(corpus):
    from gpubpe.compare import compare

    result = compare([str(corpus)], 600, progress=False)
    plain = {result.plain.token_bytes(i) for i in range(600)}
    scaffold = {result.scaffold.token_bytes(i) for i in range(600)}
    assert result.report["dropped"] == len(plain - scaffold) == len(scaffold - plain)
    assert result.plain_stats["bytes"] == result.scaffold_stats["bytes"]


def test_doctor_reports_backends(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "backend cpu: available" in out and "backend cuda:" in out
    assert main(["doctor", "--ptx", "eighty"]) == 2


def test_doctor_says_whether_the_str_kernels_run(monkeypatch, capsys):
    """A Python whose str layout the check does not find runs the slow str paths with no
    error anywhere (3.12 did, unseen): doctor says so, and why."""
    import sys

    from gpubpe import _pystr

    if sys.implementation.name != "cpython":
        pytest.skip("the str kernels run on CPython only")
    assert main(["doctor"]) == 0
    assert "str kernels: in use: lists of str read" in capsys.readouterr().out
    monkeypatch.setattr(_pystr, "_checked_layout", lambda: None)
    assert main(["doctor"]) == 0
    assert ("str kernels: not in use (this CPython's str or list objects are not laid out as "
            "the kernels read them)") in capsys.readouterr().out


def test_doctor_says_whether_cuda_kernels_are_kept_on_disk(monkeypatch, capsys):
    monkeypatch.delenv("GPUBPE_CUDA_CACHE", raising=False)
    assert main(["doctor"]) == 0
    assert "cuda kernel cache: off: each process builds" in capsys.readouterr().out
    monkeypatch.setenv("GPUBPE_CUDA_CACHE", "1")
    assert main(["doctor"]) == 0
    assert "cuda kernel cache: on (GPUBPE_CUDA_CACHE=1)" in capsys.readouterr().out


def test_bench_cpu_rows_and_json(tmp_path, corpus, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", str(corpus), "--backend", "cpu", "--vocab-size", "400",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    contenders = {(r["task"], r["contender"]) for r in rows}
    assert ("train", "gpubpe cpu") in contenders and ("encode", "gpubpe cpu") in contenders
    assert {("encode", "tiktoken (encode_ordinary_batch)"),  # its batch call, and its loop
            ("encode", "tiktoken (encode_ordinary, a loop)")} <= contenders
    assert all("DIFFER" not in r["note"] for r in rows)
    assert "| train | gpubpe cpu |" in capsys.readouterr().out


def test_bench_cuda_rows_in_the_simulator_match_the_cpu(tmp_path, corpus):
    small = tmp_path / "small.txt"  # the simulator runs a CUDA thread as a Python thread
    small.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(True)[:150]),
                     encoding="utf-8")
    out = tmp_path / "bench.json"
    assert main(["bench", str(small), "--backend", "cpu,cuda", "--vocab-size", "280",
                 "--json", str(out)]) == 0
    rows = {(r["task"], r["contender"]): r for r in json.loads(out.read_text())}
    assert rows[("encode", "gpubpe cuda")]["seconds"] > 0
    assert rows[("train", "gpubpe cuda")]["note"] == ""  # merges equal the CPU's
    assert rows[("encode", "gpubpe cuda")]["note"] == "cold word cache"  # ids equal the CPU's

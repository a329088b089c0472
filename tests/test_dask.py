"""gpubpe.dask on a real LocalCluster (2 worker processes, 1 thread each), shared by the module.

Every distributed result is checked against the single-process one: counts
(fingerprint included), token shards end to end (ids and offsets byte for
byte, documents spanning split points, empty documents), after a lost worker,
after a resume; and the refusals (unreachable scheduler, another job's output).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import gpubpe
from gpubpe.cli import main
from gpubpe.errors import ConfigError
from gpubpe.pretokenize import read_file
from gpubpe.shards import plan_splits

distributed = pytest.importorskip("distributed", reason="the Dask tests need the 'dask' or 'dev' extra")
gd = pytest.importorskip("gpubpe.dask", reason="gpubpe.dask needs the 'dask' extra")

DATA = Path(__file__).parent / "data" / "multiscript.txt"
SPLIT_BYTES = 3000  # small, so the corpus below makes about a dozen splits


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as connected:
        yield connected


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    """A line file cut mid-document, a .jsonl with empty documents, an empty and a small file."""
    folder = tmp_path_factory.mktemp("corpus")
    lines = DATA.read_bytes().split(b"\n")[:400]
    text = folder / "a.txt"
    text.write_bytes(b"\n".join(lines) + b"\n\n\r\nlast line, no newline")
    records = folder / "b.jsonl"
    documents = ["", "hello world", "", "<|endoftext|> is text here", "\u00e9t\u00e9 " * 300, ""]
    records.write_text("\n".join(json.dumps({"text": d}) for d in documents) + "\n\n")
    empty = folder / "c.txt"
    empty.write_bytes(b"")
    small = folder / "d.txt"
    small.write_bytes(b"one\ntwo\n")
    return [text, records, empty, small]


@pytest.fixture(scope="module")
def tok(corpus) -> gpubpe.Tokenizer:
    return gpubpe.train([corpus[0]], 300, special_tokens=["<|endoftext|>"], progress=False)


@pytest.fixture(scope="module")
def expected(tmp_path_factory, tok, corpus):
    """The single-process encode_files output: (ids, offsets)."""
    out = tmp_path_factory.mktemp("single") / "tokens.npy"
    gpubpe.encode_files(tok, corpus, out, progress=False)
    return gpubpe.load_tokens(out)


def assert_same_tokens(out_dir: Path, expected) -> None:
    ids, offsets = gpubpe.load_tokens(out_dir)
    assert ids.dtype == expected[0].dtype
    assert np.asarray(ids).tobytes() == np.asarray(expected[0]).tobytes()
    assert offsets.tobytes() == np.asarray(expected[1]).tobytes()


def test_dask_is_imported_only_when_used():
    import subprocess

    code = ("import sys, gpubpe; loaded = lambda: [m in sys.modules for m in "
            "('gpubpe.dask', 'dask', 'distributed')]; before = loaded(); "
            "gpubpe.dask.count_words; print(*before, *loaded())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False"] * 3 + ["True", "False", "False"]


# ---------------------------------------------------------------- splits (no cluster)


@pytest.mark.parametrize("name, content", [
    ("x.txt", b"ab\n\ncd\r\n\nlong line here\nno newline"),
    ("x.jsonl", b'{"text": "a"}\n\n{"text": ""}\n{"text": "\\u00e9\\n"}\n  \n{"text": "z"}'),
])
def test_byte_ranges_tile_a_file_into_its_documents(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    whole = [d for b in read_file(path) for d in _documents(b)]
    for cut in range(len(content) + 1):  # every cut point, inside documents and between
        parts = [d for r in ((0, cut), (cut, len(content)))
                 for b in read_file(path, byte_range=r) for d in _documents(b)]
        assert parts == whole, cut


def test_bad_jsonl_line_in_a_byte_range_named_by_its_file_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "b"}\n{"text": 3}\n')
    with pytest.raises(gpubpe.errors.CorpusError, match=r"x.jsonl:3: field 'text' is a int"):
        list(read_file(path, byte_range=(20, path.stat().st_size)))


def _documents(batch) -> list[bytes]:
    return [batch.data[a:b] for a, b in zip(batch.doc_starts.tolist(), batch.doc_ends.tolist())]


def test_plan_splits_large_files_cut_small_grouped(corpus):
    splits = plan_splits(corpus, SPLIT_BYTES)
    pieces = [piece for split in splits for piece in split]
    size = corpus[0].stat().st_size
    cuts = [p for p in pieces if p.path == os.path.abspath(corpus[0])]
    assert cuts[0].start == 0 and cuts[-1].end == size and len(cuts) > 3
    assert all(a.end == b.start for a, b in zip(cuts, cuts[1:]))
    data = corpus[0].read_bytes()
    assert any(data[p.start - 1] != 10 for p in cuts[1:])  # some cut falls inside a document
    assert any(len(split) > 1 for split in splits)  # small files grouped
    assert all(sum(p.end - p.start for p in split) <= SPLIT_BYTES for split in splits)


# ---------------------------------------------------------------- on the cluster


def test_counts_equal_single_process(client, corpus):
    distributed_counts = gd.count_words(corpus, client=client, split_bytes=SPLIT_BYTES,
                                        fan_in=2, special_tokens=["<|endoftext|>"])
    single = gpubpe.count_words(corpus, special_tokens=["<|endoftext|>"], progress=False)
    assert distributed_counts.as_dict() == single.as_dict()
    assert distributed_counts.fingerprint == single.fingerprint
    assert distributed_counts.sources == single.sources


def test_counts_with_another_pattern_equal_single_process(client, corpus):
    distributed_counts = gd.count_words(corpus, client=client, split_bytes=SPLIT_BYTES,
                                        pattern="cl100k")
    assert distributed_counts.fingerprint == \
        gpubpe.count_words(corpus, pattern="cl100k", progress=False).fingerprint


def test_special_token_settings_equal_single_process(client, tok, corpus, tmp_path):
    settings = {"allowed_special": {"<|endoftext|>"}, "append_special": "<|endoftext|>",
                "prepend_special": "<|endoftext|>", "dtype": "uint32",
                "add_special_tokens": True}
    tok = tok.with_template(after=["<|endoftext|>"])  # the template: one more after each
    gd.encode_files(tok, corpus, tmp_path / "out", client=client, split_bytes=SPLIT_BYTES,
                    **settings)
    gpubpe.encode_files(tok, corpus, tmp_path / "single.npy", progress=False, **settings)
    single = gpubpe.load_tokens(tmp_path / "single.npy")
    assert np.count_nonzero(np.asarray(single[0]) == tok.special_tokens["<|endoftext|>"]) > \
        3 * (single[1].size - 1)  # around every document, the template's, one in the text
    assert_same_tokens(tmp_path / "out", single)


def test_shards_equal_single_process_in_input_order(client, tok, corpus, expected, tmp_path):
    done = gd.encode_files(tok, corpus, tmp_path / "out", client=client, split_bytes=SPLIT_BYTES)
    assert len(done["shards"]) == len(plan_splits(corpus, SPLIT_BYTES)) > 5
    assert done["encoded"] == len(done["shards"]) and done["skipped"] == 0
    assert_same_tokens(tmp_path / "out", expected)
    assert int(np.sum(np.diff(expected[1]) == 0)) >= 3  # the empty .jsonl documents
    ids, _ = gpubpe.load_tokens(tmp_path / "out")  # slices across shard boundaries, ints
    whole = np.asarray(expected[0])
    for start, stop in ((0, 1), (5, ids.size - 5), (ids.shards[0].size - 2, ids.shards[0].size + 3),
                        (-7, None), (ids.size, ids.size + 4)):
        assert np.array_equal(ids[start:stop], whole[start:stop])
    assert [ids[i] for i in (0, ids.shards[0].size, -1)] == \
        [whole[i] for i in (0, ids.shards[0].size, -1)]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["documents"] == expected[1].size - 1
    assert [s["documents"] for s in manifest["shards"]] == [s["documents"] for s in done["shards"]]
    assert manifest["shards"][0]["inputs"][0]["start"] == 0


def test_cli_count_and_encode_with_scheduler(client, tok, corpus, expected, tmp_path, capsys):
    address = client.scheduler.address
    tok.save(tmp_path / "tok.json")
    files = [str(p) for p in corpus]
    assert main(["count", *files, "-o", str(tmp_path / "c.counts"), "--scheduler", address,
                 "--no-progress"]) == 0
    single = gpubpe.count_words(corpus, progress=False)
    assert gpubpe.WordCounts.load(tmp_path / "c.counts").fingerprint == single.fingerprint
    out = tmp_path / "out"
    assert main(["encode", *files, "-t", str(tmp_path / "tok.json"), "-o", str(out),
                 "--scheduler", address]) == 0
    assert_same_tokens(out, expected)
    # another job's output (another tokenizer) is refused, then replaced with --overwrite
    other = gpubpe.train([corpus[0]], 280, progress=False)
    other.save(tmp_path / "other.json")
    capsys.readouterr()
    command = ["encode", *files, "-t", str(tmp_path / "other.json"), "-o", str(out),
               "--scheduler", address]
    assert main(command) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "another job" in error and "--overwrite" in error
    assert_same_tokens(out, expected)  # untouched
    assert main([*command, "--overwrite"]) == 0
    single_other = tmp_path / "other.npy"
    gpubpe.encode_files(other, corpus, single_other, progress=False)
    assert_same_tokens(out, gpubpe.load_tokens(single_other))


def test_unreachable_scheduler_is_one_line_before_any_work(tmp_path, tok, corpus, capsys):
    tok.save(tmp_path / "tok.json")
    out = tmp_path / "out"
    code = main(["encode", str(corpus[0]), "-t", str(tmp_path / "tok.json"), "-o", str(out),
                 "--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "1"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'" in error
    assert not out.exists()


def test_another_jobs_output_refused_unless_overwrite(client, tok, corpus, tmp_path):
    out = tmp_path / "out"
    gd.encode_files(tok, corpus[:2], out, client=client, split_bytes=SPLIT_BYTES)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(ConfigError, match="another job"):
        gd.encode_files(tok, corpus[1:], out, client=client, split_bytes=SPLIT_BYTES)
    assert (out / "manifest.json").read_bytes() == before


def test_missing_input_refused_before_any_work(client, tok, corpus, tmp_path):
    with pytest.raises(gpubpe.errors.CorpusError, match="missing.txt: no such file"):
        gd.encode_files(tok, [corpus[0], tmp_path / "missing.txt"], tmp_path / "out",
                        client=client)
    with pytest.raises(gpubpe.errors.CorpusError, match="missing.txt: no such file"):
        gd.count_words([tmp_path / "missing.txt"], client=client)
    assert not (tmp_path / "out").exists()


def test_resume_reruns_only_missing_or_invalid_shards(client, tok, corpus, expected, tmp_path):
    out = tmp_path / "out"
    first = gd.encode_files(tok, corpus, out, client=client, split_bytes=SPLIT_BYTES)
    count = len(first["shards"])
    # an interrupted job: no manifest, shard 1 never written, shard 3's ids corrupt
    (out / "manifest.json").unlink()
    for name in ("shard-00001.npy", "shard-00001.offsets.npy", "shard-00001.json"):
        (out / name).unlink()
    corrupt = bytearray((out / "shard-00003.npy").read_bytes())
    corrupt[-1] ^= 1
    (out / "shard-00003.npy").write_bytes(bytes(corrupt))
    untouched = {p.name: p.stat().st_mtime_ns for p in out.glob("shard-0000[02]*")}
    with pytest.raises(gpubpe.errors.CorpusError, match="manifest"):
        gpubpe.load_tokens(out)  # not a finished job until the manifest is written
    again = gd.encode_files(tok, corpus, out, client=client, split_bytes=SPLIT_BYTES)
    assert (again["encoded"], again["skipped"]) == (2, count - 2)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-0000[02]*")} == untouched
    assert_same_tokens(out, expected)
    # an input whose mtime changed: its shards (only) are encoded again
    os.utime(corpus[3], ns=(corpus[3].stat().st_atime_ns, corpus[3].stat().st_mtime_ns + 10**9))
    touched = gd.encode_files(tok, corpus, out, client=client, split_bytes=SPLIT_BYTES)
    assert touched["encoded"] == 1 and touched["skipped"] == count - 1
    assert_same_tokens(out, expected)


def test_encode_column_dataframe_and_bag(client, tok):
    pd = pytest.importorskip("pandas", reason="Dask DataFrames need pandas (dask[dataframe], the 'dev' extra)")
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the 'parquet' or 'dev' extra")
    import dask.bag
    import dask.dataframe as dd

    texts = ["hello world", "", "<|endoftext|> stays text", "\u00e9t\u00e9 " * 50, "x"]
    frame = dd.from_pandas(pd.DataFrame({"text": texts, "n": range(5)}), npartitions=2)
    result = gd.encode_column(frame, tok).compute()
    assert result["ids"].dtype == pd.ArrowDtype(pa.list_(pa.uint32()))
    assert [list(row) for row in result["ids"]] == tok.encode_ordinary_batch(texts)
    assert result["n"].tolist() == list(range(5))
    bag = dask.bag.from_sequence(texts, npartitions=2)
    assert [ids.tolist() for ids in gd.encode_column(bag, tok).compute()] == \
        tok.encode_ordinary_batch(texts)


class ExitOnFirstAttempt(distributed.WorkerPlugin):
    """Kills the worker (``os._exit(1)``) when shard ``index`` first finishes: its files are
    written but the scheduler never hears of it, so Dask runs the task again elsewhere."""

    def __init__(self, marker: str, index: int):
        self.marker, self.index = marker, index

    def transition(self, key, start, finish, **kwargs):
        if start == "executing" and str(key).startswith("gpubpe-encode-") \
                and str(key).endswith(f"-{self.index:05d}") and not os.path.exists(self.marker):
            Path(self.marker).write_text("killed")
            os._exit(1)


def test_lost_worker_leaves_no_duplicate_or_missing_documents(client, tok, corpus, expected,
                                                              tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "killed"
    client.register_plugin(ExitOnFirstAttempt(str(marker), 2), name="exit-once")
    try:
        done = gd.encode_files(tok, corpus, tmp_path / "out", client=client,
                               split_bytes=SPLIT_BYTES)
    finally:
        client.unregister_worker_plugin("exit-once")
    assert marker.exists()  # a worker really died mid-job
    # the re-run of shard 2 (and of any shard whose result died with the worker) found the
    # files the first attempt wrote complete and valid
    assert done["skipped"] >= 1 and done["encoded"] + done["skipped"] == len(done["shards"])
    assert_same_tokens(tmp_path / "out", expected)
    assert not list((tmp_path / "out").glob(".*.tmp"))


# ---------------------------------------------------------------- compressed inputs


@pytest.fixture(scope="module")
def gz_corpus(corpus, tmp_path_factory) -> list[Path]:
    """The corpus gzip-compressed, file by file (a.txt.gz, b.jsonl.gz, ...)."""
    import gzip

    folder = tmp_path_factory.mktemp("gz")
    paths = []
    for path in corpus:
        packed = folder / f"{path.name}.gz"
        packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        paths.append(packed)
    return paths


def test_a_compressed_file_is_one_split(gz_corpus):
    assert gz_corpus[0].stat().st_size > 2 * SPLIT_BYTES  # large enough to be cut if plain
    pieces = [piece for split in plan_splits(gz_corpus, SPLIT_BYTES) for piece in split]
    assert [(p.path, p.start, p.end) for p in pieces] == [
        (os.path.abspath(p), 0, p.stat().st_size) for p in gz_corpus]


def test_gz_inputs_equal_plain_ones_on_the_cluster(client, tok, corpus, gz_corpus, expected,
                                                   tmp_path):
    counts = gd.count_words(gz_corpus, client=client, split_bytes=SPLIT_BYTES,
                            special_tokens=["<|endoftext|>"])
    plain = gpubpe.count_words(corpus, special_tokens=["<|endoftext|>"], progress=False)
    assert counts.as_dict() == plain.as_dict()
    assert counts.as_dict() == gpubpe.count_words(
        gz_corpus, special_tokens=["<|endoftext|>"], progress=False).as_dict()
    out = tmp_path / "out"
    done = gd.encode_files(tok, gz_corpus, out, client=client, split_bytes=SPLIT_BYTES)
    count = len(plan_splits(gz_corpus, SPLIT_BYTES))  # the small files grouped
    assert done["encoded"] == len(done["shards"]) == count > 1
    assert_same_tokens(out, expected)
    gpubpe.encode_files(tok, gz_corpus, tmp_path / "single.npy", progress=False)
    assert_same_tokens(tmp_path / "single.npy", expected)
    # resume: nothing to do, then only the input whose mtime changed
    again = gd.encode_files(tok, gz_corpus, out, client=client, split_bytes=SPLIT_BYTES)
    assert (again["encoded"], again["skipped"]) == (0, count)
    stat = gz_corpus[1].stat()
    os.utime(gz_corpus[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    touched = gd.encode_files(tok, gz_corpus, out, client=client, split_bytes=SPLIT_BYTES)
    assert (touched["encoded"], touched["skipped"]) == (1, count - 1)
    assert_same_tokens(out, expected)


def test_cli_count_and_encode_gz(client, tok, corpus, gz_corpus, expected, tmp_path):
    tok.save(tmp_path / "tok.json")
    files = [str(p) for p in gz_corpus]
    plain = gpubpe.count_words(corpus, progress=False).as_dict()
    assert main(["count", *files, "-o", str(tmp_path / "c.counts"), "--no-progress"]) == 0
    assert gpubpe.WordCounts.load(tmp_path / "c.counts").as_dict() == plain
    assert main(["count", *files, "-o", str(tmp_path / "d.counts"), "--scheduler",
                 client.scheduler.address, "--no-progress"]) == 0
    assert gpubpe.WordCounts.load(tmp_path / "d.counts").as_dict() == plain
    assert main(["encode", *files, "-t", str(tmp_path / "tok.json"), "-o",
                 str(tmp_path / "t.npy")]) == 0
    assert_same_tokens(tmp_path / "t.npy", expected)
    assert main(["encode", *files, "-t", str(tmp_path / "tok.json"), "-o", str(tmp_path / "out"),
                 "--scheduler", client.scheduler.address]) == 0
    assert_same_tokens(tmp_path / "out", expected)


def test_damaged_or_misused_gz_is_refused(tmp_path, gz_corpus):
    import gzip

    from gpubpe.errors import CorpusError

    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gz_corpus[0].read_bytes()[:-40])
    with pytest.raises(CorpusError, match="cut.txt.gz: .*gzip"):
        list(read_file(cut))
    fake = tmp_path / "fake.txt.gz"
    fake.write_bytes(b"plain text, not gzip\n")
    with pytest.raises(CorpusError, match="fake.txt.gz: not a readable gzip file"):
        gpubpe.count_words([fake], progress=False)
    with pytest.raises(CorpusError, match="read whole, not by byte range"):
        list(read_file(gz_corpus[0], byte_range=(0, 10)))
    packed = tmp_path / "x.parquet.gz"
    packed.write_bytes(gzip.compress(b"PAR1"))
    with pytest.raises(CorpusError, match="Parquet compresses its own pages"):
        list(read_file(packed))
    # a progress bar over file sizes: a .gz file's batches count its compressed bytes
    assert sum(b.input_bytes for b in read_file(gz_corpus[0], batch_bytes=4096)) == \
        gz_corpus[0].stat().st_size
    assert sum(b.input_bytes for b in read_file(gz_corpus[1], batch_bytes=512)) == \
        gz_corpus[1].stat().st_size


def test_fingerprint_tells_imports_with_other_ids_apart(tok):
    import tiktoken

    from gpubpe._reference import gpt2_byte_to_unicode
    from gpubpe.shards import tokenizer_fingerprint

    def imported(order):
        return gpubpe.Tokenizer.from_tiktoken(tiktoken.Encoding(
            "bytes", pat_str=r"\S+|\s+", special_tokens={},
            mergeable_ranks={bytes([b]): i for i, b in enumerate(order)}))

    by_value, gpt2_order = imported(range(256)), imported(gpt2_byte_to_unicode())
    assert by_value.vocabulary.rules.size == gpt2_order.vocabulary.rules.size == 0
    assert by_value.encode("a") != gpt2_order.encode("a")  # same rules, other ids
    assert tokenizer_fingerprint(by_value) != tokenizer_fingerprint(gpt2_order)
    assert "layout" not in tok.vocabulary.to_json()  # gpubpe's own: hashed as before

"""Word counts as a file: counting, saving, merging, training from it, refusals."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import gpubpe
from gpubpe.cli import demo_corpus_path, main
from gpubpe.counts import FORMAT_VERSION, WordCounts
from gpubpe.errors import ConfigError, ModelFormatError
from gpubpe.pretokenize import count_words as count_word_dict


@pytest.fixture
def shards(tmp_path):
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)[:3000]
    paths = []
    for index, part in enumerate((lines[:1000], lines[1000:2200], lines[2200:])):
        path = tmp_path / f"shard{index}.txt"
        path.write_text("".join(part), encoding="utf-8")
        paths.append(path)
    whole = tmp_path / "whole.txt"
    whole.write_text("".join(lines), encoding="utf-8")
    return paths, whole


def test_counts_equal_the_trainers_word_counts(shards):
    _, whole = shards
    counts = gpubpe.count_words([whole], progress=False)
    assert counts.as_dict() == count_word_dict([whole])
    assert counts.total_bytes == whole.stat().st_size
    assert counts.sources == [{"path": str(whole), "bytes": whole.stat().st_size}]


def test_merged_shards_equal_one_pass(shards, tmp_path):
    paths, whole = shards
    parts = [gpubpe.count_words([p], progress=False) for p in paths]
    for index, part in enumerate(parts):
        part.save(tmp_path / f"{index}.counts")
    loaded = [WordCounts.load(tmp_path / f"{i}.counts") for i in range(3)]
    merged = loaded[0].merged(*loaded[1:])
    one_pass = gpubpe.count_words([whole], progress=False)
    assert merged.as_dict() == one_pass.as_dict()
    assert merged.fingerprint == one_pass.fingerprint
    assert [s["path"] for s in merged.sources] == [str(p) for p in paths]


def test_save_load_round_trip_and_plain_numpy(tmp_path):
    counts = WordCounts.from_dict({b"hello": 3, b" world": 2**40, b"\xff\xfe": 1},
                                  special_tokens=["<|endoftext|>"])
    counts.save(tmp_path / "a.counts")
    again = WordCounts.load(tmp_path / "a.counts")
    assert again.as_dict() == {b"hello": 3, b" world": 2**40, b"\xff\xfe": 1}
    assert again.special_tokens == ["<|endoftext|>"] and again.pattern == "gpt2"
    with np.load(tmp_path / "a.counts") as archive:  # opens with NumPy alone, no pickle
        assert archive["counts"].dtype == np.int64
        assert json.loads(archive["header"].tobytes())["version"] == FORMAT_VERSION


def test_train_from_counts_equals_train_from_corpus(shards):
    _, whole = shards
    counts = gpubpe.count_words([whole], progress=False)
    for scaffold in (False, True):
        direct = gpubpe.train([whole], 600, scaffold=scaffold, progress=False)
        from_counts = gpubpe.train(counts=counts, vocab_size=600, scaffold=scaffold,
                                   progress=False)
        assert from_counts.merges == direct.merges
        assert from_counts.scaffold_tokens == direct.scaffold_tokens
        assert from_counts.metadata["counts_fingerprint"] == counts.fingerprint


def test_counts_above_two_to_the_31(tmp_path):
    counts = WordCounts.from_dict({b"ab": 3 * 2**31, b"cd": 2**31 + 1})
    counts.save(tmp_path / "big.counts")
    tok = gpubpe.train(counts=tmp_path / "big.counts", vocab_size=258, progress=False)
    assert tok.merges == [(b"a", b"b"), (b"c", b"d")]


def test_cli_count_merge_and_train(shards, tmp_path):
    paths, whole = shards
    out = tmp_path
    assert main(["count", str(paths[0]), "-o", str(out / "a.counts"), "--no-progress"]) == 0
    assert main(["count", str(paths[1]), str(paths[2]), "-o", str(out / "b.counts"),
                 "--no-progress"]) == 0
    assert main(["count", "--merge", str(out / "a.counts"), str(out / "b.counts"),
                 "-o", str(out / "all.counts")]) == 0
    assert main(["train", "--counts", str(out / "all.counts"), "--vocab-size", "500",
                 "-o", str(out / "tok.json"), "--no-progress"]) == 0
    direct = gpubpe.train([whole], 500, progress=False)
    assert gpubpe.load(out / "tok.json").merges == direct.merges


def test_cli_train_needs_files_or_counts(tmp_path, capsys):
    assert main(["train", "-o", str(tmp_path / "t.json"), "--vocab-size", "300"]) == 2
    assert "needs corpus files (or --counts FILE)" in capsys.readouterr().err


# ---------------------------------------------------------------- refusals


def _rewrite_header(path, **changes):
    with np.load(path) as archive:
        columns = {name: archive[name] for name in archive.files}
    header = json.loads(columns["header"].tobytes())
    header.update(changes)
    columns["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **columns)
    path.write_bytes(buffer.getvalue())


def test_newer_format_version_is_refused(tmp_path):
    path = tmp_path / "new.counts"
    WordCounts.from_dict({b"ab": 1}).save(path)
    _rewrite_header(path, version=FORMAT_VERSION + 1)
    with pytest.raises(ModelFormatError, match="version 2 is newer than this gpubpe reads"):
        WordCounts.load(path)


def test_corrupt_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "x.counts"
    path.write_text("not a counts file")
    with pytest.raises(ModelFormatError, match="is not a gpubpe counts file"):
        WordCounts.load(path)
    np.savez(tmp_path / "other.npz", counts=np.arange(3))
    with pytest.raises(ModelFormatError, match="no .*header"):
        WordCounts.load(tmp_path / "other.npz")
    WordCounts.from_dict({b"ab": 1, b"cd": 2}).save(path)
    _rewrite_header(path, pattern="cl100k")  # header no longer matches the data
    with pytest.raises(ModelFormatError, match="fingerprint does not match"):
        WordCounts.load(path)


def test_other_pattern_is_refused(tmp_path):
    counts = WordCounts.from_dict({b"ab": 3}, pattern="cl100k")
    with pytest.raises(ConfigError, match="made with pattern 'cl100k', not 'gpt2'"):
        gpubpe.train(counts=counts, vocab_size=300, progress=False)
    assert gpubpe.train(counts=counts, vocab_size=257, pattern="cl100k",
                        progress=False).vocabulary.pattern == "cl100k"
    with pytest.raises(ConfigError, match="pattern 'cl100k' differs from 'gpt2'"):
        WordCounts.from_dict({b"ab": 1}).merged(counts)
    counts.save(tmp_path / "c.counts")
    code = main(["train", "--counts", str(tmp_path / "c.counts"), "--vocab-size", "300",
                 "-o", str(tmp_path / "t.json")])
    assert code == 2


def test_other_special_tokens_are_refused():
    counts = WordCounts.from_dict({b"ab": 3}, special_tokens=["<s>"])
    with pytest.raises(ConfigError, match="special tokens"):
        WordCounts.from_dict({b"ab": 1}).merged(counts)
    with pytest.raises(ConfigError, match=r"special tokens \['</s>'\] differ"):
        gpubpe.train(counts=counts, vocab_size=300, special_tokens=["</s>"], progress=False)
    assert gpubpe.train(counts=counts, vocab_size=257, progress=False).special_tokens == \
        {"<s>": 257}


def test_counts_and_corpus_together_are_refused():
    with pytest.raises(ConfigError, match="either a corpus or counts="):
        gpubpe.train(["x"], 300, counts=WordCounts.from_dict({b"ab": 1}))


def test_count_shows_a_progress_bar_over_the_file_bytes(shards, tmp_path, capsys):
    paths, _ = shards
    assert main(["count", str(paths[0]), "-o", str(tmp_path / "a.counts")]) == 0
    err = capsys.readouterr().err
    size = paths[0].stat().st_size
    assert "counting words" in err and f"/{size / 1000:.1f}k" in err  # tqdm's total
    assert f"({size:,} bytes)" in err


def test_count_words_of_documents_and_special_tokens():
    counts = gpubpe.count_words(["hi there<|endoftext|>hi", b"there"],
                                special_tokens=["<|endoftext|>"], progress=False)
    assert counts.as_dict() == {b"hi": 2, b" there": 1, b"there": 1}
    assert counts.special_tokens == ["<|endoftext|>"] and counts.sources == []

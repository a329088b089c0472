"""Mistral's ``tekken.json`` (``gpubpe.tekken``) against the ids Mistral's own code makes.

- The real files no one here made: ``tekken_240718.json`` (Mistral NeMo) and
  ``tekken_240911.json`` from the ``mistral-common`` 1.13.1 wheel on PyPI, fetched once
  into ``~/.cache/gpubpe-tests`` (pinned by the wheel's sha256; offline, the test skips).
- The oracle is tiktoken (no one here wrote it) over the Encoding mistral-common's
  ``Tekkenizer`` builds (``mistral_common/tokens/tokenizers/tekken.py``: the first
  ``default_vocab_size - default_num_special_tokens`` ranks, the file's pattern, no special
  tokens; ``encode`` adds the special-token count to each id). mistral-common itself is not
  installed: it needs numpy < 2.4 on Python <= 3.12 (RESULTS, session 17).
- Offline: a tekken file made of cl100k's first ranks, with a special-token list (the
  newer files' form), through ``gpubpe.load`` and the CLI; malformed files.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest
from pinned import TEKKEN_FILES, mistral_files
from test_real_vocab import CORPUS, DEMO, two_kb_documents

import gpubpe
from gpubpe.cli import main
from gpubpe.errors import ModelFormatError, SpecialTokenError

tiktoken = pytest.importorskip("tiktoken", reason="needs the 'dev' extra")



@pytest.fixture(scope="module")
def mistral_folder() -> Path:
    return mistral_files()


def mistral_encoding(data: dict):
    """tiktoken over the ranks ``Tekkenizer`` keeps, each moved up by the special-token count
    (Mistral's ids; its ``encode`` adds the count to tiktoken's)."""
    config = data["config"]
    first_id = config["default_num_special_tokens"]
    kept = data["vocab"][:config["default_vocab_size"] - first_id]
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] + first_id for entry in kept}
    return tiktoken.Encoding("mistral", pat_str=config["pattern"], mergeable_ranks=ranks,
                             special_tokens={})


def documents() -> list[str]:
    lines = DEMO.read_text(encoding="utf-8").splitlines()[:3000]
    return two_kb_documents(DEMO, 300) + two_kb_documents(CORPUS, 300) + lines + [
        "", " ", "\n\n\n", "12345678", "[INST] a [/INST]</s>", "<SPECIAL_999>", "é" * 300]


@pytest.mark.parametrize("name", TEKKEN_FILES)
def test_mistrals_files_give_mistrals_ids(mistral_folder, name):
    path = mistral_folder / name
    data = json.loads(path.read_text(encoding="utf-8"))
    expected_encoding = mistral_encoding(data)
    tok = gpubpe.load(path, backend="cpu")
    assert tok.vocabulary.pattern == "tekken"  # the exact scanner, not regex
    assert (tok.n_vocab, tok.vocab_size, len(tok.special_tokens)) == (131072, 130072, 1000)
    texts = documents()
    expected = expected_encoding.encode_ordinary_batch(texts)
    assert tok.encode_batch(texts, disallowed_special=()) == expected
    assert [tok.encode_ordinary(text) for text in texts[-50:]] == expected[-50:]
    assert tok.decode_batch(expected) == texts
    assert tok.encode(b"\x00\xff", disallowed_special=()) == [1000, 1255]  # bytes at 1000-1255


def test_special_tokens_as_mistral_numbers_them(mistral_folder):
    # tekken_240718 (version v3) lists none: mistral-common's twenty, then <SPECIAL_20> ...
    tok = gpubpe.load(mistral_folder / "tekken_240718.json", backend="cpu")
    specials = tok.special_tokens
    assert [specials[t] for t in ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<pad>",
                                  "[TOOL_CONTENT]", "<SPECIAL_20>", "<SPECIAL_999>")] == \
        [0, 1, 2, 3, 4, 11, 19, 20, 999]
    with pytest.raises(SpecialTokenError, match=r"\[INST\]"):
        tok.encode("[INST] hello")
    assert tok.encode("[INST] hello [/INST]", allowed_special="all") == \
        [3] + tok.encode_ordinary(" hello ") + [4]
    assert tok.decode([1, 22177, 2]) == "<s>Hello</s>"


def test_saved_and_hf_exported_keep_mistrals_ids(mistral_folder, tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    tok = gpubpe.load(mistral_folder / "tekken_240911.json", backend="cpu")
    tok.save(tmp_path / "saved.json")
    tok.to_hf(tmp_path / "tokenizer.json")
    texts = CORPUS.read_text(encoding="utf-8").splitlines()[:3000]
    expected = tok.encode_batch(texts, disallowed_special=())
    saved = gpubpe.load(tmp_path / "saved.json", backend="cpu")
    assert saved.encode_batch(texts, disallowed_special=()) == expected
    assert saved.special_tokens == tok.special_tokens
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)] == expected
    assert hf.token_to_id("[INST]") == 3 and hf.token_to_id("<SPECIAL_999>") == 999


def small_tekken(cl100k, n_ranks: int = 3000, n_special: int = 100, listed: int = 5) -> dict:
    """A tekken file of the newer form (v11: special tokens listed): the 256 bytes at ranks
    0-255, as Mistral's files have them, then cl100k's first other tokens, in its order."""
    by_rank = sorted(cl100k._mergeable_ranks, key=cl100k._mergeable_ranks.get)
    pieces = [bytes([b]) for b in range(256)] + [p for p in by_rank if len(p) > 1]
    pieces = pieces[:n_ranks + 200]  # the file holds more ranks than the config keeps
    return {
        "config": {"pattern": cl100k._pat_str, "num_vocab_tokens": len(pieces),
                   "default_vocab_size": n_ranks + n_special,
                   "default_num_special_tokens": n_special, "version": "v11"},
        "vocab": [{"rank": rank, "token_bytes": base64.b64encode(piece).decode("ascii"),
                   "token_str": None} for rank, piece in enumerate(pieces)],
        "special_tokens": [{"rank": i, "token_str": f"<special {i}>", "is_control": True}
                           for i in range(listed)],
    }


def test_a_file_listing_its_special_tokens(cl100k, tmp_path):
    data = small_tekken(cl100k)
    folder = tmp_path / "model"  # a model folder holding tekken.json alone, as Mistral's do
    folder.mkdir()
    (folder / "tekken.json").write_text(json.dumps(data), encoding="utf-8")
    tok = gpubpe.load(folder, backend="cpu")
    assert tok.vocabulary.pattern == "cl100k"
    assert tok.n_vocab == 3100 and tok.special_tokens["<special 4>"] == 4
    assert tok.special_tokens["<SPECIAL_5>"] == 5 and tok.special_tokens["<SPECIAL_99>"] == 99
    texts = documents()
    assert tok.encode_batch(texts, disallowed_special=()) == \
        mistral_encoding(data).encode_ordinary_batch(texts)
    assert main(["encode", "-t", str(folder), "--text", "<special 1>Hi", "--allowed-special",
                 "all"]) == 0


def test_the_cli_prints_mistrals_ids(cl100k, tmp_path, capsys):
    data = small_tekken(cl100k)
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["encode", "-t", str(path), "--text", "Hello world"]) == 0
    expected = mistral_encoding(data).encode_ordinary("Hello world")
    assert capsys.readouterr().out.split() == [str(i) for i in expected]


def test_a_tiktoken_export_writes_its_many_special_tokens_beside_it(cl100k, tmp_path, capsys):
    # 100 special tokens: printed, they would bury the message; written as JSON instead.
    source = tmp_path / "tekken.json"
    source.write_text(json.dumps(small_tekken(cl100k)), encoding="utf-8")
    target = tmp_path / "small.tiktoken"
    assert main(["export", "-t", str(source), "-o", str(target)]) == 0
    message = capsys.readouterr().err
    specials_file = tmp_path / "small.tiktoken.special_tokens.json"
    assert str(specials_file) in message and "(100 tokens, written there)" in message
    assert len(message) < 1000
    specials = json.loads(specials_file.read_text(encoding="utf-8"))
    tok = gpubpe.load(source)
    assert specials == tok.special_tokens
    exported = tiktoken.Encoding("small", pat_str=cl100k._pat_str,
                                 mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(target)),
                                 special_tokens=specials)
    text = "<special 3>Hello world<SPECIAL_50> 12345"
    assert exported.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_an_unknown_special_token_is_named_with_the_nearest_not_all_100(cl100k, tmp_path,
                                                                          capsys):
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(small_tekken(cl100k)), encoding="utf-8")
    tok = gpubpe.load(path)
    with pytest.raises(SpecialTokenError) as caught:
        tok.encode("x", allowed_special={"<special 33>"})
    message = str(caught.value)
    assert "it has 100, of which the nearest to '<special 33>' are ['<special 3>'" in message
    assert len(message) < 300
    assert main(["encode", "-t", str(path), "--text", "x", "--allowed-special",
                 "<SPECIAL_100>"]) == 2
    error = capsys.readouterr().err
    assert "it has 100, of which the nearest to '<SPECIAL_100>' are ['<SPECIAL_" in error
    assert len(error) < 400


def _without_special_list(data):
    del data["special_tokens"]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d["config"].update(default_vocab_size=99_999), r"asks for 99899 ranks .* holds 3200"),
    (lambda d: d["config"].update(default_num_special_tokens="100"),
     r"config.default_num_special_tokens is '100', not a count"),
    (lambda d: d["config"].pop("pattern"), r"config.pattern is None"),
    (lambda d: d["vocab"][7].update(rank=8), r"vocab entry 7 .*rank 8 at index 7"),
    (lambda d: d["vocab"][300].update(token_bytes="###"), r"vocab entry 300 "),
    (lambda d: d["vocab"][301].update(token_bytes=d["vocab"][300]["token_bytes"]),
     r"1 vocab entries repeat another's bytes"),
    (_without_special_list, r"version v11 must list its special_tokens"),
    (lambda d: d["special_tokens"][1].update(rank=3), r"special_tokens\[1\] is .*'rank': 1"),
    (lambda d: d["special_tokens"].append(dict(d["special_tokens"][0], rank=5)),
     r"6 special tokens, not all different"),
])
def test_a_damaged_file_is_refused_naming_what(cl100k, tmp_path, damage, message):
    data = copy.deepcopy(small_tekken(cl100k))
    damage(data)
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match=message):
        gpubpe.load(path)

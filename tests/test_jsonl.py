"""JSON lines read by ``kernels.jsonl`` (issue 18): every line gives what ``json.loads`` gives,
and every line the kernel leaves (or json.loads refuses) goes to json.loads, which names it."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubpe import pretokenize
from gpubpe.errors import CorpusError
from gpubpe.kernels import jsonl


def _kinds_and_texts(lines: list[bytes], field: str = "text"):
    data = b"".join(lines)
    ends = np.cumsum([len(line) for line in lines]).astype(np.int64)
    starts = ends - np.array([len(line) for line in lines], dtype=np.int64)
    out = np.empty(len(data) + 3, dtype=np.uint8)
    kind, text_start, text_end = (np.empty(len(lines), dtype=np.int64) for _ in range(3))
    others = jsonl.jsonl_texts(
        np.frombuffer(data, np.uint8), starts, ends, np.frombuffer(field.encode(), np.uint8), out,
        kind, text_start, text_end, np.empty(jsonl.MAX_DEPTH, dtype=np.uint8))
    assert others == int((kind == jsonl.OTHER).sum())
    return kind.tolist(), [out[a:b].tobytes() for a, b in zip(text_start, text_end)]


def _loads_text(line: bytes, field: str = "text"):
    """What the reader takes from a line by json.loads: its field's UTF-8, or None."""
    try:
        record = json.loads(line)
        return record[field].encode() if isinstance(record[field], str) else None
    except (ValueError, KeyError, TypeError, UnicodeEncodeError, RecursionError):
        return None


TAKEN = [
    b'{"text": "plain"}\n',
    b'{"id": 3, "text": "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}\n',
    b'  {"meta": {"a": [1, -2.5e+3, 0.0, true, false, null, {"b": []}, {}], "c": "x"},'
    b' "text": "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"} \r\n',
    b'{"text": ""}',
    b'{"text":"no space","z":{}}\n',
    b'{"te\xc3\xa9xt": 1, "text": "\x7f"}\n',
    b'{"te\\u0078t": "escaped key", "\\u00e9": 2}\n',
]
LEFT = [  # json.loads reads them (and accepts or names them)
    b'{"text": "a", "text": "b"}\n',  # the field twice: json.loads keeps the last
    b'{"text": "\\ud800 lone"}\n',
    b'{"text": 3}\n',
    b'{"n": NaN, "text": "x"}\n',
    b'{"n": -Infinity, "text": "x"}\n',
    b'{"text": "raw \x01 control"}\n',
    b'{"text": "bad utf8 \xff"}\n',
    b'{"text": "surrogate in utf8 \xed\xa0\x80"}\n',
    b'{"text": "overlong \xc0\xaf"}\n',
    b'{"text": "x"} extra\n',
    b'{"text": "x",}\n',
    b'{"n": 01, "text": "x"}\n',
    b'{"n": 1., "text": "x"}\n',
    b'{"a": [1,], "text": "x"}\n',
    b'["text", "x"]\n',
    b'{}\n',
    b'{"text": "x"\n',
    b'{"text": "\\x"}\n',
    b'\xef\xbb\xbf{"text": "bom"}\n',
    b'{"text": "nul \x00"}\n',
    b'{"a": ' + b"[" * 40 + b"]" * 40 + b', "text": "deep"}\n',
    b'{"text": "x"}\x0b\n',
]


def test_lines_it_takes_give_what_json_loads_gives():
    kind, texts = _kinds_and_texts(TAKEN)
    assert kind == [jsonl.TEXT] * len(TAKEN)
    assert texts == [_loads_text(line) for line in TAKEN]


def test_lines_it_leaves_go_to_json_loads():
    kind, _ = _kinds_and_texts(LEFT)
    assert kind == [jsonl.OTHER] * len(LEFT)


def test_blank_lines_are_blank_as_bytes_strip_says():
    kind, _ = _kinds_and_texts([b"\n", b"  \t\r\n", b"\x0b\x0c\n", b""])
    assert kind == [jsonl.BLANK] * 4


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5), st.text(), st.booleans(),
       st.sampled_from([None, 0, 2]), st.integers(0, 5))
def test_any_json_line_reads_as_json_loads_reads_it(record, text, ascii_only, indent_spaces,
                                                    place):
    """Records of every JSON kind, the field anywhere, escaped or raw UTF-8: the text the
    reader takes (kernel or json.loads) is json.loads' for every line."""
    items = [item for item in record.items() if item[0] != "text"]
    record = dict(items[:place] + [("text", text)] + items[place:])
    line = json.dumps(record, ensure_ascii=ascii_only,
                      separators=(", ", ": ") if indent_spaces else (",", ":")).encode(
        "utf-8", "surrogatepass") + b"\n"
    kind, texts = _kinds_and_texts([line])
    wanted = _loads_text(line)
    if kind == [jsonl.TEXT]:
        assert texts == [wanted]
    else:
        assert kind == [jsonl.OTHER]


def test_reader_mixes_kernel_and_json_loads_lines_in_order(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = TAKEN + [b"\n"] + [b'{"text": "a", "text": "last"}\n', b'{"text": "\\u00e9"}\n']
    path.write_bytes(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
    documents = [bytes(batch.data[a:b]) for batch in pretokenize.iter_batches(path)
                 for a, b in zip(batch.doc_starts, batch.doc_ends)]
    assert documents == [_loads_text(line) for line in TAKEN] + [b"last", "é".encode()]


@pytest.mark.parametrize("line, message", [
    (b'{"text": 3}', r"c.jsonl:3: field 'text' is a int"),
    (b'{"text": "x"} extra', r"c.jsonl:3: not valid JSON"),
    (b'{"text": "\\ud800"}', r"c.jsonl:3 field 'text' holds a lone surrogate .* half a "
                             r"surrogate pair: replace it in the file"),
    (b'{"other": "x"}', r"c.jsonl:3: no 'text' field"),
])
def test_a_bad_line_is_named_by_its_line_number(tmp_path, line, message):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "a"}\n\n' + line + b'\n{"text": "b"}\n')
    with pytest.raises(CorpusError, match=message):
        list(pretokenize.iter_batches(path))


@pytest.mark.parametrize("pattern", ["gpt2", r"\w+|\W"])
def test_counting_a_jsonl_file_equals_counting_its_texts(tmp_path, pattern):
    """Batches of a .jsonl file are bytes like any other (a custom pattern decodes them;
    special tokens are cut out of them), and count as the texts given as a list."""
    texts = [f"doc {i} wörld 日本<|endoftext|>tail\n" for i in range(300)] + [""]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    assert all(isinstance(batch.data, bytes) for batch in pretokenize.iter_batches(path))
    for threads in (1, 2):
        counts = pretokenize.count_words(path, pattern, ["<|endoftext|>"], num_threads=threads)
        assert counts == pretokenize.count_words(texts, pattern, ["<|endoftext|>"], num_threads=1)

"""``decode_batch`` writes documents straight into new str objects (``gpubpe._pystr.
decode_texts``, ``kernels/encode/texts.py``). Checked against tiktoken: its bytes for the
same ids, decoded by CPython. Documents of every storage width (ASCII, Latin-1, UCS-2,
UCS-4) and of every length near the 16-character slot edge, characters split between
tokens at every place, invalid UTF-8."""

import sys
import sysconfig

import numpy as np
import pytest

from gpubpe import _pystr
from gpubpe._threads import run_all
from gpubpe.kernels.encode.texts import fill_texts, new_texts, text_plan


@pytest.fixture(autouse=True)
def kernels_on_every_batch(monkeypatch):
    """decode_batch takes the kernels from ``_TEXT_KERNEL_MIN_IDS`` ids on; here always."""
    from gpubpe import tokenizer

    monkeypatch.setattr(tokenizer, "_TEXT_KERNEL_MIN_IDS", 0)


BASES = ["plain ascii text, ", "café naïve ÿ ", "Ālex ĀĂă ", "日本語のテキスト ", "😀 emoji 🎉 ",
         "mixed 日本 café 😀 tëxt ", "Привет мир ", "ﬁ\u0300\ufeff\U0010ffff "]


def _documents() -> list[str]:
    """Every base cut to 0-40 characters (a start shifted by the length too)."""
    docs = []
    for base in BASES:
        text = base * 12
        docs += [text[n % len(base):n % len(base) + n] for n in range(41)]
    return docs


def _flat(id_lists):
    offsets = np.cumsum([0] + [len(ids) for ids in id_lists], dtype=np.int64)
    return np.array([i for ids in id_lists for i in ids], dtype=np.uint32), offsets


def test_the_kernels_decode_on_this_interpreter():
    """On CPython with a GIL the probe decode passes, so decode_batch takes the kernels
    (were it to fail, every test here would pass through CPython's decoder alone)."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("the kernels run only on CPython with a GIL")
    assert _pystr._fills_probes()


def test_documents_of_every_width_and_length_decode_as_tiktoken(cl100k, cl100k_tok):
    docs = _documents()
    id_lists = [cl100k.encode(doc) for doc in docs]
    assert [cl100k.decode_bytes(ids).decode() for ids in id_lists] == docs
    assert cl100k_tok.decode_batch(id_lists) == docs
    _assert_written_by_the_kernels(id_lists, docs, cl100k_tok)


def _assert_written_by_the_kernels(id_lists, docs, tok):
    """The kernels wrote every document (one character long too)."""
    texts, left = _pystr.decode_texts(*_flat(id_lists), tok._text_tables)
    assert left.tolist() == [] and texts == docs


def test_characters_split_between_tokens_at_every_place(cl100k, cl100k_tok):
    """Tokens replaced at random by one-byte tokens of their bytes: characters start,
    continue and end in different tokens, next to whole ones."""
    byte_id = [cl100k.encode_single_token(bytes([b])) for b in range(256)]
    rng = np.random.default_rng(18)
    docs = _documents() * 3
    id_lists = []
    for doc in docs:
        ids = []
        for token in cl100k.encode(doc):
            split = rng.random() < 0.5
            ids += [byte_id[b] for b in cl100k.decode_single_token_bytes(token)] if split \
                else [token]
        id_lists.append(ids)
    assert cl100k_tok.decode_batch(id_lists) == docs
    _assert_written_by_the_kernels(id_lists, docs, cl100k_tok)


def test_tokens_of_every_shape_under_a_trained_vocabulary():
    """A vocabulary trained on emoji, CJK and long repeated words has whole tokens of
    characters past U+FFFF (no shape: decoded byte by byte), of 9-16 characters of any
    script (one slot), of more than 16 (byte by byte), and pieces of characters: the
    kernels write every document, as CPython decodes their bytes."""
    import gpubpe

    words = ["😀🎉", "日本語のテキストです", "abcdefghijklmnopqrstuvwxyz", "Ωμέγα", "ÿé",
             "\U0010fffd", "aaaaaaaaaaaa"]
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for _ in range(300)]
    tok = gpubpe.train(docs, 330, progress=False)
    data, offsets = tok._byte_table()
    texts = [data[a:b].tobytes().decode("utf-8", "replace")
             for a, b in zip(offsets[:-1], offsets[1:])]
    assert any(max(map(ord, text)) > 0xFFFF for text in texts)
    assert any(9 <= len(text) <= 16 and not text.isascii() for text in texts)
    assert any(len(text) > 16 for text in texts)
    id_lists = [tok.encode(doc) for doc in docs]
    assert tok.decode_batch(id_lists) == docs
    _assert_written_by_the_kernels(id_lists, docs, tok)


@pytest.mark.parametrize("errors", ["replace", "strict", "ignore", "surrogateescape"])
def test_invalid_utf8_is_left_to_cpython_with_the_callers_errors(cl100k, cl100k_tok, errors):
    """Byte runs cut from valid text at random places, or with a byte changed: every way
    of being invalid (a stray continuation byte, a character cut short, an overlong
    form, a surrogate, a byte no UTF-8 holds) and valid runs among them."""
    byte_id = [cl100k.encode_single_token(bytes([b])) for b in range(256)]
    rng = np.random.default_rng(7)
    source = "".join(BASES).encode() * 4
    runs = []
    for _ in range(300):
        start = int(rng.integers(0, len(source) - 40))
        run = bytearray(source[start:start + int(rng.integers(1, 40))])
        if rng.random() < 0.3:
            run[int(rng.integers(0, len(run)))] = int(rng.choice(
                [0x80, 0xBF, 0xC0, 0xC1, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF, 0xA0, 0x9F]))
        runs.append(bytes(run))
    id_lists = [[byte_id[b] for b in run] for run in runs]
    try:
        expected = [run.decode("utf-8", errors) for run in runs]
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            cl100k_tok.decode_batch(id_lists, errors=errors)
        return
    assert cl100k_tok.decode_batch(id_lists, errors=errors) == expected


def test_a_str_something_else_holds_is_never_written():
    """The fill writes only into a str its list alone holds: one held elsewhere too (here
    by ``held``) is left, unchanged, for CPython's decoder."""
    pieces = [b"ab", b"cd"]
    offsets = np.array([0, 2, 4], dtype=np.int64)
    table_bytes = np.frombuffer(b"".join(pieces), np.uint8)
    tables = _pystr.TextTables(table_bytes, offsets,
                               _pystr.byte_slots(table_bytes, offsets))
    ids, doc_offsets = _flat([[0, 1], [1, 0]])
    characters, wide, bad = text_plan(ids, doc_offsets, tables.forms)
    assert bad == -1 and characters.tolist() == [4, 4]
    n = int(characters[0])  # "\x00" * 4 would be one constant, held twice
    held = "\x00" * n
    texts = [held, "\x00" * n]
    left = np.empty(2, dtype=np.int64)
    import ctypes

    items_at = ctypes.c_int64.from_address(id(texts) + 24).value
    n_left = fill_texts(ids, doc_offsets, tables.ascii_copies, tables.shapes,
                        tables.byte_slots, tables.wide_slots, tables.table_bytes,
                        tables.table_offsets,
                        items_at, _pystr._checked_layout(), characters, wide, left)
    assert left[:n_left].tolist() == [0]
    assert held == "\x00" * 4 and texts == [held, "cdab"]


def test_the_strs_made_for_the_fill_are_freed_with_their_list(cl100k, cl100k_tok,
                                                               traced_memory):
    """``new_texts`` puts fresh strs in a list of None: each None's reference is given
    back, and the strs go with the list (memory traced by tracemalloc, which sees
    CPython's object allocator)."""

    id_lists = [cl100k.encode(doc) for doc in _documents()] * 20
    assert len(id_lists) >= 1000
    runs = [traced_memory(lambda: cl100k_tok.decode_batch(id_lists), warm=5 if i == 0 else 0)
            for i in range(3)]
    made, left, _ = runs[0]
    nones = min((run[2] for run in runs), key=abs)
    measured = f"made {made} B, left {left} B, None's references {[run[2] for run in runs]}"
    # A None not given back (or given back twice) moves the count by one a document, here
    # 1,000+, at every call. Full CI runs with fresh Numba caches saw single windows move
    # it by -6, -186 and -1,969 (session 16): references the pool's threads were still
    # dropping after the call before; so the calm one of three windows is the count.
    assert abs(nones) <= 16, measured
    assert made > sum(map(len, _documents())) * 20, measured  # the strs were traced ...
    assert left < 4096, measured  # ... and freed


def test_no_memory_for_a_str_leaves_none_and_no_error_set(monkeypatch):
    """PyUnicode_New fails (a length past what memory allows): ``new_texts`` names that
    document, clears CPython's error and leaves the rest None; ``decode_texts`` raises
    MemoryError."""
    import ctypes

    texts = [None] * 3
    items_at = ctypes.c_int64.from_address(id(texts) + 24).value
    characters = np.array([3, 1 << 60, 2], dtype=np.int64)
    wide = np.array([0, 2, 0], dtype=np.uint8)
    assert new_texts(items_at, characters, wide, _pystr._str_api()) == 1
    assert len(texts[0]) == 3 and texts[1:] == [None, None]
    table_bytes, table_offsets = np.frombuffer(b"ab", np.uint8), np.array([0, 1, 2])
    tables = _pystr.TextTables(table_bytes, table_offsets,
                               _pystr.byte_slots(table_bytes, table_offsets))
    monkeypatch.setattr(_pystr, "new_texts", lambda *args: 0)
    with pytest.raises(MemoryError, match="no memory for the str objects of 1 decoded"):
        _pystr._decode_with(*_flat([[0, 1]]), tables, _pystr._checked_layout())


def test_no_memory_mid_way_on_two_threads_raises_once_no_fill_runs(monkeypatch, cl100k,
                                                                    cl100k_tok):
    """On 2 threads a pool thread fills chunks of documents as their strs are made (one
    ``fill_claimed`` call, waiting for each chunk's strs without the GIL): when
    PyUnicode_New fails in the third chunk, MemoryError is raised only once that filler
    has returned (it writes into strs of the list, which must outlive it; each filler here
    lingers 20 ms after its kernel), no later chunk is made, and no filler waits forever
    for strs that will not come; the same documents then decode on 2 threads as on 1."""
    import threading
    import time


    documents = _documents() * 40
    ids, offsets = _flat([cl100k.encode(doc) for doc in documents])
    cl100k_tok.decode_batch([ids[:4].tolist()])
    tables, layout = cl100k_tok._text_tables, _pystr._checked_layout()
    made, running, lock = [], [0], threading.Lock()
    real_new, real_claimed = _pystr.new_texts, _pystr.fill_claimed

    def slow_claimed(*args):
        with lock:
            running[0] += 1
        real_claimed(*args)
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(_pystr, "new_texts", lambda *args: (
        made.append(1) or (0 if len(made) == 3 else real_new(*args))))
    monkeypatch.setattr(_pystr, "fill_claimed", slow_claimed)
    with pytest.raises(MemoryError, match="no memory for the str objects"):
        try:
            _pystr._decode_with(ids, offsets, tables, layout, run_all, 2)
        finally:
            assert running[0] == 0
    assert len(made) == 3
    monkeypatch.setattr(_pystr, "new_texts", real_new)
    monkeypatch.setattr(_pystr, "fill_claimed", real_claimed)
    texts, left = _pystr._decode_with(ids, offsets, tables, layout, run_all, 2)
    assert texts == documents and left.size == 0


@pytest.mark.parametrize("bad", [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",
                                 b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
                                 b"\xf5\x80\x80\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe4\xb8",
                                 b"\xbf", b"\xed\x9f\xbf", b"\xf4\x8f\xbf\xbf"])
def test_forms_cpython_refuses_are_found_far_from_the_ends(cl100k, cl100k_tok, bad):
    """Surrogates, overlong forms, code points past U+10FFFF and cut characters (and the
    valid forms at their edges) 20 characters from either end of a document, where the
    fill applies tokens by their shapes: one byte a token, and a lead byte's token
    followed by one of the rest."""
    byte_id = [cl100k.encode_single_token(bytes([b])) for b in range(256)]
    around = "日本語のテキスト ascii ÿ 😀"
    data = around.encode() + bad + around.encode()
    one_byte = [byte_id[b] for b in data]
    ids = cl100k.encode(around) + [byte_id[b] for b in bad] + cl100k.encode(around)
    expected = data.decode("utf-8", "replace")
    assert cl100k_tok.decode_batch([one_byte, ids]) == [expected, expected]

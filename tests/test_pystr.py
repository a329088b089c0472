"""Lists of str encoded in place by ``kernels.str_utf8`` (issue 18): the same bytes as
``str.encode``, and a refusal (the caller's slow path) for everything it must not take."""

import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubpe import _pystr
from gpubpe.pretokenize import utf8_documents


def _expected(texts):
    encoded = [text.encode() for text in texts]
    return b"".join(encoded), [len(e) for e in encoded]


def test_the_kernels_run_on_this_interpreter():
    """CPython with a GIL (the build and CI machines) takes the fast path, not the fallback."""
    if sys.implementation.name != "cpython":
        pytest.skip("the kernels read CPython's str layout only")
    assert _pystr._checked_layout() is not None


@pytest.mark.parametrize("texts", [
    [],
    [""],
    ["", "a", ""],
    ["plain\n", "caf\xe9", "\xff\xfe", "\u0100\u07ff\u0800", "\uffff\U00010000\U0010ffff"],
    ["日本語のテキスト", "Привет, мир", "😀 emoji", "a" * 5000 + "\u4e2d"],
])
def test_every_storage_kind_as_str_encode(texts):
    data, lengths = _pystr.str_list_utf8(texts)
    assert (data, lengths.tolist()) == _expected(texts)
    assert lengths.dtype == np.int64


@given(st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"])), max_size=40))
def test_any_text_as_str_encode(texts):
    data, lengths = _pystr.str_list_utf8(texts)
    assert (data, lengths.tolist()) == _expected(texts)


class _Text(str):
    pass


@pytest.mark.parametrize("bad", [b"bytes", "a\ud800b", "\udfff", _Text("subclass"),
                                 np.str_("numpy"), 3, None])
def test_refuses_what_only_the_slow_path_may_take(bad):
    """No exact str, or a lone surrogate: None, wherever it sits in the list."""
    assert _pystr.str_list_utf8([bad]) is None
    assert _pystr.str_list_utf8(["ok", "日本", bad, "after"]) is None


def test_documents_equal_with_and_without_the_kernels(monkeypatch):
    """``utf8_documents`` gives the same bytes and lengths on the fallback (another
    interpreter), and takes str subclasses there."""
    texts = ["line 1 \u4e2d\u6587\n", "plain\n", "", "😀\n"] * 100  # kernels from 256 items
    fast = utf8_documents(texts)
    monkeypatch.setattr("gpubpe.pretokenize.str_list_utf8", lambda *args: None)
    slow = utf8_documents(texts)
    assert fast.data == slow.data == _expected(texts)[0]
    assert fast.lengths.tolist() == slow.lengths.tolist()
    assert utf8_documents([_Text("sub"), np.str_("np")]).data == b"subnp"
    assert utf8_documents(["a", "\ud800"]) is None


def test_a_short_list_on_one_thread_is_encoded_without_the_kernels(monkeypatch):
    """Below ``_KERNEL_MIN_ITEMS`` str, ``str.encode`` (the kernels' fixed ~20 us is more
    than it takes); from there, on more threads, or for a counting task, the kernels."""
    from gpubpe._threads import run_all

    texts = ["line 1 \u4e2d\u6587\n", "plain\n", "", "😀\n"] * 64
    called = []
    monkeypatch.setattr("gpubpe.pretokenize.str_list_utf8", lambda *args: called.append(args))
    assert utf8_documents(texts[:255]).data == _expected(texts[:255])[0] and not called
    utf8_documents(texts)
    utf8_documents(texts[:8], run_all, 2)
    utf8_documents(texts[:8], private=True)  # a counting task's share: no GIL
    assert [len(args[0]) for args in called] == [256, 8, 8]


def test_layout_check_rejects_a_layout_it_does_not_see():
    """The probe check itself can fail: a wrong data offset is caught on the probes."""
    layout = _pystr._checked_layout()
    if layout is None:
        pytest.skip("no checked layout on this interpreter")
    wrong = layout.copy()
    wrong[_pystr.COMPACT_DATA] += 8
    assert not _pystr._stored_as_assumed("é", wrong)
    assert _pystr._stored_as_assumed("é", layout)


def _cache_utf8(text: str) -> None:
    """Give ``text`` the cached UTF-8 copy CPython keeps once asked for one (3.12's
    literals have it: ``sys.getsizeof`` then counts it too)."""
    import ctypes

    as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    as_utf8.argtypes, as_utf8.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_void_p
    as_utf8(text, None)


def test_layout_found_where_literals_keep_their_utf8():
    """Python 3.12 (the GPU node's) caches the UTF-8 of non-ASCII literals, and the layout
    was read off ``sys.getsizeof`` of one: every non-ASCII probe failed there and every
    caller ran ``str.encode`` under the GIL. Here every non-ASCII literal the check uses
    is given that cache, whatever this Python does: the layout is still found, the same."""
    if sys.implementation.name != "cpython" or _pystr._checked_layout() is None:
        pytest.skip("the kernels read CPython's str layout only")
    found = _pystr._checked_layout().copy()
    functions = [_pystr._checked_layout.__wrapped__, _pystr._fresh_latin1,
                 _pystr._stored_as_assumed]
    literals = [*_pystr._PROBES, *(c for f in functions for c in f.__code__.co_consts)]
    for text in literals:
        if isinstance(text, str) and not text.isascii():
            _cache_utf8(text)
    cached = "".join(["caf", "\xe9"])
    before = sys.getsizeof(cached)
    _cache_utf8(cached)
    assert sys.getsizeof(cached) > before  # what the check must not be misled by
    _pystr._checked_layout.cache_clear()
    try:
        layout = _pystr._checked_layout()
        assert layout is not None and layout.tolist() == found.tolist()
        assert _pystr._stored_as_assumed(cached, layout)
    finally:
        _pystr._checked_layout.cache_clear()
    assert _pystr.str_list_utf8([cached, "\u4e2d"])[0] == "caf\xe9\u4e2d".encode()


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_runs_on_threads_as_one(parts):
    """Runs encoded at once on the tokenizer's threads join into the same bytes; a refused
    item in any run refuses the list."""
    from gpubpe._threads import run_all

    texts = [f"line {i} 日本語 😀\n" if i % 3 else f"plain {i}\n" for i in range(1000)]
    data, lengths = _pystr.str_list_utf8(texts, run_all, parts)
    assert (data, lengths.tolist()) == _expected(texts)
    assert _pystr.str_list_utf8(texts[:900] + ["a\ud800"] + texts[900:], run_all, parts) is None
    assert _pystr.str_list_utf8(texts[:2], run_all, parts)[0] == _expected(texts[:2])[0]


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("private", [True, False])
def test_a_span_of_a_list_reads_those_items_alone(parts, private):
    """``span`` names the items to read (a share of a chunk's list, read in place when the
    list is private, else from a copy of the span): the bytes and lengths of that slice;
    a refused item outside the span is not read."""
    from gpubpe._threads import run_all

    texts = [f"line {i} 日本語 😀\n" if i % 3 else f"plain {i}\n" for i in range(1000)]
    texts[5] = b"bytes, not str"  # outside every span below
    for lo, hi in [(6, 1000), (300, 301), (10, 700), (999, 1000)]:
        data, lengths = _pystr.str_list_utf8(texts, run_all, parts, private, (lo, hi))
        assert (data, lengths.tolist()) == _expected(texts[lo:hi])
    assert _pystr.str_list_utf8(texts, run_all, parts, private, (0, 10)) is None


def test_a_chunk_of_the_corpus_is_left_out_of_the_garbage_collector():
    """A chunk's private list (many threads count shares of it while other threads make
    tracked objects) is untracked on CPython, so no collection reads its items; it is
    still freed by its reference count."""
    import gc
    import weakref

    from gpubpe import pretokenize

    if sys.implementation.name != "cpython":
        pytest.skip("PyObject_GC_UnTrack is CPython's")
    corpus = [f"line {i}\n" for i in range(100)]
    for taken in (pretokenize._taken(corpus, iter(corpus), 10, 50),
                  pretokenize._taken(iter(corpus), iter(corpus), 0, 50)):
        assert not gc.is_tracked(taken) and len(taken) == 50

    class Item(str):  # weakly referable, to see the list's items freed with it
        pass

    items = _pystr.untracked([Item("a"), Item("b")])
    alive = weakref.ref(items[0])
    del items
    assert alive() is None

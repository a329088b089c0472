"""Encoding and decoding with backend="cuda" in Numba's CUDA simulator: equal to the CPU.

The conftest switches the simulator on, so ``Tokenizer(..., backend="cuda")``
runs the real ``@cuda.jit`` word-encoding and decoding kernels on NumPy arrays;
``launch_counts`` proves they ran. Also: long words taken by the CPU, chunks
sized by free device memory (capped by ``GPUBPE_DEVICE_BYTES``, in the
simulator and on a GPU alike), and a device failure in the middle of
``encode_files`` keeping the finished documents. Whole batches on the device
(#17): ids equal to tiktoken (cl100k ranks, cl100k and GPT-2 patterns) and to
the CPU, across device chunks, with empty documents, special tokens and invalid
UTF-8; the device word cache warm and cold; ids left on the device in the asked
dtype; text already on the device; the bit-level codec on device arrays; DLPack
to PyTorch where it is installed. With ``NUMBA_ENABLE_CUDASIM=0``
on a GPU node every test here runs against the device.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

import gpubpe
from gpubpe import device
from gpubpe._reference import encode_word
from gpubpe.backend import resolve_backend
from gpubpe.encode_files import encode_files, read_token_file
from gpubpe.errors import DeviceError
from gpubpe.kernels import _cuda
from gpubpe.kernels._cuda import device_stats, to_device, to_host
from gpubpe.pretokenize import NAMED_PATTERNS, split_words

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "multiscript.txt"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return DATA.read_text(encoding="utf-8").split("\n")[:1200]


@pytest.fixture(scope="module", params=[False, True], ids=["bpe", "scaffold"])
def cpu_tok(request, lines) -> gpubpe.Tokenizer:
    return gpubpe.train([line.encode() for line in lines[:600]], 800, scaffold=request.param,
                        special_tokens=["<|endoftext|>"], progress=False, backend="cpu")


def launches(name: str) -> int:
    return _cuda.launch_counts[name]


def test_cuda_tokenizer_encodes_real_text_as_the_cpu_does(cpu_tok, lines):
    gpu_tok = cpu_tok.with_backend("cuda")
    assert (cpu_tok.backend, gpu_tok.backend) == ("cpu", "cuda")
    if cpu_tok.scaffold_tokens:
        assert cpu_tok.vocabulary.demolish_offsets is not None  # demolishing runs on the device
    before = launches("encode_words_kernel"), launches("write_output_kernel")
    gpu = gpu_tok.encode_arrays(lines[600:])  # text the vocabulary was not trained on
    cpu = cpu_tok.encode_arrays(lines[600:])
    assert gpu.ids.tolist() == cpu.ids.tolist() and gpu.offsets.tolist() == cpu.offsets.tolist()
    assert launches("encode_words_kernel") == before[0] + 1
    assert launches("write_output_kernel") == before[1] + 1
    copies = launches("copy_token_bytes_kernel")
    assert gpu_tok.decode_batch(gpu) == lines[600:]  # host ids: decoded on the host
    assert launches("copy_token_bytes_kernel") == copies
    assert gpu_tok.decode_batch(gpu_tok.encode_arrays(lines[600:], device=True)) == lines[600:]
    assert launches("copy_token_bytes_kernel") == copies + 1


def test_a_byte_without_a_token_is_dropped_before_merging_on_the_device():
    """As on the CPU (``test_real_vocab``): HF leaves a byte its vocab lacks out before
    merging; ``encode_words_kernel`` reads the output map to do the same."""
    tokenizers = pytest.importorskip("tokenizers", reason="needs the 'dev' extra")
    from test_real_vocab import CORPUS, file_without_bytes, two_kb_documents

    data = file_without_bytes(two_kb_documents(CORPUS, 60), b"\x05\xf1")
    hf = tokenizers.Tokenizer.from_str(json.dumps(data))
    gpu_tok = gpubpe.Tokenizer.from_hf(data).with_backend("cuda")
    texts = ["a.\x05. b=\x05=", "\x05", 'x "\x05, e\U000589fbr', "plain text"]
    before = launches("encode_words_kernel")
    got = gpu_tok.encode_arrays(texts)
    assert launches("encode_words_kernel") > before
    assert got.tolist() == [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


@settings(max_examples=25)
@given(st.lists(st.text(alphabet=st.sampled_from("ab cd\u00e9\u4e2d\U0001F600\n'0"), max_size=40),
                min_size=1, max_size=6))
def test_cuda_words_equal_the_reference(texts):
    tok = _small_tokenizer()
    gpu_tok = tok.with_backend("cuda")
    gpu_tok.clear_cache()
    assert gpu_tok.encode_batch(texts) == tok.encode_batch(texts)
    words = sorted({w for t in texts for w in t.encode().split(b" ") if w})
    expected = [encode_word(w, tok.vocabulary.rules) for w in words]
    assert gpu_tok.encode_words(words) == expected
    assert gpu_tok.decode_batch(gpu_tok.encode_batch(texts)) == texts


_SMALL = {}


def _small_tokenizer() -> gpubpe.Tokenizer:
    if not _SMALL:
        docs = [("ab cd abab cdcd \u00e9\u00e9 \u4e2d\u4e2d\u4e2d " * 3).encode()] * 4
        _SMALL["tok"] = gpubpe.train(docs, 268, progress=False, backend="cpu")
    return _SMALL["tok"]


def test_long_words_go_to_the_cpu_and_keep_their_place(cpu_tok):
    long_word = "x" * (device.DEVICE_MAX_WORD_BYTES + 50)
    texts = [f"short {long_word} words", "more short", "y" * 300 + " end"]
    gpu_tok = cpu_tok.with_backend("cuda")
    before = launches("encode_words_kernel")
    assert gpu_tok.encode_batch(texts) == cpu_tok.encode_batch(texts)
    assert launches("encode_words_kernel") == before + 1  # the short words went to the device


def test_chunks_follow_free_device_memory(cpu_tok, lines, chunk_budget):
    # The word list path (encode_words, and a batch's long words): chunks of words.
    gpu_tok = cpu_tok.with_backend("cuda")
    words = sorted({w for line in lines[600:700] for w in line.encode().split()})
    expected_words = cpu_tok.encode_words(words)
    gpu_tok.decode_batch(gpu_tok.encode_arrays(["warm up"]))  # tables on the device first
    before = launches("encode_words_kernel")
    chunk_budget(3000)  # 3000 B per chunk
    assert gpu_tok.encode_words(words) == expected_words
    assert launches("encode_words_kernel") - before >= 3


def test_too_little_device_memory_is_a_clear_error(cpu_tok, cap_device_bytes):
    cap_device_bytes(device.held_device_bytes(resolve_backend("cuda")) + 100)
    with pytest.raises(DeviceError, match="not enough free device memory"):
        cpu_tok.with_backend("cuda").encode("a word never seen before: qwertzuiop")


def test_a_device_bytes_cap_that_is_not_a_number_is_a_config_error(cpu_tok, monkeypatch):
    from gpubpe.errors import ConfigError

    monkeypatch.setenv("GPUBPE_DEVICE_BYTES", "4 GB")
    with pytest.raises(ConfigError, match="GPUBPE_DEVICE_BYTES='4 GB' is not a number of bytes"):
        cpu_tok.with_backend("cuda").encode("another word never seen: zxcvbnm")


def test_chunk_bounds_fit_the_budget():
    costs = np.array([5, 5, 5, 9, 1, 1, 1, 10], dtype=np.int64)
    assert device.chunk_bounds(costs, 10) == [(0, 2), (2, 3), (3, 5), (5, 7), (7, 8)]
    with pytest.raises(DeviceError, match="one item needs 11"):
        device.chunk_bounds(np.array([11]), 10)


def test_device_failure_mid_encode_files_keeps_finished_documents(tmp_path, cpu_tok, lines,
                                                                  monkeypatch):
    from numba.cuda.cudadrv.driver import CudaAPIError

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines[600:1200]) + "\n", encoding="utf-8")
    real_kernel = device.encode_word_list_cuda
    calls = []

    def failing_on_third_call(*args):
        calls.append(1)
        if len(calls) == 3:
            raise CudaAPIError(700, "an illegal memory access was encountered")
        return real_kernel(*args)

    monkeypatch.setattr(device, "encode_word_list_cuda", failing_on_third_call)
    output = tmp_path / "tokens.npy"
    with pytest.raises(DeviceError, match="illegal memory access") as failure:
        encode_files(cpu_tok, [corpus], output, batch_bytes=4000, progress=False,
                     backend="cuda", num_threads=1)
    assert not output.exists()  # nothing under the final names
    kept_ids, kept_offsets = read_token_file(tmp_path / "tokens.partial.npy")
    kept = kept_offsets.size - 1
    assert kept > 0 and f"--skip-documents {kept}" in str(failure.value)
    assert isinstance(failure.value.__cause__, DeviceError)
    monkeypatch.setattr(device, "encode_word_list_cuda", real_kernel)
    encode_files(cpu_tok, [corpus], tmp_path / "rest.npy", skip_documents=kept, progress=False,
                 backend="cuda")
    rest_ids, rest_offsets = read_token_file(tmp_path / "rest.npy")
    whole = cpu_tok.encode_arrays([line + "\n" for line in lines[600:1200]])  # "\n" kept
    assert np.concatenate([kept_ids, rest_ids]).tolist() == whole.ids.tolist()
    assert kept_offsets.tolist() + (rest_offsets[1:] + kept_ids.size).tolist() == \
        whole.offsets.tolist()


def test_tokenizer_after_a_device_failure_still_encodes(cpu_tok, monkeypatch):
    from numba.cuda.cudadrv.driver import CudaAPIError

    gpu_tok = cpu_tok.with_backend("cuda")

    def failing(*args):
        raise CudaAPIError(2, "out of memory")

    monkeypatch.setattr(device, "encode_word_list_cuda", failing)
    with pytest.raises(DeviceError, match="while encoding 1 documents.*backend='cpu'"):
        gpu_tok.encode("zyxw vuts")
    monkeypatch.undo()
    assert gpu_tok.encode("zyxw vuts") == cpu_tok.encode("zyxw vuts")


def test_backend_choice_travels_with_the_tokenizer(cpu_tok, tmp_path):
    gpu_tok = cpu_tok.with_backend("cuda")
    assert pickle.loads(pickle.dumps(gpu_tok)).backend == "cuda"
    assert gpu_tok.with_bitlevel().backend == "cuda"
    auto = resolve_backend("auto").name  # the CPU here; the device on a GPU node
    assert gpubpe.Tokenizer(cpu_tok.vocabulary).backend == auto
    path = tmp_path / "tok.json"
    cpu_tok.save(path)
    assert gpubpe.load(path, backend="cuda").backend == "cuda"
    coded = gpu_tok.with_bitlevel()
    assert coded.codec.backend == "cuda"
    text = "\u4e2d\u6587 and text \u4e2d\u6587"
    before = launches("encode_scatter_kernel")
    assert coded.encode(text) == cpu_tok.with_bitlevel().encode(text)
    assert launches("encode_scatter_kernel") == before + 1
    assert coded.decode(coded.encode(text)) == text


def test_cli_encode_and_decode_with_cuda_backend(tmp_path, cpu_tok, lines, capsys):
    from gpubpe.cli import main

    tok_path, corpus = tmp_path / "tok.json", tmp_path / "corpus.txt"
    cpu_tok.save(tok_path)
    corpus.write_text("\n".join(lines[600:700]) + "\n", encoding="utf-8")
    for backend in ("cpu", "cuda"):
        assert main(["encode", "-t", str(tok_path), str(corpus), "-o",
                     str(tmp_path / f"{backend}.npy"), "--backend", backend,
                     "--no-progress"]) == 0
    cpu_ids, cpu_offsets = read_token_file(tmp_path / "cpu.npy")
    gpu_ids, gpu_offsets = read_token_file(tmp_path / "cuda.npy")
    assert gpu_ids.tolist() == cpu_ids.tolist() and gpu_offsets.tolist() == cpu_offsets.tolist()
    capsys.readouterr()
    assert main(["decode", "-t", str(tok_path), str(tmp_path / "cuda.npy"),
                 "--backend", "cuda"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == lines[600:700]
    assert main(["encode", "-t", str(tok_path), str(corpus), "--skip-documents", "98"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [[int(i) for i in line.split()] for line in printed] == \
        cpu_tok.encode_batch([line + "\n" for line in lines[698:700]])  # "\n" kept
    assert main(["encode", "-t", str(tok_path), str(corpus), "--skip-documents", "-1"]) == 2
    assert "skip_documents must be an int >= 0, not -1" in capsys.readouterr().err


def test_auto_sends_only_large_work_to_the_device(cpu_tok, lines, monkeypatch):
    # What backend="auto" does on a GPU machine (here the simulator stands in for it).
    import gpubpe.tokenizer as tokenizer_module

    tok = cpu_tok.with_backend("cuda")
    tok._device_min_work = tokenizer_module._AUTO_DEVICE_MIN_WORK
    before = launches("encode_words_kernel"), launches("copy_token_bytes_kernel")
    small = tok.encode_arrays(lines[600:650])
    assert tok.decode_batch(small) == lines[600:650]
    assert (launches("encode_words_kernel"), launches("copy_token_bytes_kernel")) == before
    monkeypatch.setattr(tokenizer_module, "_PARALLEL_MIN_BYTES", 1)
    tok._device_min_work = 100  # bytes of new words: the next batch has more
    assert tok.encode_arrays(lines[650:700]).ids.tolist() == \
        cpu_tok.encode_arrays(lines[650:700]).ids.tolist()
    assert launches("encode_words_kernel") == before[0] + 1


# --- whole batches on the device (#17 part 2) -----------------------------------------
#
# backend="cuda" runs the batch on the device: word starts (the pre-tokenizer), dedupe
# against the device word cache, BPE of the new words, ids scattered by offsets. Tiny
# inputs: the simulator runs ~35 us per thread-iteration.

SPECIAL = "<|endoftext|>"
DOCS = ["Hello world's 12345 tests!", "", "  two  spaces\n\nand lines  ", "x" + SPECIAL + "y",
        "caf\u00e9 \u4e2d\u6587\u5b57 \U0001F600 ok", SPECIAL, "it's   done.\n"]


@pytest.fixture(scope="module", params=["cl100k", "gpt2", "o200k", "llama3"])
def tiktoken_pair(request, cl100k):
    """(tiktoken encoding, gpubpe tokenizer on the device) for the cl100k ranks under the
    cl100k pattern, and under GPT-2's, o200k's and Llama 3's patterns (their own files
    cannot load offline)."""
    import tiktoken

    encoding = cl100k if request.param == "cl100k" else tiktoken.Encoding(
        f"cl100k_ranks_{request.param}_pattern", pat_str=NAMED_PATTERNS[request.param],
        mergeable_ranks=cl100k._mergeable_ranks, special_tokens=cl100k._special_tokens)
    tok = gpubpe.Tokenizer.from_tiktoken(encoding)
    assert tok._scanner is not None  # a named pattern: the device path takes it
    return encoding, tok.with_backend("cuda")


def test_device_batches_equal_tiktoken_and_the_cpu(tiktoken_pair):
    encoding, gpu_tok = tiktoken_pair
    gpu_tok.clear_cache()
    before = launches("item_lookup_kernel")
    got = gpu_tok.encode_arrays(DOCS, allowed_special="all")
    assert launches("item_lookup_kernel") == before + 1  # one batch, on the device
    expected = encoding.encode_batch(DOCS, allowed_special="all")
    assert got.tolist() == expected
    cpu = gpu_tok.with_backend("cpu").encode_arrays(DOCS, allowed_special="all")
    assert got.offsets.tolist() == cpu.offsets.tolist() and got.ids.tolist() == cpu.ids.tolist()
    warm = gpu_tok.encode_arrays(DOCS, allowed_special="all")  # every word from the cache
    assert warm.tolist() == expected
    assert gpu_tok.decode_batch(got) == DOCS


def test_device_chunks_equal_tiktoken(tiktoken_pair, chunk_budget):
    from gpubpe.kernels.encode import batch_cuda

    encoding, gpu_tok = tiktoken_pair
    gpu_tok.encode("warm up")
    chunk_budget(40 * batch_cuda.BATCH_DEVICE_BYTES_PER_BYTE)
    before = launches("item_lookup_kernel")
    got = gpu_tok.encode_arrays(DOCS, allowed_special="all")
    assert launches("item_lookup_kernel") - before >= 3  # documents in several chunks
    assert got.tolist() == encoding.encode_batch(DOCS, allowed_special="all")


@cuda.jit
def always_collides(data, item_start, item_len, item_cell, new_rep, collisions):
    """check_new_words_kernel's stand-in for a test: it always reports a collision."""
    if cuda.grid(1) == 0:
        collisions[0] = 1


def test_a_long_word_key_collision_sends_the_batch_to_the_host(cpu_tok, monkeypatch):
    from gpubpe.kernels.encode import batch_cuda

    texts = ["a collision is astronomically rare", "but handled exactly"]
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    monkeypatch.setattr(batch_cuda, "check_new_words_kernel", always_collides)
    assert gpu_tok.encode_batch(texts) == cpu_tok.encode_batch(texts)
    assert gpu_tok._device.cache_stats()["words"] == 0  # the device batch was dropped


def test_collision_check_compares_long_words_bytes():
    from gpubpe.kernels.encode import batch_cuda

    data = to_device(np, np.frombuffer(b"abcdefgh abcdefgh abcdefgX", np.uint8))
    item_start = to_device(np, np.array([0, 9, 18], np.int64))
    item_len = to_device(np, np.array([8, 8, 8], np.int64))
    item_cell = to_device(np, np.array([0, 0, 0], np.int64))  # all in one cell, as equal keys
    new_rep = to_device(np, np.array([0], np.int64))  # item 0 represents it
    collisions = _cuda.device_zeros(np, 1, np.int64)
    _cuda.launch(batch_cuda.check_new_words_kernel, 3, data, item_start, item_len, item_cell,
                 new_rep, collisions)
    assert to_host(collisions).tolist() == [1]  # item 2 differs in its last byte; item 1 not


def test_invalid_utf8_on_the_device_equals_the_cpu(tiktoken_pair):
    _, gpu_tok = tiktoken_pair
    docs = [b"ok \xff\xfe bytes", b"\xe4\xb8", b"", b"\x80abc \xc3\x28 end\xe2\x82"]
    cpu = gpu_tok.with_backend("cpu").encode_arrays(docs)
    got = gpu_tok.encode_arrays(docs)
    assert got.ids.tolist() == cpu.ids.tolist() and got.offsets.tolist() == cpu.offsets.tolist()
    assert [gpu_tok.decode_bytes(ids) for ids in got.tolist()] == docs


def test_documents_across_device_chunks_equal_one_chunk(cpu_tok, chunk_budget):
    from gpubpe.kernels.encode import batch_cuda

    docs = ["first doc here", "", "second one, a bit longer", "x", SPECIAL + " tail", "end"]
    expected = cpu_tok.encode_arrays(docs, allowed_special="all")
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.encode("warm up")
    per_doc = 30 * batch_cuda.BATCH_DEVICE_BYTES_PER_BYTE  # about two documents per chunk
    chunk_budget(per_doc)
    before = launches("item_lookup_kernel")
    got = gpu_tok.encode_arrays(docs, allowed_special="all")
    assert launches("item_lookup_kernel") - before >= 3
    assert got.ids.tolist() == expected.ids.tolist()
    assert got.offsets.tolist() == expected.offsets.tolist()


def test_warm_cache_equals_cold_and_a_full_cache_restarts(cpu_tok, lines):
    texts = lines[600:606]
    expected = cpu_tok.encode_arrays(texts).tolist()
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    assert gpu_tok.encode_arrays(texts).tolist() == expected  # cold
    stats = gpu_tok._device.cache_stats()
    assert stats["words"] > 0 and stats["device_bytes"] > 0
    before = launches("encode_words_kernel")
    assert gpu_tok.encode_arrays(texts).tolist() == expected  # warm: no new word
    assert launches("encode_words_kernel") == before
    small = cpu_tok.with_backend("cuda")
    small._device.cache_words = 8  # fewer than one batch's words: restarts, stays correct
    for _ in range(2):
        assert small.encode_arrays(texts).tolist() == expected
    assert small._device.cache_stats()["restarts"] >= 1


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.int64])
def test_ids_stay_on_the_device_in_the_asked_dtype(cpu_tok, lines, dtype):
    texts = lines[600:604]
    expected = cpu_tok.encode_arrays(texts)
    gpu_tok = cpu_tok.with_backend("cuda")
    got = gpu_tok.encode_arrays(texts, device=True, dtype=dtype)
    assert isinstance(got.ids, _cuda.SimulatedDeviceArray) and got.ids.dtype == dtype
    assert to_host(got.ids).tolist() == expected.ids.tolist()
    assert to_host(got.offsets).tolist() == expected.offsets.tolist()
    on_cpu = cpu_tok.encode_arrays(texts, dtype=dtype)  # dtype on the CPU backend too
    assert on_cpu.ids.dtype == dtype and on_cpu.ids.tolist() == expected.ids.tolist()
    assert gpu_tok.decode_batch(got) == texts  # device ids decode


def test_device_options_are_checked(cpu_tok):
    from gpubpe.errors import ConfigError, InputTypeError

    with pytest.raises(ConfigError, match="device=True keeps ids on a CUDA device"):
        cpu_tok.encode_arrays(["a"], device=True)
    with pytest.raises(ConfigError, match="dtype=<class 'numpy.float32'> is not an id type"):
        cpu_tok.encode_arrays(["a"], dtype=np.float32)
    gpu_tok = cpu_tok.with_backend("cuda")
    with pytest.raises(InputTypeError, match="1-D uint8 array"):
        gpu_tok.encode_buffer(to_device(np, np.zeros(3, np.int32)), [0], [3])
    with pytest.raises(ValueError, match=r"id 99999 at position 1 is no token"):
        gpu_tok.decode_arrays(to_device(np, np.array([1, 99999], np.uint32)))


def test_text_already_on_the_device_stays_there(cpu_tok, lines):
    texts = lines[600:604] + [""]
    data = "".join(texts).encode()
    lengths = np.array([len(t.encode()) for t in texts], dtype=np.int64)
    ends = np.cumsum(lengths)
    expected = cpu_tok.encode_buffer(data, ends - lengths, ends)
    gpu_tok = cpu_tok.with_backend("cuda")
    device_data = to_device(np, np.frombuffer(data, np.uint8))
    device_ranges = to_device(np, ends - lengths), to_device(np, ends)
    got = gpu_tok.encode_buffer(device_data, *device_ranges)  # device in: device out
    assert isinstance(got.ids, _cuda.SimulatedDeviceArray)
    assert to_host(got.ids).tolist() == expected.ids.tolist()
    assert to_host(got.offsets).tolist() == expected.offsets.tolist()
    text, byte_offsets = gpu_tok.decode_arrays(got.ids, got.offsets)  # device out again
    assert isinstance(text, _cuda.SimulatedDeviceArray)
    assert to_host(text).tobytes() == data and to_host(byte_offsets).tolist() == [0, *ends]
    with_specials = gpu_tok.encode_buffer(device_data, *device_ranges, allowed_special="all")
    assert to_host(with_specials.ids).tolist() == expected.ids.tolist()  # the device found none


def test_special_tokens_in_device_text_are_found_on_the_device(cpu_tok):
    from gpubpe.errors import SpecialTokenError

    texts = [SPECIAL + "a" + SPECIAL + SPECIAL, "", "no special", "x<|endoftext|", SPECIAL,
             "<|endoftext|><|endoftext|>>"]
    data = "".join(texts).encode()
    lengths = np.array([len(t.encode()) for t in texts], dtype=np.int64)
    ends = np.cumsum(lengths)
    gpu_tok = cpu_tok.with_backend("cuda")
    device_data = to_device(np, np.frombuffer(data, np.uint8))
    expected = cpu_tok.encode_buffer(data, ends - lengths, ends, allowed_special="all")
    before = launches("special_candidates_kernel")
    with gpubpe.device_stats() as stats:
        got = gpu_tok.encode_buffer(device_data, ends - lengths, ends, allowed_special="all")
    assert launches("special_candidates_kernel") == before + 1
    assert "device text to the host" not in stats.sync_sites  # the text stayed there
    assert to_host(got.ids).tolist() == expected.ids.tolist()
    assert to_host(got.offsets).tolist() == expected.offsets.tolist()
    with pytest.raises(SpecialTokenError, match="document 0 holds the special token"):
        gpu_tok.encode_buffer(device_data, ends - lengths, ends, disallowed_special="all")


def test_bitlevel_codec_keeps_device_arrays_on_the_device():
    from gpubpe.bitlevel import BitLevelCodec

    codec = BitLevelCodec(1000, backend="cuda")
    ids = np.array(list("\u4e2d\u6587 ok \u4e2d".encode()), dtype=np.uint32)
    offsets = np.array([0, 4, ids.size], dtype=np.int64)
    expected, expected_offsets = BitLevelCodec(1000).encode_batch(ids, offsets)
    with gpubpe.device_stats() as stats:
        coded, coded_offsets = codec.encode_batch(to_device(np, ids), to_device(np, offsets))
        back, back_offsets = codec.decode_batch(coded, coded_offsets)
    assert all(isinstance(a, _cuda.SimulatedDeviceArray)
               for a in (coded, coded_offsets, back, back_offsets))
    assert stats.sync_sites == {"bit-level encode size": 1, "bit-level decode size": 1}
    assert stats.bytes_to_host == 2 * 8 + 3 * 8  # the sizes only: no ids came down
    assert to_host(coded).tolist() == expected.tolist()
    assert to_host(coded_offsets).tolist() == expected_offsets.tolist()
    assert to_host(back).tolist() == ids.tolist()


def test_device_ids_hand_off_to_pytorch_through_dlpack(cpu_tok):
    torch = pytest.importorskip("torch", reason="the DLPack hand-off test needs PyTorch")
    batch = cpu_tok.with_backend("cuda").encode_arrays(["hand off"], device=True,
                                                        dtype=np.int64)
    tensor = torch.from_dlpack(batch.ids)
    assert tensor.dtype == torch.int64
    assert tensor.tolist() == cpu_tok.encode("hand off")


_TWINS: dict[int, gpubpe.Tokenizer] = {}
_PIECES = st.one_of(st.binary(max_size=12), st.sampled_from(
    [SPECIAL.encode(), b" ", b"  \n", b"'s", b"123456", "\u4e2d\u00e9 \U0001F600".encode()]))


@settings(max_examples=15)
@given(st.lists(st.lists(_PIECES, max_size=5).map(b"".join), min_size=1, max_size=4))
def test_random_bytes_and_specials_on_the_device_equal_the_cpu(cpu_tok, docs):
    if id(cpu_tok) not in _TWINS:  # one device tokenizer for every example
        _TWINS[id(cpu_tok)] = cpu_tok.with_backend("cuda")
    gpu_tok = _TWINS[id(cpu_tok)]
    for allowed in ("all", ()):
        expected = cpu_tok.encode_arrays(docs, allowed_special=allowed, disallowed_special=())
        got = gpu_tok.encode_arrays(docs, allowed_special=allowed, disallowed_special=())
        assert got.ids.tolist() == expected.ids.tolist()
        assert got.offsets.tolist() == expected.offsets.tolist()


def test_bitlevel_tokenizer_keeps_ids_on_the_device(cpu_tok):
    texts = ["\u4e2d\u6587 and text \u4e2d", "plain", ""]
    coded = cpu_tok.with_backend("cuda").with_bitlevel()
    got = coded.encode_arrays(texts, device=True, dtype=np.int64)
    assert isinstance(got.ids, _cuda.SimulatedDeviceArray) and got.ids.dtype == np.int64
    expected = cpu_tok.with_bitlevel().encode_arrays(texts)
    assert to_host(got.ids).tolist() == expected.ids.tolist()
    assert to_host(got.offsets).tolist() == expected.offsets.tolist()
    assert coded.decode_batch(got) == texts


def test_overlapping_special_candidates_keep_the_leftmost():
    # Token 0 "aa" (2 bytes) found at 0, 1, 2 and 5 of "aaaa_aa": a scan keeps 0, 2 and 5.
    at = np.array([0, 1, 2, 5], np.int64)
    kept_at, kept_token = device._leftmost_matches(at, np.zeros(4, np.int64),
                                                   np.array([2], np.int64))
    assert kept_at.tolist() == [0, 2, 5] and kept_token.tolist() == [0, 0, 0]


def test_a_full_device_cache_is_kept_while_it_answers_most_words(cpu_tok):
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok._device.cache_words = 3
    batches = (["aa bb cc"], ["aa bb cc dd"], ["ww xx yy zz"])  # "aa", " bb", " cc": 3 words
    seen = []
    for texts in batches:
        assert gpu_tok.encode_batch(texts) == cpu_tok.encode_batch(texts)
        stats = gpu_tok._device.cache_stats()
        seen.append((stats["words"], stats["restarts"]))
    # Full after the first; the second answers 3 of 4 words: kept; the third none: restarted.
    assert seen == [(3, 0), (3, 0), (0, 1)]


# ---------------------------------------------------------------- the batch table's size
# Sized by the expected cache misses (the last chunk's miss rate), not the word
# count; a batch that misses far more than predicted gives up on the small table
# (``batch_cuda.MAX_PROBES``) and runs the step again with room for every word.


@pytest.fixture()
def table_sizes(monkeypatch) -> list[int]:
    """Cells of every batch table made, in order; no slack above the expected misses."""
    sizes = []
    dedupe = device.DeviceCodec._dedupe

    def recording(self, chunk, items, n_items, n_cells):
        sizes.append(n_cells)
        return dedupe(self, chunk, items, n_items, n_cells)

    monkeypatch.setattr(device.DeviceCodec, "_dedupe", recording)
    monkeypatch.setattr(device, "BATCH_TABLE_SLACK", 0)
    return sizes


def test_a_warm_cache_gets_a_table_sized_by_its_misses(cpu_tok, lines, table_sizes):
    texts = lines[600:606]
    expected = cpu_tok.encode_batch(texts)
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    assert gpu_tok.encode_batch(texts) == expected  # cold: room for every word
    assert gpu_tok.encode_batch(texts) == expected  # the last chunk missed every word
    with device_stats() as warm:
        assert gpu_tok.encode_batch(texts) == expected  # the last chunk missed none
    n_words = sum(len(split_words(text, cpu_tok.vocabulary.pattern)) for text in texts)
    assert table_sizes[0] == table_sizes[1] >= 2 * n_words
    assert table_sizes[2:] == [16]  # no miss expected: the smallest table
    with device_stats() as cold_again:
        gpu_tok.clear_cache()
        gpu_tok.encode_batch(texts)
    assert warm.syncs == cold_again.syncs  # sizing by misses costs no sync


def test_more_misses_than_expected_run_the_step_again(cpu_tok, lines, table_sizes):
    gpu_tok = cpu_tok.with_backend("cuda")
    gpu_tok.clear_cache()
    warm_texts = lines[600:603]
    gpu_tok.encode_batch(warm_texts)
    gpu_tok.encode_batch(warm_texts)  # the last chunk missed nothing
    new_texts = lines[700:730]  # hundreds of words the cache has not seen
    del table_sizes[:]
    with device_stats() as stats:
        assert gpu_tok.encode_batch(new_texts) == cpu_tok.encode_batch(new_texts)
    assert table_sizes[0] == 16 and table_sizes[1] > 16  # gave up, then room for all
    with device_stats() as planned:
        gpu_tok.clear_cache()
        gpu_tok.encode_batch(new_texts)
    assert stats.syncs == planned.syncs + 1  # the retry's one sync


def test_a_child_forked_after_cuda_ran_encodes_on_the_cpu_or_says_why(cpu_tok, lines,
                                                                       in_forked_child):
    """CUDA's state does not follow a fork (a DataLoader's workers): in the child an "auto"
    tokenizer that held the device encodes on the CPU, a "cuda" one raises saying why and
    what to do, and new backends resolve so too. On a GPU node the child never touches
    CUDA; in the simulator the same rule holds, so that this runs here."""
    from gpubpe.backend import FORKED_AFTER_CUDA
    from gpubpe.errors import BackendUnavailable

    on_cuda = cpu_tok.with_backend("cuda")
    auto = cpu_tok.with_backend("cuda")
    auto._backend_name = "auto"  # as "auto" on a GPU node (it never picks the simulator)
    expected = cpu_tok.encode_arrays(lines, num_threads=2).tolist()
    assert on_cuda.encode_arrays(lines).tolist() == expected  # the parent used the device

    def refusal(call) -> str | None:
        try:
            call()
        except BackendUnavailable as exc:
            return str(exc)
        return None

    def in_child() -> list:
        return [auto.backend, auto.encode_arrays(lines).tolist() == expected,
                refusal(lambda: on_cuda.encode_arrays(lines)),
                refusal(lambda: resolve_backend("cuda")), resolve_backend("auto").name,
                on_cuda.with_backend("cpu").encode_arrays(lines).tolist() == expected]

    assert in_forked_child(in_child) == ["cpu", True, FORKED_AFTER_CUDA, FORKED_AFTER_CUDA,
                                         "cpu", True]
    assert on_cuda.backend == auto.backend == "cuda"  # the parent keeps its device

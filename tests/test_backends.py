"""One test body on every backend (DESIGN §4): the reference, the CPU, and CUDA in the simulator.

Each backend trains (BPE and Scaffold-BPE) on the same real text, then encodes
text it was not trained on and decodes it back. The reference
(``gpubpe._reference``) is computed once; every other backend must give the
same rules, scaffold flags and ids, bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpubpe import _reference
from gpubpe.backend import resolve_backend
from gpubpe.model import Vocabulary
from gpubpe.pretokenize import resolve_pattern, split_words, word_bytes
from gpubpe.tokenizer import Tokenizer
from gpubpe.trainer import train_from_counts

DEMO = Path(__file__).resolve().parent.parent / "gpubpe" / "data" / "demo.txt"
LINES = DEMO.read_text(encoding="utf-8").splitlines()
TRAIN_TEXT, HELD_OUT = LINES[2000:2200], LINES[5000:5080]
VOCAB_SIZE = 300  # 44 merges: the simulator pays ~5 launches a merge
GPT2 = resolve_pattern("gpt2")


def word_counts(lines: list[str]) -> dict[bytes, int]:
    return dict(Counter(word_bytes(w) for line in lines for w in split_words(line, GPT2)))


@pytest.fixture(params=["reference", "cpu", "cuda"])
def backend(request) -> str:
    return request.param


def train_on(backend: str, counts: dict[bytes, int], scaffold: bool):
    """(rules as tuples, scaffold flags or None) from one backend."""
    if backend == "reference":
        if scaffold:
            rules, flags = _reference.train_scaffold_bpe(counts, VOCAB_SIZE)
            return [tuple(r) for r in rules], list(flags)
        return [tuple(r) for r in _reference.train_bpe(counts, VOCAB_SIZE)], None
    trained = train_from_counts(counts, VOCAB_SIZE, scaffold=scaffold, progress=False,
                                backend=resolve_backend(backend))
    rules, flags = trained if scaffold else (trained, None)
    return [tuple(r) for r in rules.tolist()], None if flags is None else list(map(bool, flags))


def encode_on(backend: str, rules, flags, lines: list[str]) -> list[list[int]]:
    if backend != "reference":
        vocab = Vocabulary.from_rules(rules, scaffold=flags)
        return Tokenizer(vocab, backend=backend).encode_batch(lines)
    output_id = np.cumsum(~np.array(flags, dtype=bool)) - 1 if flags else None
    pieces = _reference.demolish_table(rules, flags) if flags else {}
    encoded = []
    for line in lines:
        ids = []
        for word in split_words(line, GPT2):
            for token in _reference.encode_word(word_bytes(word), rules):
                ids += [int(output_id[t]) for t in pieces.get(token, [token])] if flags else [token]
        encoded.append(ids)
    return encoded


REFERENCE: dict[bool, tuple] = {}


def reference_result(scaffold: bool):
    if scaffold not in REFERENCE:
        rules, flags = train_on("reference", word_counts(TRAIN_TEXT), scaffold)
        REFERENCE[scaffold] = rules, flags, encode_on("reference", rules, flags, HELD_OUT)
    return REFERENCE[scaffold]


@pytest.mark.parametrize("scaffold", [False, True], ids=["bpe", "scaffold"])
def test_every_backend_trains_encodes_and_decodes_alike(backend, scaffold):
    rules, flags, ids = reference_result(scaffold)
    assert len(rules) == VOCAB_SIZE - 256 or scaffold
    if scaffold:
        assert any(flags), "the corpus must make scaffold tokens for this test to mean much"
    got_rules, got_flags = train_on(backend, word_counts(TRAIN_TEXT), scaffold)
    assert got_rules == rules and got_flags == flags
    got_ids = encode_on(backend, got_rules, got_flags, HELD_OUT)
    assert got_ids == ids
    if backend != "reference":
        tok = Tokenizer(Vocabulary.from_rules(got_rules, scaffold=got_flags), backend=backend)
        assert tok.decode_batch(got_ids) == HELD_OUT


# --- the CUDA probe ---------------------------------------------------------------------

PROBE_SCRIPT = """
import numpy, numba
from numba import cuda
from gpubpe import backend
from gpubpe.errors import BackendUnavailable
from gpubpe.kernels import probe

backend.cuda_unavailable_reason = lambda: None  # stub: as if cupy and a device were there

@cuda.jit
def broken_kernel(values):
    values[0] = "not a number"  # a typing error: the compile fails on purpose

probe.PROBE_SIGNATURES = {broken_kernel: "void(int64[::1])"}
compiles = []
real_compile = probe.compile_probe
probe.compile_probe = lambda: (compiles.append(1), real_compile())
try:
    backend.resolve_backend("cuda")
    print("NO ERROR")
except BackendUnavailable as exc:
    print("cuda:", exc)
auto = backend.resolve_backend("auto")
print("auto:", auto.name, "|", auto.reason)
print("probes:", len(compiles))
print("versions:", numpy.__version__, numba.__version__)
"""


def test_a_stack_that_cannot_compile_is_unavailable_and_auto_falls_back():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert "cuda" in lines, out.stdout + out.stderr
    numpy_version, numba_version = lines["versions"].split()
    assert lines["cuda"].startswith("backend='cuda' cannot run here: compiling a test kernel "
                                    "failed: TypingError")
    for named in (f"numpy {numpy_version}", f"numba {numba_version}", "numba-cuda ", "cupy ",
                  "driver "):
        assert named in lines["cuda"]
    assert "pip install 'gpubpe[cuda12]'" in lines["cuda"]
    name, reason = lines["auto"].split(" | ")
    assert name == "cpu" and reason.startswith("auto picked the CPU: compiling a test kernel "
                                               "failed: TypingError")
    assert lines["probes"] == "1"  # once per process, however often a backend is resolved


def test_the_real_probe_compiles_here_and_fails_only_for_want_of_a_device():
    code = ("from gpubpe import backend\n"
            "backend.cuda_unavailable_reason = lambda: None\n"
            "print(backend.available_backends()['cuda'])\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    state = out.stdout.strip()
    if state == "available":  # a GPU node: the probe kernels ran
        return
    assert state.startswith("unavailable: running the test kernels"), out.stdout + out.stderr
    assert "CudaSupportError" in state


def test_auto_logs_the_install_hint_at_info_and_keeps_it_out_of_its_reason(monkeypatch, caplog):
    from gpubpe import backend

    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    monkeypatch.setattr(backend, "cuda_unavailable_reason", lambda: "cupy is not installed")
    with caplog.at_level("INFO", logger="gpubpe.backend"):
        auto = backend.resolve_backend("auto")
    assert (auto.name, auto.reason) == ("cpu", "auto picked the CPU: cupy is not installed")
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "pip install 'gpubpe[cuda12]'" in caplog.records[0].getMessage()


def test_doctor_json_reports_devices_versions_and_the_probe(monkeypatch, capsys):
    import json

    import numba

    from gpubpe import backend
    from gpubpe.cli import main

    facts = [{"index": 0, "name": "Test GPU", "memory_bytes": 80 << 30, "free_bytes": 79 << 30,
              "compute_capability": "9.0", "sm_count": 132}]
    monkeypatch.setattr(backend, "device_facts", lambda: (facts, None))
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["devices"] == facts
    assert report["versions"]["numpy"] == np.__version__
    assert report["versions"]["numba"] == numba.__version__
    assert {"numba-cuda", "cupy", "driver", "runtime"} <= set(report["versions"])
    assert report["backends"]["cpu"] == "available" and report["probe"]
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "device 0: Test GPU, 80.0 GiB (79.0 free), compute capability 9.0, 132 SMs" in text
    assert f"cuda probe: {report['probe']}" in text


# --- what "auto" trains on -------------------------------------------------------------

def test_auto_trains_on_the_cpu_even_where_a_device_is_usable(monkeypatch):
    # On an H200 the device's merge loop was 3.9x slower a merge than the CPU's (RESULTS,
    # session 20): "auto" encodes large batches on a device but trains on the CPU.
    import gpubpe
    from gpubpe import backend as backend_module

    def device_found(name: str = "auto"):
        return backend_module.DeviceBackend("cuda", np, "a usable device (this test's stand-in)")

    monkeypatch.setattr(backend_module, "resolve_backend", device_found)
    assert backend_module.resolve_training_backend("auto").name == "cpu"
    assert backend_module.resolve_training_backend("cuda").name == "cuda"
    tok = gpubpe.train(["low lower lowest"] * 20, 262, progress=False)
    assert tok.vocabulary.metadata["backend"] == "cpu"
    assert tok.vocabulary.vocab_size == 262

"""GPU backend without a GPU: the real CUDA kernels in Numba's simulator, and PTX builds.

The conftest switches the simulator on (``NUMBA_ENABLE_CUDASIM=1``), so
``backend="cuda"`` runs every ``@cuda.jit`` kernel on NumPy arrays. Results must
equal the CPU path bit for bit; ``launch_counts`` proves the kernels ran.
PTX compilation for sm_80 and sm_90 runs in a subprocess without the simulator.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpubpe
from gpubpe.backend import resolve_backend
from gpubpe.errors import BackendUnavailable
from gpubpe.kernels import _cuda
from gpubpe.kernels.pairs import count_pairs_cpu, count_pairs_cuda
from gpubpe.trainer import flatten_words, train_from_counts

CUDA = resolve_backend("cuda")
ROOT = Path(__file__).resolve().parent.parent

small_words = st.dictionaries(
    st.binary(min_size=1, max_size=7).map(lambda b: bytes(97 + x % 3 for x in b)),
    st.integers(1, 6), min_size=1, max_size=10)


simulator_only = pytest.mark.skipif(
    not numba.config.ENABLE_CUDASIM,
    reason="asserts what the simulator picks; on a GPU node 'cuda' is a real device")


@simulator_only
def test_simulator_backend_is_selected():
    assert CUDA.name == "cuda" and CUDA.simulated and CUDA.xp is np
    assert resolve_backend("auto").name == "cpu"


def positions_of(word_counts):
    tokens, word_start, word_len, word_count = flatten_words(word_counts)
    last = np.zeros(tokens.size, np.uint8)
    last[word_start + word_len - 1] = 1
    return tokens, last, np.repeat(word_count, word_len), (tokens, word_start, word_len, word_count)


@settings(max_examples=15)
@given(small_words)
def test_pair_histogram_kernel_equals_cpu(word_counts):
    tokens, last, position_count, table = positions_of(word_counts)
    before = _cuda.launch_counts["pair_keys_kernel"]
    keys, counts = count_pairs_cuda(tokens, last, position_count)
    cpu_keys, cpu_counts = count_pairs_cpu(*table)
    assert keys.tolist() == cpu_keys.tolist() and counts.tolist() == cpu_counts.tolist()
    assert _cuda.launch_counts["pair_keys_kernel"] == before + 1


@settings(max_examples=4)  # tests/test_cuda_train.py covers device training in depth
@given(small_words, st.integers(257, 275), st.booleans())
def test_phased_device_training_equals_cpu(word_counts, vocab_size, scaffold):
    # The phased launcher named: the default is the persistent kernel where the device has
    # grid sync (an H200 does; the simulator does not), which launches no find-runs.
    before = _cuda.launch_counts["find_runs_kernel"]
    cpu = train_from_counts(word_counts, vocab_size, scaffold=scaffold, progress=False)
    gpu = train_from_counts(word_counts, vocab_size, scaffold=scaffold, progress=False,
                            backend=CUDA, launcher="phased")
    if scaffold:
        assert gpu[0].tolist() == cpu[0].tolist() and gpu[1].tolist() == cpu[1].tolist()
        merges = len(cpu[0])
    else:
        assert gpu.tolist() == cpu.tolist()
        merges = len(cpu)
    # The phased launcher: a find-runs launch per iteration (re-admits included).
    assert _cuda.launch_counts["find_runs_kernel"] >= before + merges


def test_runs_of_one_token_merge_by_parity():
    # "aaaaa": (a,a) merges at offsets 0 and 2 of the run -> aa aa a, as the CPU does.
    cpu = train_from_counts({b"aaaaa": 1, b"xaaay": 2}, 262, progress=False)
    gpu = train_from_counts({b"aaaaa": 1, b"xaaay": 2}, 262, progress=False, backend=CUDA)
    assert gpu.tolist() == cpu.tolist()


def test_end_to_end_train_with_cuda_backend_on_real_text():
    text = (ROOT / "gpubpe" / "data" / "demo.txt").read_text(encoding="utf-8").splitlines(True)
    docs = text[:15]
    cpu = gpubpe.train(docs, 280, progress=False, backend="cpu")
    gpu = gpubpe.train(docs, 280, progress=False, backend="cuda")
    assert gpu.merges == cpu.merges
    assert gpu.metadata["backend"] == "cuda"


@pytest.mark.skipif(not numba.config.ENABLE_CUDASIM,
                    reason="on a GPU node a device is usable, so there is no error to check")
def test_cuda_without_simulator_or_device_is_a_clear_error():
    code = ("import gpubpe\n"
            "try:\n    gpubpe.train(['ab ab'], 257, backend='cuda', progress=False)\n"
            "except gpubpe.errors.BackendUnavailable as e:\n    print('unavailable:', e)\n"
            "try:\n"
            "    gpubpe.train(['ab ab'], 257, backend='cpu', progress=False).with_backend('cuda')\n"
            "except gpubpe.errors.BackendUnavailable as e:\n    print('tokenizer unavailable:', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert "unavailable: backend='cuda' cannot run here:" in out.stdout, out.stderr
    assert "tokenizer unavailable: backend='cuda' cannot run here:" in out.stdout
    assert "cupy" in out.stdout or "device" in out.stdout
    assert issubclass(BackendUnavailable, RuntimeError)


PTX_SCRIPT = """
from gpubpe.kernels.cuda_kernels import compile_all_ptx
for arch, name, outcome, per_thread in compile_all_ptx([(8, 0), (9, 0)]):
    print(arch, name, outcome, "|", per_thread)
"""


def test_every_kernel_compiles_to_ptx_and_assembles_for_sm80_and_sm90():
    """Every kernel builds to PTX for sm_80 and sm_90 and, where CUDA's ptxas is here (the
    build VM and CI have it), assembles as the driver would load it on such a GPU, with
    what a thread costs read back from ptxas."""
    from gpubpe.kernels.cuda_kernels import all_cuda_kernels, ptxas_path

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", PTX_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split(" ", 3) for line in out.stdout.splitlines()]
    names = {kernel.py_func.__name__ for kernel, _ in all_cuda_kernels()}
    for arch in ("sm_80", "sm_90"):
        assert {name for row_arch, name, *_ in rows if row_arch == arch} == names
    failed = [row for row in rows if row[2] != "ok"]
    assert not failed, failed
    if ptxas_path():
        costs = [row[3].removeprefix("| ") for row in rows]
        assert all(re.fullmatch(r"\d+ registers, \d+ B stack, .*", cost) for cost in costs), costs


CACHE_SCRIPT = """
from numba.cuda.dispatcher import CUDACache
from gpubpe.kernels.cuda_kernels import all_cuda_kernels, enable_disk_cache
switched = enable_disk_cache()
cached = sorted(k.py_func.__name__ for k, _ in all_cuda_kernels()
                if isinstance(k._cache, CUDACache))
print(len(all_cuda_kernels()), sorted(switched) == cached, " ".join(cached))
"""


@pytest.mark.parametrize("variable", [None, "1"])
def test_the_disk_cache_of_kernels_is_opt_in_and_leaves_the_cooperative_one_out(variable):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "GPUBPE_CUDA_CACHE")}
    if variable is not None:
        env["GPUBPE_CUDA_CACHE"] = variable
    out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    n_kernels, agrees, *cached = out.stdout.split()
    assert agrees == "True"
    if variable is None:
        assert cached == []
    else:  # every kernel but the persistent training kernel (a cooperative launch)
        assert len(cached) == int(n_kernels) - 1 and "train_steps_kernel" not in cached
        assert {"encode_words_kernel", "decide_kernel", "count_pairs_kernel"} <= set(cached)


def test_assembled_reports_registers_and_refuses_bad_ptx():
    from gpubpe.kernels.cuda_kernels import AssemblyError, assembled, ptxas_path

    if not ptxas_path():
        pytest.skip("CUDA's ptxas is not installed here")
    ptx = "\n".join([".version 7.0", ".target sm_80", ".address_size 64",
                     ".visible .entry noop()", "{", "ret;", "}", ""])
    assert re.fullmatch(r"\d+ registers, 0 B stack, no spills", assembled(ptx, (8, 0)))
    with pytest.raises(AssemblyError, match="error"):
        assembled(ptx.replace("ret;", "not_an_instruction;"), (8, 0))


# Functions and attributes of the NumPy API that CuPy also provides; orchestration code
# that runs on device arrays may use only these through ``xp``.
CUPY_SHARED = {
    "arange", "argsort", "asarray", "concatenate", "cumsum", "empty", "flatnonzero", "full",
    "int64", "maximum", "ones", "stack", "uint8", "uint32", "uint64", "zeros", "bool_",
    "int32", "zeros_like", "empty_like", "where", "searchsorted", "diff", "repeat", "unique",
    "nonzero", "count_nonzero", "minimum", "sort", "take", "ascontiguousarray", "bincount",
    "array",
}


@pytest.mark.parametrize("module", ["kernels/_cuda.py", "kernels/pairs.py", "kernels/merge.py",
                                    "kernels/bitpack.py", "kernels/encode/cuda.py",
                                    "kernels/train_device.py",
                                    "gpubpe/trainer.py", "gpubpe/device.py"])
def test_orchestration_uses_only_the_api_cupy_shares(module):
    tree = ast.parse((ROOT / module).read_text())
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "xp"}
    assert used <= CUPY_SHARED, f"{module} uses xp.{sorted(used - CUPY_SHARED)}"

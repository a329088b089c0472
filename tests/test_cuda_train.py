"""Device-resident training (``kernels/train_device.py``) in the CUDA simulator.

Both launcher shapes run: the phased launcher (each phase its own launch,
grid-stride over two blocks, as ``launch`` gives the simulator) and the
persistent cooperative kernel with one block (the simulator's ``grid.sync()``
waits for its own block only). Rules, scaffold flags and the event log must
equal the CPU loop's, and the rules and flags ``_reference.py``'s. Inputs are
tiny: the simulator costs ~35 us per thread-iteration. On a GPU node
(``bench/gpu_node.sh``, ``NUMBA_ENABLE_CUDASIM=0``) the same tests run on the device, and
one more: the persistent kernel over many blocks, whose grid syncs the simulator cannot run.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpubpe
from gpubpe import _reference
from gpubpe.backend import Backend, resolve_backend
from gpubpe.errors import DeviceError
from gpubpe.kernels import train_device as dev
from gpubpe.kernels._cuda import to_host
from gpubpe.trainer import DeviceTrainState, train_from_counts

CUDA = resolve_backend("cuda")
LAUNCHERS = ("phased", "cooperative")

small_words = st.dictionaries(
    st.binary(min_size=1, max_size=7).map(lambda b: bytes(97 + x % 3 for x in b)),
    st.integers(1, 6), min_size=1, max_size=8)


def train_both(word_counts, vocab_size, scaffold=False, launcher="phased", step=4,
               min_frequency=0, max_token_length=None):
    """(cpu, device) results of train_from_counts with events, the device in small steps."""
    kwargs = dict(scaffold=scaffold, progress=False, with_events=True,
                  min_frequency=min_frequency, max_token_length=max_token_length)
    cpu = train_from_counts(word_counts, vocab_size, merges_per_step=step, **kwargs)
    device = train_from_counts(word_counts, vocab_size, backend=CUDA, launcher=launcher,
                               merges_per_step=step, **kwargs)
    return cpu, device


def assert_same(cpu, device, scaffold):
    (cpu_result, cpu_events), (device_result, device_events) = cpu, device
    if scaffold:
        assert device_result[0].tolist() == cpu_result[0].tolist()
        assert device_result[1].tolist() == cpu_result[1].tolist()
    else:
        assert device_result.tolist() == cpu_result.tolist()
    assert device_events.tolist() == cpu_events.tolist()


def reference_rules(word_counts, vocab_size, scaffold=False):
    if scaffold:
        rules, flags = _reference.train_scaffold_bpe(word_counts, vocab_size)
        return [list(rule) for rule in rules], flags
    return [list(rule) for rule in _reference.train_bpe(word_counts, vocab_size)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@settings(max_examples=4)  # the simulator: ~35 us a thread-iteration
@given(small_words, st.integers(257, 272), st.booleans())
def test_device_training_equals_cpu_and_reference(launcher, word_counts, vocab_size, scaffold):
    cpu, device = train_both(word_counts, vocab_size, scaffold, launcher, step=3)
    assert_same(cpu, device, scaffold)
    reference = reference_rules(word_counts, vocab_size, scaffold)
    if scaffold:
        assert device[0][0].tolist() == reference[0]
        assert device[0][1].tolist() == list(reference[1])
    else:
        assert device[0].tolist() == reference


ON_SIMULATOR = numba.config.ENABLE_CUDASIM


@pytest.mark.skipif(not ON_SIMULATOR, reason="the grid shapes asserted are the simulator's")
def test_phased_launcher_runs_over_two_blocks_and_the_persistent_kernel_over_one():
    word_counts = {b"abcabcab": 3, b"bcabca": 2, b"cab": 5}
    cpu = train_from_counts(word_counts, 266, progress=False)
    for launcher, blocks in (("phased", 2), ("cooperative", 1)):
        state = DeviceTrainState(word_counts, 266, 1, False, np, 4, launcher)
        rules = np.concatenate([state.run(4)[0] for _ in range(4)])
        assert rules.tolist() == cpu.tolist()
        # The count phase records the grid it ran with.
        assert to_host(state.state["control"], "test")[dev.GRID_BLOCKS] == blocks


def random_words(n_words: int, seed: int) -> dict[bytes, int]:
    rng = random.Random(seed)
    word_counts = {}
    while len(word_counts) < n_words:
        word = bytes(rng.choice(b"abcdefghijklmnop") for _ in range(rng.randint(2, 12)))
        word_counts[word] = rng.randint(1, 50)
    return word_counts


@pytest.mark.skipif(ON_SIMULATOR, reason="a grid of many blocks needs a device: the "
                    "simulator's grid.sync() waits for its own block only")
@pytest.mark.parametrize("scaffold", [False, True])
def test_the_persistent_kernel_over_many_blocks_equals_cpu(scaffold):
    """~150 K positions: the cooperative kernel runs on one block a multiprocessor or more,
    each grid sync between its phases real; rules (and flags) equal the CPU loop's."""
    word_counts = random_words(20000, seed=11)
    cpu, device = train_both(word_counts, 1256, scaffold, launcher="cooperative", step=64)
    assert_same(cpu, device, scaffold)
    state = DeviceTrainState(word_counts, 1256, 1, scaffold, CUDA.xp, 64, "cooperative")
    state.run(64)
    assert to_host(state.state["control"], "test")[dev.GRID_BLOCKS] > 1


@pytest.mark.parametrize("launcher", LAUNCHERS)
@settings(max_examples=4)
@given(st.dictionaries(st.binary(min_size=1, max_size=12), st.integers(1, 5), min_size=1,
                       max_size=10), st.integers(1, 6), st.booleans())
def test_max_token_length_on_the_device_equals_cpu_and_reference(launcher, word_counts,
                                                                   max_token_length, scaffold):
    cpu, device = train_both(word_counts, 300, scaffold, launcher, step=5,
                             max_token_length=max_token_length)
    assert_same(cpu, device, scaffold)
    if not scaffold:
        assert device[0].tolist() == [list(rule) for rule in _reference.train_bpe(
            word_counts, 300, max_token_length=max_token_length)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_long_runs_of_one_byte(launcher):
    # a^17: (a,a) pairs up left to right, 8 times, leaving one a: aa x8 + a.
    word_counts = {b"a" * 17: 1, b"xaaaay": 2, b"aaa": 3}
    cpu, device = train_both(word_counts, 264, launcher=launcher, step=2)
    assert_same(cpu, device, False)
    assert device[0].tolist() == reference_rules(word_counts, 264)
    assert device[0][0].tolist() == [97, 97, 256]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_chunks_kept_in_groups_of_several(monkeypatch, launcher):
    # The head is the best of the groups' maxima; with GROUPS = 2 each group holds several
    # chunks, so a group's rescan must find its listed chunks among others (the tests'
    # small inputs otherwise get a group a chunk).
    monkeypatch.setattr(dev, "GROUPS", 2)
    word_counts = random_words(40, seed=5)
    state = DeviceTrainState(word_counts, 300, 1, True, CUDA.xp, 8, launcher)
    assert to_host(state.state["control"], "test")[dev.GROUP_CHUNKS] > 2
    cpu, device = train_both(word_counts, 300, True, launcher=launcher, step=16)
    assert_same(cpu, device, True)


@pytest.mark.skipif(not ON_SIMULATOR, reason="counts the simulator's calls of grid_sync()")
def test_a_merge_pays_two_grid_syncs_three_when_its_two_tokens_are_one(monkeypatch):
    """The persistent kernel's cost a merge that no launch count shows: its grid syncs
    (~1.5-3 us each on an H100, bench/GPU_NOTES.md). Until session 21, five a merge; until
    session 22, three (the decision had its own phase)."""
    calls = []
    simulated_sync = dev.grid_sync

    def counted_sync():
        calls.append(1)
        simulated_sync()

    monkeypatch.setattr(dev, "grid_sync", counted_sync)
    for word_counts, vocab_size, syncs in (({b"abcd": 2}, 259, [2, 2, 2]),
                                           ({b"aaaa": 2}, 258, [3, 3]),
                                           ({b"aaab": 2}, 259, [3, 2, 2])):
        calls.clear()
        state = DeviceTrainState(word_counts, vocab_size, 1, False, CUDA.xp, 4, "cooperative")
        rules = state.run(4)[0]  # one launch of an iteration a missing token
        assert rules.tolist() == reference_rules(word_counts, vocab_size)
        assert len(calls) == sum(syncs) * dev.block_threads()  # every thread calls each sync
        assert [left == right for left, right, _ in rules.tolist()] == [s == 3 for s in syncs]


@pytest.mark.parametrize("scaffold", [False, True])
def test_word_counted_more_than_2_to_the_32(scaffold):
    big = 2**33 + 5
    word_counts = {b"abcd": big, b"bcd": big - 1, b"cdab": 7}
    cpu, device = train_both(word_counts, 262, scaffold, step=2)
    assert_same(cpu, device, scaffold)
    rules = device[0][0] if scaffold else device[0]
    assert rules.tolist() == (reference_rules(word_counts, 262, scaffold)[0] if scaffold
                              else reference_rules(word_counts, 262))


def test_ties_across_a_step_boundary():
    # Every pair counted once: the order is HF's tie-break alone, two merges a step.
    word_counts = {bytes([a, b]): 1 for a, b in zip(b"zyxwvuts", b"qponmlkj")}
    word_counts[b"~!"] = 1  # '~' and '!' sit at other places in HF's byte order
    cpu, device = train_both(word_counts, 256 + len(word_counts), step=2)
    assert_same(cpu, device, False)
    assert device[0].tolist() == reference_rules(word_counts, 256 + len(word_counts))


@pytest.mark.parametrize("vocab_size", [259, 262, 263])
def test_vocab_size_ending_mid_step(vocab_size):
    word_counts = {b"hello": 5, b"yellow": 3, b"low": 4, b"lowest": 2}
    cpu, device = train_both(word_counts, vocab_size, step=4)
    assert_same(cpu, device, False)
    assert len(device[0]) == vocab_size - 256


def test_min_frequency_stops_the_device_too():
    word_counts = {b"abab": 3, b"cd": 1, b"ef": 2}
    cpu, device = train_both(word_counts, 270, step=2, min_frequency=3)
    assert_same(cpu, device, False)
    assert device[0].tolist() == [[97, 98, 256], [256, 256, 257]]


def test_scaffold_events_replay_to_the_flags():
    word_counts = {b"abcabcd": 4, b"abcx": 3, b"bcd": 2, b"abd": 5, b"cabd": 1}
    cpu, device = train_both(word_counts, 264, scaffold=True, step=3)
    assert_same(cpu, device, True)
    (rules, flags), events = device
    assert events[events[:, 0] == 0, 1].tolist() == list(range(len(rules)))
    replayed = np.zeros(flags.size, bool)
    for kind, token in events[events[:, 0] > 0].tolist():
        replayed[token] = kind == 1
    assert replayed.tolist() == flags.tolist()
    reference_events = []
    reference = _reference.train_scaffold_bpe(word_counts, 264, reference_events)
    assert [list(rule) for rule in reference[0]] == rules.tolist()
    assert list(reference[1]) == flags.tolist()
    code = {"scaffold": 1, "readmit": 2, "readmit-by-pair": 2}
    assert [[code[kind], token] for kind, token in reference_events] == \
        events[events[:, 0] > 0].tolist()


def test_token_pool_grows_when_the_device_runs_short(monkeypatch):
    monkeypatch.setattr(DeviceTrainState, "initial_pool_bytes",
                        staticmethod(lambda max_tokens, vocab_size: 258))
    word_counts = {b"abcdefgh": 3, b"abcd": 2}
    cpu, device = train_both(word_counts, 263, step=3)
    assert_same(cpu, device, False)
    assert len(device[0]) == 7


def test_demo_corpus_slice_on_the_device_equals_cpu(tmp_path):
    text = gpubpe.__file__.replace("__init__.py", "data/demo.txt")
    docs = open(text, encoding="utf-8").read().splitlines(True)[11:15]  # ~250 bytes of prose
    cpu = gpubpe.train(docs, 300, progress=False, backend="cpu", scaffold=True)
    device = gpubpe.train(docs, 300, progress=False, backend="cuda", scaffold=True)
    assert device.merges == cpu.merges and len(cpu.merges) >= 44
    path = tmp_path / "device.json"
    device.save(path)
    assert gpubpe.load(path).merges == cpu.merges


@pytest.mark.parametrize("word_counts", [{b"hello": 3, b"world": 2, b"abcab": 5},
                                         random_words(300, seed=3)])
def test_the_planned_device_bytes_are_what_the_state_holds(word_counts):
    # device_bytes sizes the error a device without room gets; it must be the state's size.
    state = DeviceTrainState(word_counts, 300, 1, False, CUDA.xp, 8, "phased").state
    held = sum(to_host(array, "test").nbytes for name, array in state.items()
               if name not in ("control", "rules", "events"))  # views of "out"
    planned = dev.device_bytes(state["tokens"].size, len(word_counts), state["token_len"].size,
                               state["pool"].size, 8)
    assert held == planned


def test_out_of_device_memory_is_a_device_error_naming_the_bytes(monkeypatch):
    def no_room(*args, **kwargs):
        raise MemoryError("out of memory allocating 4096 bytes")

    monkeypatch.setattr(dev, "init_state", no_room)
    with pytest.raises(DeviceError, match=r"needs about [0-9.,]+ MiB for 7 positions in 2 distinct"):
        train_from_counts({b"abcd": 1, b"xyz": 2}, 260, progress=False, backend=CUDA)


def test_130_merges_in_steps_of_32_make_one_sync_a_step():
    # The bound is per step, whatever the count: 4 full steps and a partial one.
    merges, step = 130, 32
    rng = random.Random(7)
    word_counts = {}
    while len(word_counts) < 100:
        word = bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(5, 9)))
        word_counts[word] = rng.randint(1, 9)
    with gpubpe.device_stats() as stats:
        rules = train_from_counts(word_counts, 256 + merges, progress=False, backend=CUDA,
                                  launcher="cooperative", merges_per_step=step)
    assert len(rules) == merges
    assert rules.tolist() == train_from_counts(word_counts, 256 + merges,
                                               progress=False).tolist()
    assert stats.syncs <= math.ceil(merges / step) + 1, stats.sync_sites
    assert stats.sync_sites["training step"] == math.ceil(merges / step)
    # One cooperative launch and one reset a step; the initial pair count (the first
    # iteration rescans every chunk before its decision).
    assert stats.n_launches == 2 * math.ceil(merges / step) + 1, stats.launches


def test_a_step_past_its_deadline_is_a_device_error(monkeypatch):
    monkeypatch.setattr(dev, "wait_until_done", lambda xp, seconds: False)
    with pytest.raises(DeviceError, match="did not finish within 120 s"):
        train_from_counts({b"abcd": 1, b"xyz": 2}, 260, progress=False, backend=CUDA)


def test_without_grid_sync_the_step_falls_back_to_the_phased_launcher(monkeypatch):
    def no_grid_sync(*args):
        raise RuntimeError("cudadevrt not found")

    monkeypatch.setattr(dev, "run_cooperative", no_grid_sync)
    word_counts = {b"hello": 3, b"yellow": 2}
    with pytest.warns(UserWarning, match="cooperative training kernel cannot run here"):
        device = train_from_counts(word_counts, 262, progress=False, backend=CUDA,
                                   launcher="cooperative")
    assert device.tolist() == train_from_counts(word_counts, 262, progress=False).tolist()


def test_the_backend_object_picks_the_loop_not_its_name():
    # Where the merges run is the Backend's own choice (``Backend.train_state``): a device
    # backend under another name still launches, a host one named "cuda" launches nothing.
    word_counts = {b"hello": 3, b"yellow": 2, b"mellow": 4}
    expected = train_from_counts(word_counts, 264, progress=False).tolist()
    renamed_device = dataclasses.replace(CUDA, name="gpu")
    host_named_cuda = Backend("cuda", np, "a host backend under the device's name")
    for backend, launches in ((renamed_device, True), (host_named_cuda, False)):
        with gpubpe.device_stats() as stats:
            rules = train_from_counts(word_counts, 264, progress=False, backend=backend)
        assert rules.tolist() == expected
        assert (stats.n_launches > 0) is launches, (backend, stats.launches)

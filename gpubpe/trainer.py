"""BPE training controller: argument checks, word counting, the merge loop in batches.

The heavy work is in ``gpubpe.kernels``: ``build_pair_index_cpu`` counts every
pair once, then ``merge_loop_cpu`` runs the BPE iterations (priority queue with
lazy invalidation, merge application, count deltas) in Numba, a batch of rules
per call so a progress bar can move. Results do not depend on thread counts:
word counting is a sum, and the merge loop is sequential and exact.
"""

from __future__ import annotations

import time
import unicodedata
import warnings
from collections.abc import Iterable, Iterator

import numpy as np
from tqdm.auto import tqdm

from ._threads import check_num_threads
from .backend import Backend, resolve_backend, resolve_training_backend
from .bytes_order import HF_BYTE_RANK as _HF_BYTE_RANK
from .errors import ConfigError, CorpusError, DeviceError
from .kernels import train_device as dev
from .kernels._cuda import to_host
from .kernels.hashing import table_grown
from .kernels.merge import merge_batch_cpu
from .kernels.pairs import (
    HEAP_SIZE,
    MAX_TOKEN_LEN,
    N_EVENTS,
    N_NORMAL,
    N_POSTINGS,
    N_SLOTS,
    N_TOKENS,
    NEED,
    POOL_USED,
    SIZES_LENGTH,
    STOP,
    build_pair_index_cpu,
    token_frequencies_cpu,
)
from .kernels.pqueue import empty_heap, heap_of_counts
from .model import Vocabulary, check_special_tokens, normalizing
from .normalize import FORMS, hf_normalize_bytes
from .pretokenize import Batch, count_batch_words, count_words, iter_batches, resolve_pattern

TIE_BREAKS = ("hf",)
# Merges per step of the Numba loop: small enough for a lively progress bar,
# large enough that the call overhead (~50 us) does not show.
CPU_MERGES_PER_STEP = 512
HF_BYTE_RANK = np.array(_HF_BYTE_RANK, dtype=np.int64)
# Merges per step on a device: one host read per step, so the step's launches
# and its one sync are spread over this many merges.
DEVICE_MERGES_PER_STEP = 256
LAUNCHERS = ("cooperative", "phased")

# Token ids are uint32 (DESIGN §2), special tokens included.
MAX_VOCAB_SIZE = (1 << 32) - 1


def check_train_args(vocab_size, min_frequency, tie_break, max_token_length=None) -> None:
    """Raise ConfigError for arguments training cannot use."""
    if max_token_length is not None and (
            isinstance(max_token_length, bool) or not isinstance(max_token_length, int | np.integer)
            or max_token_length < 1):
        raise ConfigError(f"max_token_length={max_token_length!r}: expected a positive int "
                          "(HF's BpeTrainer option: tokens shorter than it), or None")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise ConfigError(f"vocab_size must be an int, not {type(vocab_size).__name__}")
    if vocab_size < 256:
        raise ConfigError(
            f"vocab_size={vocab_size} is below 256: the 256 byte tokens are always part of "
            "the vocabulary; ask for at least 257 to learn any merge"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise ConfigError(f"vocab_size={vocab_size} is beyond the id space: token ids are "
                          f"uint32, so at most {MAX_VOCAB_SIZE:,}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int | np.integer):
        raise ConfigError(f"min_frequency must be an int, not {type(min_frequency).__name__}")
    if min_frequency < 0:
        raise ConfigError(f"min_frequency={min_frequency} is negative; use 0 for no threshold")
    if tie_break not in TIE_BREAKS:
        raise ConfigError(f"tie_break={tie_break!r} is not one of {TIE_BREAKS}")


def check_normalizer(normalizer, scaffold: bool) -> None:
    """ConfigError unless ``normalizer`` is None or a form training can follow."""
    if normalizer is None:
        return
    if normalizer not in FORMS:
        raise ConfigError(f"normalizer={normalizer!r}: expected None or one of "
                          f"{', '.join(FORMS)} (HF's Unicode normalizers)")
    if scaffold:
        raise ConfigError("normalizer= with scaffold=True: a Scaffold-BPE vocabulary maps its "
                          "ids itself, and gpubpe keeps a normalizer in an id layout; train "
                          "one or the other")


def normalized_batches(corpus, form: str, text_field: str = "text") -> Iterator[Batch]:
    """The documents of ``corpus`` (what :func:`train` takes) in batches, each document in
    HF's ``form`` (``hf_normalize``), as HF's trainer normalizes each sequence. A batch
    already in that form (English, most Chinese) is passed on as it was read.

    Counting English (40 MB, 2 threads, ``bench/train_bench.py --normalizer NFKC``) takes
    0.83 s against 0.44 s without a normalizer, though NFKC changes almost nothing there:
    each batch is read, decoded and checked here, on the calling thread, before its words
    are counted (``count_words`` of a file reads it its own way). Yielding each document
    (counted as a list of bytes) took the same 0.82 s. bench/RESULTS.md, session 28."""
    for batch in iter_batches(corpus, text_field):
        data = bytes(batch.data)
        if data.isascii() or unicodedata.is_normalized(
                form, data.decode("utf-8", "surrogateescape")):
            yield batch
            continue
        documents, start = [], 0
        for end in batch.doc_ends.tolist():
            document = data[start:end]
            start = end
            documents.append(document if document.isascii() else
                             hf_normalize_bytes(document, form))
        ends = np.cumsum(np.fromiter(map(len, documents), np.int64, len(documents)))
        yield Batch(b"".join(documents), ends, batch.input_bytes, batch.last)


def normalized_documents(corpus, form: str, text_field: str = "text") -> Iterator[bytes]:
    """``normalized_batches``' documents one by one (what ``count_words`` of a list takes)."""
    for batch in normalized_batches(corpus, form, text_field):
        data, start = bytes(batch.data), 0
        for end in batch.doc_ends.tolist():
            yield data[start:end]
            start = end


def flatten_words(word_counts: dict[bytes, int]):
    """The word table of DESIGN §2: tokens (uint32), word_start, word_len, word_count (int64)."""
    words = list(word_counts)
    word_len = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    word_start = np.zeros(len(words), dtype=np.int64)
    if len(words) > 1:
        np.cumsum(word_len[:-1], out=word_start[1:])
    tokens = np.frombuffer(b"".join(words), dtype=np.uint8).astype(np.uint32)
    word_count = np.fromiter(word_counts.values(), dtype=np.int64, count=len(words))
    return tokens, word_start, word_len, word_count


def vocabulary_from_counts(word_counts, vocab_size, min_frequency, scaffold, progress, backend,
                           special_tokens, pattern, max_token_length=None) -> Vocabulary:
    """Train and wrap as a Vocabulary; a Scaffold one keeps its event log in its metadata
    (``scaffold_events``, flat ``[kind, value, ...]``) so ``Tokenizer.truncate`` can cut it."""
    trained = train_from_counts(word_counts, int(vocab_size), min_frequency=int(min_frequency),
                                scaffold=scaffold, progress=progress, backend=backend,
                                with_events=scaffold, max_token_length=max_token_length)
    limit = {} if max_token_length is None else {"max_token_length": int(max_token_length)}
    if not scaffold:
        return Vocabulary.from_rules(trained, special_tokens, pattern, limit)
    (rules, flags), events = trained
    vocab = Vocabulary.from_rules(rules, special_tokens, pattern, limit, scaffold=flags)
    vocab.metadata["scaffold_events"] = events.ravel().tolist()
    return vocab


def train_from_counts(
    word_counts: dict[bytes, int],
    vocab_size: int,
    *,
    min_frequency: int = 0,
    scaffold: bool = False,
    progress: bool = True,
    backend: Backend | None = None,
    merges_per_step: int | None = None,
    launcher: str | None = None,
    with_events: bool = False,
    max_token_length: int | None = None,
):
    """Rules learned from word counts: int64 (n x 3) rows ``(left, right, result)``.

    With ``scaffold=True`` (Scaffold-BPE) returns ``(rules, scaffold_flags)``,
    the flags a bool per internal id. ``backend`` (from ``resolve_backend``)
    picks the CPU loop or the device step; both give the same rules. The one
    loop here asks the backend for up to ``merges_per_step`` merges at a time
    (one host round trip per step on a device). ``launcher`` picks how a
    device runs a step ("cooperative": one persistent kernel; "phased": a
    launch per phase; default: cooperative on a GPU, falling back to phased).
    ``with_events=True`` returns ``(result, events)``: int64 (m x 2) rows
    ``(kind, value)`` in order, kind 0 a rule (its index), 1 a token marked
    scaffold, 2 one re-admitted (``kernels/train_policy.py``).
    ``max_token_length``: HF's BpeTrainer option, as HF runs it (``kernels.merge.counted_pair``):
    no pair whose token would be ``max_token_length`` bytes or longer is merged, except
    two single bytes; tokens are then at most ``max_token_length - 1`` bytes (2 at least).
    """
    min_count = max(min_frequency, 1)
    state, step = (backend or resolve_backend("cpu")).train_state(
        word_counts, vocab_size, min_count, scaffold, merges_per_step, launcher,
        max_token_length or 0)
    bar = tqdm(total=vocab_size - 256, desc="merges", unit="tok", disable=not progress, leave=False)
    rule_batches, event_batches = [], []
    with bar:
        while True:
            normal_before = state.n_normal
            rules, events, stop = state.run(step)
            rule_batches.append(rules)
            event_batches.append(events)
            bar.update(state.n_normal - normal_before)
            if stop:
                break
    rules = np.concatenate(rule_batches)
    result = (rules, state.scaffold_flags()) if scaffold else rules
    return (result, np.concatenate(event_batches)) if with_events else result


class _TrainState:
    """Host state of training: pair slots and their table, the heap, the tokens made."""

    sizes: np.ndarray
    arrays: dict

    def _init_heap(self, n_slots: int) -> None:
        priority, order, item = empty_heap(2 * n_slots)
        self.sizes[HEAP_SIZE] = heap_of_counts(priority, order, item, self.arrays["slot_count"],
                                               self.arrays["slot_order"], n_slots)
        self.arrays.update(heap_priority=priority, heap_order=order, heap_item=item)


    def _init_tokens(self, vocab_size: int, word_table) -> None:
        # Sized by what the corpus can produce, never by the request: each merge
        # shortens some word, so merges <= sum(word_len - 1) (vocab_size=10**9 is fine).
        capacity = max(min(vocab_size, 256 + int(np.maximum(word_table[2] - 1, 0).sum())), 512)
        tables = dev.host_token_tables(capacity, 16 * capacity)
        self.sizes[N_TOKENS], self.sizes[POOL_USED], self.sizes[N_NORMAL] = 256, 256, 256
        token_freq = token_frequencies_cpu(*word_table, capacity)
        self.arrays.update(zip(("pool", "token_start", "token_len", "token_hash", "vocab_keys",
                                "vocab_values"), tables),
                           token_freq=token_freq,
                           scaffold=np.zeros(capacity, np.uint8))

    _STATE = ("table_keys", "table_values", "slot_key", "slot_count", "slot_order", "slot_head",
              "slot_touch", "post_word", "post_next", "touched", "heap_priority", "heap_order",
              "heap_item", "pool", "token_start", "token_len", "token_hash", "vocab_keys",
              "vocab_values", "token_freq", "scaffold")

    def _grow(self, need: int) -> None:
        """Make room for one merge that may add ``need`` slots, postings and pushes."""
        a, sizes = self.arrays, self.sizes
        while 2 * (sizes[N_SLOTS] + need) > a["table_keys"].size:
            a["table_keys"], a["table_values"] = table_grown(a["table_keys"], a["table_values"])
        while 2 * (sizes[N_TOKENS] + 1) > a["vocab_keys"].size:
            a["vocab_keys"], a["vocab_values"] = table_grown(a["vocab_keys"], a["vocab_values"])
        groups = (
            (("slot_key", "slot_count", "slot_order", "slot_head", "slot_touch"), sizes[N_SLOTS] + need),
            (("post_word", "post_next"), sizes[N_POSTINGS] + need),
            (("touched",), need),
            (("heap_priority", "heap_order", "heap_item"), sizes[HEAP_SIZE] + need + 1),
            (("token_start", "token_len", "token_hash", "token_freq", "scaffold"),
             sizes[N_TOKENS] + 1),
            (("pool",), sizes[POOL_USED] + need),
        )
        for names, wanted in groups:
            for name in names:
                if a[name].size < wanted:
                    a[name] = _grown(a[name], int(wanted))


class CpuTrainState(_TrainState):
    """Every array the Numba merge loop keeps between calls."""

    # Tie order of the byte tokens (merged tokens rank by id after them): HF's, or an
    # extended import's own (``gpubpe.extend``).
    byte_rank = HF_BYTE_RANK

    def __init__(self, word_counts: dict[bytes, int], vocab_size: int, min_count: int,
                 scaffold: bool, max_token_length: int = 0):
        self.params = (vocab_size, min_count, scaffold)
        self.tokens, self.word_start, self.word_len, self.word_count = flatten_words(word_counts)
        index, n_slots, n_postings = build_pair_index_cpu(
            self.tokens, self.word_start, self.word_len, self.word_count, HF_BYTE_RANK
        )
        self.arrays = index
        self.arrays["touched"] = np.zeros(1024, np.int64)
        self.word_stamp = np.full(len(word_counts), -1, np.int64)
        self.sizes = np.zeros(SIZES_LENGTH, np.int64)
        self.sizes[N_SLOTS], self.sizes[N_POSTINGS] = n_slots, n_postings
        self.sizes[MAX_TOKEN_LEN] = max_token_length  # the text's first pairs: two bytes each
        self._init_heap(n_slots)
        self._init_tokens(vocab_size, (self.tokens, self.word_start, self.word_len, self.word_count))

    @property
    def n_normal(self) -> int:
        return int(self.sizes[N_NORMAL])

    def scaffold_flags(self) -> np.ndarray:
        return self.arrays["scaffold"][: self.sizes[N_TOKENS]].astype(bool)

    def run(self, max_rules: int):
        """One step: up to max_rules rules; returns (rules, events, stopped)."""
        rules = np.zeros((max_rules, 3), np.int64)
        events = np.zeros((3 * max_rules + 3, 2), np.int64)
        self.sizes[N_EVENTS] = 0
        done = 0
        while done < max_rules:
            done += merge_batch_cpu(
                rules[done:], events, *self.params, self.sizes, self.byte_rank,
                self.tokens, self.word_start, self.word_len, self.word_count, self.word_stamp,
                *(self.arrays[name] for name in self._STATE),
            )
            if self.sizes[NEED] == 0:
                break
            self._grow(int(self.sizes[NEED]))
        return rules[:done], events[: self.sizes[N_EVENTS]], bool(self.sizes[STOP])


class DeviceTrainState:
    """Training state on the device (``kernels/train_device.py``): a step runs up to K
    merges there and the host reads its rules and events once (the step's one sync)."""

    def __init__(self, word_counts: dict[bytes, int], vocab_size: int, min_count: int,
                 scaffold: bool, xp, rows: int, launcher: str | None,
                 max_token_length: int = 0):
        if launcher not in (None, *LAUNCHERS):
            raise ConfigError(f"launcher={launcher!r} is not one of {LAUNCHERS}")
        tokens, word_start, word_len, word_count = flatten_words(word_counts)
        next_pos, prev_pos, position_count = dev.host_word_positions(tokens, word_start,
                                                                     word_len, word_count)
        n_words = len(word_counts)
        # Every rule merges one position at least: at most positions - words rules.
        max_tokens = 256 + max(tokens.size - n_words, 0) + 1
        pool = self.initial_pool_bytes(max_tokens, vocab_size)
        control = np.zeros(dev.CONTROL_LENGTH, np.int64)
        control[[dev.N_TOKENS, dev.POOL_USED, dev.N_NORMAL]] = 256
        control[[dev.VOCAB_SIZE, dev.MIN_COUNT, dev.SCAFFOLD_MODE, dev.MAX_TOKEN_LEN]] = (
            vocab_size, min_count, int(scaffold), max_token_length)
        token_tables = dict(zip(("pool", "token_start", "token_len", "token_hash", "vocab_keys",
                                 "vocab_values"), dev.host_token_tables(max_tokens, pool)))
        host = dict(tokens=tokens, next_pos=next_pos, prev_pos=prev_pos,
                    position_count=position_count, byte_rank=HF_BYTE_RANK, **token_tables,
                    token_freq=token_frequencies_cpu(tokens, word_start, word_len, word_count,
                                                     max_tokens),
                    scaffold=np.zeros(max_tokens, np.uint8), control=control)
        needed = dev.device_bytes(tokens.size, n_words, max_tokens, pool, rows)
        try:
            self.state = dev.init_state(xp, host, n_words, rows)
        except MemoryError as error:
            raise DeviceError(
                f"device training needs about {needed / 2**20:,.1f} MiB for {tokens.size} "
                f"positions in {n_words} distinct words and did not fit ({error}); train on "
                "fewer distinct words (a smaller corpus, or min_frequency) or use "
                "backend='cpu'") from error
        self.xp, self.rows = xp, rows
        self.launcher = launcher or ("phased" if xp is np else "cooperative")
        self.blocks = dev.cooperative_blocks(tokens.size)
        self.cooperative_ran = False  # after one good launch, a failure is not a fallback
        self.n_normal, self.n_tokens = 256, 256
        self.vocab_size, self.marks_pending = vocab_size, False

    step_deadline_s = 120.0  # a step runs up to DEVICE_MERGES_PER_STEP merges: well under 1 s

    @staticmethod
    def initial_pool_bytes(max_tokens: int, vocab_size: int) -> int:
        """Bytes of tokens the device holds at first; the step grows it when it runs short."""
        return 256 + 16 * min(max_tokens, 2 * vocab_size)

    def run(self, max_rules: int):
        """One step of up to max_rules iterations; returns (rules, events, stopped).

        An iteration adds one normal token at most, so a step never needs more than the
        normal tokens still missing (the simulator paid ~25 ms a launch for the rest of
        a 256-iteration step that had nothing left to do). With none missing and no
        marks pending, the device's next iteration would only stop: the host stops.
        """
        missing = self.vocab_size - self.n_normal
        if missing <= 0 and not self.marks_pending:
            return np.zeros((0, 3), np.int64), np.zeros((0, 2), np.int64), True
        iterations = min(max_rules, self.rows, max(missing, 1))
        out = self._step(iterations)
        control = out[: dev.CONTROL_LENGTH]
        n_rules, n_events = int(control[dev.N_RULES]), int(control[dev.N_EVENTS])
        first_rule = dev.CONTROL_LENGTH
        rules = out[first_rule:first_rule + 3 * n_rules].reshape(-1, 3).copy()
        first_event = dev.CONTROL_LENGTH + 3 * self.rows
        events = out[first_event:first_event + 2 * n_events].reshape(-1, 2).copy()
        self.n_normal, self.n_tokens = int(control[dev.N_NORMAL]), int(control[dev.N_TOKENS])
        self.marks_pending = bool(control[dev.PENDING_MARKS])
        stop = int(control[dev.STOP])
        if stop == dev.STOP_NEED_POOL:
            self._grow_pool(int(control[dev.NEED]))
        return rules, events, stop not in (dev.STOP_NONE, dev.STOP_NEED_POOL)

    def _step(self, iterations: int) -> np.ndarray:
        """Launch a step, wait for it (with a deadline) and read its output: the one sync.

        A failure of a real device becomes a DeviceError; nothing is written then.
        """
        try:
            self._launch(iterations)
            if not dev.wait_until_done(self.xp, self.step_deadline_s):
                raise DeviceError(
                    f"a device training step of {iterations} merges did not finish within "
                    f"{self.step_deadline_s:.0f} s (a hung kernel or a failed device); "
                    "nothing was written. Check `gpubpe doctor`, or train with backend='cpu'")
            return to_host(self.state["out"], "training step")  # sync: the step's one read
        except DeviceError:
            raise
        except Exception as error:
            if self.xp is np:
                raise  # the simulator: a bug to see as it is, not a device failure
            raise DeviceError(f"the device failed during training ({type(error).__name__}: "
                              f"{error}); nothing was written. Check `gpubpe doctor`, or "
                              "train with backend='cpu'") from error

    def _launch(self, iterations: int) -> None:
        if self.launcher == "phased":
            dev.run_phased(self.state, iterations)
            return
        try:
            dev.run_cooperative(self.state, iterations, self.blocks)
        except Exception as error:  # e.g. no libcudadevrt to link grid.sync() (numba-cuda #302)
            if self.cooperative_ran:
                raise
            warnings.warn(f"the cooperative training kernel cannot run here ({error}); "
                          "running each phase as its own launch instead", stacklevel=4)
            self.launcher = "phased"
            dev.run_phased(self.state, iterations)
            return
        self.cooperative_ran = True
        self.blocks = dev.resident_blocks(self.blocks, self.state["tokens"].size)

    def _grow_pool(self, need: int) -> None:
        xp, pool = self.xp, self.state["pool"]
        self.state["pool"] = xp.concatenate([pool, xp.zeros(max(pool.size, need), xp.uint8)])

    def scaffold_flags(self) -> np.ndarray:
        flags = to_host(self.state["scaffold"], "scaffold flags")  # sync
        return flags[: self.n_tokens].astype(bool)


def _grown(array: np.ndarray, wanted: int) -> np.ndarray:
    bigger = np.zeros(max(2 * array.size, wanted), dtype=array.dtype)
    bigger[: array.size] = array
    return bigger


def train(
    corpus=None,
    vocab_size: int | None = None,
    *,
    counts=None,
    extend=None,
    add: int | None = None,
    min_frequency: int = 0,
    pattern: str | None = "gpt2",
    special_tokens: Iterable[str] = (),
    tie_break: str = "hf",
    scaffold: bool = False,
    backend: str = "auto",
    progress: bool = True,
    text_field: str = "text",
    num_threads: int | None = None,
    max_token_length: int | None = None,
    normalizer: str | None = None,
):
    """Train a byte-level BPE tokenizer and return it as a :class:`~gpubpe.Tokenizer`.

    ``corpus`` is a path, a list of paths (``.txt``: each line a document;
    ``.jsonl``: the ``text_field`` of each line), or any iterable of ``str`` /
    ``bytes`` documents. ``vocab_size`` counts the 256 byte tokens and excludes
    special tokens. Ties between equally frequent pairs are broken as HF
    ``tokenizers`` does (``tie_break="hf"``), so the merges equal HF's.

    ``scaffold=True`` trains Scaffold-BPE (Lian et al.): tokens that become
    rare once merged into longer ones turn into scaffold tokens, used while
    encoding and then demolished, so ``vocab_size`` counts normal tokens only.

    ``backend``: "auto" (the default) trains on the CPU, faster than the GPU's merge loop
    wherever both were timed (``resolve_training_backend``); "cuda" trains on the GPU. The
    tokenizer returned has ``backend`` for its encoding.

    ``max_token_length``: HF's BpeTrainer option, run as HF runs it: no merge makes a token
    of ``max_token_length`` bytes or more (so tokens have at most ``max_token_length - 1``),
    except that two single bytes always merge.

    ``normalizer``: "NFC", "NFD", "NFKC" or "NFKD": each document is normalized as HF's
    normalizer of that name writes it (``gpubpe.normalize``) before it is split and
    counted, as HF's trainer does, and the tokenizer normalizes the text it encodes (its
    HF export has that normalizer). Special-token text is cut from the normalized
    documents here (HF matches its added tokens before normalizing: the two differ only
    where normalizing makes or breaks a special token's text).

    ``counts`` (a :class:`~gpubpe.WordCounts` or a counts file) replaces the
    corpus: no corpus pass. ``extend`` (a Tokenizer or a tokenizer file) with
    ``add`` new tokens continues BPE from that vocabulary (``gpubpe.extend``), learnt
    from ``counts`` or from the corpus, counted with the base's split and special tokens.
    """
    from .tokenizer import Tokenizer

    if counts is not None or extend is not None:  # word counts from a file (gpubpe.counts)
        from .counts import train_on_counts

        return train_on_counts(
            counts, vocab_size, corpus=corpus, extend=extend, add=add,
            min_frequency=min_frequency, pattern=pattern, special_tokens=special_tokens,
            tie_break=tie_break, scaffold=scaffold, backend=backend, progress=progress,
            max_token_length=max_token_length, normalizer=normalizer)
    check_train_args(vocab_size, min_frequency, tie_break, max_token_length)
    check_normalizer(normalizer, scaffold)
    if scaffold and vocab_size <= 256:
        raise ConfigError(
            f"scaffold=True needs vocab_size above 256 (got {vocab_size}): only merged tokens "
            "can become scaffold tokens")
    special_tokens = check_special_tokens(special_tokens)
    check_num_threads(num_threads)
    resolve_pattern(pattern)
    chosen = resolve_training_backend(backend)
    started = time.perf_counter()
    with tqdm(desc="counting words", unit="B", unit_scale=True, disable=not progress,
              leave=False) as bar:
        if normalizer is None:
            word_counts = count_words(corpus, pattern, special_tokens, text_field, num_threads,
                                      bar, chosen.name)
        else:
            word_counts = count_batch_words(normalized_batches(corpus, normalizer, text_field),
                                            pattern, special_tokens, num_threads, bar)
    counted = time.perf_counter()
    corpus_bytes = sum(len(word) * count for word, count in word_counts.items())
    if corpus_bytes == 0:
        raise CorpusError("the corpus holds no text to train on (empty, or only special tokens)")
    vocab = normalizing(vocabulary_from_counts(word_counts, vocab_size, min_frequency, scaffold,
                                               progress, chosen, special_tokens, pattern,
                                               max_token_length), normalizer)
    if vocab.vocab_size < vocab_size:
        warnings.warn(
            f"training stopped at {vocab.vocab_size} tokens, below vocab_size={vocab_size}: "
            "no pair left" + (" at min_frequency" if min_frequency > 1 else "")
            + (" shorter than max_token_length" if max_token_length else "")
            + "; use a larger corpus or a smaller vocab_size", stacklevel=2)
    vocab.metadata.update(
        corpus_bytes=int(corpus_bytes),
        unique_words=len(word_counts),
        seconds_counting=round(counted - started, 3),
        seconds_merging=round(time.perf_counter() - counted, 3),
        backend=chosen.name,
        min_frequency=int(min_frequency),
        tie_break=tie_break,
        scaffold=bool(scaffold),
        **({} if normalizer is None else {"normalizer": normalizer}),
    )
    return Tokenizer(vocab, backend)

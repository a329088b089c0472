"""One test body on every backend (DESIGN §4): the reference, the CPU, and CUDA in the simulator.

Each backend trains (BPE and Scaffold-BPE) on the same real text, then encodes
text it was not trained on and decodes it back. The reference
(``gpubpe._reference``) is computed once; every other backend must give the
same rules, scaffold flags and ids, bit for bit.
"""

from __future__ import annotations

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
TRAIN_TEXT, HELD_OUT = LINES[2000:2400], LINES[5000:5080]
VOCAB_SIZE = 420
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

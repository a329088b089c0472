"""Plain-Python oracle of every gpubpe algorithm: slow, short, obviously right.

Every fast path (Numba, CUDA) is tested against these functions; they follow
DESIGN §3 word for word and recount everything at every step on purpose.

Training takes pre-tokenized words with their counts (``{word_bytes: count}``)
and returns the merge rules ``(left, right, result)`` in rank order. Token ids
0-255 are the bytes; a rule creates the next id unless its merged bytes already
are a token, in which case ``result`` is that existing id (as HF does).
"""

from __future__ import annotations

from collections import Counter


def gpt2_byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def hf_byte_rank() -> list[int]:
    """HF's id of each byte token: its GPT-2 character's rank by code point.

    HF's BpeTrainer numbers the initial alphabet in code-point order, so at
    equal counts the pair tie-break compares bytes by this rank, and merged
    tokens (ids >= 256, numbered in creation order) after every byte.
    """
    chars = gpt2_byte_to_unicode()
    by_code_point = sorted(range(256), key=lambda b: ord(chars[b]))
    rank = [0] * 256
    for position, byte in enumerate(by_code_point):
        rank[byte] = position
    return rank


def hf_pair_order(pair: tuple[int, int], byte_rank: list[int]) -> tuple[int, int]:
    """The pair in HF's id space; at equal counts the smaller one is merged first."""
    left, right = pair
    return (
        byte_rank[left] if left < 256 else left,
        byte_rank[right] if right < 256 else right,
    )


def count_pairs(words: list[list[int]], counts: list[int]) -> Counter:
    """Pair count = sum over words of count(word) x adjacent occurrences (overlaps too)."""
    pair_counts: Counter = Counter()
    for tokens, count in zip(words, counts):
        for pair in zip(tokens, tokens[1:]):
            pair_counts[pair] += count
    return pair_counts


def merge_word(tokens: list[int], pair: tuple[int, int], result: int) -> list[int]:
    """Replace non-overlapping occurrences of ``pair``, left to right."""
    merged: list[int] = []
    i = 0
    while i < len(tokens):
        if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
            merged.append(result)
            i += 2
        else:
            merged.append(tokens[i])
            i += 1
    return merged


def train_bpe(
    word_counts: dict[bytes, int], vocab_size: int, min_frequency: int = 0,
    max_token_length: int | None = None,
) -> list[tuple[int, int, int]]:
    """Train byte-level BPE; returns the rules ``(left, right, result)`` in rank order.

    Stops when the vocabulary (256 bytes included) reaches ``vocab_size``, when
    the best pair's count is below ``min_frequency``, or when no pair is left.
    At equal counts the smaller pair in HF's id space wins (``hf_pair_order``).
    ``max_token_length`` (HF's): only pairs of two bytes, or whose token would be
    shorter than it, are candidates.
    """
    return continue_bpe(word_counts, [], vocab_size, min_frequency,
                        max_token_length=max_token_length)


def _negated(order: tuple[int, int]) -> tuple[int, int]:
    return (-order[0], -order[1])


def encode_word(word: bytes, rules: list[tuple[int, int, int]]) -> list[int]:
    """Encode one pre-tokenized word: lowest-rank rule first, leftmost occurrence first."""
    rank_of: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, (left, right, result) in enumerate(rules):
        rank_of.setdefault((left, right), (rank, result))
    tokens = list(word)
    while True:
        candidates = [
            (rank_of[pair][0], i) for i, pair in enumerate(zip(tokens, tokens[1:])) if pair in rank_of
        ]
        if not candidates:
            return tokens
        rank, i = min(candidates)
        result = rank_of[(tokens[i], tokens[i + 1])][1]
        tokens[i : i + 2] = [result]


def token_bytes_of(rules: list[tuple[int, int, int]]) -> list[bytes]:
    """The bytes of every token id the rules define, bytes first."""
    pieces = [bytes([b]) for b in range(256)]
    for left, right, result in rules:
        if result == len(pieces):
            pieces.append(pieces[left] + pieces[right])
    return pieces


# ---------------------------------------------------------------- Scaffold-BPE


def token_frequencies(words: list[list[int]], counts: list[int]) -> Counter:
    """f(t): occurrences of each token in the word table, weighted by word counts."""
    freq: Counter = Counter()
    for tokens, count in zip(words, counts):
        for token in tokens:
            freq[token] += count
    return freq


def train_scaffold_bpe(
    word_counts: dict[bytes, int], vocab_size: int, events: list | None = None,
    event_rows: list | None = None,
) -> tuple[list[tuple[int, int, int]], list[bool]]:
    """Scaffold-BPE (Lian et al., Algorithm 1) as DESIGN §3 states it.

    Returns the rules in rank order and the scaffold flag of every internal id.
    Every iteration recounts pair counts and token frequencies f(t), then
    takes the head of the candidates:

    - candidates are pairs (priority: count) and scaffold tokens (priority:
      f(t)), priorities above 0 only; at equal priority a token comes before a
      pair, the smaller token id first, pairs by HF's order;
    - a scaffold token at the head becomes normal again, nothing else changes;
    - a pair whose merged bytes are a scaffold token re-admits that token and
      is not applied; its count is unchanged, so it stays a candidate (it is
      then usually the next head, applied with the re-admitted id as result);
    - otherwise the pair is applied as in BPE; then for p in (a, b), if p is a
      normal, non-byte token and f(p) < the head priority read after this
      merge (before marking either child), p becomes scaffold.

    |V| counts normal tokens (bytes included); training runs until |V| =
    vocab_size or no candidate is left. ``events``, when given, receives
    ("scaffold" | "readmit" | "readmit-by-pair", token) in order.
    ``event_rows``, when given, receives the fast trainer's event log
    ``(kind, value)``: 0 a rule appended (its index), 1 a token marked scaffold,
    2 a token re-admitted (``gpubpe.sweep`` cuts runs with it).
    """
    events = [] if events is None else events
    rows = [] if event_rows is None else event_rows
    byte_rank = hf_byte_rank()
    words = [list(word) for word in word_counts]
    counts = list(word_counts.values())
    token_bytes = [bytes([b]) for b in range(256)]
    token_id = {piece: i for i, piece in enumerate(token_bytes)}
    scaffold = [False] * 256
    rules: list[tuple[int, int, int]] = []
    while scaffold.count(False) < vocab_size:
        head = _scaffold_head(words, counts, scaffold, byte_rank)
        if head is None:
            break
        kind, item, _ = head
        if kind == "token":
            scaffold[item] = False
            events.append(("readmit", item))
            rows.append((2, item))
            continue
        merged_bytes = token_bytes[item[0]] + token_bytes[item[1]]
        existing = token_id.get(merged_bytes)
        if existing is not None and scaffold[existing]:
            scaffold[existing] = False
            events.append(("readmit-by-pair", existing))
            rows.append((2, existing))
            continue
        if existing is None:
            existing = token_id[merged_bytes] = len(token_bytes)
            token_bytes.append(merged_bytes)
            scaffold.append(False)
        rules.append((item[0], item[1], existing))
        rows.append((0, len(rules) - 1))
        words = [merge_word(tokens, item, existing) for tokens in words]
        threshold = _scaffold_head(words, counts, scaffold, byte_rank)
        threshold_priority = threshold[2] if threshold else 0
        freq = token_frequencies(words, counts)
        for child in dict.fromkeys(item):
            if child >= 256 and not scaffold[child] and freq[child] < threshold_priority:
                scaffold[child] = True
                events.append(("scaffold", child))
                rows.append((1, child))
    return rules, scaffold


def _scaffold_head(words, counts, scaffold, byte_rank):
    """(kind, item, priority) of the best candidate, or None when there is none."""
    pair_counts = count_pairs(words, counts)
    freq = token_frequencies(words, counts)
    candidates = [
        (freq[t], 1, (t, 0), "token", t) for t in range(len(scaffold)) if scaffold[t] and freq[t] > 0
    ] + [
        (c, 0, _negated(hf_pair_order(p, byte_rank)), "pair", p)
        for p, c in pair_counts.items() if c > 0
    ]
    if not candidates:
        return None
    best = max(candidates, key=lambda c: (c[0], c[1], c[2] if c[3] == "pair" else (-c[2][0], 0)))
    return best[3], best[4], best[0]


def demolish_table(
    rules: list[tuple[int, int, int]], scaffold: list[bool]
) -> dict[int, list[int]]:
    """Each scaffold token's shortest sequence of normal tokens, through the rules that make it.

    A normal token stands for itself; a scaffold token t is the shortest
    concatenation of its children's sequences over the rules whose result is
    t (the lowest rank wins a tie). Children's bytes are shorter, so the
    recursion ends.
    """
    makers: dict[int, list[tuple[int, int]]] = {}
    for left, right, result in rules:
        makers.setdefault(result, []).append((left, right))
    memo: dict[int, list[int]] = {}

    def pieces(token: int) -> list[int]:
        if not scaffold[token]:
            return [token]
        if token not in memo:
            options = [pieces(left) + pieces(right) for left, right in makers[token]]
            memo[token] = min(options, key=len)
        return memo[token]

    return {t: pieces(t) for t in range(len(scaffold)) if scaffold[t]}


# ---------------------------------------------------------------- continuing BPE


def continue_bpe(
    word_counts: dict[bytes, int], rules: list[tuple[int, int, int]], vocab_size: int,
    min_frequency: int = 0, byte_rank: list[int] | None = None,
    max_token_length: int | None = None,
) -> list[tuple[int, int, int]]:
    """BPE continued from existing rules: they are applied to the words in rank order (as
    training applied them), then new rules are chosen as :func:`train_bpe` does, until
    the vocabulary reaches ``vocab_size``. Returns the old rules followed by the new.
    ``byte_rank``: the byte tokens' tie order (default HF's, :func:`hf_byte_rank`)."""
    byte_rank = hf_byte_rank() if byte_rank is None else byte_rank
    words = [list(word) for word in word_counts]
    counts = list(word_counts.values())
    token_bytes = token_bytes_of(rules)
    token_id = {piece: i for i, piece in enumerate(token_bytes)}
    rules = [tuple(rule) for rule in rules]
    for left, right, result in rules:
        words = [merge_word(tokens, (left, right), result) for tokens in words]
    while len(token_bytes) < vocab_size:
        pair_counts = count_pairs(words, counts)
        if max_token_length is not None:
            pair_counts = Counter({(a, b): n for (a, b), n in pair_counts.items()
                                   if len(token_bytes[a]) + len(token_bytes[b])
                                   in range(2, max(max_token_length, 3))})
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda p: (pair_counts[p], _negated(hf_pair_order(p, byte_rank))))
        if pair_counts[best] < max(min_frequency, 1):
            break
        merged_bytes = token_bytes[best[0]] + token_bytes[best[1]]
        if merged_bytes not in token_id:
            token_id[merged_bytes] = len(token_bytes)
            token_bytes.append(merged_bytes)
        rules.append((best[0], best[1], token_id[merged_bytes]))
        words = [merge_word(tokens, best, token_id[merged_bytes]) for tokens in words]
    return rules


def tiktoken_encode_word(ranks: dict[bytes, int], word: bytes) -> list[int]:
    """tiktoken's rule on one pre-tokenized word: a word that is a token is that token;
    else merge, while any is left, the adjacent pair whose joined bytes have the lowest
    rank (leftmost on ties), and return the ranks of the parts."""
    if word in ranks:
        return [ranks[word]]
    parts = [bytes([b]) for b in word]
    while True:
        joined = [ranks.get(a + b) for a, b in zip(parts, parts[1:])]
        candidates = [(rank, at) for at, rank in enumerate(joined) if rank is not None]
        if not candidates:
            return [ranks[part] for part in parts]
        _, at = min(candidates)
        parts[at:at + 2] = [parts[at] + parts[at + 1]]


def all_splits(token_bytes: list[bytes]) -> list[tuple[int, int, int]]:
    """tiktoken's rules of a token table as gpubpe stores them: ``(left, right, token)`` for
    every split of every token past the bytes into two tokens, by token then by cut."""
    index = {piece: i for i, piece in enumerate(token_bytes)}
    return [(index[piece[:cut]], index[piece[cut:]], token)
            for token, piece in enumerate(token_bytes[256:], 256)
            for cut in range(1, len(piece))
            if piece[:cut] in index and piece[cut:] in index]


def continue_tiktoken(word_counts: dict[bytes, int], ranks: dict[bytes, int], add: int,
                      first_rank: int, min_frequency: int = 0) -> dict[bytes, int]:
    """A tiktoken vocabulary continued by up to ``add`` tokens; returns the new ``{bytes: rank}``.

    Each step encodes every word with :func:`tiktoken_encode_word` under the ranks so
    far (the base's own BPE, then the tokens added), counts adjacent pairs weighted by
    the word counts, and adds the bytes of the most frequent pair as a token ranked
    ``first_rank``, ``first_rank + 1``, ...; at equal counts the pair of smaller ranks
    (left, then right) wins. The joined bytes are always a new token: tiktoken's BPE
    stops only when no adjacent pair joins into a token.
    """
    ranks = dict(ranks)
    piece_of = {rank: piece for piece, rank in ranks.items()}
    added: dict[bytes, int] = {}
    for rank in range(first_rank, first_rank + add):
        pair_counts: Counter = Counter()
        for word, count in word_counts.items():
            parts = tiktoken_encode_word(ranks, word)
            for pair in zip(parts, parts[1:]):
                pair_counts[pair] += count
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda p: (pair_counts[p], -p[0], -p[1]))
        if pair_counts[best] < max(min_frequency, 1):
            break
        piece = piece_of[best[0]] + piece_of[best[1]]
        ranks[piece] = added[piece] = rank
        piece_of[rank] = piece
    return added


def whole_word_encode(word: bytes, ids: dict[bytes, int],
                      rules: list[tuple[int, int, int]]) -> list[int]:
    """HF's BPE with ``ignore_merges``, in a vocabulary's own ids (``ids``: bytes -> id): a
    word that is a token is that token; else, from its bytes' ids, the rule of lowest rank
    first, leftmost occurrence first, until no rule applies."""
    return _whole_word_parts(word, ids, _first_ranks(rules))


def _first_ranks(rules: list[tuple[int, int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, result) of each pair's first rule."""
    rank_of: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, (left, right, result) in enumerate(rules):
        rank_of.setdefault((left, right), (rank, result))
    return rank_of


def _whole_word_parts(word: bytes, ids: dict[bytes, int], rank_of: dict) -> list[int]:
    if word in ids:
        return [ids[word]]
    tokens = [ids[bytes([b])] for b in word]
    while True:
        found = [(rank_of[p][0], i) for i, p in enumerate(zip(tokens, tokens[1:])) if p in rank_of]
        if not found:
            return tokens
        _, i = min(found)
        tokens[i:i + 2] = [rank_of[(tokens[i], tokens[i + 1])][1]]


def continue_whole_word_bpe(word_counts: dict[bytes, int], ids: dict[bytes, int],
                            rules: list[tuple[int, int, int]], add: int,
                            first_id: int) -> list[tuple[int, int, int]]:
    """A HF ``ignore_merges`` vocabulary continued until ``add`` new tokens exist; returns
    the new rules (in its ids). Each step encodes every word with :func:`whole_word_encode`
    under the rules so far, counts adjacent pairs, and appends a rule for the most
    frequent pair (equal counts: smaller ids, left then right); its result is the token
    spelling the joined bytes if there is one (no token is made), else a new token
    numbered ``first_id``, ``first_id + 1``, ..."""
    ids, rules = dict(ids), list(rules)
    piece_of = {token: piece for piece, token in ids.items()}
    new_rules: list[tuple[int, int, int]] = []
    next_id = first_id
    while next_id < first_id + add:
        pair_counts: Counter = Counter()
        rank_of = _first_ranks(rules)
        for word, count in word_counts.items():
            parts = _whole_word_parts(word, ids, rank_of)
            for pair in zip(parts, parts[1:]):
                pair_counts[pair] += count
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda p: (pair_counts[p], -p[0], -p[1]))
        piece = piece_of[best[0]] + piece_of[best[1]]
        if piece not in ids:
            ids[piece], piece_of[next_id] = next_id, piece
            next_id += 1
        rules.append((*best, ids[piece]))
        new_rules.append(rules[-1])
    return new_rules

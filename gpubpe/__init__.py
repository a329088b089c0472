"""gpubpe: byte-level BPE and Scaffold-BPE tokenizers on array kernels.

This is the public API; everything else is internal::

    import gpubpe
    tok = gpubpe.train(["corpus.txt"], vocab_size=8000)          # scaffold=True for Scaffold-BPE
    counts = gpubpe.count_words(["corpus.txt"])                   # count once: counts.save(path)
    tok = gpubpe.train(counts=counts, vocab_size=8000)             # no corpus pass; tok.truncate(n)
    ids = tok.encode("hello world")
    text = tok.decode(ids)                                         # "hello world"
    batch = tok.encode_arrays(["many", "documents"])              # ragged: batch.ids, batch.offsets
    gpubpe.encode_files(tok, ["big.jsonl"], "tokens.npy")         # streamed, bounded memory
    ids, offsets = gpubpe.load_tokens("tokens.npy")               # document d: ids[offsets[d]:offsets[d+1]]
    coded = gpubpe.BitLevelCodec(tok.n_vocab).encode(ids)         # bit-level re-encoding
"""

__version__ = "0.1.0"

import os as _os

# A source checkout keeps the kernels beside this folder (pyproject's package-dir makes them
# gpubpe.kernels when installed). Python started in the checkout imports this folder, not
# the installed package, and then found no gpubpe.kernels: look beside it too.
if not _os.path.isdir(_os.path.join(__path__[0], "kernels")) and _os.path.isfile(
        _os.path.join(_os.path.dirname(__path__[0]), "kernels", "__init__.py")):
    __path__.append(_os.path.dirname(__path__[0]))

from . import metrics
from .backend import available_backends
from .bitlevel import BitLevelCodec
from .counts import WordCounts, count_words
from .encode_files import encode_files, load_tokens
from .kernels._cuda import device_stats
from .tokenizer import Tokenizer
from .trainer import train

load = Tokenizer.load


def __getattr__(name: str):
    # gpubpe.dask is imported on first use only (it needs dask + distributed)
    if name == "dask":
        import importlib

        return importlib.import_module(".dask", __name__)
    raise AttributeError(f"module 'gpubpe' has no attribute {name!r}")


__all__ = ["BitLevelCodec", "Tokenizer", "WordCounts", "available_backends", "count_words",
           "device_stats", "encode_files", "load", "load_tokens", "metrics", "train",
           "__version__"]

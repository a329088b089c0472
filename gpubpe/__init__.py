"""gpubpe: byte-level BPE and Scaffold-BPE tokenizers on array kernels.

This is the public API; everything else is internal::

    import gpubpe
    tok = gpubpe.train(["corpus.txt"], vocab_size=8000)
    ids = tok.encode("hello world")
    assert tok.decode(ids) == "hello world"
"""

__version__ = "0.1.0"

from .backend import available_backends
from .tokenizer import Tokenizer
from .trainer import train

load = Tokenizer.load

__all__ = ["Tokenizer", "available_backends", "load", "train", "__version__"]

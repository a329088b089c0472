"""Typed errors of gpubpe.

Every error a user can cause derives from :class:`GpubpeError`, and each one
subclasses the built-in it refines (``ValueError``, ``OSError``...) so code that
catches the built-ins keeps working. Messages name the bad value and the fix.
"""

from __future__ import annotations


class GpubpeError(Exception):
    """Base class of every error gpubpe raises on purpose."""


class ConfigError(GpubpeError, ValueError):
    """An argument has a value gpubpe cannot use (vocab size, pattern, ...)."""


class CorpusError(GpubpeError, ValueError):
    """The training or encoding input cannot be read as text."""


class ModelFormatError(GpubpeError, ValueError):
    """A tokenizer file is corrupt, truncated, of another format or inconsistent."""


class SpecialTokenError(GpubpeError, ValueError):
    """Special-token text appeared where it is not allowed."""


class BackendUnavailable(GpubpeError, RuntimeError):
    """The requested backend cannot run here; the message says why."""


class DeviceError(GpubpeError, RuntimeError):
    """The CUDA device failed during a run (out of memory, a fault, a lost device).

    The message says what was running, what the device said, and what output
    was kept; ``__cause__`` holds the device library's own exception.
    """


class InputTypeError(GpubpeError, TypeError):
    """An argument or document has a type gpubpe cannot use (the message names the type)."""


# A tokenizer's special tokens are listed whole in a message up to this many; beyond, the
# count and the ones nearest the bad name (Mistral's tekken.json has 1,000).
_LISTED_TOKENS = 16


def special_tokens_said(special_tokens, wanted: str = "") -> str:
    """What an error says a tokenizer's special tokens are: "it has [...]" for a few, else
    their count and those whose text is nearest ``wanted``."""
    names = sorted(special_tokens)
    if len(names) <= _LISTED_TOKENS:
        return f"it has {names}"
    import difflib

    near = difflib.get_close_matches(wanted, names, n=5, cutoff=0.0)
    return f"it has {len(names)}, of which the nearest to {wanted!r} are {near}"

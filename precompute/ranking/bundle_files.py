"""The files of a model bundle (``bundle.py``) by its format: which it must have, their checksums, how its candidate
sources are read, and its size on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..errors import BundleError
from . import knn, latent
from .source_arrays import SourceArrays

#: The formats ``bundle.load`` reads: 1, id pairs in ``covisit.npz`` (loaded into memory); 2, mapped source arrays.
READS = (1, 2)
SOURCES = "sources"
#: The files every bundle of a format has (a first stage, item-kNN or latent arrays come on top, by its meta.json).
FILES = {1: ("model.cbm", "covisit.npz"),
         2: ("model.cbm", *(f"{SOURCES}/{n}.npy" for n in ("items", "covisit_indptr", "covisit_nbr",
                                                             "covisit_weight")))}
FIRST_STAGE = "first_stage.cbm"


def checked_files(path: Path, version: int, meta: dict) -> None:
    """Check that every file of bundle ``version`` (in ``path``, of a format ``READS`` holds) is there with the
    checksum its ``meta`` records: those its format requires, its first stage if it has one, and (format 2) every
    file it records. Raises ``BundleError`` naming the first that is not."""
    recorded = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    for name in dict.fromkeys((*FILES[meta["format"]], *((FIRST_STAGE,) if "cascade" in meta else ()),
                               *(recorded if meta["format"] > 1 else ()))):
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise BundleError(f"model bundle {version}: meta.json names a file outside the bundle; retrain")
        try:
            digest = file_sha256(path / name)
        except FileNotFoundError:
            raise BundleError(f"model bundle {version}: {name} is missing") from None
        if digest != recorded.get(name):
            raise BundleError(f"model bundle {version}: {name} is truncated or altered (checksum mismatch)")


def read_sources(path: Path, version: int, meta: dict) -> SourceArrays | dict[str, np.ndarray]:
    """The candidate sources of checked bundle ``version``: format 2's arrays mapped read-only, format 1's id pairs
    loaded into memory."""
    if meta["format"] == 1:
        with np.load(path / "covisit.npz") as npz:
            return {k: npz[k] for k in ("src", "dst", "weight", *knn.KEYS, *latent.KEYS) if k in npz.files}
    names = [name.removeprefix(f"{SOURCES}/") for name in meta["sha256"] if name.startswith(f"{SOURCES}/")]
    try:
        return SourceArrays.read(path / SOURCES, names)
    except (KeyError, ValueError) as exc:
        raise BundleError(f"model bundle {version}: its sources do not read ({str(exc)[:120]}); retrain") from None


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file, as meta.json records it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def disk_bytes(path: Path) -> int:
    """The size on disk of the bundle in directory ``path``: its models and sources (meta.json aside)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and p.name != "meta.json")

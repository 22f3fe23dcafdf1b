"""Versioned model bundles: the CatBoost model, the co-visitation neighbours and metadata, in one directory.

    MODEL_DIR/CURRENT              the version in use (replaced atomically; the one file workers read)
    MODEL_DIR/HISTORY              one line per promotion: version, UTC time, how (train, promote, rollback, ...)
    MODEL_DIR/.lock                held (``fcntl.flock``) while CURRENT and HISTORY change
    MODEL_DIR/<version>/model.cbm
    MODEL_DIR/<version>/covisit.npz   the sources' pairs and factors, and the similar-item lists (``similar.py``)
    MODEL_DIR/<version>/first_stage.cbm   the cascade's first stage (``scoring.py``), when it has one
    MODEL_DIR/<version>/meta.json  format, feature layout (names in order, dtype), checksums, training metrics

A bundle is written to a temporary directory and renamed into place, and is checked (format, the feature layout
recorded in meta.json against the one inside the model and against the layout today's settings imply
(``layout.for_settings``: declared attributes and event types name columns), file checksums, model loads) before it
is made current and whenever it is loaded. A bad bundle, or one trained with other attributes or event types, is
refused with a ``BundleError`` that says to retrain; workers keep the bundle they have.

Bundles are immutable: written once under a new version, never changed. Promotions are recorded in HISTORY so
``rollback`` knows the previous current. Both files change under one exclusive lock, CURRENT first, then HISTORY
(each replaced atomically): two promotions at once cannot lose a line, and a crash between the two writes leaves
a CURRENT that HISTORY does not end with, which ``rollback`` reads as the newest promotion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import BundleError
from . import knn, latent, similar
from .layout import FeatureLayout
from .scoring import Cascade, Ranker, load_cascade

BUNDLE_FORMAT = 1
FILES = ("model.cbm", "covisit.npz")
FIRST_STAGE = "first_stage.cbm"


@dataclasses.dataclass
class Bundle:
    version: int
    model: object            # catboost.CatBoost
    pairs: dict[str, np.ndarray]
    meta: dict
    cascade: Cascade | None = None      # a bundle written before the cascade, or without one, has none

    @property
    def ranker(self) -> Ranker:
        return Ranker(self.model, self.cascade)


def current_version(model_dir: Path) -> int | None:
    """The version named by CURRENT, or None; a cheap read workers do between jobs."""
    try:
        return int((Path(model_dir) / "CURRENT").read_text().strip())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise BundleError(f"{model_dir}/CURRENT is not a bundle version") from exc


def write(model_dir: Path, model, pairs: dict[str, np.ndarray], meta: dict, cascade: Cascade | None = None) -> int:
    """Write a new bundle and return its version (not yet current). Its recorded layout is the one the model was
    trained with: training names every column (``learning.fit.fit_ranker``). ``cascade``: its first stage, whose
    columns are recorded by name."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    version = int(time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    while (model_dir / str(version)).exists():
        version += 1
    tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=model_dir))
    try:
        model.save_model(str(tmp / "model.cbm"))
        np.savez(tmp / "covisit.npz", **pairs)
        names = tuple(model.feature_names_ or ())
        trained = FeatureLayout(groups=(("trained", names),))
        files = FILES
        if cascade is not None:
            cascade.model.save_model(str(tmp / FIRST_STAGE))
            meta = dict(meta, cascade=dict(columns=[names[c] for c in cascade.columns], keep=cascade.keep))
            files = (*FILES, FIRST_STAGE)
        full = dict(meta, format=BUNDLE_FORMAT, version=version, **trained.as_meta(), created_at=time.time(),
                    sha256={name: _sha256(tmp / name) for name in files})
        (tmp / "meta.json").write_text(json.dumps(full, indent=2))
        os.replace(tmp, model_dir / str(version))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return version


def promote(model_dir: Path, version: int, layout: FeatureLayout | None = None, how: str = "promote") -> Bundle:
    """Check bundle ``version`` fully (against ``layout`` if given, see ``load``), then make it current and record
    the promotion in HISTORY (``how``: one word or two saying what promoted it). Returns the loaded bundle."""
    with _locked(model_dir):
        return _promote_locked(Path(model_dir), version, layout, how)


def rollback(model_dir: Path, layout: FeatureLayout | None = None) -> Bundle:
    """Make the previous current bundle current again: the newest earlier promotion in HISTORY, undoing rollbacks
    like a stack (rolling back twice goes two promotions back), skipping bundles that no longer load. Raises
    ``BundleError`` when there is none."""
    model_dir = Path(model_dir)
    with _locked(model_dir):
        current = current_version(model_dir)
        stack = promotion_stack(history(model_dir))
        if current is not None and (not stack or stack[-1] != current):
            stack.append(current)        # CURRENT written, its HISTORY line not (a crash), or set by hand
        skipped = []
        for version in reversed(stack[:-1]):
            if version == current:
                continue
            try:
                return _promote_locked(model_dir, version, layout, "rollback")
            except BundleError as exc:
                skipped.append(f"{version}: {exc}")
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise BundleError(f"no earlier current bundle to roll back to in {model_dir}/HISTORY{why}; "
                          f"promote one by version (`manage.py models list`)")


@dataclasses.dataclass(frozen=True)
class Promotion:
    version: int
    at: str          # UTC, ISO 8601
    how: str


def history(model_dir: Path) -> list[Promotion]:
    """HISTORY's promotions, oldest first (lines that do not parse are left out)."""
    try:
        lines = _read_history(Path(model_dir) / "HISTORY").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0].isdigit():
            out.append(Promotion(int(parts[0]), parts[1], parts[2]))
    return out


def promotion_stack(promotions: list[Promotion]) -> list[int]:
    """The versions a rollback walks back through, the current last: each promotion pushes its version, each
    rollback pops back to the version it restored."""
    stack: list[int] = []
    for p in promotions:
        if p.how == "rollback" and p.version in stack:
            while stack[-1] != p.version:
                stack.pop()
        elif not stack or stack[-1] != p.version:
            stack.append(p.version)
    return stack


def versions(model_dir: Path) -> list[int]:
    """Every bundle directory's version, newest first (temporary and other files are not bundles)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted((int(p.name) for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir()), reverse=True)


def beats_baseline(metrics: dict) -> bool:
    """Whether a trained model may be promoted without ``--force``: its validation NDCG@10 is strictly greater
    than the best baseline's on the same users, truth and cut."""
    try:
        return float(metrics["ndcg10"]) > float(metrics["baseline_ndcg10"])
    except (KeyError, TypeError, ValueError):
        return False


def _promote_locked(model_dir: Path, version: int, layout: FeatureLayout | None, how: str) -> Bundle:
    bundle = load(model_dir, version, layout)
    path = model_dir / "HISTORY"
    try:                                 # read before CURRENT changes: an unreadable HISTORY changes nothing
        before = _read_history(path)
    except FileNotFoundError:
        before = ""
    _replace(model_dir / "CURRENT", f"{version}\n")
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if before and not before.endswith("\n"):
        before += "\n"
    _replace(path, f"{before}{version} {at} {' '.join(how.split())}\n")
    return bundle


def _read_history(path: Path) -> str:
    """HISTORY's text; bytes that are not UTF-8 read as U+FFFD (their lines then do not parse and are left out).
    Raises FileNotFoundError when there is none, BundleError when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}; move it aside to start a new history") from None


def _replace(path: Path, text: str) -> None:
    """Write ``path`` atomically: readers see the old content or the new, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(model_dir: Path):
    """Hold MODEL_DIR/.lock exclusively: promotions (from any process) change CURRENT and HISTORY one at a time."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    with open(model_dir / ".lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def load(model_dir: Path, version: int | None = None, layout: FeatureLayout | None = None) -> Bundle:
    """Bundle ``version`` (default: the current one), checked. ``layout``: the columns the caller builds (the
    pipeline passes its settings' layout); without it the model and meta.json are only checked against each
    other."""
    from catboost import CatBoost, CatBoostError

    model_dir = Path(model_dir)
    if version is None:
        version = current_version(model_dir)
        if version is None:
            raise BundleError(f"no current model bundle in {model_dir}; run `manage.py train` first")
    path = model_dir / str(version)
    meta = checked_meta(model_dir, version, layout)
    names = meta["feature_names"]
    model = CatBoost()
    try:
        model.load_model(str(path / "model.cbm"))
    except CatBoostError as exc:
        raise BundleError(f"model bundle {version}: model.cbm does not load ({str(exc)[:120]})") from None
    # The model carries the names it was trained with (training passes them to its Pool): checked too, so a
    # meta.json edited or copied from another bundle cannot pair a model with columns in another order.
    recorded = FeatureLayout(groups=(("recorded", tuple(names)),), dtype=meta.get("feature_dtype") or "float32")
    recorded.check(list(model.feature_names_ or []), None, f"the model in bundle {version}")
    with np.load(path / "covisit.npz") as npz:
        pairs = {k: npz[k] for k in ("src", "dst", "weight", *knn.KEYS, *latent.KEYS, *similar.KEYS)
                 if k in npz.files}
    staged = meta.get("cascade")
    cascade = None if staged is None else \
        load_cascade(path / FIRST_STAGE, staged, meta["feature_names"], f"model bundle {version}")
    return Bundle(version=version, model=model, pairs=pairs, meta=meta, cascade=cascade)


def checked_meta(model_dir: Path, version: int, layout: FeatureLayout | None = None) -> dict:
    """Bundle ``version``'s meta.json after every check that does not load the model: format, feature names
    (against ``layout`` if given), file checksums. Raises ``BundleError`` saying what is wrong."""
    path = Path(model_dir) / str(version)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise BundleError(f"model bundle {version} not found in {model_dir}") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"model bundle {version}: unreadable meta.json ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise BundleError(f"model bundle {version}: format {found!r}, this prefeed reads {BUNDLE_FORMAT}")
    names = meta.get("feature_names")
    if layout is not None:
        layout.check(names, meta.get("feature_dtype"), f"model bundle {version}")
    elif not isinstance(names, list) or not names or len(set(names)) != len(names):
        raise BundleError(f"model bundle {version}: meta.json records no valid feature names; retrain")
    for name in (*FILES, *((FIRST_STAGE,) if "cascade" in meta else ())):
        try:
            digest = _sha256(path / name)
        except FileNotFoundError:
            raise BundleError(f"model bundle {version}: {name} is missing") from None
        if digest != meta.get("sha256", {}).get(name):
            raise BundleError(f"model bundle {version}: {name} is truncated or altered (checksum mismatch)")
    return meta


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

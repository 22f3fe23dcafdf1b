"""Versioned model bundles: the CatBoost model, the co-visitation neighbours and metadata, in one directory.

    MODEL_DIR/CURRENT              the version in use (replaced atomically)
    MODEL_DIR/<version>/model.cbm
    MODEL_DIR/<version>/covisit.npz
    MODEL_DIR/<version>/meta.json  format, feature layout (names in order, dtype), checksums, training metrics

A bundle is written to a temporary directory and renamed into place, and is checked (format, the feature layout
recorded in meta.json against the one inside the model and against the layout today's settings imply
(``layout.for_settings``: declared attributes and event types name columns), file checksums, model loads) before it
is made current and whenever it is loaded. A bad bundle, or one trained with other attributes or event types, is
refused with a ``BundleError`` that says to retrain; workers keep the bundle they have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import BundleError
from .layout import FeatureLayout

BUNDLE_FORMAT = 1
FILES = ("model.cbm", "covisit.npz")


@dataclasses.dataclass
class Bundle:
    version: int
    model: object            # catboost.CatBoost
    pairs: dict[str, np.ndarray]
    meta: dict


def current_version(model_dir: Path) -> int | None:
    """The version named by CURRENT, or None; a cheap read workers do between jobs."""
    try:
        return int((Path(model_dir) / "CURRENT").read_text().strip())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise BundleError(f"{model_dir}/CURRENT is not a bundle version") from exc


def write(model_dir: Path, model, pairs: dict[str, np.ndarray], meta: dict) -> int:
    """Write a new bundle and return its version (not yet current). Its recorded layout is the one the model was
    trained with: training names every column (``ranker.train``)."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    version = int(time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    while (model_dir / str(version)).exists():
        version += 1
    tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=model_dir))
    try:
        model.save_model(str(tmp / "model.cbm"))
        np.savez(tmp / "covisit.npz", **pairs)
        trained = FeatureLayout(groups=(("trained", tuple(model.feature_names_ or ())),))
        full = dict(meta, format=BUNDLE_FORMAT, version=version, **trained.as_meta(), created_at=time.time(),
                    sha256={name: _sha256(tmp / name) for name in FILES})
        (tmp / "meta.json").write_text(json.dumps(full, indent=2))
        os.replace(tmp, model_dir / str(version))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return version


def promote(model_dir: Path, version: int, layout: FeatureLayout | None = None) -> Bundle:
    """Check bundle ``version`` fully (against ``layout`` if given, see ``load``), then make it current. Returns
    the loaded bundle."""
    bundle = load(model_dir, version, layout)
    pointer = Path(model_dir) / "CURRENT"
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(f"{version}\n")
    os.replace(tmp, pointer)
    return bundle


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
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise BundleError(f"model bundle {version} not found in {model_dir}") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"model bundle {version}: unreadable meta.json ({exc})") from None
    if meta.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"model bundle {version}: format {meta.get('format')!r}, this prefeed reads "
                          f"{BUNDLE_FORMAT}")
    names = meta.get("feature_names")
    if layout is not None:
        layout.check(names, meta.get("feature_dtype"), f"model bundle {version}")
    elif not isinstance(names, list) or not names or len(set(names)) != len(names):
        raise BundleError(f"model bundle {version}: meta.json records no valid feature names; retrain")
    for name in FILES:
        try:
            digest = _sha256(path / name)
        except FileNotFoundError:
            raise BundleError(f"model bundle {version}: {name} is missing") from None
        if digest != meta.get("sha256", {}).get(name):
            raise BundleError(f"model bundle {version}: {name} is truncated or altered (checksum mismatch)")
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
        pairs = {k: npz[k] for k in ("src", "dst", "weight")}
    return Bundle(version=version, model=model, pairs=pairs, meta=meta)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

"""What ranks an arm's users: its spec.

    model:<version>   the model bundle of that version (``model:current`` is pinned, at creation, to the version
                      current then: a later promotion does not change the arm)
    popular           items by their weighted events over all time
    recent:<window>   items by their weighted events in the last window: one of the windows the worker's item table
                      keeps (``precompute.ranking.layout.WINDOWS``: 1h, 1d, 3d, 7d, 30d)
    covisit           the co-visitation of the user's last items
    item_knn          item-kNN neighbours of the user's items
    latent            the latent model's scores

The simple methods are the baselines ``evaluate`` judges the ranker against; they rank without the model.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidInput
from ..ranking.layout import WINDOWS, FeatureLayout
from ..ranking.sources import METHODS

MODEL = "model"
#: The simple methods: name → whether it takes an argument (the window); declared in ``ranking/sources.py``.
SIMPLE = METHODS
WINDOW_NAMES = tuple(name for name, _ in WINDOWS)


def method_of(spec: str) -> tuple[str, str | None]:
    """``("model", "<version>")``, ``("recent", "<window>")``, or a method without argument and None
    (``("popular", None)``). ``InvalidInput`` for anything else; ``model:current`` is refused here: an arm's spec
    is stored pinned (``pinned``)."""
    method, sep, arg = spec.partition(":")
    if method == MODEL:
        if not (arg.isascii() and arg.isdigit()):
            raise InvalidInput(f"arm spec {spec!r}: a model arm is model:<version> or model:current")
        return MODEL, str(int(arg))
    if method not in SIMPLE:
        raise InvalidInput(f"arm spec {spec!r}: unknown method {method!r}; an arm is model:<version>, "
                           f"model:current, {', '.join(m + (':<window>' if w else '') for m, w in SIMPLE.items())}")
    if not SIMPLE[method]:
        if sep:
            raise InvalidInput(f"arm spec {spec!r}: {method} takes no argument")
        return method, None
    if arg not in WINDOW_NAMES:
        raise InvalidInput(f"arm spec {spec!r}: unknown window {arg!r}; the windows are {', '.join(WINDOW_NAMES)}")
    return method, arg


def pinned(spec: str, model_dir: Path, layout: FeatureLayout | None = None) -> str:
    """``spec`` as an arm stores it: ``model:current`` becomes ``model:<the current version>``, and a model arm's
    bundle is checked (it exists, is whole, and records ``layout``'s columns if given). ``InvalidInput`` for an
    unknown method, window or version (or no current bundle for ``model:current``); ``BundleError`` for a bundle
    that exists but is broken or was trained for other columns."""
    if spec.strip() != spec or not spec:
        raise InvalidInput(f"arm spec {spec!r}: empty or with spaces")
    if spec == f"{MODEL}:current":
        from ..ranking import bundle       # brings scipy: only the commands that create an experiment need it

        version = bundle.current_version(model_dir)
        if version is None:
            raise InvalidInput(f"arm spec {spec!r}: no model bundle is current in {model_dir}")
        spec = f"{MODEL}:{version}"
    method, arg = method_of(spec)
    if method != MODEL:
        return spec
    from ..ranking import bundle

    if not (Path(model_dir) / arg).is_dir():
        raise InvalidInput(f"arm spec {spec!r}: no model bundle {arg} in {model_dir} (`manage.py models list`)")
    bundle.checked_meta(model_dir, int(arg), layout)
    return f"{MODEL}:{arg}"

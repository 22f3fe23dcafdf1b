"""Model bundles: checked before they are promoted or loaded, the feature layout included, and picked up by a
running pipeline between jobs."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from precompute.errors import BundleError
from precompute.ranking import bundle
from precompute.ranking.layout import for_settings


_copies = iter(range(1, 1000))


def _copy_bundle(settings, version) -> int:
    """A byte-identical copy of bundle ``version`` under a new version number."""
    new = version + 1_000_000 * next(_copies)
    shutil.copytree(settings.model_dir / str(version), settings.model_dir / str(new))
    return new


def test_bad_bundles_are_refused_and_the_pipeline_keeps_its_own(pipeline, settings, world):
    good = pipeline.bundle.version
    truncated = _copy_bundle(settings, world.version)
    path = settings.model_dir / str(truncated) / "model.cbm"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BundleError, match="truncated"):
        bundle.promote(settings.model_dir, truncated)
    assert bundle.current_version(settings.model_dir) == world.version

    wrong_format = _copy_bundle(settings, world.version)
    meta = settings.model_dir / str(wrong_format) / "meta.json"
    meta.write_text(meta.read_text().replace('"format": 2', '"format": 99'))
    with pytest.raises(BundleError, match="format 99"):
        bundle.load(settings.model_dir, wrong_format)

    wrong_features = _copy_bundle(settings, world.version)
    meta = settings.model_dir / str(wrong_features) / "meta.json"
    meta.write_text(meta.read_text().replace('"item_log_price"', '"something_else"'))
    with pytest.raises(BundleError, match="features"):
        bundle.load(settings.model_dir, wrong_features, for_settings(settings))

    # a running pipeline told to use a broken bundle keeps the one it has
    pointer = settings.model_dir / "CURRENT"
    pointer.write_text(f"{truncated}\n")
    try:
        pipeline.refresh()
        assert pipeline.bundle.version == good
    finally:
        pointer.write_text(f"{world.version}\n")


def test_a_promoted_bundle_is_picked_up_by_refresh(pipeline, settings, world):
    new = _copy_bundle(settings, world.version)
    bundle.promote(settings.model_dir, new)
    try:
        assert pipeline.refresh() is True
        assert pipeline.bundle.version == new
        assert pipeline.refresh() is False
    finally:
        bundle.promote(settings.model_dir, world.version)


def test_model_beats_popularity_on_the_seeded_marketplace(world):
    # given the session's bundle, trained and judged as `manage.py train` does it
    metrics = bundle.load(world.settings.model_dir).meta["metrics"]
    # then at the validation cut its NDCG@10 is above global popularity's on the same users
    assert metrics["ndcg10"] > metrics["baselines"]["popular"]


def _swapped(names: list[str], a: str, b: str) -> list[str]:
    out = list(names)
    i, j = out.index(a), out.index(b)
    out[i], out[j] = out[j], out[i]
    return out


def test_a_bundle_with_the_features_in_another_order_is_refused(settings, world):
    # given a bundle whose metadata lists the same features with two of them swapped
    swapped = _copy_bundle(settings, world.version)
    meta_path = settings.model_dir / str(swapped) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["feature_names"] = _swapped(meta["feature_names"], "item_attr_quality", "item_attr_photos")
    meta_path.write_text(json.dumps(meta))
    # then loading and promoting it are refused, naming the first column that differs
    layout = for_settings(settings)
    with pytest.raises(BundleError, match="different order.*column 2 is 'item_attr_photos' there, "
                                          "'item_attr_quality' here"):
        bundle.load(settings.model_dir, swapped, layout)
    with pytest.raises(BundleError, match="different order"):
        bundle.promote(settings.model_dir, swapped, layout)
    # and without a layout to check against, the model's own names still refuse the edited metadata
    with pytest.raises(BundleError, match="the model in bundle"):
        bundle.load(settings.model_dir, swapped)
    assert bundle.current_version(settings.model_dir) == world.version


def test_a_model_trained_on_another_column_order_is_refused_whatever_its_metadata_says(settings):
    from catboost import CatBoost, Pool

    # given a model trained with two columns swapped, written as a bundle whose metadata is this prefeed's layout
    layout = for_settings(settings)
    names = _swapped(list(layout.names), "user_events_24h", "user_click_rate")
    rng = np.random.default_rng(0)
    X, y = rng.random((60, len(names)), dtype=np.float32), rng.integers(0, 2, 60)
    model = CatBoost(dict(loss_function="YetiRank", iterations=2, depth=2, verbose=False, allow_writing_files=False))
    model.fit(Pool(X, y, group_id=np.repeat(np.arange(6), 10), feature_names=names))
    version = bundle.write(settings.model_dir, model, {k: np.empty(0) for k in ("src", "dst", "weight")}, {})
    meta_path = settings.model_dir / str(version) / "meta.json"
    meta_path.write_text(json.dumps(dict(json.loads(meta_path.read_text()), feature_names=list(layout.names))))
    # then it is refused: the names inside the model are checked against the layout too
    with pytest.raises(BundleError, match="the model in bundle .* different order"):
        bundle.load(settings.model_dir, version, layout)


def test_a_bundle_recording_another_dtype_is_refused(settings, world):
    other = _copy_bundle(settings, world.version)
    meta_path = settings.model_dir / str(other) / "meta.json"
    meta = json.loads(meta_path.read_text())
    layout = for_settings(settings)
    assert meta["feature_dtype"] == "float32" and meta["feature_names"] == list(layout.names)
    meta["feature_dtype"] = "float64"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="float64 features"):
        bundle.load(settings.model_dir, other, layout)


@pytest.mark.parametrize("change", [dict(item_attributes=("quality", "photos")),
                                    dict(event_types=(("view", 1.0), ("click", 2.0), ("contact", 4.0),
                                                      ("purchase", 6.0), ("review", 3.0)))])
def test_a_bundle_trained_with_other_attributes_or_event_types_is_refused(settings, world, r, change):
    import dataclasses

    from precompute.pipeline.pipeline import Pipeline

    # given today's bundle, trained with the synthetic world's three attributes and four event types
    # when a worker declares other attributes or one more event type
    other = dataclasses.replace(settings, **change)
    # then it refuses the bundle, saying to retrain
    with pytest.raises(BundleError, match="different feature set.*PREFEED_ITEM_ATTRIBUTES and "
                                          "PREFEED_EVENT_TYPES.*retrain"):
        Pipeline(other, world.engine, r).load()
    # while the same declarations with other weights keep the layout, and the bundle
    reweighted = dataclasses.replace(settings, event_types=tuple((n, 2 * w) for n, w in settings.event_types))
    Pipeline(reweighted, world.engine, r).load()


def test_the_matrix_builder_places_every_column_by_its_declared_name(pipeline, own_users, monkeypatch):
    from precompute.ranking import features
    from precompute.ranking.layout import FeatureLayout

    # given a batch's feature matrix under the declared layout
    from precompute.data.history import load_histories

    hist = load_histories(pipeline.engine, own_users(2), pipeline.items, pipeline.settings)
    cand = pipeline.candidates(hist)
    now = 1.7e9
    before = features.build(pipeline.items, hist, cand, now)
    # when the layout declares pairs of columns in the other order (one per group that is built differently)
    pairs = [("item_attr_quality", "item_attr_photos"), ("user_events_24h", "user_click_rate"),
             ("ux_category_share", "ux_category_events_7d"), ("ux_price_z", "ux_covisit_count")]
    groups = []
    layout = pipeline.items.layout
    for name, group in layout.groups:
        group = list(group)
        for a, b in pairs:
            if a in group:
                group = _swapped(group, a, b)
        groups.append((name, tuple(group)))
    swapped = FeatureLayout(groups=tuple(groups))
    after = features.build(dataclasses.replace(pipeline.items, layout=swapped), hist, cand, now)
    # then each named column holds the same values, at its new place
    for name in layout.names:
        assert np.array_equal(before[:, layout.index(name)], after[:, swapped.index(name)], equal_nan=True), name
    assert not np.array_equal(before, after)

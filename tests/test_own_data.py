"""A catalogue and a rating log of one's own, in MovieLens's files, go the whole way through the commands a new user
runs: import-items, import-events, train, precompute --stale, and the API serves precomputed feeds from them."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from sqlalchemy import func, select

from api import create_app
from api.services import services
from precompute.data import engine as db, synthetic
from precompute.data.tables import Event, ItemCategory
from tests.conftest import manage, own_database, with_key

RATING_OF_TYPE = {1: 3, 2: 3.5, 3: 4, 4: 5}     # the generator's view ... purchase as a film's stars


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "own")


def write_movielens(folder, market) -> tuple:
    """``u.item`` and ``u.data`` of a generated marketplace: each item a film whose genres are its category and,
    for every fifth film, the next one too; each event a rating at its time."""
    flags = np.zeros((len(market.item_id), 19), dtype=int)
    flags[np.arange(len(flags)), market.item_category % 19] = 1
    every_fifth = np.arange(0, len(flags), 5)
    flags[every_fifth, (market.item_category[every_fifth] + 1) % 19] = 1
    u_item = folder / "u.item"
    with open(u_item, "w", encoding="latin-1") as f:
        for item, row in zip(market.item_id.tolist(), flags.tolist()):
            f.write(f"{item}|Film {item} (1995)|01-Jan-1995||http://example.invalid/{item}|"
                    + "|".join(map(str, row)) + "\n")
    u_data = folder / "u.data"
    with open(u_data, "w") as f:
        for u, i, t, ts in zip(market.event_user.tolist(), market.event_item.tolist(), market.event_type.tolist(),
                               market.event_ts.tolist()):
            f.write(f"{u}\t{i}\t{RATING_OF_TYPE[t]}\t{int(ts)}\n")
    return u_item, u_data, flags


def test_a_movielens_catalogue_and_log_are_imported_trained_precomputed_and_served(settings, own_url, tmp_path):
    # given a MovieLens-format catalogue (films in one or two genres) and rating log, and a prefeed without
    # attributes on a database of its own
    market = synthetic.generate(150, 400, 12_000, seed=5, now=time.time())
    u_item, u_data, flags = write_movielens(tmp_path, market)
    s = dataclasses.replace(settings, database_url=own_url, var_dir=tmp_path, model_dir=tmp_path / "models",
                            item_attributes=())
    # when a new user runs the documented commands
    for args in (("init-db",), ("import-items", str(u_item), "--format", "movielens"),
                 ("import-events", str(u_data), "--format", "movielens"),
                 ("train", "--iterations", "20", "--users", "150"),
                 ("precompute", "--stale", "--inline")):
        done = manage(s, *args, timeout=300)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    users = len(set(market.event_user.tolist()))
    assert f"{users} feeds written" in done.stdout           # every user who rated something
    # then every film is in the catalogue with its genres, every rating is an event with its stars as value
    engine = db.make_engine(own_url)
    with engine.connect() as conn:
        genres = conn.execute(select(ItemCategory.item_id, func.count()).group_by(ItemCategory.item_id)).all()
        assert dict(genres) == {int(i): int(n) for i, n in zip(market.item_id, flags.sum(axis=1))}
        # (two ratings of one film by one user in the same second, on the same side of 4 stars, are one event)
        strong = np.isin(market.event_type, [3, 4])
        keys = {(u, i, k, int(t)) for u, i, k, t in zip(market.event_user.tolist(), market.event_item.tolist(),
                                                        strong.tolist(), market.event_ts.tolist())}
        assert conn.execute(select(func.count()).select_from(Event)).scalar() == len(keys)
        assert sorted(set(conn.execute(select(Event.value)).scalars())) == [3.0, 3.5, 4.0, 5.0]
    engine.dispose()
    # and the model learnt from this log's own feature set (no attributes), and nothing is stale any more
    assert "0 feeds written" in manage(s, "precompute", "--stale", "--inline").stdout
    # and a user who rated films gets a precomputed feed of films they have not rated, of known films only
    app = create_app(s)
    client = with_key(app.test_client())
    user = int(market.event_user[0])
    body = client.get(f"/feed/{user}?limit=50").get_json()
    assert body["source"] == "precomputed", body
    served = [e["item_id"] for e in body["items"]]
    rated = set(market.event_item[market.event_user == user].tolist())
    assert served and not set(served) & rated and set(served) <= set(market.item_id.tolist())
    services(app).engine.dispose()

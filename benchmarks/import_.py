"""import: a catalogue and rating log of MovieLens-25M's shape imported (``precompute/data/importing``), then
trained on: import rows/s, wall time and peak RSS, and training's wall time per stage and peak RSS, on SQLite and,
given ``DATABASE_URL`` or ``--postgres URL``, on PostgreSQL (a schema of its own, dropped after).

The files are generated (deterministic seed), never downloaded: ``movies.csv`` (``movieId,title,genres``, genres
``|``-joined, sparse ids) and ``ratings.csv`` (``userId,movieId,rating,timestamp``; ratings 0.5–5 in halves,
each user's rows together and in time order, in sittings of close ratings over the years 1995–2019). At 25 M rows
there are 162,541 users and 62,423 films as in ML-25M; other sizes keep ~154 ratings a user (at least 20) and scale
the catalogue by the square root of the rows. Import and training each run in a child process, so each peak RSS
is its own.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from .lab.pg import own_schema
from .lab.results import table, write_result
from .lab.world import ROOT

ML25M_ROWS, ML25M_USERS, ML25M_ITEMS = 25_000_095, 162_541, 62_423
FULL_ROWS, QUICK_ROWS = 25_000_000, 20_000
GENRE_NAMES = ("Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama", "Fantasy",
               "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western")
RATINGS = np.array(["0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "4.5", "5.0"], dtype=object)
RATING_SHARE = np.array([1.6, 3.1, 1.6, 6.6, 5.0, 19.6, 12.6, 26.6, 8.5, 14.4])   # ML-25M's, roughly (%)
FIRST_TS, LAST_TS = 789_652_009, 1_574_327_703                                     # 1995-01-09 … 2019-11-21
CHUNK_USERS = 2000
MiB = 1 << 20


def sizes(rows: int) -> tuple[int, int]:
    """Users and films for a log of ``rows`` ratings."""
    users = max(1, min(round(rows * ML25M_USERS / ML25M_ROWS), rows // 20 or 1))
    return users, max(50, min(ML25M_ITEMS, round(ML25M_ITEMS * math.sqrt(rows / ML25M_ROWS))))


def generate(folder: Path, rows: int, seed: int = 25) -> tuple[Path, Path]:
    """Write ``movies.csv`` and ``ratings.csv`` of ``rows`` ratings into ``folder``; streamed by chunks of users."""
    rng = np.random.default_rng(seed)
    n_users, n_items = sizes(rows)
    movie_ids = np.sort(rng.choice(np.arange(1, 4 * n_items), n_items, replace=False))
    n_genres = np.where(rng.random(n_items) < 0.08, 0, rng.integers(1, 4, n_items))
    genres = ["|".join(sorted(set(rng.choice(GENRE_NAMES, k).tolist()))) or "(no genres listed)" for k in n_genres]
    titles = [f"Film {m}, The ({y})" if m % 7 == 0 else f"Film {m} ({y})"
              for m, y in zip(movie_ids.tolist(), rng.integers(1920, 2020, n_items).tolist())]
    movies = folder / "movies.csv"
    pd.DataFrame({"movieId": movie_ids, "title": titles, "genres": genres}).to_csv(movies, index=False)
    # Popularity: a Zipf-like law over a random order of the films.
    popularity = 1.0 / (np.arange(n_items) + 20.0) ** 1.1
    by_rank = rng.permutation(n_items)
    cdf = np.cumsum(popularity) / popularity.sum()
    counts = _ratings_per_user(rng, rows, n_users, n_items)
    ratings = folder / "ratings.csv"
    with open(ratings, "w", newline="") as out:
        out.write("userId,movieId,rating,timestamp\n")
        for lo in range(0, n_users, CHUNK_USERS):
            k = counts[lo:lo + CHUNK_USERS]
            user = np.repeat(np.arange(lo, lo + len(k)), k)
            item = _distinct_items(rng, user, n_items, by_rank, cdf)
            ts = _times(rng, user)
            rating = RATINGS[np.searchsorted(np.cumsum(RATING_SHARE) / RATING_SHARE.sum(), rng.random(len(user)))]
            pd.DataFrame({"u": user + 1, "m": movie_ids[item], "r": rating, "t": ts}).to_csv(
                out, header=False, index=False)
    return movies, ratings


def _ratings_per_user(rng, rows: int, n_users: int, n_items: int) -> np.ndarray:
    """Heavy-tailed counts, at least 20 (as MovieLens keeps), at most half the films, summing to ``rows``."""
    floor = min(20, rows // n_users)
    cap = max(floor + 1, n_items // 2)
    raw = rng.pareto(1.2, n_users)
    counts = np.minimum(floor + np.floor(raw / raw.sum() * (rows - floor * n_users)).astype(np.int64), cap)
    while (missing := rows - int(counts.sum())) > 0:
        room = np.flatnonzero(counts < cap)
        counts[rng.choice(room, min(missing, len(room)), replace=False)] += 1
    return counts


def _distinct_items(rng, user: np.ndarray, n_items: int, by_rank: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    """One film per row by popularity, none twice for a user (a repeat is drawn again, uniformly after 3 tries)."""
    item = by_rank[np.minimum(np.searchsorted(cdf, rng.random(len(user))), n_items - 1)]
    for attempt in range(100):
        order = np.lexsort((item, user))
        repeat = np.zeros(len(user), dtype=bool)
        repeat[order[1:]] = (user[order[1:]] == user[order[:-1]]) & (item[order[1:]] == item[order[:-1]])
        if not repeat.any():
            return item
        k = int(repeat.sum())
        item[repeat] = by_rank[np.minimum(np.searchsorted(cdf, rng.random(k)), n_items - 1)] if attempt < 3 \
            else rng.integers(0, n_items, k)
    raise RuntimeError("could not draw distinct films")


def _times(rng, user: np.ndarray) -> np.ndarray:
    """Each user's ratings in time order: sittings (gaps of about a minute), days to months between them."""
    gaps = np.where(rng.random(len(user)) < 0.92, rng.exponential(60.0, len(user)),
                    rng.exponential(90 * 86400.0, len(user)))
    first = np.r_[True, user[1:] != user[:-1]]
    owner = np.cumsum(first) - 1
    offset = np.cumsum(gaps)
    offset -= offset[first][owner]                  # seconds since the user's first rating
    span = np.maximum.reduceat(offset, np.flatnonzero(first))
    start = FIRST_TS + rng.random(len(span)) * np.maximum(LAST_TS - FIRST_TS - span, 0.0)
    scale = np.minimum(1.0, (LAST_TS - FIRST_TS) / np.maximum(span, 1.0))    # squeezed into the years
    return (start[owner] + offset * scale[owner]).astype(np.int64)


def run(quick: bool = False, rows: int | None = None, postgres: str | None = None) -> dict:
    rows = rows or (QUICK_ROWS if quick else FULL_ROWS)
    try:
        import precompute.data.importing  # noqa: F401
    except ModuleNotFoundError:
        raise SystemExit("import: precompute.data.importing is not there yet; nothing to benchmark") from None
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-import-"))
    try:
        t0 = time.perf_counter()
        movies, ratings = generate(tmp, rows)
        generate_s = time.perf_counter() - t0
        backends = [("sqlite", f"sqlite:///{tmp / 'import.db'}", None)]
        postgres = postgres or os.environ.get("DATABASE_URL")
        if postgres:
            backends.append(("postgresql", *own_schema(postgres)))
        runs = []
        for name, url, drop in backends:
            try:
                imported = _child("import", url, tmp, movies, ratings)
                trained = _child("train", url, tmp, movies, ratings, quick=quick)
            finally:
                if drop:
                    drop()
            runs.append({"database": name, **imported, **trained})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(f"import + train: {rows:,} ratings ({sizes(rows)[0]:,} users, {sizes(rows)[1]:,} films), files "
                f"generated in {generate_s:.1f} s",
                ["database", "import s", "rows/s", "import RSS MiB", "train s", "train RSS MiB",
                 "train's largest child RSS MiB"],
                [[r["database"], r["import_s"], r["import_rows_per_s"], r["import_rss_mib"], r["train_s"],
                  r["train_rss_mib"], r["train_child_rss_mib"]] for r in runs]))
    for r in runs:
        print(table(f"training stages ({r['database']}; RSS is the peak so far)", ["stage", "s", "RSS MiB"],
                    [[s["stage"], s["s"], s["rss_mib"]] for s in r["stages"]]))
    sqlite = runs[0]
    result = {"rows": rows, "generate_s": generate_s, "runs": runs,
              **{k: sqlite[k] for k in ("import_s", "import_rows_per_s", "import_rss_mib", "train_s",
                                        "train_rss_mib", "train_child_rss_mib")}}
    print(f"wrote {write_result('import', result, quick)}")
    return result


def _child(step: str, url: str, tmp: Path, movies: Path, ratings: Path, quick: bool = False) -> dict:
    args = json.dumps({"step": step, "url": url, "tmp": str(tmp), "movies": str(movies), "ratings": str(ratings),
                       "quick": quick})
    done = subprocess.run([sys.executable, "-m", "benchmarks.import_", args], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{step} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024      # Linux: KiB


def _in_child(args: dict) -> dict:
    from precompute.data import engine as db
    from precompute.learning.fit import fit_ranker
    from precompute.settings import Settings

    tmp = Path(args["tmp"])
    settings = Settings(database_url=args["url"], model_dir=tmp / "models", var_dir=tmp)
    engine = db.make_engine(settings.database_url, settings)
    t0 = time.perf_counter()
    if args["step"] == "import":
        from precompute.data import importing

        db.init_db(engine, settings)
        importing.import_items(engine, args["movies"], "movielens", settings)
        result = importing.import_events(engine, args["ratings"], "movielens", settings)
        wall = time.perf_counter() - t0
        stored = result.events_stored
        return {"import_s": wall, "events": stored, "import_rows_per_s": stored / wall,
                "import_rss_mib": _peak_mib()}
    stages, last = [], [t0]

    def progress(message: str) -> None:         # a stage is the work done before ``train`` reports a message
        now = time.perf_counter()
        stages.append({"stage": f"until: {message[:50]}", "s": now - last[0], "rss_mib": _peak_mib()})
        last[0] = now

    fit_ranker(engine, settings, iterations=20 if args["quick"] else 100, users=200 if args["quick"] else None,
                 progress=progress)
    progress("the end (validation, co-visitation of the whole log)")
    # Training fits each next period in a forked child (``ranking/ahead.py``): the largest child's peak, whose pages
    # shared with the parent (the event log) count in both, so their sum is an upper bound of the memory used.
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"train_s": time.perf_counter() - t0, "train_rss_mib": _peak_mib(), "train_child_rss_mib": child,
            "stages": stages}


if __name__ == "__main__":
    print(json.dumps(_in_child(json.loads(sys.argv[1]))))

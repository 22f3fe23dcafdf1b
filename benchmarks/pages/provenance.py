"""Where a figure on a generated page comes from: the logs in the pages' order and by name, and the command that
writes a results file again."""

from __future__ import annotations

#: Logs in the order the pages show them (others after, by name).
ORDER = ("synthetic", "pf-ml-1m", "pf-ml-100k")
NAMES = {"synthetic": "Synthetic marketplace (the demo's world: 2,000 users, 3,000 items, 100,000 events)",
         "pf-ml-1m": "MovieLens-1M", "pf-ml-100k": "MovieLens-100K",
         "ml1m": "MovieLens-1M, films numbered by sorted title (another import of the same ratings)"}


def by_log(results: list[dict]) -> list[dict]:
    rank = {name: k for k, name in enumerate(ORDER)}
    return sorted(results, key=lambda r: (rank.get(r.get("log"), len(ORDER)), r.get("log", ""),
                                          bool(r.get("rank_shown"))))


def command(res: dict) -> str:
    """What to type to write ``res`` again, with what its name alone does not say: the log's folder
    (``PREFEED_VAR_DIR``), the protocols' training seeds, a run without the cascade or with the shown columns, the
    ablation's cut, the import's row count and PostgreSQL run."""
    name = res["benchmark"].partition("-")[0]
    env = f"PREFEED_VAR_DIR=<{res['log']}> " if res.get("log", "synthetic") != "synthetic" else ""
    seeds = res.get("seeds", [0]) if name == "protocols" else [0]
    env += f"PREFEED_BENCH_SEEDS={','.join(map(str, seeds))} " if seeds != [0] else ""
    env += f"PREFEED_BENCH_CUT={res['cut']:g} " if name == "ablation" and res.get("cut", 0.8) != 0.8 else ""
    env += "PREFEED_CASCADE_KEEP=0 " if res.get("cascade_keep") == 0 else ""
    env += "PREFEED_RANK_SHOWN=1 " if res.get("rank_shown") else ""
    options = ""
    if name == "import":
        from ..import_ import FULL_ROWS

        options += f" --rows {res['rows']}" if res.get("rows", FULL_ROWS) != FULL_ROWS else ""
        options += " --postgres URL" if any(r.get("database") == "postgresql" for r in res.get("runs", [])) else ""
    return f"{env}python -m benchmarks {name}{options}"

"""The directory prometheus_client's multiprocess mode counts in, one per serving command and port."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from precompute.settings import Settings


def fresh(settings: Settings, name: str) -> Path:
    """``<PREFEED_VAR_DIR>/metrics/<name>``, emptied, set as ``PROMETHEUS_MULTIPROC_DIR`` for this process and the
    ones it starts. Emptied at each start: counts begin at zero with the processes, as Prometheus expects of a
    restarted target, and files of processes long gone are not read at every scrape. Must run before
    prometheus_client is imported (it chooses where values live at import)."""
    path = (Path(settings.var_dir) / "metrics" / name).resolve()
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path

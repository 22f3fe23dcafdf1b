"""Reading the metrics files of prometheus_client's multiprocess mode, for the API's and the worker's ``/metrics``.

``ProcessFiles`` is the library's ``MultiProcessCollector`` for files still being created: a process creates its
file empty and sizes it a moment later (prometheus_client's ``MmapedDict``), and read in between, the empty file
failed the whole scrape (``struct.error``, an HTTP 500). A worker pool's processes create theirs at their first
job and gunicorn's workers as they start, both while scrapes come in. An empty file holds no count yet, and files
only grow, so it is skipped.
"""

from __future__ import annotations

import glob
import os

from prometheus_client.multiprocess import MultiProcessCollector


class ProcessFiles:
    """The counts of every process whose files are in ``path``; registered in a ``CollectorRegistry``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self):
        files = [f for f in glob.glob(os.path.join(self.path, "*.db")) if os.path.getsize(f) > 0]
        return MultiProcessCollector.merge(files)

"""The no-op job for the fork benchmark's floor. Kept in its own module with no imports, so a work horse that
imports it pays nothing but RQ's own queue and fork cost."""


def noop() -> None:
    return None

"""Which files ``docker build`` sends as the build context, read off ``.dockerignore`` without a Docker daemon.

The rules are Docker's own (its ``patternmatcher`` module, which the CLI and BuildKit share), ported here:

- A line starting with ``#`` is a comment; others are trimmed, and a blank one is skipped. ``!`` makes an exception.
  A pattern is cleaned as Go's ``filepath.Clean`` cleans a path, and a leading ``/`` dropped: ``/foo``, ``./foo``
  and ``foo/`` all mean ``foo``, relative to the context's root (never "a ``foo`` anywhere", as in ``.gitignore``).
- The glob is Go's ``filepath.Match``: ``*`` and ``?`` stop at ``/``, ``[...]`` is a class (``[^...]`` negated),
  ``\\`` escapes the next character; plus ``**``, any number of directories, none included.
- A pattern excludes a path when it matches the path or one of its parent directories; the last line that matches
  decides, so a later ``!`` line takes a file back.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_ESCAPED = set(".+()|{}$")             # regex characters that mean nothing in filepath.Match: matched as they are


@dataclass(frozen=True)
class Rule:
    pattern: str                        # cleaned, without its "!"
    exception: bool
    matches: Callable[[str], bool]


def _clean(path: str) -> str:
    """Go's ``filepath.Clean`` on a slash-separated path (``normpath`` keeps a leading ``//``, Go does not)."""
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def _compile(pattern: str) -> Callable[[str], bool]:
    """The matcher of one cleaned pattern: exact, prefix (``dir/**``), suffix (``**/name``) or a regex, chosen as
    Docker chooses them (the kind changes the meaning at the edges: ``**/foo`` matches ``foo`` itself)."""
    regex, kind, i = "^", "exact", 0
    while i < len(pattern):
        start, ch = i, pattern[i]
        i += 1
        if ch == "*" and pattern[i:i + 1] == "*":
            i += 1
            if pattern[i:i + 1] == "/":       # "**/" is read as "**"
                i += 1
            if i == len(pattern):              # a trailing "**" takes anything
                if kind == "exact":
                    kind = "prefix"
                else:
                    regex, kind = regex + ".*", "regexp"
            else:
                regex, kind = regex + "(.*/)?", "regexp"
            if start == 0:
                kind = "suffix"
        elif ch == "*":
            regex, kind = regex + "[^/]*", "regexp"
        elif ch == "?":
            regex, kind = regex + "[^/]", "regexp"
        elif ch in _ESCAPED:
            regex += "\\" + ch
        elif ch == "\\":
            if i == len(pattern):
                raise ValueError(f"bad .dockerignore pattern {pattern!r}: a trailing backslash")
            regex, kind, i = regex + "\\" + pattern[i], "regexp", i + 1
        elif ch in "[]":
            regex, kind = regex + ch, "regexp"
        else:
            regex += ch
    if kind == "exact":
        return lambda path: path == pattern
    if kind == "prefix":
        return lambda path: path.startswith(pattern[:-2])
    if kind == "suffix":
        suffix = pattern[2:]
        return lambda path: path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
    compiled = re.compile(regex + "$", re.S)
    return lambda path: compiled.match(path) is not None


class DockerIgnore:
    """The rules of one ``.dockerignore`` text."""

    def __init__(self, text: str) -> None:
        self.rules: list[Rule] = []
        for line in text.removeprefix("\ufeff").splitlines():
            if line.startswith("#") or not (line := line.strip()):
                continue
            exception = line.startswith("!")
            pattern = line[1:].strip() if exception else line
            if not pattern:
                raise ValueError('bad .dockerignore pattern "!": an exception of nothing')
            pattern = _clean(pattern)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern[1:]
            self.rules.append(Rule(pattern, exception, _compile(pattern)))

    @property
    def has_exceptions(self) -> bool:
        return any(rule.exception for rule in self.rules)

    def excludes(self, path: str) -> bool:
        """Whether ``path`` (relative to the context's root, ``/``-separated) stays out of the context."""
        path = _clean(path)
        parents = path.split("/")[:-1]
        excluded = False
        for rule in self.rules:
            if rule.exception != excluded:     # only an exception can take back, only a pattern can exclude
                continue
            if rule.matches(path) or any(rule.matches("/".join(parents[:k])) for k in range(1, len(parents) + 1)):
                excluded = not rule.exception
        return excluded


def context(root: Path) -> set[str]:
    """The files (``/``-separated, relative to ``root``) that ``docker build root`` sends, as the CLI walks the
    folder: an excluded directory is not entered unless an exception could take something inside back. Symbolic
    links are sent as links, never followed."""
    ignore_file = root / ".dockerignore"
    ignore = DockerIgnore(ignore_file.read_text() if ignore_file.exists() else "")
    files = set()
    for folder, dirs, names in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]     # os.walk does not enter them
        if not ignore.has_exceptions:
            dirs[:] = [d for d in dirs if not ignore.excludes(prefix + d)]
        files.update(prefix + name for name in [*names, *links] if not ignore.excludes(prefix + name))
    return files

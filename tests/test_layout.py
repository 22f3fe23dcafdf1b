"""The layout rules of docs/development.md, checked on the code: imports form no circle, ranking holds nothing of
learning and a worker never loads it, no module reads another's underscore names, the core's root stays small."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("precompute", "api", "jobs", "cli")
#: Underscore names that are the documented public API of a library, not another module's private parts:
#: ``os._exit`` (exit without unwinding, in a forked child) and SQLAlchemy's ``Row._mapping``.
PUBLIC_UNDERSCORE = {"_exit", "_mapping"}


def modules() -> dict[str, Path]:
    """Every prefeed module by its dotted name (a package by its own name)."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The prefeed modules ``name`` imports anywhere in its file: at the top, in functions, under TYPE_CHECKING.
    ``from package import submodule`` imports the submodule (its package's ``__init__`` runs first, as for every
    import, which is no dependency of ``name``'s)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            subs = [f"{module}.{a.name}" for a in node.names]
            found = subs if all(s in known for s in subs) else [module]
        else:
            continue
        out |= {f for f in found if f in known and f != name}
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root), on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w), on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle():
    # given a graph with a circle of three modules beside a chain
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    # then the circle is found, and only it
    assert circles(edges) == [["a", "b", "c"]]


def test_no_circle_of_imports_type_only_ones_included():
    assert circles(graph()) == []


def folders(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between folders: ``precompute``'s sub-folders (``precompute.ranking``), else the top
    package (``api``); a module at ``precompute``'s root is a folder of its own."""
    def folder(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] == "precompute" and len(parts) > 2 else ".".join(parts[:2]) \
            if parts[0] == "precompute" else parts[0]

    out: dict[str, set[str]] = {}
    for name, deps in edges.items():
        out.setdefault(folder(name), set()).update(folder(d) for d in deps)
    return {f: deps - {f} for f, deps in out.items()}


def test_the_folder_graph_sees_two_folders_that_import_each_other():
    # given modules of two folders that import each other, through different modules
    edges = {"precompute.a.x": {"precompute.b.y"}, "precompute.b.z": {"precompute.a.w"}, "precompute.a.w": set(),
             "precompute.b.y": set()}
    # then the module graph has no circle, and the folders' graph has one
    assert circles(edges) == [] and circles(folders(edges)) == [["precompute.a", "precompute.b"]]


def test_no_folder_imports_a_folder_that_imports_it():
    assert circles(folders(graph())) == []


def test_ranking_imports_nothing_of_learning():
    # what a worker needs to rank a user never reaches for training or evaluation code
    edges = graph()
    reached = {m: sorted(n for n in deps if n.startswith("precompute.learning"))
               for m, deps in edges.items() if m.startswith(("precompute.ranking", "precompute.feeds",
                                                               "precompute.data", "precompute.pipeline",
                                                               "precompute.experiments", "jobs", "api"))}
    assert {m: v for m, v in reached.items() if v} == {}


def test_a_worker_process_imports_no_learning_module(settings, world, user_id):
    # given a worker process as ``manage.py worker`` starts one: the CLI loaded, the pipeline initialised before
    # fork, then a user's feed recomputed
    code = ("import sys, cli, jobs.worker, jobs.tasks\n"
            "from jobs import context\n"
            f"context.init().recompute([{user_id}])\n"
            "print(sorted(m for m in sys.modules if m.startswith('precompute.learning')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=settings.child_env(), capture_output=True,
                          text=True, timeout=300)
    # then no module of the learning package was ever loaded in it
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def underscore_reads(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``, and ``from m import _name``, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) \
                    and node.attr not in PUBLIC_UNDERSCORE:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_underscore_check_finds_a_borrowed_buffer(tmp_path):
    # given a module that borrows another object's private buffer and imports a private helper
    source = tmp_path / "borrower.py"
    source.write_text("from other import _helper\n\ndef f(items):\n    self_ok = 1\n    return items._mark\n")
    # then both are found
    assert [line.split(": ")[1] for line in underscore_reads(source)] == ["from other import _helper",
                                                                         "items._mark"]


def test_no_module_reads_another_modules_underscore_names():
    found = {str(p.relative_to(ROOT)): hits for package in (*PACKAGES, "benchmarks")
             for p in sorted((ROOT / package).rglob("*.py")) if (hits := underscore_reads(p))}
    assert found == {}


def test_the_cores_root_holds_at_most_six_modules():
    root = sorted(p.name for p in (ROOT / "precompute").glob("*.py"))
    assert len(root) <= 6, root

"""The package table of `docs/architecture.md` §2, enforced: who may import whom, and no cycles.

The table is read from the document itself (its third column lists, in backticks, what a package
may import), so the prose and the check cannot drift apart. Every import counts — module level,
under `TYPE_CHECKING`, and inside functions — because a lazy import that closes a cycle is still a
cycle: the two modules cannot be understood, tested or replaced one without the other.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"
DOCUMENT = ROOT / "docs" / "architecture.md"

_ROW = re.compile(r"^\|\s*`(?P<name>[^`]+)`\s*\|(?P<owns>[^|]*)\|(?P<may>[^|]*)\|\s*$")


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # the dotted module it resolves to
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in SOURCE.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(modules: dict[str, Path]) -> list[Import]:
    found: list[Import] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # `from persyn.store import base` imports the module `persyn.store.base`.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                if not target.startswith("persyn"):
                    continue
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != module:
                    found.append(Import(module, resolved, getattr(node, "lineno", 0)))
    return found


def _unit(module: str) -> str:
    """The table's unit a module belongs to: `persyn.memory.access` → `memory`, `persyn.cli` → `cli`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "persyn"


def _table() -> dict[str, tuple[str, ...]]:
    """`{unit: allowed}` from the document; `*` allows everything (but `testing`)."""
    rows: dict[str, tuple[str, ...]] = {}
    for line in DOCUMENT.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line.strip())
        if match is None:
            continue
        name = match["name"].removesuffix("/").removesuffix(".py")
        rows[name] = tuple(re.findall(r"`([^`]+)`", match["may"]))
    return rows


def _allowed(allowed: tuple[str, ...], imported: str) -> bool:
    if "*" in allowed:
        return _unit(imported) != "testing"
    dotted = imported.removeprefix("persyn.")
    return any(dotted == entry or dotted.startswith(entry + ".") for entry in allowed)


def test_the_document_has_a_row_for_every_package() -> None:
    table = _table()
    units = {_unit(module) for module in _modules()} - {"persyn"}
    missing = sorted(units - set(table))
    assert not missing, f"docs/architecture.md §2 has no row for {missing}"
    assert table["core"] == (), "core imports nothing else of ours"


def test_every_import_is_allowed_by_the_package_table() -> None:
    table = _table()
    violations = [
        f"{i.importer} (line {i.line}) imports {i.imported}, which `{_unit(i.importer)}` may not "
        f"(allowed: {', '.join(table.get(_unit(i.importer), ())) or 'nothing'})"
        for i in _imports(_modules())
        if _unit(i.importer) != _unit(i.imported)
        and _unit(i.importer) != "persyn"
        and not _allowed(table.get(_unit(i.importer), ()), i.imported)
    ]
    assert not violations, "\n".join(violations)


def test_production_code_never_imports_the_test_doubles() -> None:
    offenders = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in _imports(_modules())
        if _unit(i.imported) == "testing" and _unit(i.importer) != "testing"
    ]
    assert not offenders, "\n".join(offenders)


def _two_way_ties(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs of units each importing the other, whatever the modules: an arrow that runs back up."""
    return sorted(
        {(a, b) for a, targets in edges.items() for b in targets if a < b and a in edges.get(b, ())}
    )


def test_no_two_folders_import_each_other() -> None:
    """The house drawn from `ls src/persyn`: every arrow between two top-level folders runs one
    way. A module-level cycle is caught above; this catches `a/x.py` → `b/y.py` with `b/z.py` →
    `a/w.py`, which no cycle shows but which ties the two folders into one."""
    edges: dict[str, set[str]] = defaultdict(set)
    for found in _imports(_modules()):
        importer, imported = _unit(found.importer), _unit(found.imported)
        if importer != imported and "persyn" not in (importer, imported):
            edges[importer].add(imported)
    ties = _two_way_ties(edges)
    assert not ties, "folders importing each other:\n" + "\n".join(f"{a} ↔ {b}" for a, b in ties)


def _sub_unit(module: str) -> str | None:
    """The sub-package or module directly inside a top-level folder that a module belongs to:
    `persyn.store.schema.tables` → `store.schema`, `persyn.tools.providers` → `tools.providers`;
    None for a top-level folder's own `__init__.py` and for a top-level module."""
    parts = module.split(".")
    return ".".join(parts[1:3]) if len(parts) > 2 else None


def test_no_two_sub_packages_import_each_other() -> None:
    """The same one-way rule a level down: `store/sql/` imports `store/schema/`, so the schema
    never imports `store/sql/` (or a backend) back; the tool groups import `tools/providers.py`,
    so it names none of their types. A tie makes two sub-packages one that cannot be read,
    tested or replaced apart. `python scripts/house.py` prints the same figure."""
    edges: dict[str, set[str]] = defaultdict(set)
    for found in _imports(_modules()):
        importer, imported = _sub_unit(found.importer), _sub_unit(found.imported)
        if importer is not None and imported is not None and importer != imported:
            edges[importer].add(imported)
    ties = _two_way_ties(edges)
    assert not ties, "sub-packages importing each other:\n" + "\n".join(f"{a} ↔ {b}" for a, b in ties)


def test_the_tie_finder_finds_ties() -> None:
    """The check above is only as good as this."""
    assert _two_way_ties({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [("a", "b")]
    assert _two_way_ties({"a": {"b"}, "b": {"c"}}) == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_there_is_no_import_cycle_anywhere() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for found in _imports(_modules()):
        edges[found.importer].add(found.imported)
    cycles = _cycles(edges)
    assert not cycles, "import cycles (every import counts, TYPE_CHECKING and lazy ones too):\n" + "\n".join(
        " ↔ ".join(cycle) for cycle in cycles
    )


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    """The check above is only as good as this: it must see a cycle when there is one."""
    assert _cycles(edges) == expected

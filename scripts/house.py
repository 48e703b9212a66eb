"""The house in figures: how the source tree is laid out, as issue 34 measures it.

    python scripts/house.py [SOURCE_ROOT]     (default: this checkout's src/)

Prints one table: packages and modules, the most modules directly in one folder (and which), the
largest module, import cycles, folder-level two-way ties (a package importing another that imports
it back), and the storage port's size (the abstract methods a backend must write). Reads the tree
with `ast` only, so it runs on any checkout, old or new, without installing it.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(root: Path, modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != module and name.startswith("persyn"):
                    edges[module].add(name)
    return edges


def _cycles(edges: dict[str, set[str]]) -> int:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    count = 0
    counter = 0
    for start in list(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                size = 0
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    size += 1
                    if member == node:
                        break
                count += size > 1
    return count


def _two_way_ties(edges: dict[str, set[str]], depth: int) -> list[str]:
    """Pairs of folders (packages `depth` levels below `persyn`) that import each other."""

    def folder(module: str) -> str:
        return ".".join(module.split(".")[: depth + 1])

    between: set[tuple[str, str]] = set()
    for importer, imported in ((a, b) for a, targets in edges.items() for b in targets):
        one, other = folder(importer), folder(imported)
        if one != other and one.count(".") == depth and other.count(".") == depth:
            between.add((one, other))
    return sorted(f"{a} ⇄ {b}" for a, b in between if (b, a) in between and a < b)


def _port_methods(root: Path) -> str:
    """The abstract methods of the storage port: every `@abstractmethod` in store/base.py and
    the sub-port modules it composes (store/*.py or store/ports/*.py, whichever exists)."""
    store = root / "persyn" / "store"
    files = [store / "base.py", *sorted(store.glob("ports/*.py"))]
    if not (store / "ports").is_dir():
        files += [p for p in store.glob("*.py") if not p.name.startswith(("_", "sqlite", "postgres"))]
    core = optional = 0
    for path in files:
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            abstract = sum(
                1
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and any(
                    (isinstance(d, ast.Name) and d.id == "abstractmethod")
                    or (isinstance(d, ast.Attribute) and d.attr == "abstractmethod")
                    for d in item.decorator_list
                )
            )
            if "Capability" in node.name or any(
                isinstance(b, ast.Name) and b.id == "Capability" for b in node.bases
            ):
                optional += abstract
            else:
                core += abstract
    return f"{core} required" + (f" + {optional} in capabilities" if optional else "")


def _port_size(root: Path) -> str:
    """The storage port's required methods and its optional capabilities, read from the code
    itself where the tree can be imported (this checkout), else counted from its source."""
    sys.path.insert(0, str(root))
    try:
        from persyn.store.base import Store  # pyright: ignore[reportMissingImports]
    except ImportError:
        return _port_methods(root)
    finally:
        sys.path.pop(0)
    required = len(Store.__abstractmethods__)
    try:
        from persyn.store import capabilities  # pyright: ignore[reportMissingImports]
    except ImportError:
        return f"{required} required"
    names = ", ".join(
        f"{name} ({len(port.__abstractmethods__)})" for name, port in capabilities.CAPABILITIES.items()
    )
    return f"{required} required; capabilities: {names}"


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    package = root / "persyn"
    paths = sorted(package.rglob("*.py"))
    modules = {_module_name(root, p): p for p in paths}
    per_folder = Counter(str(p.parent.relative_to(package)) for p in paths)
    crowded_folder, crowded = per_folder.most_common(1)[0]
    lines = {str(p.relative_to(package)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    largest = max(lines, key=lambda name: lines[name])
    edges = _imports(root, modules)
    top_ties = _two_way_ties(edges, 1)
    sub_ties = _two_way_ties(edges, 2)
    rows = [
        ("modules / folders", f"{len(paths)} / {len({p.parent for p in paths})}"),
        ("most modules in one folder", f"{crowded} ({crowded_folder}/)"),
        (
            "folders over 25 modules",
            ", ".join(f"{f}/ {n}" for f, n in per_folder.items() if n > 25) or "none",
        ),
        ("largest module", f"{lines[largest]} lines ({largest})"),
        ("modules over 700 lines", str(sum(n > 700 for n in lines.values()))),
        ("import cycles", str(_cycles(edges))),
        ("two-way ties between top-level packages", f"{len(top_ties)} {', '.join(top_ties)}".strip()),
        ("two-way ties between sub-packages", f"{len(sub_ties)} {', '.join(sub_ties)}".strip()),
        ("storage port: abstract methods", _port_size(root)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()

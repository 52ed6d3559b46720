"""The shape of the code (docs/architecture.md): no import cycle between Lattice's modules, no
import hidden in a function without a comment saying why, and modules and functions of a size
a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scheduling", "nodes", "lattice_site")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# Each exception says why it is one.
LONG_MODULES: dict[str, str] = {}
# The engine's hot paths: each is one vectorised pass over the cluster's arrays, measured in
# bench/decision.py; cut into helpers they would pass a dozen arrays around and cost calls per
# decision. The parser builds an allocation with one field of the contract per line.
LONG_FUNCTIONS: dict[str, str] = {
    "scheduling/engine/snapshot_update.py:add": "updates every array for one allocation at once (incremental, < 20 us)",
    "scheduling/engine/eligibility.py:_kind_codes": "one vectorised branch per policy kind, side by side",
    "scheduling/engine/placement.py:_compute": "the request's view of the cluster in one vectorised pass",
    "scheduling/engine/parse_items.py:read_allocation": "one field of the contract per line",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, ast.AST]]:
    """The Lattice modules ``name`` imports (with the node that does it): ``from a.b import c``
    imports a.b.c when that is a module, else a.b; every package on the way runs its __init__."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    out.append((prefix, node))
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        skip = _type_checking_only(ast.parse(path.read_text()))
        for target, node in _imports(name, path, modules):
            if getattr(node, "lineno", 0) not in skip:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_lattice_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_imports_inside_functions_say_why():
    """An import in a function hides a dependency (and once hid a cycle): each one carries a
    comment on its line or the line before saying why it cannot be at the top."""
    silent = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    here, before = lines[inner.lineno - 1], lines[inner.lineno - 2]
                    if "#" not in here and not before.strip().startswith("#"):
                        silent.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    assert not silent, "function-local imports without a reason: " + ", ".join(sorted(set(silent)))


def _span(node: ast.AST) -> int:
    return (getattr(node, "end_lineno", None) or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]


def _own_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines less those of the functions defined inside it (counted on their own)."""
    nested = [n for n in ast.walk(function) if n is not function
              and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    outermost = [n for n in nested if not any(o is not n and o.lineno <= n.lineno <= (o.end_lineno or 0)
                                              for o in nested)]
    return _span(function) - sum(_span(n) for n in outermost)


def test_modules_and_functions_stay_readable():
    too_long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if "migrations" in path.parts:
                continue
            text = path.read_text()
            if len(text.splitlines()) > MAX_MODULE_LINES and rel not in LONG_MODULES:
                too_long.append(f"{rel}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = _own_lines(node)
                    if length > MAX_FUNCTION_LINES and f"{rel}:{node.name}" not in LONG_FUNCTIONS:
                        too_long.append(f"{rel}:{node.name}: {length} lines")
    assert not too_long, "over the size limits: " + "; ".join(too_long)

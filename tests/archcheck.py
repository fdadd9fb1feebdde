"""The shape of the package, measured from its source (no import of fedpath).

``python -m tests.archcheck`` prints the figures the architecture notes quote:
lines per package, modules over the size limit, functions over the length
limit, import circles and layer violations, and the files of ``tests/`` and
``benchmarks/`` over the same size limit. ``tests/test_architecture.py`` fails
when any of them comes back.

Imports are read with :mod:`ast`, module-level and inside functions alike;
imports under ``if TYPE_CHECKING:`` are left out (they never run). An import
whose line, or the line above it, carries a ``# circle-ok: <why>`` comment is
left out of the circle search: that is the allow-list, and the comment says why.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "fedpath"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
ALLOW_MARK = "# circle-ok:"
#: folders outside the package whose ``.py`` files keep to MAX_MODULE_LINES too
SIZED_FOLDERS = ("tests", "benchmarks")


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    allowed: set[str] = field(default_factory=set)
    long_functions: list[tuple[str, int]] = field(default_factory=list)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime(tree: ast.AST) -> list[ast.AST]:
    """Every node outside ``if TYPE_CHECKING:`` blocks."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return out


def _resolve(name: str, package: str, level: int, known: set[str]) -> str | None:
    if level:
        base = package.split(".")
        base = base[: len(base) - level + 1]
        name = ".".join([*base, name] if name else base)
    top = package.split(".")[0]
    if not (name == top or name.startswith(top + ".")):
        return None
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the last line, less the docstring's lines."""
    end = node.end_lineno or node.lineno
    length = end - node.lineno + 1
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        doc = body[0]
        length -= (doc.end_lineno or doc.lineno) - doc.lineno + 1
    return length


def _long_functions(tree: ast.AST, limit: int) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{prefix}{child.name}"
                n = function_length(child)
                if n > limit:
                    found.append((qual, n))
                visit(child, qual + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def load(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Module]:
    paths = sorted((root / package).rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        text = path.read_text("utf-8")
        source_lines = text.splitlines()
        tree = ast.parse(text, str(path))
        name = module_name(path, root)
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        mod = Module(name, path, len(source_lines))
        for node in _walk_runtime(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_resolve(a.name, pkg, 0, known) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}" if base else a.name
                    hit = _resolve(sub, pkg, node.level, known)
                    full = _resolve(sub, pkg, node.level, {sub} | known)
                    targets.append(hit if hit == full else None)
                    if hit != full or hit is None:
                        targets.append(_resolve(base, pkg, node.level, known))
            else:
                continue
            lines = source_lines[max(0, node.lineno - 2) : node.lineno]
            allowed = any(ALLOW_MARK in line for line in lines)
            for t in targets:
                if t and t != name:
                    (mod.allowed if allowed else mod.imports).add(t)
        mod.long_functions = _long_functions(tree, MAX_FUNCTION_LINES)
        modules[name] = mod
    return modules


def file_lines(
    root: Path = ROOT, folders: tuple[str, ...] = SIZED_FOLDERS
) -> dict[str, int]:
    """Lines of every ``.py`` file under ``folders`` (the tests and benchmarks), by
    path relative to ``root``, counted as :func:`load` counts a module's."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text("utf-8").splitlines())
        for folder in folders
        for path in sorted((root / folder).rglob("*.py"))
    }


def circles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(modules[v].imports):
            if w not in modules:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            strong(v)
    return sorted(out, key=lambda c: (-len(c), c))


def layer_violations(
    modules: dict[str, Module], lower: str, upper: str
) -> list[tuple[str, str]]:
    """Imports from package ``lower`` (e.g. fedpath.runtime) into ``upper``."""
    return sorted(
        (m.name, t)
        for m in modules.values()
        if m.name == lower or m.name.startswith(lower + ".")
        for t in m.imports | m.allowed
        if t == upper or t.startswith(upper + ".")
    )


def lines_per_package(modules: dict[str, Module], root: Path = ROOT) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for m in modules.values():
        parts = m.name.split(".")
        sub = m.path.parent != root / PACKAGE
        totals[".".join(parts[:2]) if sub else PACKAGE + " (top level)"] += m.lines
    return dict(sorted(totals.items()))


def has_logic(path: Path) -> bool:
    """A module defines a function or a class (not only imports and constants)."""
    tree = ast.parse(path.read_text("utf-8"))
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    return any(isinstance(n, kinds) for n in tree.body)


def mirror_path(name: str, root: Path = ROOT) -> Path:
    """Where a module's tests live: ``tests/<package>/test_<module>.py``."""
    parts = name.split(".")[1:]
    return root / "tests" / Path(*parts[:-1], f"test_{parts[-1]}.py")


def unmirrored(modules: dict[str, Module], root: Path = ROOT) -> list[str]:
    """Modules with logic and no ``tests/<package>/test_<module>.py``."""
    return sorted(
        m.name
        for m in modules.values()
        if m.path.name != "__init__.py"
        and m.path.name != "__main__.py"
        and has_logic(m.path)
        and not mirror_path(m.name, root).exists()
    )


def report(root: Path = ROOT) -> str:
    modules = load(root)
    big = sorted(
        ((m.lines, m.name) for m in modules.values() if m.lines > MAX_MODULE_LINES),
        reverse=True,
    )
    long = sorted(
        ((n, f"{m.name}.{q}") for m in modules.values() for q, n in m.long_functions),
        reverse=True,
    )
    rows = [f"modules: {len(modules)}, lines: {sum(m.lines for m in modules.values())}"]
    rows += [f"  {k}: {v}" for k, v in lines_per_package(modules, root).items()]
    rows.append(f"modules over {MAX_MODULE_LINES} lines: {len(big)}")
    rows += [f"  {n} {name}" for n, name in big]
    sized = sorted(
        ((n, path) for path, n in file_lines(root).items() if n > MAX_MODULE_LINES),
        reverse=True,
    )
    rows.append(f"test and benchmark files over {MAX_MODULE_LINES} lines: {len(sized)}")
    rows += [f"  {n} {path}" for n, path in sized]
    rows.append(f"functions over {MAX_FUNCTION_LINES} lines: {len(long)}")
    rows += [f"  {n} {name}" for n, name in long]
    found = circles(modules)
    rows.append(f"import circles: {len(found)} (sizes {[len(c) for c in found]})")
    rows += [f"  {' '.join(c)}" for c in found]
    bad = layer_violations(modules, "fedpath.runtime", "fedpath.deploy")
    rows.append(f"runtime -> deploy imports: {len(bad)}")
    rows += [f"  {a} -> {b}" for a, b in bad]
    missing = unmirrored(modules, root)
    logic = sum(
        1
        for m in modules.values()
        if m.path.name not in ("__init__.py", "__main__.py") and has_logic(m.path)
    )
    rows.append(
        f"modules with logic and no mirrored test file: {len(missing)} of {logic}"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))

"""The package's module graph: no import cycle, and torch imported only under metaltopk/torch/.

Imports are read with ast from the sources (module level and inside functions alike), so the
test needs neither the library nor torch.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "metaltopk"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set) -> set:
    """The package's modules that path imports: `from . import x`, `from .x import y`,
    `import metaltopk.x`, resolved against the set of existing modules."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def module_graph() -> dict:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(paths)) for name, path in paths.items()}


def test_no_import_cycle():
    graph = module_graph()
    # A package imports its own submodules through its __init__; an edge from a submodule back
    # to a package it lives in is resolved by Python before the submodule runs.
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for child in sorted(graph[node]):
            if node.startswith(child + "."):
                continue  # a module importing its parent package: not a cycle
            if state.get(child) == "open":
                cycle = stack[stack.index(child):] + [child]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if child not in state:
                visit(child, stack + [child])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_torch_is_imported_only_under_metaltopk_torch():
    for path in PACKAGE.rglob("*.py"):
        if "torch" in path.relative_to(PACKAGE).parts[:-1]:
            continue
        for node in ast.parse(path.read_text()).body:  # module level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            assert not any(n == "torch" or n.startswith("torch.") for n in names), path

"""The package's layers import only downwards, and no import cycle exists (imports inside
functions included), read from every module's syntax tree.

Layers, bottom to top (docs/development.md, "Architecture"):

    core  <-  attention, recurrent  <-  layers  <-  the public modules  <-  tools  <-  __main__

A module imports from its own layer or the layers below; attention and recurrent never import
each other; the scan driver names no family, a cell never imports the driver, and the dispatcher
imports no op (every op registers its routes with it).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.cpu  # about the package's imports

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "portable_rnn"
PUBLIC = ("__init__", "linen", "nnx", "keras", "equinox")
RANKS = {"core": 0, "attention": 1, "recurrent": 1, "layers": 2, "public": 3, "tools": 4,
         "main": 5}
FAMILIES = ("lstm", "gru", "simple_rnn")


def module_name(path: pathlib.Path) -> str:
    parts = ("portable_rnn",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    """The layer of a module of the package (None for the `_src` package itself)."""
    parts = module.split(".")[1:]
    if not parts or (len(parts) == 1 and parts[0] in PUBLIC):
        return "public"
    if parts == ["__main__"]:
        return "main"
    if parts[0] == "_src" and len(parts) > 1:
        return parts[1]
    return None


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str) -> dict[str, int]:
    """The package's modules `module` imports (anywhere in it), each with a line number."""
    path = MODULES[module]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        for target in targets:
            while target and target not in MODULES:  # `import a.b.c` names a.b.c's module
                target = target.rpartition(".")[0]
            if target and target != module:
                found.setdefault(target, node.lineno)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if layer(m) is None and m != "portable_rnn._src"]


def test_no_import_cycle():
    cycles = _cycles()
    edges = [f"{a} -> {b} (line {GRAPH[a][b]})" for c in cycles for a in c for b in GRAPH[a]
             if b in c]
    assert not cycles, "import cycles:\n" + "\n".join(edges)


def test_layers_import_downwards_only():
    bad = []
    for a, targets in GRAPH.items():
        for b, line in targets.items():
            la, lb = layer(a), layer(b)
            if la is None or lb is None:
                continue
            if RANKS[lb] > RANKS[la] or {la, lb} == {"attention", "recurrent"}:
                bad.append(f"{a} ({la}) imports {b} ({lb}) at line {line}")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def _strings(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


@pytest.mark.parametrize("module", ["portable_rnn._src.recurrent.driver",
                                    "portable_rnn._src.recurrent.layout"])
def test_the_driver_and_the_weight_layout_name_no_family(module):
    """Per-family facts live in each cell's `Family`: the driver and the layout read them."""
    assert not _strings(module) & set(FAMILIES)


def test_cells_do_not_import_the_driver_and_dispatch_imports_no_op():
    cells = [f"portable_rnn._src.recurrent.{family}.cell" for family in FAMILIES]
    assert all(cell in MODULES for cell in cells), "a family folder lacks its cell.py"
    for cell in cells:
        assert "portable_rnn._src.recurrent.driver" not in GRAPH[cell], cell
    core = [m for m in GRAPH if m.startswith("portable_rnn._src.core")]
    assert "portable_rnn._src.core.dispatch" in core
    for m in core:
        assert not [t for t in GRAPH[m] if layer(t) != "core"], m

"""prep's folders form strict layers: each imports only the layers below it, so no folder imports one that imports
it back (docs/architecture.md, "Package layout", states the same order).

The graph is built from the source with ``ast``: top-level imports and those inside functions (and under
``TYPE_CHECKING``), so a cycle cannot hide in a lazy import. ``import prep.reader`` loading no Ray is
tests/test_api.py's; that it loads no part of the materialize stage is here (read from the source too).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

from conftest import REPO

PREP = REPO / "prep"

# Bottom to top; a folder may import its own layer's folders only where ALSO_ALLOWED says so.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # PrepError
    ("plan",),  # the shuffle plan and the global order: pure
    ("contracts",),  # the on-disk records and their rules: no I/O
    ("io",),  # storage, Lance tables, the lease, reading and writing the contract files
    ("runtime",),  # Ray, ranks, configs, logs
    ("prepare", "materialize", "cache", "reader"),  # the stages
    ("tools", "integrations"),
    ("cli",),
)
ALSO_ALLOWED = {("reader", "cache")}  # the reader fetches through the cache (its verified local copies)
# The root package (prep/__init__.py, __main__.py) is loaded before any of its modules and imports its names
# lazily, so ``import prep`` (for __version__) is no edge, and the root may import any folder.
ROOT = "prep"
# Sizes past which a module or a class does more than one job (docs/architecture.md, "Package layout").
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 220


def _folder(path: Path) -> str:
    rel = path.relative_to(PREP).parts
    return rel[0] if len(rel) > 1 else (ROOT if rel[0] in ("__init__.py", "__main__.py") else Path(rel[0]).stem)


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return []


@functools.cache
def import_graph() -> dict[str, dict[str, set[str]]]:
    """folder -> folder it imports -> the modules that import it."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(PREP.rglob("*.py")):
        source = _folder(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node):
                parts = name.split(".")
                if parts[0] != "prep" or len(parts) < 2 or parts[1] == source:
                    continue
                if (PREP / parts[1]).is_dir() or (PREP / f"{parts[1]}.py").exists():  # not ``prep.__version__``
                    graph[source][parts[1]].add(str(path.relative_to(REPO)))
    return graph


def checked_graph() -> dict[str, dict[str, set[str]]]:
    """:func:`import_graph` without the root package's imports."""
    return {s: targets for s, targets in import_graph().items() if s != ROOT}


def _rank() -> dict[str, int]:
    return {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def test_every_folder_has_a_layer():
    folders = {p.name for p in PREP.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {"errors"}
    assert folders == set(_rank()), "a folder of prep/ is not in LAYERS (or LAYERS names one that is gone)"


def test_the_architecture_page_states_these_layers():
    """docs/architecture.md "Package layout" has the order as a table: one row a layer, bottom to top."""
    page = (REPO / "docs" / "architecture.md").read_text()
    section = page[page.index("## Package layout"):page.index("\n## ", page.index("## Package layout"))]
    rows = re.findall(r"^\| (\d+) \| (.*?) \|", section, re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    assert tuple(tuple(re.findall(r"`(\w+)(?:/|\.py)`", cell)) for _, cell in rows) == LAYERS


def test_each_folder_imports_only_the_layers_below_it():
    rank, wrong = _rank(), []
    for source, targets in checked_graph().items():
        for target, modules in targets.items():
            if rank[target] >= rank[source] and (source, target) not in ALSO_ALLOWED:
                wrong.append(f"{source} -> {target} ({', '.join(sorted(modules))})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


def test_no_folder_cycle():
    graph = {s: set(t) for s, t in checked_graph().items()}
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cycles.append(" -> ".join(path + [nxt]))
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its smallest folder
                walk(nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, [start])
    assert not cycles, "folder cycles:\n" + "\n".join(cycles)


def _loaded_at_import(path: Path) -> set[str]:
    """The prep modules ``path`` imports when it is imported: its top-level imports (in ``try`` blocks too, not
    under ``if TYPE_CHECKING``), each with its packages."""
    out: set[str] = set()
    body = list(ast.parse(path.read_text(), str(path)).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            body += node.orelse
        elif isinstance(node, (ast.If, ast.Try)):
            body += [*node.body, *node.orelse, *getattr(node, "handlers", ()), *getattr(node, "finalbody", ())]
        elif isinstance(node, ast.ExceptHandler):
            body += node.body
        for name in _imported(node) if isinstance(node, (ast.Import, ast.ImportFrom)) else ():
            parts = name.split(".")
            out |= {".".join(parts[:i]) for i in range(2, len(parts) + 1) if parts[0] == "prep"}
    return out


def _source_of(module: str) -> Path | None:
    path = REPO.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py") if path.with_suffix(".py").exists() else None


def test_importing_the_reader_loads_no_part_of_the_materialize_stage():
    """Whatever module of the reader a trainer imports (its Ray-free import is tests/test_api.py's)."""
    todo = [f"prep.reader.{p.stem}" for p in (PREP / "reader").glob("*.py")]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        source = _source_of(module)
        if module in seen or source is None:  # a name imported from a module, not a module
            continue
        seen.add(module)
        todo += _loaded_at_import(source)
    assert not sorted(m for m in seen if m.startswith("prep.materialize"))


def test_no_module_or_class_is_past_its_size():
    big = []
    for path in sorted(PREP.rglob("*.py")):
        text = path.read_text()
        if (lines := text.count("\n")) > MAX_MODULE_LINES:
            big.append(f"{path.relative_to(REPO)}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef) and (length := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                big.append(f"{path.relative_to(REPO)}: class {node.name}, {length} lines")
    assert not big, f"past {MAX_MODULE_LINES} lines a module or {MAX_CLASS_LINES} a class:\n" + "\n".join(big)

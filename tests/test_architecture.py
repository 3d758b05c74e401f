"""The layout stays what docs/architecture.md says: every module listed once, imports run down.

The import rule, read from the code itself (every ``import``, at module level or inside a
function, except those under ``if TYPE_CHECKING:``): a module imports from its own part and from
the floors below it, never from a part beside it or above it; inside a part the imports form no
circle. The product's parts (acquire, curate, episodes, text) reach each other only through a
part's face (its package, or a module it declares as one), and the two readers, episodes and
text, never import each other: both stand on the streaming floor. Error classes live in their part's ``errors.py`` (a private control-flow signal such as
``_Stopped`` may stay beside the loop it stops), and no module is over 600 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "feedline"

#: Each part's floor: a part may import only parts on lower floors (and itself).
FLOORS = {
    "errors": 0, "lazy": 0,  # the package root's small shared modules
    "feedline": 1, "validate": 1,
    "io": 2,
    "run": 3,
    "dedup": 4, "streaming": 4,  # the scheduler both readers run on
    "acquire": 5, "curate": 5, "episodes": 5,
    "text": 6,  # carries curate's documents into training on the streaming floor
    "cli": 7, "demo": 7,
    "__main__": 8,
}
MAX_LINES = 600

#: The product's parts, and what each shows the others (its package plus these modules).
PARTS = {"acquire", "curate", "episodes", "text"}
FACES = {"curate": {"feedline.curate.documents"}}
#: Readers that stand side by side on the streaming floor.
SIBLINGS = {"episodes", "text"}


def test_the_package_map_lists_every_module_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^\| `([\w/]+\.py)` \|", text, flags=re.M)
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))
    assert sorted(listed) == modules
    assert len(listed) == len(set(listed))


#: What a newcomer looks for first; docs/architecture.md's "Where is X" table must answer each.
WHERE_IS = ("sidecar", "derived index", "byte budget", "exact-coverage pool", "strategies", "windows",
            "resume", "elastic resume", "mixtures", "forecaster", "doctor")


def test_every_path_of_the_where_is_x_table_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = re.search(r"^## Where is X\n(.*?)^## ", text, flags=re.S | re.M)
    assert section, 'docs/architecture.md has no "## Where is X" section'
    rows = [row for row in re.findall(r"^\| (.+?) \| (.+) \|$", section.group(1), flags=re.M)
            if row != ("what", "where")]
    concepts = " ".join(what for what, _ in rows)
    assert [c for c in WHERE_IS if c not in concepts] == []
    wrong = []
    for what, where in rows:
        paths = re.findall(r"`([^`]+)`", where)
        if not paths:
            wrong.append(f"{what}: no path")
        for path in paths:  # a folder ends in "/", a module in ".py"
            target = PACKAGE / path
            if not (target.is_dir() if path.endswith("/") else target.is_file() and path.endswith(".py")):
                wrong.append(f"{what}: src/feedline/{path} does not exist")
    assert not wrong, "\n".join(wrong)


def test_the_readme_layout_names_every_package_once() -> None:
    """README.md's Layout block: one line per package (a folder with ``__init__.py``), its path
    from ``src/feedline/`` and what it is for."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## Layout\n+```\n(.*?)^```", text, flags=re.S | re.M)
    assert block, "README.md has no ## Layout code block"
    listed = re.findall(r"^  ([\w/]+)/ +\S", block.group(1), flags=re.M)
    packages = sorted(p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")
                      if p.parent != PACKAGE)
    missing, stale = sorted(set(packages) - set(listed)), sorted(set(listed) - set(packages))
    assert not missing and not stale, f"README layout: add {missing}, remove {stale}"
    assert len(listed) == len(set(listed))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "feedline"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> set[str]:
    """The feedline modules ``path`` imports (``from a.b import c`` counts as ``a.b``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "feedline")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "feedline":
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_part_has_a_floor() -> None:
    parts = {_part(m) for m in _graph()}
    assert parts <= set(FLOORS), f"give these parts a floor in FLOORS: {sorted(parts - set(FLOORS))}"


def test_imports_run_down_never_sideways() -> None:
    wrong = []
    for module, targets in _graph().items():
        here = _part(module)
        for target in targets:
            there = _part(target)
            if there != here and FLOORS.get(there, 99) >= FLOORS.get(here, 99):
                wrong.append(f"{module} imports {target} ({here} floor {FLOORS.get(here)}, "
                             f"{there} floor {FLOORS.get(there)})")
    assert not wrong, "imports that run sideways or up:\n" + "\n".join(sorted(wrong))


def test_no_part_imports_another_parts_internals() -> None:
    wrong = []
    for module, targets in _graph().items():
        here = _part(module)
        if here not in PARTS:
            continue
        for target in targets:
            there = _part(target)
            if there == here or there not in PARTS:
                continue
            if target != f"feedline.{there}" and target not in FACES.get(there, set()):
                wrong.append(f"{module} imports {target}: use feedline.{there} or its face "
                             f"{sorted(FACES.get(there, ()))}")
            if {here, there} == SIBLINGS:
                wrong.append(f"{module} imports {target}: the readers share the streaming floor only")
    assert not wrong, "imports into another part's internals:\n" + "\n".join(sorted(wrong))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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


def test_no_circle_of_imports_inside_a_part() -> None:
    graph = _graph()
    within = {m: {t for t in targets if _part(t) == _part(m)} for m, targets in graph.items()}
    assert _cycles(within) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_error_classes_live_in_their_parts_errors_module() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and (node.name.endswith(("Error", "Damaged", "Failure"))
                                                   or any(isinstance(b, ast.Name) and b.id.endswith("Error")
                                                          for b in node.bases)):
                wrong.append(f"{path.relative_to(PACKAGE)}: class {node.name}")
    assert not wrong, "error classes outside errors.py:\n" + "\n".join(wrong)


def test_no_module_is_over_600_lines() -> None:
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by idea: {long}"

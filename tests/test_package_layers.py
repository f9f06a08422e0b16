"""The package's plan: its root holds only the public face, its sub-packages import only
the layers below them, no modules import each other in a cycle, and nothing outside
``cloudlstm.cli`` imports the entry points. Read from the source (every import, those
inside functions too), without importing anything."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "cloudlstm"
# bottom to top: a package may import its own modules and those of the layers below it
LAYERS = (
    ("errors", "paths"),
    ("nn", "viz"),
    ("data",),
    ("models",),
    ("engine",),
    ("rundir",),
    ("report",),
    ("assembly",),
    ("forecast",),
    ("compare",),
    ("cli",),
)
PUBLIC_ROOT = {"__init__.py", "forecast.py", "errors.py", "paths.py"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The ``cloudlstm`` modules (or packages) a file imports, absolute or relative."""
    found = set()
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "cloudlstm"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            if base.split(".")[0] != "cloudlstm":
                continue
            # `from cloudlstm.nn import dconv` imports a module of that package; any other
            # name is the package's own
            names = [f"{base}.{a.name}" for a in node.names]
            found |= {n for n in names if _is_module(n)}
            found |= {base} if not all(map(_is_module, names)) else set()
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative).is_dir()


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {i for i in imports_of(path) if i in modules} for name, path in modules.items()}


def layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    for index, names in enumerate(LAYERS):
        if part in names:
            return index
    raise AssertionError(f"{module} is in no layer of this test: add its package to LAYERS")


def test_the_root_holds_only_the_public_face():
    assert {p.name for p in PACKAGE.glob("*.py")} <= PUBLIC_ROOT


def test_nothing_outside_cli_imports_it():
    offenders = {
        f"{m} imports {i}"
        for m, deps in graph().items()
        if not m.startswith("cloudlstm.cli")
        for i in deps
        if i.startswith("cloudlstm.cli")
    }
    assert not offenders


def test_each_package_imports_only_the_layers_below():
    upward = {
        f"{m} imports {i}"
        for m, deps in graph().items()
        if m != "cloudlstm"  # the package's face re-exports the Forecaster
        for i in deps
        if i != "cloudlstm" and layer(i) > layer(m)
    }
    assert not upward


def test_no_import_cycles():
    imports = graph()
    imports["cloudlstm"] -= {"cloudlstm.forecast"}  # loaded on use (PEP 562), not at import
    cycles, done = [], set()

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            cycles.append(" -> ".join([*stack[stack.index(module) :], module]))
            return
        if module in done:
            return
        for dep in sorted(imports[module]):
            visit(dep, [*stack, module])
        done.add(module)

    for module in sorted(imports):
        visit(module, [])
    assert not cycles


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import cloudlstm.nn.dconv as d\n", {"cloudlstm.nn.dconv"}),
        ("from cloudlstm.rundir import layout\n", {"cloudlstm.rundir.layout"}),
        ("from cloudlstm.nn import DConv, knn\n", {"cloudlstm.nn", "cloudlstm.nn.knn"}),
        ("def f():\n    from ..errors import UserError\n", {"cloudlstm.errors"}),
    ],
)
def test_every_import_is_seen(tmp_path, monkeypatch, source, expected):
    """The walk sees plain, from-package and relative imports, inside functions too."""
    path = PACKAGE / "engine" / "probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self: source)
    assert imports_of(path) == expected

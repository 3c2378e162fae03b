"""Where the scripts live and what they may import: ``studies/`` holds the measurements of
the method, ``benchmarks/`` only the timing scripts (``bench_*.py`` and the helpers they
import); both run as modules from the repository root (``python -m studies.<name>``), so
neither edits ``sys.path``, and both use the libraries' public names only. No file
outside ``adapters/cli/`` imports the command line (its tests do: they test it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("adapters", "guardrail", "skeleton_store")
SCRIPTS = ("studies", "benchmarks")
PENDING: set[str] = set()
"""Exempt from the private-import check only (none now). Only shrinks."""
DATA = {"results", "traces"}
"""What ``benchmarks/`` holds besides the scripts: the saved runs, the committed traces."""


def _files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every module ``path`` imports, relative imports resolved,
    ``from P import N`` as ``P.N`` as well (N may be a module), and the literal names
    given to ``importlib.import_module``."""
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # the package path is in, less one level per dot after the first
                package = path.relative_to(root).parent.parts
                parts = package[: len(package) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def path_edits(path: Path) -> list[int]:
    """Lines that change ``sys.path``: a method call on it (insert, append, ...), an
    assignment to it or to a slice of it, ``from sys import path``."""
    lines = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            hit = _is_sys_path(node.func.value)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hit = any(_is_sys_path(t.value if isinstance(t, ast.Subscript) else t)
                      for t in targets)  # fmt: skip
        elif isinstance(node, ast.ImportFrom):
            hit = node.module == "sys" and any(alias.name == "path" for alias in node.names)
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return sorted(lines)


def _private(module: str, roots: tuple[str, ...]) -> bool:
    parts = module.split(".")
    return parts[0] in roots and any(p.startswith("_") and p != "__init__" for p in parts[1:])


def test_the_scripts_do_not_edit_sys_path() -> None:
    found = [f"{_name(p)}:{line}" for p in _files(*SCRIPTS) for line in path_edits(p)]
    assert not found, f"run it with python -m from the repository root instead: {found}"


def test_the_scripts_import_no_private_module() -> None:
    """No underscored module of the libraries, nor of the scripts' own folders (by its
    dotted name or, as a script's neighbour, by its bare one)."""
    bare = {p.stem for p in _files(*SCRIPTS) if p.stem.startswith("_") and p.stem != "__init__"}
    found = []
    for path in _files(*SCRIPTS):
        if _name(path) in PENDING:
            continue
        found += [f"{_name(path)}:{line} {module}" for line, module in imported(path)
                  if _private(module, (*LIBRARIES, *SCRIPTS))
                  or module.split(".")[0] in bare]  # fmt: skip
    assert not found, f"import the public name instead: {found}"


def test_benchmarks_holds_only_timing_scripts() -> None:
    """``bench_*.py``, and the helpers that one of them imports (directly or through
    another helper); no studies, no sub-packages of scripts."""
    folder = ROOT / "benchmarks"
    assert {p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"} <= DATA
    assert not [p for d in DATA if (folder / d).is_dir() for p in (folder / d).rglob("*.py")]
    scripts = {p.stem: p for p in folder.glob("*.py") if p.name != "__init__.py"}
    needed = {name for name in scripts if name.startswith("bench_")}
    todo = list(needed)
    while todo:
        for _, module in imported(scripts[todo.pop()]):
            stem = module.removeprefix("benchmarks.").split(".")[0]
            if stem in scripts and stem not in needed:
                needed.add(stem)
                todo.append(stem)
    assert set(scripts) == needed, f"not timing: {sorted(set(scripts) - needed)}"


def test_only_the_command_line_imports_the_command_line() -> None:
    """``adapters.cli`` is the application on top: the libraries, the studies, the
    benchmarks and the examples call the public API, never the command's modules (a script
    that needs a command runs it, as ``liftguard ...``)."""
    found = []
    for path in _files(*LIBRARIES, *SCRIPTS, "examples"):
        if _name(path).startswith("adapters/cli/"):
            continue
        found += [f"{_name(path)}:{line} {module}" for line, module in imported(path)
                  if module == "adapters.cli" or module.startswith("adapters.cli.")]  # fmt: skip
    assert not found, found


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Each check flags the forms it is for (so that a pass means something)."""
    script = tmp_path / "studies" / "x.py"
    script.parent.mkdir()
    script.write_text(
        "import sys\nfrom sys import path\nsys.path.insert(0, '.')\nsys.path[:0] = ['.']\n"
        "sys.path += ['.']\nfrom adapters.cli._fit_args import X\nfrom adapters import cli\n"
        "import guardrail._fit._state\nfrom guardrail import _labels\n"
        "from studies import _tables\nimportlib.import_module('adapters._risk._fleet')\n",
        encoding="utf-8",
    )
    assert path_edits(script) == [2, 3, 4, 5]
    modules = [m for _, m in imported(script, tmp_path)]
    private = [m for m in modules if _private(m, (*LIBRARIES, "studies"))]
    assert sorted(private) == [
        "adapters._risk._fleet", "adapters.cli._fit_args", "adapters.cli._fit_args.X",
        "guardrail._fit._state", "guardrail._labels", "studies._tables",
    ]  # fmt: skip
    assert "adapters.cli" in modules
    inner = tmp_path / "adapters" / "_guard" / "y.py"
    inner.parent.mkdir(parents=True)
    inner.write_text("from ..cli import main\nfrom . import _stream\n", encoding="utf-8")
    assert sorted(m for _, m in imported(inner, tmp_path)) == [
        "adapters._guard", "adapters._guard._stream", "adapters.cli", "adapters.cli.main",
    ]  # fmt: skip

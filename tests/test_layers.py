"""The layers: guardrail -> (nothing of ours), its fitting package (``guardrail/_fit/``)
above the rest of the core; adapters and skeleton_store on top of it; the command line
(adapters.cli) above all three: their public API by its public path, and the internals a
command shares with the library from the private modules they live in. Nothing in the
repository but the command line and the tests imports it."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_import_pulls_in_no_heavy_or_vendor_module() -> None:
    code = (
        "import sys, guardrail\n"
        "bad = [m for m in ('torch', 'openai', 'anthropic', 'langchain_core', 'langchain',"
        " 'transformers', 'llama_cpp', 's3fs', 'fsspec', 'adapters', 'skeleton_store', 'scipy')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_served_certificate_and_its_risk_monitor_need_no_scipy_stats() -> None:
    # what a server builds at start (the certificate, its monitor, its risk monitor) reads
    # no statistical table from scipy.stats: that import alone costs about a second
    code = (
        "import sys\n"
        "from guardrail import Certificate\n"
        "c = Certificate.load('guardrail/data/qwen_fitted_certificate.json')\n"
        "c.risk_monitor(0.05)\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


def test_the_command_line_imports_its_commands_lazily() -> None:
    # building the parser imports every command's module: none may pull in a vendor SDK,
    # the server stack or the store's optional backends
    code = (
        "import sys, adapters.cli._parser\n"
        "adapters.cli._parser.build_parser()\n"
        "bad = [m for m in ('torch', 'openai', 'anthropic', 'langchain_core', 'langchain',"
        " 'llama_cpp', 's3fs', 'fsspec', 'scipy', 'starlette', 'uvicorn', 'httpx', 'pydantic',"
        " 'prometheus_client', 'matplotlib') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _imported_modules(package: str) -> Iterator[tuple[str, int, str, tuple[str, ...]]]:
    """``(file, line, module, names)`` of every import in ``package``'s source, lazy imports
    inside functions included; relative imports resolved to absolute module names."""
    root = ROOT / package
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        here = parts[:-1]  # the package the file is in
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield str(path), node.lineno, alias.name, ()
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else ()
                module = ".".join([*base, *([node.module] if node.module else [])])
                yield str(path), node.lineno, module, tuple(a.name for a in node.names)


def test_the_core_imports_nothing_built_on_it() -> None:
    # guardrail -> (nothing of ours): adapters and skeleton_store are built on the core
    bad = [
        f"{path}:{line}: {module}"
        for path, line, module, _ in _imported_modules("guardrail")
        if module.split(".")[0] in ("adapters", "skeleton_store")
    ]
    assert bad == []


FIT_PARTS_THE_CORE_READS = {"guardrail._fit._statistic", "guardrail._fit._state",
                            "guardrail._fit._replay"}  # fmt: skip
"""What ``guardrail``'s modules outside the fitting package (``guardrail/_fit/``) and its
facade :mod:`guardrail.fitting` may import from it: the statistic a certificate stores,
the state its rule streams, and the replay the evaluation reads. The recipe, its options,
choices and selection sit above the core."""


def test_the_core_reads_of_the_fitting_package_only_what_a_certificate_holds() -> None:
    bad = []
    for path, line, module, _ in _imported_modules("guardrail"):
        inside = Path(path).parent.name == "_fit" or Path(path).name == "fitting.py"
        if module.startswith("guardrail._fit") and not inside:
            bad += [] if module in FIT_PARTS_THE_CORE_READS else [f"{path}:{line}: {module}"]
    assert bad == []
    init = (ROOT / "guardrail" / "_fit" / "__init__.py").read_text(encoding="utf-8")
    assert not [n for n in ast.parse(init).body if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_command_line_imports_public_names_by_their_public_path() -> None:
    # the CLI sits above the three packages: a name the public API exports it imports from
    # there (not from the private module behind it); the internals a command shares with
    # the library, which users do not call, it imports from the private module they live in
    public_modules = (
        "guardrail", "guardrail.evaluate", "guardrail.fitting", "guardrail.paper",
        "guardrail.stats", "guardrail.topk", "guardrail.traces", "guardrail.vsd",
        "adapters", "adapters.local", "adapters.proxy", "adapters.tracefiles", "skeleton_store",
    )  # fmt: skip
    exported: dict[int, str] = {}
    for name in public_modules:
        module = importlib.import_module(name)
        for attr in module.__all__:
            exported.setdefault(id(getattr(module, attr)), f"{name}.{attr}")
    bad = []
    for path, line, module, names in _imported_modules("adapters/cli"):
        ours = module.split(".")[0] in ("guardrail", "adapters", "skeleton_store")
        if not ours or module.startswith("adapters.cli"):
            continue
        if module not in public_modules and not any(p.startswith("_") for p in module.split(".")):
            bad.append(f"{path}:{line}: {module} (neither public nor private)")
            continue
        imported = importlib.import_module(module)
        for name in names:
            value = getattr(imported, name)
            if module in public_modules:
                if name not in imported.__all__:
                    bad.append(f"{path}:{line}: {module}.{name} is not public")
            elif id(value) in exported and not isinstance(value, (int, float, str, bool)):
                bad.append(f"{path}:{line}: {module}.{name}: import {exported[id(value)]}")
    assert bad == []


ROLES: dict[str, set[str]] = {
    "_guard": {"_errors", "_local"},  # _local: lazily, a GGUF's vocabulary for token ids
    "_local": {"_guard"},
    "_labels": set(),
    "_providers": {"_errors", "_guard", "_local"},  # _local: the Anthropic scorer's model
    "_serving": {"_guard", "_local"},  # _local: a prompt-free skeleton's model, lazily
    "_risk": {"_guard", "_serving"},  # the label loop, on the answer path's wire and sources
    "_tracefiles": set(),  # trace files, JSONL or Parquet, local or fsspec: on the core only
    "_proxy": {"_errors", "_guard", "_providers", "_risk", "_serving", "_tracefiles"},
    # _providers: logprob refusals; _tracefiles: recordings in Parquet
    "_litellm": {"_guard", "_risk", "_serving"},
}
"""Which role sub-package of ``adapters`` may import which (besides itself): the guard step
at the bottom, providers and local models beside it, the serving core above them with the
label loop on it, and the two front ends (the proxy's HTTP, LiteLLM's hooks) on both, never
on each other."""


def test_the_role_sub_packages_import_only_what_their_role_allows() -> None:
    on_disk = {p.name for p in (ROOT / "adapters").iterdir() if (p / "__init__.py").exists()}
    assert on_disk - {"cli"} == set(ROLES), "a role sub-package without a rule, or the reverse"
    bad = []
    for role, allowed in ROLES.items():
        for path, line, module, _ in _imported_modules(f"adapters/{role}"):
            parts = module.split(".")
            if parts[0] != "adapters" or len(parts) < 2 or parts[1] == role:
                continue
            if parts[1] not in allowed:
                bad.append(f"{path}:{line}: {module}")
    assert bad == []


SKIPPED_DIRS = {".git", ".venv", "venv", "site", "build", "dist", "node_modules", "__pycache__"}
"""Folders that hold no file of the project's own (environments, caches, built pages)."""


def _project_files(suffix: str) -> Iterator[Path]:
    """Every ``suffix`` file of the repository (``.ci`` included, the environments and
    caches not)."""
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                         and (d == ".ci" or not d.startswith(".")))  # fmt: skip
        yield from (Path(folder) / f for f in sorted(files) if f.endswith(suffix))


def _cli_imports(source: str, package: tuple[str, ...]) -> list[int]:
    """Lines of ``source`` (in package ``package``) that import ``adapters.cli`` or a module
    of it: ``import``, ``from``, relative or not, and a literal ``import_module`` name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            modules = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Call) and _imports_by_name(node):
            modules = [str(node.args[0].value)]  # type: ignore[attr-defined]
        if any(m == "adapters.cli" or m.startswith("adapters.cli.") for m in modules):
            lines.append(node.lineno)
    return sorted(lines)


def _imports_by_name(call: ast.Call) -> bool:
    """``import_module("...")`` or ``__import__("...")`` with a literal name."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    literal = bool(call.args) and isinstance(call.args[0], ast.Constant)
    return name in ("import_module", "__import__") and literal


PYTHON_BLOCK = re.compile(r"^```(?:python|py)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_nothing_outside_the_command_line_and_its_tests_imports_it() -> None:
    # adapters.cli is the application on top: the libraries, the studies, the benchmarks,
    # the examples, the CI scripts and the docs' Python use the public API, and a script
    # that needs a command runs it (liftguard ..., python -m adapters.cli ...); only the
    # tests import it, to test it (its entry point main, and the modules a command is made of)
    found = []
    for path in _project_files(".py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "tests" or rel.parts[:2] == ("adapters", "cli"):
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{rel}:{line}" for line in _cli_imports(text, rel.parent.parts)]
    for page in _project_files(".md"):
        rel = page.relative_to(ROOT)
        for block in PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
            try:
                found += [f"{rel}: {line}" for line in _cli_imports(block, ())]
            except SyntaxError:  # a block with an elided part: no statement of it runs
                continue
    assert found == []
    # the check sees each form
    probe = (
        "import adapters.cli\nfrom adapters.cli._fit import x\nfrom adapters import cli\n"
        "from .cli import main\nimport_module('adapters.cli._demo')\nfrom adapters import proxy"
    )
    assert _cli_imports(probe, ("adapters",)) == [1, 2, 3, 4, 5]

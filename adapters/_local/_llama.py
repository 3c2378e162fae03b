"""Open a llama.cpp model, without the weight repacking that crashes on AMX CPUs.

On CPUs with Intel AMX (Sapphire Rapids and later), llama.cpp built for the machine
repacks the weights into AMX buffers, and the first evaluation can then die with a
segmentation fault in ``ggml_backend_amx_mul_mat``, depending on the machine
(ggml-org/llama.cpp#20824, still open). :func:`open_llama` turns llama.cpp's extra
buffer types off on such CPUs (``use_extra_bufts``: the model's weights stay in
ordinary CPU buffers, a little slower, never a crash). ``LIFTGUARD_LLAMA_EXTRA_BUFFERS=1``
keeps them on.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["EXTRA_BUFFERS_ENV", "cpu_has_amx", "open_llama"]

EXTRA_BUFFERS_ENV = "LIFTGUARD_LLAMA_EXTRA_BUFFERS"
"""Set to ``1`` to keep llama.cpp's extra buffer types on an AMX CPU."""

_PATCH_LOCK = threading.Lock()


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU flags in ``cpuinfo`` (Linux) include AMX (False where unreadable).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
    ...     _ = f.write("flags\\t\\t: fpu avx2 amx_bf16 amx_tile amx_int8\\n")
    ...     f.flush()
    ...     cpu_has_amx(f.name)
    True
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags") and "amx_tile" in line.split(":", 1)[-1].split():
                    return True
    except OSError:
        return False
    return False


def open_llama(llama_cpp: Any, *, cpuinfo: str = "/proc/cpuinfo", **kwargs: Any) -> Any:
    """``llama_cpp.Llama(**kwargs)``, with llama.cpp's extra buffer types off on an AMX CPU
    (see the module docstring). llama-cpp-python takes no argument for them, so its
    default model parameters are replaced for the duration of this one call (under a
    lock)."""
    low = llama_cpp.llama_cpp  # the ctypes bindings llama_cpp.Llama takes its defaults from
    keep = os.environ.get(EXTRA_BUFFERS_ENV, "") == "1"
    fields = {name for name, _ in getattr(low.llama_model_params, "_fields_", ())}
    if keep or "use_extra_bufts" not in fields or not cpu_has_amx(cpuinfo):
        return llama_cpp.Llama(**kwargs)
    with _PATCH_LOCK:
        default = low.llama_model_default_params

        def without_extra_buffers() -> Any:
            params = default()
            params.use_extra_bufts = False
            return params

        low.llama_model_default_params = without_extra_buffers
        try:
            return llama_cpp.Llama(**kwargs)
        finally:
            low.llama_model_default_params = default

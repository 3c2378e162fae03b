"""The local model turns llama.cpp's extra (AMX) weight buffers off on an AMX CPU, where they
can crash the first evaluation (ggml-org/llama.cpp#20824), and only there."""

from __future__ import annotations

from pathlib import Path

import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

from adapters._local._llama import EXTRA_BUFFERS_ENV, cpu_has_amx, open_llama  # noqa: E402
from adapters._local._packaged import bundled_smollm2_path  # noqa: E402

AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8\n"
NO_AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\nbugs\t\t: amx_tile\n"


@pytest.fixture
def cpuinfo(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name, text in (("amx", AMX), ("plain", NO_AMX)):
        path = tmp_path / name
        path.write_text(text)
        paths[name] = str(path)
    paths["missing"] = str(tmp_path / "absent")
    return paths


def test_amx_is_read_from_the_flags_line_only(cpuinfo: dict[str, str]) -> None:
    assert cpu_has_amx(cpuinfo["amx"])
    assert not cpu_has_amx(cpuinfo["plain"])  # "amx_tile" outside the flags line
    assert not cpu_has_amx(cpuinfo["missing"])


def _open(cpuinfo: str) -> object:
    return open_llama(
        llama_cpp, cpuinfo=cpuinfo, model_path=str(bundled_smollm2_path()), n_ctx=64,
        n_threads=1, verbose=False, vocab_only=True,
    )  # fmt: skip


def test_extra_buffers_are_off_on_amx_only_and_the_defaults_are_restored(
    cpuinfo: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(EXTRA_BUFFERS_ENV, raising=False)
    default = llama_cpp.llama_cpp.llama_model_default_params
    assert _open(cpuinfo["amx"]).model_params.use_extra_bufts is False  # type: ignore[attr-defined]
    assert llama_cpp.llama_cpp.llama_model_default_params is default
    assert _open(cpuinfo["plain"]).model_params.use_extra_bufts is True  # type: ignore[attr-defined]
    monkeypatch.setenv(EXTRA_BUFFERS_ENV, "1")
    assert _open(cpuinfo["amx"]).model_params.use_extra_bufts is True  # type: ignore[attr-defined]

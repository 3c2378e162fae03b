"""``liftguard skeleton put``: a certificate file into a skeleton store, as a new version.

The store options come before the subcommand, as for every ``liftguard skeleton``
command: ``liftguard skeleton --store URL [--storage-option K=V] put NAME --certificate
CERT.json [--promote ALIAS] [--parent REF]``. (Putting into S3 and serving from it:
``tests/proxy/test_production_loop.py``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.cli import main
from guardrail import (
    Certificate,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
)
from skeleton_store import SkeletonStore
from skeleton_store._handle import open_certificate

PROG = "liftguard skeleton put: error: "


def _certificate(tau: float) -> Certificate:
    return Certificate(
        StreamPolicy(aggregate="min"),
        tau,
        SkeletonSpec("uniform", {"vocab_size": 50_000}),
        ModelIdentity("test-model", vocab_size=50_000),
        context=GenerationContext(max_tokens=32),
    )


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path]:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    _certificate(4.0).save(one)
    _certificate(6.5).save(two)
    return one, two


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse usage errors
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


def test_put_prints_the_new_version_and_promote_moves_the_alias(
    certs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = certs
    store = str(tmp_path / "store")
    base = ["skeleton", "--store", store, "put", "chat"]
    status, out, err = _run([*base, "--certificate", str(one), "--promote", "production"], capsys)
    assert (status, out) == (0, "1\n")
    assert err == (
        f"liftguard skeleton put: wrote chat v1 to {store} from {one} (tau 4); production -> v1\n"
    )
    status, out, _ = _run([*base, "--certificate", str(two), "--parent", "v1"], capsys)
    assert (status, out) == (0, "2\n")
    reader = SkeletonStore(store)
    assert (reader.resolve("chat", "production"), reader.resolve("chat", "latest")) == (1, 2)
    v2 = reader.get("chat", 2)
    assert (v2.kind, v2.parent, v2.model_id, v2.vocab_size) == (
        "certificate",
        1,
        "test-model",
        50_000,
    )
    assert v2.manifest["extra"] == {"certificate_file": "two.json"}
    assert reader.certificate("chat", "production").to_dict() == _certificate(4.0).to_dict()
    handle = open_certificate(store, "chat", "production")
    assert handle.certificate.tau == 4.0
    # the existing promote command moves the alias to the put version; a handle picks it up
    status, _, _ = _run(["skeleton", "--store", store, "promote", "chat", "2"], capsys)
    assert status == 0 and handle.refresh()
    assert handle.certificate.to_dict() == _certificate(6.5).to_dict()


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--certificate", "{missing}"], 1, "{missing}: No such file or directory"),
        (["--certificate", "{bad_json}"], 1, "{bad_json}: not valid JSON"),
        (
            ["--certificate", "{not_cert}"],
            1,
            "{not_cert}: format: expected 'liftguard.certificate/1'",
        ),
        (["--certificate", "{tmp}"], 1, "{tmp}: Is a directory"),
        (
            ["--certificate", "{one}", "--promote", "latest"],
            1,
            "'latest' is maintained by the store",
        ),
        (
            ["--certificate", "{one}", "--promote", "v2"],
            1,
            "alias 'v2' looks like a version number",
        ),
        (["--certificate", "{one}", "--parent", "v9"], 1, "does not exist"),
        ([], 2, "the following arguments are required: --certificate"),
    ],
)
def test_bad_input_is_one_error_line_and_writes_nothing(
    args: list[str],
    status: int,
    message: str,
    certs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = {"missing": tmp_path / "nope.json", "bad_json": tmp_path / "bad.json",
             "not_cert": tmp_path / "other.json", "tmp": tmp_path, "one": certs[0]}  # fmt: skip
    names["bad_json"].write_text("{not json", encoding="utf-8")
    names["not_cert"].write_text('{"tau": 1}', encoding="utf-8")
    store = tmp_path / "store"
    argv = ["skeleton", "--store", str(store), "put", "chat", *(a.format(**names) for a in args)]
    got, out, err = _run(argv, capsys)
    assert (got, out) == (status, "")
    assert err.startswith(PROG) and message.format(**names) in err
    assert len(err.splitlines()) == 1
    assert not (store / "chat" / "versions").exists()  # nothing was published


def test_an_unknown_store_is_one_error_line(
    certs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["skeleton", "--store", "nosuch://bucket/x", "put", "chat", "--certificate"]
    status, out, err = _run([*argv, str(certs[0])], capsys)
    assert (status, out) == (1, "")
    assert (
        err
        == f"{PROG}cannot open store nosuch://bucket/x: ValueError: Protocol not known: nosuch\n"
    )
    status, _, err = _run(["skeleton", "--store", "s3://b/x", "--storage-option", "oops",
                           "put", "chat", "--certificate", str(certs[0])], capsys)  # fmt: skip
    assert status == 2 and len(err.splitlines()) == 1 and "expected KEY=VALUE" in err

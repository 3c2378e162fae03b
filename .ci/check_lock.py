"""Check that requirements.lock still matches pyproject.toml (or stamp it after a refresh).

    python .ci/check_lock.py            exit 1, naming what disagrees, when the lock is stale
    python .ci/check_lock.py --stamp    record the locked requirements' digest (run by .ci/lock)

Two checks: the lock records a sha256 of every requirement it was compiled from (so any edit
to the dependencies or extras in pyproject.toml, or to .ci/build-requirements.in, needs a
refresh), and every such requirement is met by a pinned version in the lock.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCKED_EXTRAS = ("test", "local", "vsd", "docs", "lock")
"""The extras `.ci/lock` compiles; keep in step with its --extra."""
STAMP = "# locked-requirements-sha256: "
REFRESH = "run `bash .ci/lock` in the project's virtual environment and commit requirements.lock"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def locked_requirements(root: Path) -> list[str]:
    """Every requirement the lock is compiled from, in a fixed order."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = list(project["build-system"]["requires"]) + list(project["project"]["dependencies"])
    extras = project["project"].get("optional-dependencies", {})
    for extra in LOCKED_EXTRAS:
        if extra not in extras:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}; {REFRESH}")
        reqs += extras[extra]
    build_in = root / ".ci" / "build-requirements.in"
    for line in build_in.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.append(line)
    return reqs


def digest(reqs: list[str]) -> str:
    return hashlib.sha256(json.dumps(reqs).encode()).hexdigest()


def pins(lock_text: str) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in lock_text.splitlines():
        match = _PIN.match(line)
        if match:
            out[canonicalize_name(match.group(1))] = Version(match.group(2))
    return out


def problems(root: Path) -> list[str]:
    """What disagrees between pyproject.toml and requirements.lock (empty when they agree)."""
    lock_path = root / "requirements.lock"
    if not lock_path.is_file():
        return [f"requirements.lock is missing; {REFRESH}"]
    text = lock_path.read_text(encoding="utf-8")
    reqs = locked_requirements(root)
    found: list[str] = []
    stamps = [line[len(STAMP) :].strip() for line in text.splitlines() if line.startswith(STAMP)]
    if stamps != [digest(reqs)]:
        found.append("the requirements in pyproject.toml changed since the lock was made")
    pinned = pins(text)
    for spec in reqs:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name == "liftguard":
            continue
        if name not in pinned:
            found.append(f"{spec!r} has no pin in requirements.lock")
        elif not req.specifier.contains(pinned[name], prereleases=True):
            found.append(f"{spec!r} is not met by the locked {req.name}=={pinned[name]}")
    return found


def stamp(root: Path) -> None:
    lock_path = root / "requirements.lock"
    lines = [
        line
        for line in lock_path.read_text(encoding="utf-8").splitlines()
        if not line.startswith(STAMP)
    ]
    at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    lines.insert(at, STAMP + digest(locked_requirements(root)))
    lock_path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stamp", action="store_true", help="record the digest after a refresh")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    if args.stamp:
        stamp(args.root)
    found = problems(args.root)
    for problem in found:
        print(f"requirements.lock: {problem}", file=sys.stderr)
    if found:
        print(f"requirements.lock is stale: {REFRESH}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

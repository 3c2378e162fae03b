"""Backend failures as one-line :class:`StoreUnavailable` errors, cause chained."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._errors import StoreError, StoreUnavailable

__all__ = ["first_line", "unavailable"]


def first_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (just the type name if there is none)."""
    lines = str(exc).strip().splitlines()
    text = lines[0].strip() if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def unavailable(
    url: str,
    action: str,
    *,
    catch: tuple[type[Exception], ...] = (OSError,),
    keep: tuple[type[Exception], ...] = (),
) -> Iterator[None]:
    """Re-raise a backend failure inside the block as one-line :class:`StoreUnavailable`.

    ``keep``: exception types that are answers, not failures (``FileNotFoundError``
    on a read), passed through unchanged, like every :class:`StoreError`.
    """
    try:
        yield
    except StoreError:
        raise
    except keep:
        raise
    except catch as exc:
        raise StoreUnavailable(f"store {url}: cannot {action}: {first_line(exc)}", url=url) from exc

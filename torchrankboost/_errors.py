"""How the library quotes an exception in a one-line message."""

from __future__ import annotations

from typing import Optional

__all__ = ["first_line"]


def first_line(exc: BaseException, *, default: Optional[str] = None) -> str:
    """The first line of ``exc``'s message (stripped); when the message is empty,
    ``default``, or the exception's type name when no ``default`` is given."""
    text = str(exc).strip()
    if text:
        return text.splitlines()[0]
    return type(exc).__name__ if default is None else default

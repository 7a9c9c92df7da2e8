r"""A strict reader of Universal Binary JSON (UBJSON, draft 12), the binary form of XGBoost's
model (``save_model("m.ubj")``, ``save_raw("ubj")``), without recursion.

Markers: ``{`` ``}`` objects (keys: an integer length then UTF-8 bytes), ``[`` ``]``
arrays, either one optionally counted (``#`` then an integer) and arrays optionally typed
(``$`` then a numeric marker, then ``#``; read at once as a big-endian ``numpy`` array);
``i`` ``U`` ``I`` ``l`` ``L`` integers (int8, uint8, int16, int32, int64), ``d`` ``D``
float32 / float64, ``T`` ``F`` booleans, ``Z`` null, ``N`` no-op, ``S`` strings, ``C``
characters and ``H`` high-precision numbers (kept as text, as
:class:`~.import_trees.JsonFloat`). Every count is checked against the bytes left before
anything is allocated, nesting is bounded by ``max_depth``, a key appears once per object,
and nothing may follow the document: any other input is one ``ValueError`` naming the byte.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from .import_trees import JsonFloat

__all__ = ["read_ubjson"]

_INTS = {ord("i"): ">i1", ord("U"): ">u1", ord("I"): ">i2", ord("l"): ">i4", ord("L"): ">i8"}
_FLOATS = {ord("d"): ">f4", ord("D"): ">f8"}
_NUMERIC = {**_INTS, **_FLOATS}
_END = {True: ord("}"), False: ord("]")}


class _Frame:
    __slots__ = ("value", "is_object", "left", "key")

    def __init__(self, is_object: bool, left: Optional[int]):
        self.value = {} if is_object else []
        self.is_object = is_object
        self.left = left
        self.key: Optional[str] = None


class _Reader:
    def __init__(self, data: bytes, who: str):
        self.data, self.pos, self.who = memoryview(data), 0, who

    def fail(self, why: str) -> ValueError:
        return ValueError(f"{self.who}: invalid UBJSON at byte {self.pos}: {why}")

    def take(self, k: int) -> memoryview:
        if k < 0 or self.pos + k > len(self.data):
            raise self.fail(f"{k} bytes wanted, {len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + k]
        self.pos += k
        return out

    def marker(self) -> int:
        while True:
            m = self.take(1)[0]
            if m != ord("N"):
                return m

    def peek(self) -> int:
        while self.pos < len(self.data) and self.data[self.pos] == ord("N"):
            self.pos += 1
        if self.pos >= len(self.data):
            raise self.fail("the document ends early")
        return self.data[self.pos]

    def integer(self, m: int) -> int:
        if m not in _INTS:
            raise self.fail(f"marker {chr(m)!r} where an integer belongs")
        dt = np.dtype(_INTS[m])
        return int(np.frombuffer(self.take(dt.itemsize), dtype=dt)[0])

    def count(self, per: int = 1) -> int:
        n = self.integer(self.marker())
        if n < 0 or n * per > len(self.data) - self.pos:
            raise self.fail(f"a count of {n} for {len(self.data) - self.pos} bytes left")
        return n

    def text(self) -> str:
        raw = self.take(self.count())
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string that is not UTF-8") from None

    def scalar(self, m: int):
        if m in _NUMERIC:
            dt = np.dtype(_NUMERIC[m])
            v = np.frombuffer(self.take(dt.itemsize), dtype=dt)[0]
            return int(v) if m in _INTS else float(v)
        if m in (ord("T"), ord("F")):
            return m == ord("T")
        if m == ord("Z"):
            return None
        if m == ord("S"):
            return self.text()
        if m == ord("C"):
            return chr(self.take(1)[0])
        if m == ord("H"):
            return JsonFloat(self.text())
        raise self.fail(f"unknown marker {chr(m)!r}" if 32 <= m < 127 else f"unknown marker "
                        f"byte {m}")

    def container(self, is_object: bool):
        """A typed array (returned whole) or a new frame (``$`` / ``#`` read)."""
        typ = None
        if self.peek() == ord("$"):
            self.pos += 1
            typ = self.take(1)[0]
            if typ not in _NUMERIC or is_object:
                raise self.fail("only numeric typed arrays are supported")
            if self.peek() != ord("#"):
                raise self.fail("a typed container without a count")
        if self.peek() != ord("#"):
            return _Frame(is_object, None)
        self.pos += 1
        if typ is None:
            return _Frame(is_object, self.count())
        dt = np.dtype(_NUMERIC[typ])
        n = self.count(dt.itemsize)
        return np.frombuffer(self.take(n * dt.itemsize), dtype=dt).astype(dt.newbyteorder("="))


def _put(stack: List[_Frame], value) -> None:
    f = stack[-1]
    if f.is_object:
        f.value[f.key] = value
        f.key = None
    else:
        f.value.append(value)
    if f.left is not None:
        f.left -= 1


def read_ubjson(data: bytes, who: str, *, max_depth: int = 64):
    """The document of the UBJSON bytes ``data``: dicts, lists, numbers, strings, and
    ``numpy`` arrays for typed arrays (module docstring)."""
    r = _Reader(data, who)
    stack: List[_Frame] = []
    root, done = None, False
    while not done:
        value, have = None, False
        if stack:
            f = stack[-1]
            if f.left == 0 or (f.left is None and r.peek() == _END[f.is_object]):
                if f.left is None:
                    r.pos += 1
                value, have = stack.pop().value, True
            elif f.is_object and f.key is None:
                key = r.text()
                if key in f.value:
                    raise r.fail(f"the key {key[:40]!r} appears twice")
                f.key = key
                continue
        if not have:
            m = r.marker()
            if m in (ord("["), ord("{")):
                got = r.container(m == ord("{"))
                if isinstance(got, _Frame):
                    if len(stack) >= max_depth:
                        raise r.fail(f"nested deeper than {max_depth}")
                    stack.append(got)
                    continue
                value = got
            else:
                value = r.scalar(m)
        if stack:
            _put(stack, value)
        else:
            root, done = value, True
    while r.pos < len(r.data) and r.data[r.pos] == ord("N"):
        r.pos += 1
    if r.pos != len(r.data):
        raise r.fail("bytes after the end of the document")
    return root

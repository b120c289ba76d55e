"""A dict that sees every write, for the indexes and counts kept beside large tables.

At 100k-1M partitions, a gauge or digest recomputed by scanning its table after every request
costs a full scan per request; kept as entries are written, it costs nothing to read. Making
the table itself a dict subclass means no writer can forget to keep them, and every read
(`get`, `[]`, `in`, iteration: the hot loops) stays dict's own C code; only writes pay a
Python call. Used by the broker's roles and metadata cache and the controller's partition
state machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")
MISSING: Any = object()


def update_pairs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterable[tuple[Any, Any]]:
    """What dict.update would iterate over."""
    if args:
        (other,) = args
        if isinstance(other, Mapping):
            yield from other.items()
        elif hasattr(other, "keys"):
            yield from ((k, other[k]) for k in other)
        else:
            yield from other
    yield from kwargs.items()


class ObservedDict(dict[K, V]):
    """Every entry that leaves goes through `_removed`, every entry that arrives through
    `_added` (a replaced value: both), `clear` through `_cleared`. Subclasses may override
    `__setitem__` for speed, keeping that contract."""

    __slots__ = ()

    def _added(self, key: K, value: V) -> None:
        raise NotImplementedError

    def _removed(self, key: K, value: V) -> None:
        raise NotImplementedError

    def _cleared(self) -> None:
        raise NotImplementedError

    def __setitem__(self, key: K, value: V) -> None:
        previous = dict.get(self, key, MISSING)
        if previous is not MISSING:
            self._removed(key, previous)
        dict.__setitem__(self, key, value)
        self._added(key, value)

    def __delitem__(self, key: K) -> None:
        self._removed(key, dict.__getitem__(self, key))
        dict.__delitem__(self, key)

    def pop(self, key: K, default: Any = MISSING) -> Any:
        value = dict.pop(self, key, MISSING)
        if value is MISSING:
            if default is MISSING:
                raise KeyError(key)
            return default
        self._removed(key, value)
        return value

    def popitem(self) -> tuple[K, V]:
        key, value = dict.popitem(self)
        self._removed(key, value)
        return key, value

    def setdefault(self, key: K, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in update_pairs(args, kwargs):
            self[key] = value

    def __ior__(self, other: Any) -> ObservedDict[K, V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self._cleared()

"""A value built on first use, once, safely from several threads (scene and world parts)."""

from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """``build()`` called on the first :meth:`get`, its result kept for every later call.

    Thread-safe: threads that ask while another is building wait for that build (a lock
    per value) and get the same object; ``build`` runs at most once per success. A build
    that raises is not memoised: the exception goes to the caller, and the next
    :meth:`get` tries again (a file fixed in between is read then). Once built, the
    builder is dropped, so whatever only it referred to can be freed.
    """

    __slots__ = ("_build", "_lock", "_value", "_built")

    def __init__(self, build: Callable[[], T]) -> None:
        self._build: Callable[[], T] | None = build
        self._lock = threading.Lock()
        self._value: T | None = None
        self._built = False

    @classmethod
    def of(cls, value: T) -> "Lazy[T]":
        """A Lazy that already holds ``value`` (nothing left to build)."""
        lazy = cls(lambda: value)
        lazy.get()
        return lazy

    @property
    def built(self) -> bool:
        """True once :meth:`get` has returned a value (it will return the same one from now on)."""
        return self._built

    def get(self) -> T:
        """The value, built now if no call has built it yet."""
        if self._built:  # the common case: no lock once built
            return self._value  # type: ignore[return-value]
        with self._lock:
            if not self._built:
                self._value = self._build()  # type: ignore[misc]
                self._built = True
                self._build = None
        return self._value  # type: ignore[return-value]

"""One registry type for every extension point of the bench.

A :class:`Registry` maps keys (names, or framework-neutral / framework layer types) to what
is registered under them: layer types and their builders, fast rules, privacy mechanisms,
calibration accountants, data sets, audit faults, architectures, report sections. Every
registration is the same decorator, as Opacus registers its grad samplers
(``@register_grad_sampler(nn.Linear)``)::

    @LAYER_BUILDERS.register(Conv2D)
    def _conv2d(layer, x, ctx): ...

    @DP_MECHANISMS.register("dpsgd-gaussian")
    class GaussianDpSgd(DpSgdMechanism): ...

(or its call form, ``REG.register(key)(value)``, for a value that is not a definition).
Lookups are by exact key (a subclass of a registered type is not found: it may compute
something else); a registry reads as a read-only mapping (``name in REG``, ``REG[name]``,
``REG.get(name)``, iteration in registration order). A missing key is one
:class:`~dpcore.errors.ConfigError` naming the key, the registry's job, the valid keys and
the closest one. Pure Python: it imports nothing of the bench but :mod:`dpcore.errors` and
:mod:`dpcore.suggest`, so any module may hold a registry. Hand-written: the pinned stack has no
registry library (Opacus's and Keras's registries are module-level dicts), and one
(``catalogue``, ``class-registry``) would be a new dependency for some sixty lines.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from dpcore.errors import ConfigError
from dpcore.suggest import did_you_mean

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")
D = TypeVar("D")


def key_text(key: object) -> str:
    """How a key is named to users: a type by its class name, anything else as itself."""
    return key.__name__ if isinstance(key, type) else str(key)


class Registry(Mapping[K, V], Generic[K, V]):
    """Key -> registered value, in registration order.

    Args:
        job: what the values are, in the plural, for messages (``"Keras builders"``,
            ``"privacy mechanisms"``).
        key: how a key is named to users (``"layer type"``, ``"privacy.mechanism"``).
        key_of: the key of a value registered without one (``REG.register()(value)``), e.g.
            a mechanism class's ``name``; None: every registration names its keys.
        make: what is stored for a registered value (default: the value itself), called
            once per registration (one stored object for all its keys), e.g. one instance
            of a registered class; it raises (:class:`~dpcore.errors.ConfigError`, or
            TypeError for a value of the wrong kind) to refuse a registration. The decorator
            returns the value it was given either way.

    A later registration of a key replaces the earlier one in place (as Opacus's registries
    do).
    """

    def __init__(self, job: str, *, key: str,
                 key_of: Callable[[Any], K] | None = None,
                 make: Callable[[Any], V] | None = None) -> None:
        self.job = job
        self.key = key
        self._key_of = key_of
        self._make = make
        self._entries: dict[K, V] = {}
        self._origins: dict[K, str] = {}

    def register(self, *keys: K) -> Callable[[T], T]:
        """Decorator registering the decorated value under each of ``keys`` (none: under
        ``key_of(value)``); returns the value unchanged.

        Raises:
            TypeError: no key given and the registry has no ``key_of``.
        """
        if not keys and self._key_of is None:
            raise TypeError(f"register() of the {self.job} needs at least one {self.key}")

        def decorate(value: T) -> T:
            caller = inspect.currentframe()
            module = "" if caller is None or caller.f_back is None else str(
                caller.f_back.f_globals.get("__name__", ""))
            chosen = keys or (self._key_of(value),)  # type: ignore[misc]
            stored: Any = value if self._make is None else self._make(value)
            for key in chosen:
                self._entries[key] = stored
                self._origins[key] = module
            return value

        return decorate

    def unregister(self, *keys: K) -> None:
        """Forget ``keys`` (a key that is not registered is ignored); for tests' toys."""
        for key in keys:
            self._entries.pop(key, None)
            self._origins.pop(key, None)

    def __getitem__(self, key: K) -> V:
        """The value registered under exactly ``key``.

        Raises:
            ConfigError: nothing is registered under it (:meth:`missing`).
        """
        try:
            return self._entries[key]
        except (KeyError, TypeError):  # TypeError: an unhashable key from a user's file
            raise self.missing(key) from None

    @overload
    def get(self, key: object) -> V | None: ...

    @overload
    def get(self, key: object, default: D) -> V | D: ...

    def get(self, key: object, default: object = None) -> object:
        """The value registered under exactly ``key``, else ``default``."""
        try:
            return self._entries.get(key, default)  # type: ignore[call-overload]
        except TypeError:  # unhashable
            return default

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._entries
        except TypeError:  # unhashable
            return False

    def __iter__(self) -> Iterator[K]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<Registry of {self.job}: {', '.join(self.names())}>"

    def names(self) -> tuple[str, ...]:
        """Every key as users name it (types by class name), in registration order."""
        return tuple(key_text(key) for key in self._entries)

    def origin(self, key: K) -> str:
        """The module whose code registered ``key`` (``""`` if unknown).

        Raises:
            ConfigError: nothing is registered under ``key``.
        """
        if key not in self:
            raise self.missing(key)
        return self._origins[key]

    def missing(self, key: object) -> ConfigError:
        """The error for a lookup of ``key`` that found nothing: it names the key, the job,
        the closest registered key and every registered one."""
        shown = key_text(key) if isinstance(key, type) else repr(key)
        subject = f"{self.key} {shown}" if isinstance(key, type) else f"{self.key}={shown}"
        valid = ", ".join(self.names()) or "none registered"
        return ConfigError(f"{subject} is not known to the {self.job}"
                           f"{did_you_mean(key_text(key), self.names())}; valid: {valid}")


__all__ = ["Registry", "key_text"]

"""Typed, validated dataclasses from plain mappings: the machinery under every config.

:func:`from_mapping` builds a (frozen) dataclass from a YAML-like mapping, checking
each key against the annotations (unknown keys and wrongly typed values fail at
once, naming the key and what was expected). Value constraints are declared on
the field, not written out in ``__post_init__``::

    @dataclass(frozen=True)
    class FedProxParams(Checked):
        mu: Annotated[float, Ge(0)] = 0.01          # "a number >= 0"
        q: Annotated[float, Range(0, 1, lo_open=True)] = 0.7  # "a number in (0, 1]"

A :class:`Checked` dataclass checks its constraints whenever it is constructed
(from a config or in code); the error names the config key
(``config key 'algorithm.params.mu': expected a number >= 0, got -1.0``).
Constraints that relate several fields go in :meth:`Checked.validate` with
:func:`require`, which words its error the same way.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar, Union

from fedpath.errors import ConfigError

T = TypeVar("T")


class FieldError(ConfigError):
    """A value that breaks its field's constraint; :func:`from_mapping` prefixes the
    field with the config section it was read from."""

    def __init__(self, key: str, expected: str, got: Any) -> None:
        self.key, self.expected, self.got = key, expected, got
        super().__init__(f"config key {key!r}: expected {expected}, got {got!r}")

    def under(self, prefix: str) -> FieldError:
        return FieldError(_join(prefix, self.key), self.expected, self.got)


def require(ok: bool, key: str, expected: str, got: Any) -> None:
    """Raise :class:`FieldError` for ``key`` unless ``ok`` (cross-field checks)."""
    if not ok:
        raise FieldError(key, expected, got)


# ---------------------------------------------------------------------- constraints


@dataclass(frozen=True)
class Check:
    """A value constraint: ``ok(value)``, worded as ``expected`` in errors.

    ``ok`` is evaluated with the annotation (``typing.get_type_hints``), whose
    lambdas see module-level names only through default arguments
    (``lambda v, names=NAMES: v in names``).
    """

    expected: str
    ok: Callable[[Any], bool]

    def describe(self, tp: Any) -> str:
        return self.expected


@dataclass(frozen=True)
class Range:
    """A finite number in an interval; ``None`` bounds are open-ended. Worded from
    the field's type: ``an integer >= 1``, ``a number in (0, 1]``."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def ok(self, v: Any) -> bool:
        if isinstance(v, float) and not math.isfinite(v):  # NaN, inf: never valid
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (
            self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi)
        )

    def describe(self, tp: Any) -> str:
        what = "an integer" if tp is int else "a number"
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"{what} in {left}{_num(self.lo)}, {_num(self.hi)}{right}"
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{what} {'<' if self.hi_open else '<='} {_num(self.hi)}"
        return what


def Ge(lo: float) -> Range:
    """``>= lo``."""
    return Range(lo=lo)


def Gt(lo: float) -> Range:
    """``> lo``."""
    return Range(lo=lo, lo_open=True)


#: a probability: a number in [0, 1]
Probability = Range(0.0, 1.0)

Constraint = Range | Check


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _constraints(tp: Any) -> tuple[Any, list[Constraint]]:
    """(base type, constraints) of an ``Annotated[...]`` hint (else no constraints)."""
    if typing.get_origin(tp) is typing.Annotated:
        base, *meta = typing.get_args(tp)
        return base, [m for m in meta if isinstance(m, Range | Check)]
    return tp, []


def _check_value(name: str, tp: Any, value: Any) -> None:
    base, cons = _constraints(tp)
    if not cons:
        return
    optional = False
    if typing.get_origin(base) in (Union, types.UnionType):
        args = [a for a in typing.get_args(base) if a is not type(None)]
        optional = len(args) < len(typing.get_args(base))
        base = args[0] if len(args) == 1 else base
    if value is None and optional:
        return
    for c in cons:
        if not c.ok(value):
            raise FieldError(
                name, c.describe(base) + (" or null" if optional else ""), value
            )


class Checked:
    """Mixin for dataclasses whose fields carry constraints (module docstring).

    ``config_section`` names the section the class is read from (``train``,
    ``algorithm.params``...) so errors of a directly constructed instance name the
    full key; :meth:`validate` holds checks that relate several fields.
    """

    config_section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self), include_extras=True)
        try:
            for f in dataclasses.fields(self):  # type: ignore[arg-type]
                _check_value(f.name, hints[f.name], getattr(self, f.name))
            self.validate()
        except FieldError as err:
            raise err.under(self.config_section) from None

    def validate(self) -> None:
        """Cross-field checks (:func:`require`); field names are relative."""


# ------------------------------------------------------------------------- mappings


def resolve_params(schema: type[T], params: Mapping[str, Any], section: str) -> T:
    """Build a params dataclass from a (resolved) params mapping."""
    return from_mapping(schema, params, section)


def from_mapping(cls: type[T], raw: Any, prefix: str) -> T:
    """Build dataclass ``cls`` from a mapping, checking keys, value types and the
    fields' constraints; errors name the full key under ``prefix``."""
    where = prefix or "the top level"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"config key {where!r}: expected a mapping, got {type(raw).__name__}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in raw if k not in fields]
    if unknown:
        key = _join(prefix, str(unknown[0]))
        raise ConfigError(
            f"unknown config key {key!r}; valid keys"
            f"{' under ' + repr(prefix) if prefix else ''}: {', '.join(fields)}"
        )
    kwargs = {
        name: _convert(hints[name], value, _join(prefix, name))
        for name, value in raw.items()
    }
    section = getattr(cls, "config_section", "")
    try:
        return cls(**kwargs)
    except FieldError as err:
        if not prefix:
            raise
        # the instance named its key under its own section; name it under ours
        key = err.key.removeprefix(f"{section}.") if section else err.key
        raise FieldError(_join(prefix, key), err.expected, err.got) from None
    except TypeError as err:
        raise ConfigError(f"config section {where!r}: {err}") from None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_mapping(tp, value, key)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, key)
            except ConfigError as err:
                errors.append(str(err).split(": expected ", 1)[-1].split(", got")[0])
        raise ConfigError(
            f"config key {key!r}: expected {' or '.join(errors)}"
            f"{' or null' if type(None) in args else ''}, got {value!r}"
        )
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(
            f"config key {key!r}: expected one of {', '.join(map(repr, args))}, "
            f"got {value!r}"
        )
    if origin in (list, tuple, Sequence):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key {key!r}: expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        items = [_convert(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key!r}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key {key!r}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"config key {key!r}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"config key {key!r}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key {key!r}: expected a string, got {value!r}")
    raise ConfigError(f"config key {key!r}: unsupported type {tp!r}")

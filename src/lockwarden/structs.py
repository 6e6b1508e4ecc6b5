"""Record classes at a fraction of `dataclasses`' start-up cost.

A quiet `--once` run is mostly Python start-up, and on Python 3.11 `@dataclass` is a large
part of it: importing `dataclasses` pulls in `inspect` (with `ast` and `dis`), and each class
compiles five or six generated methods with `exec`, ~0.6 ms per class for ~35 classes on the
quiet path. `@struct` gives the same declarations the same behaviour where lockwarden uses it
(keyword or positional `__init__`, defaults, `field(default_factory=...)`, `repr=False`,
frozen instances, value equality and hashing, `__post_init__`, `replace`, `asdict`) with one
compiled `__init__` per class (which fills a frozen instance's `__dict__` directly: a 40-field
Claim takes 1 us, 3 us through `object.__setattr__` as dataclasses do); equality, hashing,
`repr` and the frozen guard are shared functions over a per-class attribute getter. Type
checkers see it as a dataclass (`typing.dataclass_transform`). Inheritance between structs is
not supported (nothing uses it, and `struct` refuses it rather than guessing).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")
_MISSING: Any = object()

FIELDS = "__struct_fields__"


class FrozenInstanceError(AttributeError):
    """Assigning to (or deleting) a field of a frozen struct."""


class Field:
    """What `field()` declares; replaced by the default (or removed) once the class is built."""

    __slots__ = ("default", "default_factory", "name", "repr")

    def __init__(self, default: Any, default_factory: Any, repr: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.name = ""

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] = _MISSING,
    repr: bool = True,
) -> Any:
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, repr)


@overload
def struct(cls: type[_T], /) -> type[_T]: ...


@overload
def struct(*, frozen: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def struct(cls: type[_T] | None = None, /, *, frozen: bool = True) -> Any:
    """`@struct` (frozen, like `@dataclass(frozen=True)`) or `@struct(frozen=False)`."""

    def build(target: type[_T]) -> type[_T]:
        return _build(target, frozen)

    return build if cls is None else build(cls)


def _build(cls: type[_T], frozen: bool) -> type[_T]:
    for base in cls.__mro__[1:]:
        if FIELDS in base.__dict__:
            raise TypeError(f"{cls.__qualname__}: a struct cannot inherit from struct {base}")
    fields = _collect(cls)
    names = tuple(spec.name for spec in fields)
    getter = _getter(names)
    shown = tuple(spec.name for spec in fields if spec.repr)

    def __repr__(self: Any) -> str:
        parts = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({parts})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(getter(self) == getter(other))

    def __hash__(self: Any) -> int:
        return hash(getter(self))

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        # Pickled as its field values, rebuilt through __init__: several times faster both
        # ways than the default __dict__ state (bounded.py sends every claim between processes).
        return type(self), getter(self)

    members: dict[str, Any] = {
        FIELDS: fields,
        "__match_args__": names,
        "__init__": _make_init(cls, fields, frozen),
        "__repr__": __repr__,
        "__eq__": __eq__,
        # as with dataclasses: frozen ones hash by value, mutable ones are unhashable
        "__hash__": __hash__ if frozen else None,
        "__reduce__": __reduce__,
    }
    if frozen:
        members["__setattr__"] = _frozen_setattr(cls, frozenset(names))
        members["__delattr__"] = _frozen_delattr(cls, frozenset(names))
    for name, member in members.items():
        if callable(member):
            member.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, member)
    return cls


def _collect(cls: type) -> tuple[Field, ...]:
    """The fields in declaration order; a plain default stays a class attribute, as with
    dataclasses; a `field()` is replaced by its default or removed."""
    # not inspect.get_annotations: importing inspect is what this module exists to avoid
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    fields: list[Field] = []
    seen_default = False
    for name, annotation in annotations.items():
        if isinstance(annotation, str) and annotation.startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, Field) else Field(value, _MISSING, True)
        spec.name = name
        if spec.default is _MISSING and spec.default_factory is _MISSING:
            if seen_default:
                raise TypeError(f"{cls.__qualname__}: non-default field {name!r} after a default")
        else:
            seen_default = True
        if isinstance(value, Field):
            if spec.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        fields.append(spec)
    return tuple(fields)


def _make_init(cls: type, fields: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """One compiled `__init__`: as fast per instance as the dataclasses one."""
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    parameters = ["self"]
    body: list[str] = []
    for number, spec in enumerate(fields):
        name = spec.name
        if spec.default_factory is not _MISSING:
            namespace[f"_factory{number}"] = spec.default_factory
            parameters.append(f"{name}=_MISSING")
            value = f"_factory{number}() if {name} is _MISSING else {name}"
        elif spec.default is not _MISSING:
            namespace[f"_default{number}"] = spec.default
            parameters.append(f"{name}=_default{number}")
            value = name
        else:
            parameters.append(name)
            value = name
        # A frozen struct's own __setattr__ refuses: write the instance dict directly.
        body.append(f"__d[{name!r}] = {value}" if frozen else f"self.{name} = {value}")
    if frozen:
        body.insert(0, "__d = self.__dict__")  # no field can be `__d`: a class body mangles it
    if "__post_init__" in cls.__dict__:
        body.append("self.__post_init__()")
    source = f"def __init__({', '.join(parameters)}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__module__ = cls.__module__
    return init


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda _instance: ()
    if len(names) == 1:
        single = operator.attrgetter(names[0])
        return lambda instance: (single(instance),)
    return operator.attrgetter(*names)


def _frozen_setattr(cls: type, names: frozenset[str]) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    return __setattr__


def _frozen_delattr(cls: type, names: frozenset[str]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)

    return __delattr__


def is_struct(value: object) -> bool:
    return FIELDS in type(value).__dict__


def field_names(value: object) -> tuple[str, ...]:
    return tuple(spec.name for spec in getattr(value, FIELDS))


def replace(instance: _T, /, **changes: Any) -> _T:
    """A copy with `changes` applied, as `dataclasses.replace` makes it."""
    specs: tuple[Field, ...] = getattr(type(instance), FIELDS)
    values = {spec.name: getattr(instance, spec.name) for spec in specs}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(instance).__qualname__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(instance)(**values)


def asdict(instance: object) -> dict[str, Any]:
    """Fields as a dict, structs inside lists, tuples and dicts converted too."""
    return {name: _plain(getattr(instance, name)) for name in field_names(instance)}


def _plain(value: Any) -> Any:
    if is_struct(value):
        return asdict(value)
    if isinstance(value, list | tuple):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value

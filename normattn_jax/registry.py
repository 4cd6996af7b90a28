"""A registry of named objects: the one implementation behind every kind a user may extend
(normalisations: ``attention.registry``; synthetic tasks: ``tasks.registry``; fine-tuning heads
and tasks: ``finetune.heads``, ``finetune.task``; kinds of run: ``train.kinds``), so that all
look up, refuse and list names alike; and ``load_plugins``, the one way a command line imports a
user's registrations.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Callable, Generic, Optional, TypeVar

__all__ = ["NamesView", "Registry", "load_plugins"]

T = TypeVar("T")


class Registry(Generic[T]):
  """Objects of one class by their ``name`` attribute, in registration order.

  Args:
    kind: the noun of the objects in error messages, e.g. "normalization" or "task".
    cls: the class every registered object must be an instance of.
    check: ``obj -> None``, raising ``ValueError`` for an object of ``cls`` that cannot be
      registered (after the name was checked); None accepts any.
  """

  def __init__(self, kind: str, cls: type, check: Optional[Callable[[T], None]] = None):
    self.kind = kind
    self.cls = cls
    self.check = check
    self._objects: dict = {}
    self.view = NamesView(self)

  def register(self, obj: T, *, replace: bool = False) -> T:
    """Make ``obj`` available by its name everywhere; returns it.

    Args:
      obj: the object to register under ``obj.name``.
      replace: replace another object registered under the same name.

    Returns:
      ``obj``.

    Raises:
      TypeError: if ``obj`` is not an instance of the registry's class.
      ValueError: if its name is empty or not a string, the registry's ``check`` refuses it,
        or the name is taken and ``replace`` is False.
    """
    if not isinstance(obj, self.cls):
      raise TypeError(f"register takes a {self.cls.__name__}, got {type(obj).__name__}")
    if not isinstance(obj.name, str) or not obj.name:
      raise ValueError(f"a {self.kind} needs a non-empty name, got {obj.name!r}")
    if self.check is not None:
      self.check(obj)
    old = self._objects.get(obj.name)
    if old is not None and old is not obj and not replace:
      raise ValueError(f"{self.kind} {obj.name!r} is already registered; pass replace=True to "
                       f"replace it")
    self._objects[obj.name] = obj
    return obj

  def unregister(self, name: str) -> None:
    """Remove a registered object (built-ins too).

    Args:
      name: the registered name.

    Raises:
      ValueError: if nothing is registered as ``name``.
    """
    self.get(name)
    del self._objects[name]

  def get(self, name: str) -> T:
    """The object registered as ``name``.

    Args:
      name: the registered name.

    Returns:
      The object.

    Raises:
      ValueError: naming the registered objects, if ``name`` is not one of them.
    """
    try:
      return self._objects[name]
    except (KeyError, TypeError):
      raise ValueError(f"{self.kind} must be one of {self.names()}, got {name!r}") from None

  def names(self) -> tuple:
    """The registered names, in registration order.

    Returns:
      A tuple of strings.
    """
    return tuple(self._objects)

  def __contains__(self, name) -> bool:
    return isinstance(name, str) and name in self._objects

  def __len__(self) -> int:
    return len(self._objects)


class NamesView(Sequence):
  """A live, tuple-like view of a registry's names (``NORMALIZATIONS``, ``TASKS``): it follows
  later registrations, unlike a tuple taken at import."""

  def __init__(self, registry: Registry):
    self._registry = registry

  def __getitem__(self, index):
    return self._registry.names()[index]

  def __len__(self) -> int:
    return len(self._registry)

  def __contains__(self, name) -> bool:
    return name in self._registry

  def __eq__(self, other) -> bool:
    return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, NamesView))
                           else other)

  def __hash__(self):
    return hash(self._registry.names())

  def __repr__(self) -> str:
    return repr(self._registry.names())


def load_plugins(modules: Sequence[str]) -> None:
  """Import the named modules, which register their normalisations, tasks, heads or kinds of run
  as they load (how a command line, e.g. ``normattn-run --plugins=my_norms``, learns of the
  user's).

  Args:
    modules: importable module names, e.g. ``["my_norms"]``.
  """
  for module in modules:
    importlib.import_module(module)

"""Old ``config.json`` files read as today's, so that a workdir written before a change still
resumes, re-scores and is compared field by field with today's config of the same run. Each kind
of run owns how its configs changed (``RunKind.renamed``, ``added``, ``migrate``: e.g. a sweep's
``sweep.values`` became ``sweep.grid``, its switches were strings, every kind's normalisation
was a flat field before it was an ``attention`` section); ``with_current_names`` applies them.
"""
from __future__ import annotations

import copy
from typing import Union

from normattn_jax import _moved
from normattn_jax.train import kinds
from normattn_jax.validation import dotted_holder


def with_current_names(stored: dict, kind: Union[kinds.RunKind, str]) -> dict:
  """A stored ``config.json`` tree as today's config of the same run would store it.

  Args:
    stored: the tree as read from a workdir's ``config.json`` (not changed).
    kind: the kind of run (a ``RunKind``, or its registered name), which owns its renames,
      added fields and migration (``RunKind.renamed``, ``added``, ``migrate``).

  Returns:
    A copy of ``stored`` naming its kind (``kind``, a field every config has had since), with
    renamed fields under their new names, fields added since at the values that keep the old
    behaviour, and the kind's own migration applied (a sweep's switches as booleans, the
    attention as one section); a tree already of today's form stays as it is.
  """
  run_kind = kinds.get(kind) if isinstance(kind, str) else kind
  tree = copy.deepcopy(stored)
  tree.setdefault("kind", run_kind.name)
  for old, new in run_kind.renamed.items():
    (source, old_key), (target, new_key) = dotted_holder(tree, old), dotted_holder(tree, new)
    if source is not None and old_key in source and target is not None and new_key not in target:
      target[new_key] = source.pop(old_key)
  for field, value in run_kind.added.items():
    holder, key = dotted_holder(tree, field)
    if holder is not None and key not in holder:
      holder[key] = value
  return run_kind.migrate(tree)


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)

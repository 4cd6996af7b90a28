"""What the configs of every run kind share: the ``attention`` section, and the rule that a
config holds only the fields its kind defines.

An ``attention`` section is ``{name, options}``: a registered normalisation and the options it
owns (``attention.registry.Option``), set from the command line like any field
(``--config.attention.name=sinkhorn --config.attention.options.sinkhorn_iters=5``). The run
scripts accept new attributes so that any option can be named there (ml_collections'
``accept_new_attributes``); ``check_known_fields`` then refuses every other new field, so a
typo is still an error.
"""
from __future__ import annotations

from typing import Any, Optional

import ml_collections

from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.validation import fail_config

OPTIONS = "options"


def attention_section(name: str = "", **options: Any) -> ml_collections.ConfigDict:
  """A config's ``attention`` section.

  Args:
    name: a registered normalisation, or "" where the run keeps its model's own.
    **options: the normalisation's options that differ from its defaults.

  Returns:
    ``ConfigDict({"name": name, "options": {...}})``.
  """
  return ml_collections.ConfigDict({"name": name, OPTIONS: dict(options)})


def attention_spec(section: ml_collections.ConfigDict, field: str, *,
                   keep: bool = False) -> Optional[AttentionSpec]:
  """The spec that an attention section names, checked before anything compiles.

  Args:
    section: the attention section (``name``, ``options``).
    field: its dotted path in the config, for errors, e.g. "model.attention".
    keep: whether the name "" (keep the model's own normalisation) is allowed.

  Returns:
    The ``AttentionSpec``, or None for "" where ``keep`` allows it.

  Raises:
    ValueError: ``config.<field>.name=...`` or ``config.<field>.options...`` and why.
  """
  name, options = section.get("name"), section.get(OPTIONS)
  options = {} if options is None else dict(options)
  if name == "" and keep:
    if options:
      fail_config(f"{field}.{OPTIONS}", options, f"options need a normalisation in {field}.name")
    return None
  try:
    AttentionSpec(name)  # the name alone: a spec checks its options when it is made
  except ValueError as err:
    fail_config(f"{field}.name", name, str(err))
  try:
    spec = AttentionSpec(name, options)
  except ValueError as err:
    fail_config(f"{field}.{OPTIONS}", options, str(err))
  return spec


def check_known_fields(config: ml_collections.ConfigDict, reference: ml_collections.ConfigDict,
                       *, free: tuple = ()) -> None:
  """Refuse fields that ``reference`` (the kind's base config) does not have, except under the
  sections ``free`` (dotted paths, e.g. "attention.options"), whose keys are the user's.

  Args:
    config: the config to check.
    reference: the run kind's base config.
    free: dotted paths of sections that take any key.

  Raises:
    ValueError: ``config.<field>=<value>: no such field`` for the first unknown field.
  """
  known = flat_fields(reference.to_dict())
  for field, value in sorted(flat_fields(config.to_dict()).items()):
    if field not in known and not any(field.startswith(f"{f}.") for f in free):
      fail_config(field, value, "no such field (misspelt?)")


def flat_fields(tree: dict, prefix: str = "") -> dict:
  """Dotted field -> value of a nested dict (an empty dict is a field of its own).

  Args:
    tree: e.g. a config's ``to_dict()`` or a stored ``config.json``.
    prefix: put before every field.

  Returns:
    ``{"model.d_model": 128, ...}``.
  """
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict) and value:
      flat.update(flat_fields(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value
  return flat

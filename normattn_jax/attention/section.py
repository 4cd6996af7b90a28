"""A config's ``attention`` section, ``{name, options}``: a registered normalisation and the
options it owns (``registry.Option``), the one way every kind of run names its normalisation,
set from the command line like any field (``--config.attention.name=sinkhorn
--config.attention.options.sinkhorn_iters=5``), and read here into an ``AttentionSpec`` before
anything compiles. Plain mappings in, no config library needed: a ``ConfigDict`` takes the
section as it is.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from normattn_jax.attention.registry import NORMALIZATIONS, AttentionSpec, get
from normattn_jax.validation import dotted_holder, fail_config

OPTIONS = "options"


def attention_section(name: str = "", **options: Any) -> dict:
  """A config's ``attention`` section.

  Args:
    name: a registered normalisation, or "" where the run keeps its model's own.
    **options: the normalisation's options that differ from its defaults.

  Returns:
    ``{"name": name, "options": {...}}``, which a ``ConfigDict`` takes as a section.
  """
  return {"name": name, OPTIONS: dict(options)}


def attention_spec(section: Mapping, field: str, *,
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


def with_attention_section(tree: dict, section: str, old_key: str, new_key: str,
                           option_fields: tuple) -> dict:
  """``tree`` with a flat normalisation name (and its option fields) as an attention section.

  Args:
    tree: a stored config tree (changed in place).
    section: the dotted section that holds the name ("" for the top level).
    old_key: the name's key there before.
    new_key: the attention section's key there now.
    option_fields: the option fields that stood beside the name.

  Returns:
    ``tree``; unchanged when it has no flat name (today's form, or another kind's tree).
  """
  holder = tree if not section else dotted_holder(tree, f"{section}.{old_key}")[0]
  if holder is None or not isinstance(holder.get(old_key), str):
    return tree
  name = holder.pop(old_key)
  flat = {field: holder.pop(field) for field in option_fields if field in holder}
  options = {}
  if name in NORMALIZATIONS:
    defaults = {o.name: o.default for o in get(name).options}
    options = {k: v for k, v in flat.items() if k in defaults and v != defaults[k]}
  holder[new_key] = {"name": name, "options": options}
  return tree

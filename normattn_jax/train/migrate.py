"""Old ``config.json`` files read as today's: the one place that knows how the project's
configs changed, so that a workdir written before a change still resumes, re-scores and is
compared field by field with today's config of the same run.

- ``sweep.values`` became ``sweep.grid``;
- a sweep's switches were the strings "auto" (or ""), "true" and "false";
- a normalisation's options were flat fields beside its name: a sweep's top-level
  ``normalization``, pre-training's ``model.attention`` with ``model.hybrid_init`` and
  ``model.sinkhorn_iters``, fine-tuning's ``encoder.attention`` with ``encoder.hybrid_init``.
  Each is now one ``attention`` section (``train.sections``) holding the options that differ
  from the normalisation's defaults;
- the attention module's ``output_gate``, ``qk_norm`` and ``differential`` came later: a sweep's
  or pre-training's config without them ran without them (``model.*`` None, None, False).
- the causal-LM analysis (``analysis.causal_lm_keys``) took ``train.models_per_vmap`` when it
  moved onto the grid engine: a config without it reads as 0, the engine's auto width.
- a sweep's ``model.ffn_implementation`` came with the feed-forward kernels: a config without it
  ran XLA's ops ("xla").
"""
from __future__ import annotations

import copy
from typing import Optional

from normattn_jax.attention import registry
from normattn_jax.train import kinds
from normattn_jax.train.config import SWITCHES
from normattn_jax.validation import fail_config

# How a config.json written before the switches were booleans stored them.
_OLD_SWITCHES = {"": None, "auto": None, "true": True, "false": False}


def with_current_names(stored: dict, kind: str) -> dict:
  """A stored ``config.json`` tree as today's config of the same run would store it.

  Args:
    stored: the tree as read from a workdir's ``config.json`` (not changed).
    kind: the kind of run (``kinds.get``), which owns its renames, added fields and
      migration (``RunKind.renamed``, ``added``, ``migrate``).

  Returns:
    A copy of ``stored`` naming its kind (``kind``, a field every config has had since), with
    renamed fields under their new names, fields added since at the values that keep the old
    behaviour, and the kind's own migration applied (a sweep's switches as booleans, the
    attention as one section); a tree already of today's form stays as it is.
  """
  run_kind = kinds.get(kind)
  tree = copy.deepcopy(stored)
  tree.setdefault("kind", kind)
  for old, new in run_kind.renamed.items():
    (source, old_key), (target, new_key) = _section(tree, old), _section(tree, new)
    if source is not None and old_key in source and target is not None and new_key not in target:
      target[new_key] = source.pop(old_key)
  for field, value in run_kind.added.items():
    holder, key = _section(tree, field)
    if holder is not None and key not in holder:
      holder[key] = value
  return run_kind.migrate(tree)


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
  holder = tree if not section else _section(tree, f"{section}.{old_key}")[0]
  if holder is None or not isinstance(holder.get(old_key), str):
    return tree
  name = holder.pop(old_key)
  flat = {field: holder.pop(field) for field in option_fields if field in holder}
  options = {}
  if name in registry.NORMALIZATIONS:
    defaults = {o.name: o.default for o in registry.get(name).options}
    options = {k: v for k, v in flat.items() if k in defaults and v != defaults[k]}
  holder[new_key] = {"name": name, "options": options}
  return tree


def with_boolean_switches(stored: dict) -> dict:
  """A stored sweep ``config.json`` tree with its switches as today's booleans: a config written
  when they were the strings "auto" (or ""), "true" and "false" reads as None, True and False.

  Such a config's ``model.positional`` (then a plain bool) was ignored by the counting tasks,
  which never had positional embeddings: its True reads as None (the task's own choice).

  Args:
    stored: the tree read from a ``config.json`` (not changed).

  Returns:
    A tree that compares equal to today's config of the same run.
  """
  sections = {name: dict(stored.get(name, {})) for name in ("model", "train")}
  old = [(section, key) for section, key in (f.split(".") for f in SWITCHES)
         if isinstance(sections[section].get(key), str)]
  if not old:
    return stored
  for section, key in old:
    value = sections[section][key]
    if value not in _OLD_SWITCHES:
      fail_config(f"{section}.{key}", value, f"an old switch reads from {tuple(_OLD_SWITCHES)}")
    sections[section][key] = _OLD_SWITCHES[value]
  if sections["model"].get("positional") is True:
    sections["model"]["positional"] = None
  return {**stored, **{name: section for name, section in sections.items() if name in stored}}


def _section(tree: dict, field: str) -> tuple[Optional[dict], str]:
  """The dict that holds a dotted ``field`` (None if there is none) and the field's key in it."""
  *sections, key = field.split(".")
  for section in sections:
    tree = tree.get(section) if isinstance(tree, dict) else None
  return (tree if isinstance(tree, dict) else None), key

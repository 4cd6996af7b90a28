"""How an old sweep ``config.json`` reads as today's: its switches were the strings "auto" (or
""), "true" and "false", its normalisation a flat top-level ``normalization`` field, and the
majority task's ``min_margin`` a field of every sweep's ``task`` section (now the majority
task's own setting), and a sweep over ``train.dropout`` a program per rate (now one program, the
rate data of it, unless ``sweep.in_program`` is False).
"""
from __future__ import annotations

from normattn_jax.attention.section import with_attention_section
from normattn_jax.sweep.config import SWITCHES
from normattn_jax.validation import fail_config

# How a config.json written before the switches were booleans stored them.
_OLD_SWITCHES = {"": None, "auto": None, "true": True, "false": False}


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


def without_shared_min_margin(stored: dict) -> dict:
  """A stored sweep tree without ``task.min_margin`` where its task does not own it (every sweep
  config had the field, at 0, before it was the majority task's setting)."""
  task = stored.get("task")
  if not isinstance(task, dict) or "min_margin" not in task or task.get("name") == "majority":
    return stored
  return {**stored, "task": {k: v for k, v in task.items() if k != "min_margin"}}


def with_sweep_in_program(stored: dict) -> dict:
  """A stored sweep tree with ``sweep.in_program``: False for a ``train.dropout`` sweep stored
  before the field (it trained a program per rate, and its ``metrics.npz`` holds a grid per
  rate), True for any other."""
  sweep = stored.get("sweep")
  if not isinstance(sweep, dict) or "in_program" in sweep:
    return stored
  return {**stored, "sweep": {**sweep, "in_program": sweep.get("name") != "train.dropout"}}


def migrate_sweep(tree: dict) -> dict:
  """An old sweep ``config.json`` tree's switches as booleans, its attention as one section, no
  ``task.min_margin`` its task does not own, and its sweep's ``in_program``."""
  return with_attention_section(
      without_shared_min_margin(with_boolean_switches(with_sweep_in_program(tree))), "",
      "normalization", "attention", ())

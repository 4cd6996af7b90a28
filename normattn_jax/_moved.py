"""The import paths of the previous release, kept importable for one release: each moved module
(``MOVED_MODULES``) and each name a package no longer exports (``MOVED_NAMES``) still imports
from its old path, with a ``DeprecationWarning`` that names the new one (CHANGELOG.md lists
them). The aliases are resolved by name when they are imported, so no package imports the
packages its old names now live in.
"""
from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED_MODULES = {
    "normattn_jax.train.config": "normattn_jax.sweep.config",
    "normattn_jax.train.plan": "normattn_jax.sweep.plan",
    "normattn_jax.train.scoring": "normattn_jax.sweep.scoring",
    "normattn_jax.train.artifacts": "normattn_jax.sweep.artifacts",
    "normattn_jax.train.retrain": "normattn_jax.sweep.retrain",
    "normattn_jax.train.sweep": "normattn_jax.sweep.train",
    "normattn_jax.train.pretrain": "normattn_jax.pretrain.train",
    "normattn_jax.train.sections": "normattn_jax.attention.section",
    "normattn_jax.train.cli": "normattn_jax.cli.command",
    "normattn_jax.train.export_check": "normattn_jax.cli.exports",
    "normattn_jax.reporting.seeds": "normattn_jax.sweep.seeds",
    "normattn_jax.reporting.report_card": "normattn_jax.card.train",
    "normattn_jax.reporting.report_card_text": "normattn_jax.card.text",
    "normattn_jax.reporting.card_stats": "normattn_jax.card.stats",
    "normattn_jax.reporting.diagnostics": "normattn_jax.card.diagnostics",
    "normattn_jax.reporting.card_names": "normattn_jax.card.names",
    "normattn_jax.analysis.card_lm": "normattn_jax.card.lm",
}

# (package or module, name) -> the module that holds the name now.
MOVED_NAMES = {
    **{("normattn_jax.train", name): "normattn_jax.sweep"
       for name in ("base_config", "validate", "run_sweep", "Setup", "make_programs",
                    "train_grid")},
    ("normattn_jax.train", "Programs"): "normattn_jax.sweep.programs",
    **{("normattn_jax.train.grid", name): "normattn_jax.sweep.programs"
       for name in ("Setup", "Programs", "make_programs", "eval_sets_for", "train_grid",
                    "HYPERPARAMETERS", "l2_penalty")},
    **{("normattn_jax.train.layout", name): "normattn_jax.sweep.layout"
       for name in ("ModelsAxis", "grid_name", "HYPERPARAMETER_OF")},
    ("normattn_jax.train.migrate", "with_attention_section"): "normattn_jax.attention.section",
    ("normattn_jax.train.migrate", "with_boolean_switches"): "normattn_jax.sweep.migrate",
    # a task's settings are options, as a normalisation's are
    ("normattn_jax.tasks", "Setting"): "normattn_jax.validation:Option",
    ("normattn_jax.tasks.registry", "Setting"): "normattn_jax.validation:Option",
    # named for what it does (``card.stats.compare`` compares two arms)
    ("normattn_jax.sweep.seeds", "compare"): "normattn_jax.sweep.seeds:compare_with_authors",
}


def _warn(old: str, new: str) -> None:
  warnings.warn(f"{old} moved to {new}; the old path goes in the next release",
                DeprecationWarning, stacklevel=3)


def moved_attribute(module: str, name: str):
  """The object a module's old name refers to now (a module's ``__getattr__``).

  Raises:
    AttributeError: for a name that never moved from ``module``.
  """
  target = MOVED_NAMES.get((module, name))
  if target is None:
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
  target, _, new_name = target.partition(":")  # "module:new name" for a renamed one
  new_name = new_name or name
  _warn(f"{module}.{name}", f"{target}.{new_name}")
  return getattr(importlib.import_module(target), new_name)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Imports a moved module's old path as a module holding the new module's names."""

  def find_spec(self, fullname, path, target=None):
    if fullname not in MOVED_MODULES:
      return None
    return importlib.util.spec_from_loader(fullname, self)

  def create_module(self, spec):
    return None  # the default module object, filled by exec_module

  def exec_module(self, module):
    new = MOVED_MODULES[module.__name__]
    _warn(module.__name__, new)
    target = importlib.import_module(new)
    module.__dict__.update({key: value for key, value in vars(target).items()
                            if not key.startswith("__")})
    module.__getattr__ = functools.partial(moved_attribute, new)  # the new module's old names


def install() -> None:
  """Put the old paths' finder on ``sys.meta_path`` (once)."""
  if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.append(_Alias())

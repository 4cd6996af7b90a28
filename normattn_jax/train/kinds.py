"""The kinds of run (a sweep, pre-training, fine-tuning, the causal-LM analysis, ...): one
``RunKind`` per name, carrying all that differs from one kind to another, in one registry.

The driver (``train.runs.run``), the workdir checks (``checkpoint.check_workdir``), the old
configs' migrations (``migrate.with_current_names``) and the command line look a kind up here by
its config's ``kind`` field, so a kind registered from user code (``register(RunKind(...))``, a
module loaded with ``--plugins``) runs, resumes and is refused alike as a built-in one. Each
kind registers itself as its package is imported; the engine names none of them (the command
line, on the top floor, imports the built-in ones). A new kind of run is one module and one
config.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Optional

import ml_collections

from normattn_jax.registry import Registry
from normattn_jax.validation import fail_config

def _unchanged(tree: dict) -> dict:
  return tree


def _whole(config, results):
  """The default ``RunKind.summarise``: the results are the summary."""
  return results


@dataclasses.dataclass(frozen=True)
class RunKind:
  """One kind of run: all the driver, the workdir checks and the command line need of it.

  - ``name``: the config's ``kind`` field and the workdir kind.
  - ``may_differ``: the dotted fields a workdir may be resumed (or rerun) with changed, those
    that change only what is logged, how often checkpoints are saved or where data is cached;
    every other field changes the results. An empty set: every field counts.
  - ``base_config()``: every field of the kind's config at its default (``kind`` among them).
  - ``validate(config)``: the kind's own cross-field rules; raises ``ValueError`` naming the field
    and its value, before anything is written or compiled.
  - ``workdir_config(config, workdir) -> config``: what the workdir belongs to (its
    ``config.json``) when that is not the config itself (a report card's: its normalisation,
    scale and machine), with the checks that come before the workdir is opened; None: the config.
  - ``train(config, context) -> results``: the grid jobs, resumed from the workdir's checkpoints
    and paid from ``context.budget`` (``runs.RunContext``); None for a kind run by its own
    function, which still owns its workdir's checks.
  - ``summarise(config, results) -> summary``: the ``summary.json`` tree (default: the results).
  - ``save(workdir, config, results)``: the chief's files besides the summary (``metrics.npz``),
    written before it.
  - ``describe(summary) -> lines``: what the command line prints of a finished run.
  - ``summary_file``: the summary's file, written last; "summary.json" marks a finished run,
    which a rerun returns untouched (a kind whose target may grow names another).
  - ``summary_format``: ``json.dump``'s options for the summary.
  - ``divides(config) -> numbers``: what the device count must divide when the command line
    splits a CPU into devices (a pre-training's batch sizes).
  - ``renamed`` ({old dotted field: new}), ``added`` ({dotted field: the value that keeps the
    old behaviour}) and ``migrate(tree) -> tree``: how an older ``config.json`` of the kind
    reads as today's (``migrate.with_current_names``).
  """
  name: str
  may_differ: frozenset
  base_config: Optional[Callable[[], ml_collections.ConfigDict]] = None
  validate: Callable[[ml_collections.ConfigDict], None] = lambda config: None
  workdir_config: Optional[Callable[[ml_collections.ConfigDict, str],
                                    ml_collections.ConfigDict]] = None
  train: Optional[Callable[[ml_collections.ConfigDict, Any], Any]] = None
  summarise: Callable[[ml_collections.ConfigDict, Any], dict] = _whole
  save: Optional[Callable[[str, ml_collections.ConfigDict, Any], None]] = None
  describe: Callable[[dict], list] = lambda summary: []
  summary_file: str = "summary.json"
  summary_format: Mapping = dataclasses.field(default_factory=lambda: {"indent": 2})
  divides: Callable[[ml_collections.ConfigDict], tuple] = lambda config: ()
  renamed: Mapping = dataclasses.field(default_factory=dict)
  added: Mapping = dataclasses.field(default_factory=dict)
  migrate: Callable[[dict], dict] = _unchanged

  def __post_init__(self):
    if isinstance(self.may_differ, str):  # one field is a set of one, not of its letters
      raise TypeError(f"run kind {self.name!r}: may_differ takes a set of dotted field names, "
                      f"got the string {self.may_differ!r}")
    object.__setattr__(self, "may_differ", frozenset(self.may_differ))


def _check(kind: RunKind) -> None:
  """Refuse a kind whose ``may_differ`` is not a set of dotted field names."""
  if not all(isinstance(field, str) and field for field in kind.may_differ):
    raise ValueError(f"run kind {kind.name!r}: may_differ must hold dotted field names, got "
                     f"{sorted(kind.may_differ, key=str)}")


KINDS: Registry[RunKind] = Registry("run kind", RunKind, _check)


# Make a kind available by its name everywhere (the command line, the workdir checks); a kind
# registers itself as its package is imported. ``get`` refuses an unregistered name, naming the
# registered ones.
register, unregister, get, names = KINDS.register, KINDS.unregister, KINDS.get, KINDS.names


def kind_of(config: ml_collections.ConfigDict) -> RunKind:
  """The kind a config names in its ``kind`` field.

  Raises:
    ValueError: ``config.kind=<value>: ...`` naming the kinds, for a config without one or one
      that names no registered kind.
  """
  name = config.get("kind") if isinstance(config, (ml_collections.ConfigDict, dict)) else None
  if isinstance(name, str) and name in KINDS:
    kind = get(name)
    check_sections(config, kind)
    return kind
  return fail_config("kind", name, f"must name a kind of run, one of {names()}")


def _top_fields(kind: RunKind) -> Optional[frozenset]:
  """The top-level fields of ``kind``'s config, or None for a kind without a base config."""
  return None if kind.base_config is None else frozenset(kind.base_config().keys())


def check_sections(config: ml_collections.ConfigDict, kind: RunKind) -> None:
  """Refuse a config that lacks top-level fields of its kind's (a sweep's config given
  ``--config.kind=pretraining``), naming the kind whose fields they are, before any field is
  read: else the first missing field failed deep inside, as a chained KeyError.

  Raises:
    ValueError: ``config.kind=<value>: ...``, naming the missing and the foreign fields.
  """
  want = _top_fields(kind)
  have = frozenset(config.keys())
  if want is None or want <= have:  # a field too many is the known-fields rule's to name
    return
  matches = [other for other in names() if other != kind.name
             and _top_fields(get(other)) == have]
  whose = f"; they are a {matches[0]!r} config's" if matches else ""
  fail_config("kind", kind.name,
              f"the config's fields are not a {kind.name} config's: it lacks "
              f"{sorted(want - have)} and has {sorted(have - want)}{whose} (a config file "
              f"of that kind runs that kind)")


def check_kind(config: ml_collections.ConfigDict, expected: str, *,
               absent_is_expected: bool = False) -> None:
  """Refuse a config of another kind than the one a kind-specific entry point (``run_sweep``,
  ...) or a kind's ``validate`` takes.

  Args:
    config: the config.
    expected: the kind's name.
    absent_is_expected: take a config without a ``kind`` field as one of ``expected`` (a kind's
      ``validate``: a config built by hand, or stored before configs named their kind).

  Raises:
    ValueError: ``config.kind=<value>: ...``, for a config whose ``kind`` is not ``expected``.
  """
  if config.get("kind", expected if absent_is_expected else None) != expected:
    fail_config("kind", config.get("kind"), f"this runs a {expected!r} config")

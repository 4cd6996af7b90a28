"""Synthetic tasks generated on device (case distinction, mode finding, majority), each a
registered ``Task`` (``normattn_jax.tasks.registry``) that a user may add to; a task's settings
are ``Option`` objects (``normattn_jax.validation``), as a normalisation's options are."""
from normattn_jax import _moved
from normattn_jax.tasks.registry import (SHARED_FIELDS, TASKS, GroupedEval, MetricGroup,
                                         Option, Task, check_batches, check_settings, get,
                                         names, register, resolved_settings, unregister)
from normattn_jax.tasks.synthetic import (BUILTIN_TASKS, CASES, CaseBatch, balanced_case_set,
                                          case_distinction, case_labels, majority,
                                          mode_finding, mode_labels)

__all__ = ["BUILTIN_TASKS", "CASES", "CaseBatch", "GroupedEval", "MetricGroup", "Option",
           "SHARED_FIELDS", "TASKS", "Task", "balanced_case_set", "case_distinction", "case_labels",
           "check_batches", "check_settings", "get", "majority", "mode_finding", "mode_labels",
           "names", "register", "resolved_settings", "unregister"]


def __getattr__(name: str):
  """The previous release's names of this package (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)

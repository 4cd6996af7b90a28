"""Synthetic tasks generated on device (case distinction, mode finding, majority), each a
registered ``Task`` (``normattn_jax.tasks.registry``) that a user may add to."""
from normattn_jax.tasks.registry import (SHARED_FIELDS, TASKS, GroupedEval, MetricGroup,
                                         Setting, Task, check_batches, check_settings, get,
                                         names, positive_int, register, resolved_settings,
                                         unregister)
from normattn_jax.tasks.synthetic import (BUILTIN_TASKS, CASES, CaseBatch, balanced_case_set,
                                          case_distinction, case_labels, majority,
                                          mode_finding, mode_labels)

__all__ = ["BUILTIN_TASKS", "CASES", "CaseBatch", "GroupedEval", "MetricGroup", "SHARED_FIELDS",
           "Setting",
           "TASKS", "Task", "balanced_case_set", "case_distinction", "case_labels",
           "check_batches", "check_settings", "get", "majority", "mode_finding", "mode_labels",
           "names", "positive_int", "register", "resolved_settings", "unregister"]

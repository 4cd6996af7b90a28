"""Synthetic tasks generated on device: case distinction, mode finding, majority."""
from normattn_jax.tasks.synthetic import (CASES, CaseBatch, balanced_case_set, case_distinction,
                                          case_labels, majority, mode_finding,
                                          mode_labels)

__all__ = ["CASES", "CaseBatch", "balanced_case_set", "case_distinction", "case_labels",
           "majority", "mode_finding", "mode_labels"]

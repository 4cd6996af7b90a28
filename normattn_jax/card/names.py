"""The names a report card's run (``report_card``) and its words (``report_card_text``) share:
its arms, tasks and cases. Both import them from here, so neither imports the other for them.
"""
from normattn_jax.analysis import explaining_away

ARMS = ("card", "softmax", "nap")
BASELINES = ("softmax", "nap")
CASES = ("argmin", "first", "argmax")
EPSILON = explaining_away.EPSILON  # a key whose total weight falls below it is explained away
# Normalisations whose every key keeps a total weight >= 1/N by construction (Theorem 2 of the
# DNAS paper and its corollaries): for them the bound is a check of the code, not a finding.
BOUND_BY_CONSTRUCTION = ("dnas", "hnas", "sinkhorn")
# task of a card -> (registered task, output)
CARD_TASKS = {"case": ("case_distinction", "tokens"), "first_token": ("case_distinction", "first"),
              "mode": ("mode_finding", "classes")}
# the metric each task is judged on (the paper's: training accuracy; the mode task's at 2N)
TASK_METRIC = {"case": "train_acc", "first_token": "train_acc", "mode": "val_acc"}


"""The names a report card's run (``card.train``) and its words (``card.text``) share: its
arms, tasks and cases. Both import them from here, so neither imports the other for them.
"""
from normattn_jax.analysis import explaining_away

ARMS = ("card", "softmax", "nap")
BASELINES = ("softmax", "nap")
CASES = ("argmin", "first", "argmax")
EPSILON = explaining_away.EPSILON  # a key whose total weight falls below it is explained away
# The least total weight every key keeps by construction (Theorem 2 of the DNAS paper): 1/N for
# DNAS and Sinkhorn; u/N for HNAS (u * DNAS + (1 - u) * softmax, u its learned DNAS share per
# head). For them the bound is a check of the code, not a finding.
BOUND_BY_CONSTRUCTION = {"dnas": "1/N", "sinkhorn": "1/N", "hnas": "u/N"}
# task of a card -> (registered task, output)
CARD_TASKS = {"case": ("case_distinction", "tokens"), "first_token": ("case_distinction", "first"),
              "mode": ("mode_finding", "classes")}
# the metric each task is judged on (the paper's: training accuracy; the mode task's at 2N)
TASK_METRIC = {"case": "train_acc", "first_token": "train_acc", "mode": "val_acc"}

# Normalisations whose exact zeros are their construction (a projection onto the simplex, a
# ReLU): elsewhere an exact zero is float32 underflow of a positive weight, not sparsity.
SPARSE_BY_CONSTRUCTION = ("sparsemax", "entmax15", "softpick")

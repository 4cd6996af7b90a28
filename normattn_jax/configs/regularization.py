"""Tables 2-4: dropout in {0.0625, 0.125, 0.25, 0.5} or L2 in {1e-4, 1e-3, 1e-2, 1e-1}, at the
defaults, for one task. Choose with the config argument ``<task>,<kind>``:

  --config=regularization:case_tokens,dropout   (Table 2)
  --config=regularization:case_first,l2         (Table 3)
  --config=regularization:mode,dropout          (Table 4)

L2 and dropout are both swept inside the compiled program (each model's value is data of it):
one program per arch.
"""
from normattn_jax.configs import case_distinction, mode_finding

TABLE_TASKS = ("case_tokens", "case_first", "mode")
KINDS = {"dropout": ("train.dropout", (0.0625, 0.125, 0.25, 0.5)),
         "l2": ("train.l2", (1e-4, 1e-3, 1e-2, 1e-1))}


def get_config(arg="case_tokens,dropout"):
  task, _, kind = arg.partition(",")
  if task not in TABLE_TASKS or kind not in KINDS:
    raise ValueError(f"config argument {arg!r}: expected '<task>,<kind>' with task in "
                     f"{TABLE_TASKS} and kind in {tuple(KINDS)}")
  c = mode_finding.get_config() if task == "mode" else case_distinction.get_config()
  if task == "case_first":
    c.task.output = "first"
  c.sweep.name, c.sweep.grid = KINDS[kind]
  return c

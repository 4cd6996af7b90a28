"""reporting.tables: the fine-tuning comparison, one table per task. From made-up summaries."""
import json
import os
import subprocess
import sys

from normattn_jax.reporting.tables import finetuning_tables

from helpers import REPO, subprocess_env


def stats(mean, seeds=3):
  return {"mean": mean, "std_error": 0.01, "min": mean - 0.02, "max": mean + 0.02,
          "seeds": seeds}


def summary(task, metrics, means, lr=1e-4):
  best = {"learning_rate": lr, **{m: stats(v) for m, v in zip(metrics, means)}}
  return {"task": task, "task_description": f"the {task} task", "metric": metrics[0],
          "metrics": list(metrics), "best": best}


def test_runs_of_different_tasks_go_to_tables_of_their_own():
  summaries = {"softmax": summary("genre", ("accuracy",), (0.5,)),
               "nap": summary("genre", ("accuracy",), (0.6,)),
               "softmax_mrpc": summary("glue/mrpc", ("accuracy", "f1"), (0.7, 0.8), lr=3e-5),
               "diverged": {**summary("genre", ("accuracy",), (0.0,)), "best": None}}
  lines = finetuning_tables(summaries).splitlines()
  assert lines == [
      "### genre: the genre task",
      "",
      "| task | run | dev accuracy (%) | best lr | seeds |",
      "|---|---|---|---|---|",
      "| genre | softmax | 50.0 +- 1.0 (48.0-52.0) | 0.0001 | 3 |",
      "| genre | nap | 60.0 +- 1.0 (58.0-62.0) | 0.0001 | 3 |",
      "| genre | diverged | all diverged | | |",
      "",
      "### glue/mrpc: the glue/mrpc task",
      "",
      "| task | run | dev accuracy (%) | dev f1 (%) | best lr | seeds |",
      "|---|---|---|---|---|---|",
      "| glue/mrpc | softmax_mrpc | 70.0 +- 1.0 (68.0-72.0) | 80.0 +- 1.0 (78.0-82.0) | 3e-05 "
      "| 3 |",
  ]


def test_the_command_writes_a_task_column(tmp_path):
  for name, task in (("softmax", "genre"), ("mrpc", "glue/mrpc")):
    os.makedirs(tmp_path / name)
    (tmp_path / name / "summary.json").write_text(json.dumps(summary(task, ("accuracy",),
                                                                     (0.5,))))
  done = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.compare_finetuning",
       f"--workdirs={tmp_path / 'softmax'},{tmp_path / 'mrpc'}", f"--output={tmp_path / 'out'}"],
      capture_output=True, text=True, cwd=REPO, timeout=300,
      env=subprocess_env())
  assert done.returncode == 0, done.stderr
  table = (tmp_path / "out" / "comparison.md").read_text()
  assert "| genre | softmax |" in table and "| glue/mrpc | mrpc |" in table


def test_two_runs_of_one_name_are_refused_with_both_paths(tmp_path):
  """Runs are labelled by their folder's name: two folders of one name are refused, both paths
  named, not merged into one."""
  for folder in ("genre/dnas", "next/dnas"):
    os.makedirs(tmp_path / folder)
    (tmp_path / folder / "summary.json").write_text(json.dumps(summary("genre", ("accuracy",),
                                                                       (0.5,))))
  done = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.compare_finetuning",
       f"--workdirs={tmp_path / 'genre/dnas'},{tmp_path / 'next/dnas'}",
       f"--output={tmp_path / 'out'}"],
      capture_output=True, text=True, cwd=REPO, timeout=300,
      env=subprocess_env())
  assert done.returncode != 0
  assert str(tmp_path / "genre/dnas") in done.stderr and str(tmp_path / "next/dnas") in done.stderr
  assert not os.path.exists(tmp_path / "out")

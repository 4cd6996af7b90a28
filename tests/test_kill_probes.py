"""A run killed outright (SIGKILL) while orbax writes a checkpoint resumes, and ends bit for bit
where the uninterrupted run ends: a sweep, a pre-training and a fine-tuning, each run by a child
process that the test kills the moment a temporary checkpoint folder appears in its workdir."""
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))

# Each kind's run of one workdir (argv[1]); the fine-tuning's pre-trained encoder is argv[2].
RUNS = {
    "sweep": """
        from normattn_jax.train.sweep import run_sweep
        from test_grid import tiny_config
        config = tiny_config(**{"archs": ("nap",), "learning_rates": (0.001,),
                                "train.num_steps": 600, "train.eval_every": 20})
        run_sweep(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
    "pretrain": """
        from normattn_jax.train import pretrain
        from test_pretrain import FAKE_VOCAB, RandomExamples, tiny_config
        splits = {"train": RandomExamples(64, 0), "validation": RandomExamples(16, 1)}
        pretrain.load_data = lambda c, workdir: (FAKE_VOCAB, splits)
        config = tiny_config("hnas")
        config.train.update(num_steps=60, checkpoint_every=2, eval_every=20)
        pretrain.run_pretraining(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
    "finetune": """
        import pathlib
        from normattn_jax.finetune import train as ft
        from test_finetune import tiny_config
        config = tiny_config(pathlib.Path(sys.argv[2]))
        config.train.update(num_steps=60, eval_every=20, checkpoint_every=1)
        ft.run_finetuning(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
}


def child(kind: str, *args: str) -> subprocess.Popen:
  script = "import sys\n" + textwrap.dedent(RUNS[kind])
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([REPO, TESTS]))
  return subprocess.Popen([sys.executable, "-c", script, *args], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(kind: str, *args: str) -> None:
  process = child(kind, *args)
  _, err = process.communicate(timeout=900)
  assert process.returncode == 0, err


def kill_while_writing(kind: str, workdir: str, *args: str) -> str:
  """Start the run and SIGKILL it as soon as orbax's temporary folder of a checkpoint exists;
  the folder's path."""
  process = child(kind, workdir, *args)
  deadline = time.monotonic() + 900
  try:
    while time.monotonic() < deadline and process.poll() is None:
      found = glob.glob(os.path.join(workdir, "checkpoints", "**", "*orbax-checkpoint-tmp*"),
                        recursive=True)
      if found:
        process.send_signal(signal.SIGKILL)
        process.wait()
        return found[0]
      time.sleep(0.002)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  pytest.fail(f"the {kind} run ended ({process.returncode}) before a checkpoint was caught "
              f"being written: {process.stderr.read()[-2000:]}")


def outputs(workdir: str) -> dict:
  """What a finished run leaves: its summary, history and curves, timings aside."""
  out = {}
  with open(os.path.join(workdir, "summary.json")) as f:
    out["summary"] = {k: v for k, v in json.load(f).items() if "second" not in k}  # timings
  history = os.path.join(workdir, "history.jsonl")
  if os.path.exists(history):
    with open(history) as f:
      rows = [json.loads(line) for line in f]
    out["history"] = [{k: v for k, v in row.items() if "second" not in k} for row in rows]
  metrics = os.path.join(workdir, "metrics.npz")
  if os.path.exists(metrics):
    with np.load(metrics) as data:
      out["metrics"] = {name: data[name].tolist() for name in data.files}
  return out


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
  from test_finetune import pretrained

  return str(pretrained(tmp_path_factory.mktemp("encoder")))


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_run_killed_while_writing_a_checkpoint_resumes_bit_for_bit(kind, tmp_path, request):
  args = (request.getfixturevalue("encoder"),) if kind == "finetune" else ()
  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  finish(kind, whole, *args)
  caught = kill_while_writing(kind, killed, *args)
  assert not os.path.exists(os.path.join(killed, "summary.json"))
  finish(kind, killed, *args)  # resumes from the newest complete checkpoint
  assert not glob.glob(os.path.join(killed, "checkpoints", "**", "*orbax-checkpoint-tmp*"),
                       recursive=True), f"{caught} was left behind"
  assert outputs(killed) == outputs(whole)

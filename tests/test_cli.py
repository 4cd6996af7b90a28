"""The run scripts' shared command line (normattn_jax.train.cli)."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    from absl import app
    from normattn_jax.train import cli
    RUN = cli.define_run_flags()

    def run(config, workdir, afresh):
      import jax
      print("devices", jax.device_count(), "workdir", workdir, "afresh", afresh)

    app.run(lambda argv: cli.run_command(run, None, RUN))
""")


def command(*flags):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, "-c", SCRIPT, *flags], capture_output=True, text=True,
                        env=env, cwd=REPO)


def test_cpu_devices_splits_the_cpu_before_the_run_starts():
  done = command("--workdir=w", "--cpu_devices=3", "--afresh")
  assert done.returncode == 0, done.stderr
  assert "devices 3 workdir w afresh True" in done.stdout
  assert "devices 1 " in command("--workdir=w").stdout


def test_multi_host_flags_without_distributed_are_refused():
  done = command("--workdir=w", "--num_processes=2")
  assert done.returncode != 0 and "need --distributed" in done.stderr

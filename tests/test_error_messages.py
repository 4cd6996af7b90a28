"""Bad input from a user's files and flags is refused with an error that names the field, flag
or file at fault and its value, instead of failing later with an error that hides the cause."""
import os
import re
import subprocess
import sys

import pytest

from normattn_jax.train import multihost

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(*args, cwd=REPO):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                        cwd=cwd, timeout=600)


def write(path, text):
  with open(path, "w") as f:
    f.write(text)
  return str(path)


# ----- --coordinator_address -----

@pytest.mark.parametrize("address", ["localhost:1234", "10.0.0.1:80", "[::1]:1234", ""])
def test_coordinator_addresses_of_host_and_port_are_taken(address):
  assert multihost.address_problem(address) is None
  multihost.check_arguments(address, 2, 1)


@pytest.mark.parametrize("address", ["notahost", "host:", ":1234", "host:0", "host:65536",
                                     "host:http", "::1:1234"])
def test_other_coordinator_addresses_are_refused_by_value(address):
  with pytest.raises(ValueError, match=re.escape(f"coordinator_address={address!r} must")):
    multihost.check_arguments(address)
  with pytest.raises(ValueError, match="coordinator_address"):
    multihost.initialize(address, 2, 0)  # before JAX is asked to join anything


def test_the_run_scripts_refuse_a_coordinator_address_by_flag(tmp_path):
  script = ("from absl import app\nfrom normattn_jax.train import cli\n"
            "RUN = cli.define_run_flags()\n"
            "app.run(lambda argv: cli.run_command(lambda *a, **k: print('ran'), None, RUN))\n")
  done = run_script("-c", script, f"--workdir={tmp_path / 'w'}", "--distributed",
                    "--coordinator_address=notahost")
  assert done.returncode != 0 and "ran" not in done.stdout
  assert "--coordinator_address='notahost' must be host:port" in done.stderr
  assert "IndexError" not in done.stderr

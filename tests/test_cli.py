"""The run scripts' shared command line (normattn_jax.cli.command)."""
import os
import subprocess
import sys
import textwrap

import jax
import pytest

from normattn_jax.cli import command as cli

from helpers import REPO, subprocess_env


SCRIPT = textwrap.dedent("""
    from absl import app
    from normattn_jax.cli import command as cli
    RUN = cli.define_run_flags()

    def run(config, workdir, afresh):
      import jax
      print("devices", jax.device_count(), "workdir", workdir, "afresh", afresh)

    app.run(lambda argv: cli.run_command(run, None, RUN))
""")


def command(*flags):
  env = subprocess_env()
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, "-c", SCRIPT, *flags], capture_output=True, text=True,
                        env=env, cwd=REPO)


@pytest.fixture(scope="module")
def stopped_by_ctrl_c(tmp_path_factory):
  """A run script of ``SCRIPT``'s run that says its devices, then is stopped by Ctrl-C, run on
  one CPU device: ``(the script, its process)``."""
  script = tmp_path_factory.mktemp("ctrl_c") / "my_run.py"
  script.write_text(SCRIPT.replace('"afresh", afresh)',
                                  '"afresh", afresh)\n  raise KeyboardInterrupt'))
  env = subprocess_env()
  env.pop("XLA_FLAGS", None)
  done = subprocess.run([sys.executable, str(script), "--workdir=runs/a b", "--afresh",
                         "--cpu_devices=1"], capture_output=True, text=True, env=env, cwd=REPO)
  return script, done


def test_cpu_devices_splits_the_cpu_before_the_run_starts(stopped_by_ctrl_c):
  done = command("--workdir=w", "--cpu_devices=3", "--afresh")
  assert done.returncode == 0, done.stderr
  assert "devices 3 workdir w afresh True" in done.stdout
  assert "devices 1 " in stopped_by_ctrl_c[1].stdout  # --cpu_devices=1, before its Ctrl-C


def test_a_run_uses_one_device_per_core_by_default():
  from normattn_jax.cli import command as cli
  assert f"devices {cli.cpu_cores()} " in command("--workdir=w").stdout


def test_the_default_device_count_divides_a_data_parallel_batch():
  from normattn_jax.cli import command as cli
  assert cli.default_cpu_devices(16) == 16
  assert cli.default_cpu_devices(6, divides=(32, 64)) == 4
  assert cli.default_cpu_devices(3, divides=(30,)) == 3
  assert cli.default_cpu_devices(7, divides=(35, 14)) == 7
  assert cli.default_cpu_devices(5, divides=(7,)) == 1
  assert cli.default_cpu_devices(4, divides=("x", 0)) == 4  # left to validation


def test_the_default_leaves_a_started_jax_alone():
  import jax
  from normattn_jax.cli import command as cli
  jax.devices()  # this process's JAX has started
  assert cli.split_cpu(None) is None
  assert (cli.split_cpu(None, environ={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
          is None)


def test_ctrl_c_says_how_to_resume_instead_of_a_traceback(stopped_by_ctrl_c):
  script, done = stopped_by_ctrl_c
  assert done.returncode == cli.CTRL_C_EXIT, done.stderr
  assert "Traceback" not in done.stderr
  assert (f"runs/a b keeps its newest checkpoint; resume with\n  python {script} "
          f"'--workdir=runs/a b' --cpu_devices=1\n") in done.stderr


def test_the_resume_command_names_the_module_that_python_m_ran():
  from normattn_jax.cli import command as cli
  argv = ["/site/normattn_jax/cli/card.py", "--workdir=runs/a b", "--afresh"]
  assert (cli.resume_command(argv, "normattn_jax.cli.card")
          == "python -m normattn_jax.cli.card '--workdir=runs/a b'")
  assert cli.resume_command(["/venv/bin/normattn-card", "--afresh=true", "--x=1"]) == (
      "/venv/bin/normattn-card --x=1")


# a process flag without --distributed (one check of all three): test_distributed's
# test_process_flags_need_distributed (the sweep's command, nothing written)
@pytest.mark.slow
def test_multi_host_flags_without_distributed_are_refused():
  done = command("--workdir=w", "--num_processes=2")
  assert done.returncode != 0 and "need --distributed" in done.stderr


def test_the_compilation_cache_is_on_by_default_under_the_users_cache(tmp_path):
  import jax
  from normattn_jax.cli import command as cli
  assert cli.compilation_cache_dir({"XDG_CACHE_HOME": "/x"}) == "/x/normattn_jax/jax"
  assert cli.compilation_cache_dir({}).endswith(os.path.join(".cache", "normattn_jax", "jax"))
  assert cli.enable_compilation_cache(False) is None
  assert cli.enable_compilation_cache(True, {cli.CACHE_ENV: "0"}) is None
  given = jax.config.jax_compilation_cache_dir  # the tests' own (conftest.py) is kept
  assert cli.enable_compilation_cache(True, {"XDG_CACHE_HOME": str(tmp_path)}) == given
  try:
    jax.config.update("jax_compilation_cache_dir", None)  # none given to JAX
    assert (cli.enable_compilation_cache(True, {"XDG_CACHE_HOME": str(tmp_path)}) ==
            str(tmp_path / "normattn_jax" / "jax"))
  finally:
    jax.config.update("jax_compilation_cache_dir", given)


def test_a_compilation_cache_pointed_at_a_file_is_said_once_and_left_off(tmp_path):
  """JAX warned on every program it compiled ("Error reading persistent compilation cache
  entry ... Not a directory"); the run now says it once, naming the path, and compiles
  without it."""
  import jax
  from normattn_jax.cli import command as cli
  (tmp_path / "file").write_text("not a folder")
  given = jax.config.jax_compilation_cache_dir
  try:
    for environ, path in (({"XDG_CACHE_HOME": str(tmp_path / "file")}, "file/normattn_jax/jax"),
                          ({}, "file")):
      jax.config.update("jax_compilation_cache_dir",
                        None if environ else str(tmp_path / "file"))  # JAX_COMPILATION_CACHE_DIR
      with pytest.warns(UserWarning, match=f"the compilation cache {tmp_path / path} cannot be "
                                           f"a folder .*compiles without it"):
        assert cli.enable_compilation_cache(True, environ) is None
      assert jax.config.jax_compilation_cache_dir is None
  finally:
    jax.config.update("jax_compilation_cache_dir", given)


def test_a_run_resumed_on_another_device_count_says_so(tmp_path, monkeypatch):
  import json
  import pytest
  from normattn_jax.train import checkpoint
  first = checkpoint.write_versions(str(tmp_path))
  assert checkpoint.write_versions(str(tmp_path)) == first  # same machine: nothing to say
  more = dict(first, device_count=first["device_count"] + 1)
  monkeypatch.setattr(checkpoint, "versions", lambda: more)
  with pytest.warns(checkpoint.DeviceCountWarning, match="resumes on"):
    stored = checkpoint.write_versions(str(tmp_path))
  assert stored["resumed_with"] == [more]
  assert json.loads((tmp_path / "versions.json").read_text()) == stored
  pinned = dict(first, cpu_cores=first["cpu_cores"] + 1)  # a CPU's cores change its numbers too
  monkeypatch.setattr(checkpoint, "versions", lambda: pinned)
  cores = (first["cpu_cores"], pinned["cpu_cores"])
  with pytest.warns(checkpoint.DeviceCountWarning,
                    match=rf"on {cores[0]} core\(s\) and resumes on .* on {cores[1]} core"):
    checkpoint.write_versions(str(tmp_path))


def test_a_value_given_to_a_config_section_says_which_field_to_set():
  """--config.model.attention=dnas (the flag before attention became a section) names the
  section's fields and the flag to write, not ml_collections' "malformed node or string"."""
  done = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.pretrain",
       "--config=albert_tiny", "--config.model.attention=dnas", "--workdir=/nowhere"],
      capture_output=True, text=True, cwd=REPO, timeout=300,
      env=subprocess_env())
  assert done.returncode == 1
  assert ("--config.model.attention=dnas: config.model.attention is a section, not a value "
          "(its fields: name, options): set one of its fields, e.g. "
          "--config.model.attention.name=dnas") in done.stderr, done.stderr
  assert "malformed node" not in done.stderr


def test_other_flag_errors_are_absls_own():
  message = "flag --cpu_devices=x: invalid literal for int() with base 10: 'x'"
  from normattn_jax.cli import command as cli

  assert cli.section_hint(message) == message


def test_quick_compile_comes_before_the_first_computation():
  """The suite itself compiles quickly (conftest); once JAX has computed, asking is an error,
  not a silent no-op."""
  jax.numpy.zeros(1).block_until_ready()
  with pytest.raises(RuntimeError, match="before JAX's first computation"):
    cli.quick_compile({})
  if os.environ.get("NORMATTN_JAX_TEST_OPTIMIZED", "0") != "1":
    assert set(cli.QUICK_COMPILE_FLAGS) <= set(os.environ["XLA_FLAGS"].split())


def test_a_config_field_given_twice_is_found_by_its_name():
  """ml_collections joins a repeated tuple flag's values and keeps a scalar's last: each config
  flag given twice is found, in any spelling; ``--`` ends the flags."""
  argv = ["run.py", "--config=demo", "--config.archs=('nap',)", "--workdir=w",
          "--config.archs", "('mte',)", "--noconfig.model.flag", "-config.model.flag",
          "--configs=1", "--", "--config.seed=1", "--config.seed=2"]
  assert cli.repeated_config_fields(argv) == ["config.archs", "config.model.flag"]
  assert cli.repeated_config_fields(["run.py", "--config=a.py", "--config", "b.py"]) == ["config"]
  assert cli.repeated_config_fields(["run.py", "--config=a.py", "--config.archs=('nap',)"]) == []
  assert cli.usage_problem(["run.py"], ["run.py"]) is None


def test_a_repeated_config_field_and_stray_arguments_are_refused_before_anything_runs():
  """The union of two --config.archs, and an unquoted workdir with a space, each exit with a
  usage error naming what was given (the config would also fail, so nothing trains anyway)."""
  sweep = [sys.executable, "-m", "normattn_jax.cli.sweep", "--config=demo",
           "--config.num_seeds=0"]
  for extra, said in (
      (["--config.archs=('nap',)", "--config.archs=('mte',)", "--workdir=/nowhere"],
       "--config.archs is given more than once"),
      (["--workdir", "/nowhere/my", "runs", "a"],
       "unexpected positional arguments ['runs', 'a']")):
    done = subprocess.run(sweep + extra, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=subprocess_env())
    assert done.returncode == 1, done.stderr[-2000:]
    assert said in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("minutes", ["nan", "inf"])
@pytest.mark.fast_subset(lambda p: p["minutes"] == "nan")  # one check of the flag, two values
def test_a_budget_that_is_not_a_finite_number_of_minutes_is_a_usage_error(minutes):
  done = command(f"--max_minutes={minutes}", "--workdir=/nowhere")
  assert done.returncode == 1, done.stderr[-2000:]
  assert (f"flag --max_minutes={minutes}: must be a finite number of minutes (0: no limit)"
          in done.stderr), done.stderr[-2000:]

"""The kinds of run (``train.kinds``) and their one driver (``train.runs.run``): a kind that a
plugin module registers runs, stops on its budget and resumes to the numbers of an uninterrupted
run, as a built-in one does, from Python and from ``normattn-run --plugins``."""
import ast
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from normattn_jax.cli.command import load_builtin_kinds
from normattn_jax.registry import load_plugins
from normattn_jax.train import kinds, runs
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.driver import Budget, Interrupted

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A new kind of run in one module: a grid of random walks, one per seed, a chunk a step, its
# state and metrics checkpointed by RunHooks.
PLUGIN = '''
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from normattn_jax.train import kinds
from normattn_jax.train.driver import RunHooks
from normattn_jax.validation import check_config_int


def base_config():
  return ml_collections.ConfigDict({"kind": "random_walk", "steps": 6, "seeds": 3, "seed": 0,
                                    "checkpoint_every": 1})


def validate(c):
  check_config_int("steps", c.steps)
  check_config_int("seeds", c.seeds)


def train(c, context):
  keys = jax.random.split(jax.random.key(c.seed), c.seeds)
  state = {"position": jnp.zeros(c.seeds)}
  with RunHooks(context.path("checkpoints"), c.checkpoint_every, c.steps, budget=context.budget,
                name="random walk") as hooks:
    done, state, metrics = hooks.resume(None, state, None)
    metrics = metrics or {"position": np.zeros((c.steps, c.seeds), np.float32)}
    for step in range(done, c.steps):
      moves = jax.vmap(lambda key: jax.random.normal(jax.random.fold_in(key, step)))(keys)
      state = {"position": state["position"] + moves}
      metrics["position"][step] = np.asarray(state["position"])
      hooks.on_chunk(step + 1, state, metrics)
  return metrics


kinds.register(kinds.RunKind(
    name="random_walk", may_differ={"checkpoint_every"}, base_config=base_config,
    validate=validate, train=train,
    summarise=lambda c, metrics: {"positions": metrics["position"].tolist()},
    describe=lambda summary: [f"final positions {summary['positions'][-1]}"]))
'''

CONFIG_FILE = '''"""Random walks, e.g. Fig. 1 of a paper on walks. Their positions."""
import walk_plugin


def get_config():
  return walk_plugin.base_config()
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
  folder = tmp_path / "plugins"
  folder.mkdir()
  (folder / "walk_plugin.py").write_text(PLUGIN)
  (folder / "walk_config.py").write_text(CONFIG_FILE)
  monkeypatch.syspath_prepend(str(folder))
  load_plugins(["walk_plugin"])
  yield folder
  kinds.unregister("random_walk")
  sys.modules.pop("walk_plugin", None)


def walk_config(**fields):
  config = kinds.get("random_walk").base_config()
  config.update(fields)
  return config


def read(path):
  with open(path) as f:
    return json.load(f)


def test_a_plugins_kind_stopped_by_its_budget_resumes_to_the_uninterrupted_numbers(plugin,
                                                                                   tmp_path):
  whole = runs.run(walk_config(), str(tmp_path / "whole"), show_progress=False)
  parts = str(tmp_path / "parts")
  with pytest.raises(Interrupted, match="random walk: stopped after 2 of 6"):
    runs.run(walk_config(), parts, budget=Budget(chunks=2))
  assert not os.path.exists(os.path.join(parts, "summary.json"))
  with pytest.raises(Interrupted, match="stopped after 3 of 6"):
    runs.run(walk_config(checkpoint_every=3), parts, budget=Budget(chunks=1))  # may differ
  resumed = runs.run(walk_config(), parts)
  assert resumed == whole
  assert read(os.path.join(parts, "summary.json")) == whole
  assert read(os.path.join(parts, "config.json"))["kind"] == "random_walk"
  assert runs.run(walk_config(), parts, budget=Budget(chunks=0)) == whole  # finished: read back


def test_a_plugins_kind_owns_its_workdir_rules(plugin, tmp_path):
  assert kinds.get("random_walk").may_differ == {"checkpoint_every"}
  workdir = str(tmp_path / "run")
  runs.run(walk_config(), workdir)
  with pytest.raises(WorkdirError, match="steps was 6, now 5"):
    runs.run(walk_config(steps=5), workdir)
  with pytest.raises(ValueError, match=r"config.steps=0: must be a positive integer"):
    runs.run(walk_config(steps=0), str(tmp_path / "bad"))
  assert not os.path.exists(tmp_path / "bad")


def test_run_py_dispatches_on_the_kind_a_plugin_registers(plugin, tmp_path):
  whole = runs.run(walk_config(), str(tmp_path / "whole"))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([REPO, str(plugin)]))
  command = [sys.executable, "-m", "normattn_jax.cli.run", "--plugins=walk_plugin",
             "--config", str(plugin / "walk_config.py"), "--workdir", str(tmp_path / "cli"),
             "--nocompilation_cache"]
  done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
  assert done.returncode == 0, done.stderr
  assert f"final positions {whole['positions'][-1]}" in done.stdout
  # the run's figures name the experiment its config file says it runs
  assert read(tmp_path / "cli" / "about.json") == {
      "experiment": "Random walks, e.g. Fig. 1 of a paper on walks."}
  assert read(tmp_path / "cli" / "summary.json") == whole


def test_a_config_of_no_kind_is_refused_naming_the_field(tmp_path):
  load_builtin_kinds()  # as the command line does
  config = kinds.get("sweep").base_config()
  config.kind = "sweeep"
  with pytest.raises(ValueError, match=r"config.kind='sweeep': must name a kind of run, one of "
                                       r"\(.*'sweep'.*\)") as refused:
    runs.run(config, str(tmp_path / "run"))
  listed = ast.literal_eval(str(refused.value).split("of ")[-1])
  assert {"pretraining", "report_card"} <= set(listed)
  assert not os.path.exists(tmp_path / "run")


def test_a_kind_declares_what_may_differ():
  with pytest.raises(TypeError, match="may_differ"):
    kinds.RunKind(name="forgetful")  # the missing field is the point
  with pytest.raises(TypeError, match="the string 'steps'"):
    kinds.RunKind(name="careless", may_differ="steps")
  load_builtin_kinds()
  with pytest.raises(ValueError, match="run kind 'sweep' is already registered"):
    kinds.register(kinds.RunKind(name="sweep", may_differ=()))


def test_every_shipped_config_names_a_registered_kind():
  names = load_builtin_kinds()
  for path in sorted(os.listdir(os.path.join(REPO, "normattn_jax", "configs"))):
    if path.endswith(".py") and not path.startswith("_"):
      spec = importlib.util.spec_from_file_location(
          path[:-3], os.path.join(REPO, "normattn_jax", "configs", path))
      module = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(module)
      assert module.get_config().kind in names, path


def test_a_pretraining_workdir_from_before_the_kinds_is_an_encoder():
  """Its config.json has no kind: it reads as the pre-training it is; a sweep's is refused."""
  from normattn_jax.finetune import encoders

  committed = os.path.join(REPO, "results", "albert_tiny", "softmax")
  assert "kind" not in read(os.path.join(committed, "config.json"))
  assert encoders.pretraining_config(committed).kind == "pretraining"
  with pytest.raises(ValueError, match="is not a pre-training workdir"):
    encoders.pretraining_config(os.path.join(REPO, "results", "fig3_reduced"))


def test_a_config_of_another_kind_is_named_before_a_field_is_read():
  """A sweep's config with --config.kind=pretraining failed as a chained KeyError on
  train.eval_batch_size; it is refused naming the fields and the kind they belong to."""
  from normattn_jax.configs import demo
  c = demo.get_config()
  c.kind = "pretraining"
  with pytest.raises(ValueError, match=r"config.kind='pretraining': the config's fields are not "
                                       r"a pretraining config's: it lacks \['data'\].*they are "
                                       r"a 'sweep' config's"):
    kinds.kind_of(c)
  c.kind = "sweep"
  c.extra_field = 1  # a field too many is the known-fields rule's to name
  assert kinds.kind_of(c).name == "sweep"

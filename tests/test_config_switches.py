"""The config's switches (``model.positional``, ``model.normalize``, ``model.attention_gelu``,
``train.warmup``, ``train.clip``) are True, False or None for the arch's (or the task's) own
choice; a run stored when they were the strings "auto", "true" and "false" still reads."""
import copy
import json
import os

import ml_collections
import pytest

from normattn_jax.sweep import validate
from normattn_jax.train.checkpoint import WorkdirError, check_workdir, config_json
from normattn_jax.sweep.config import SWITCHES, base_config, point_config, static_points
from normattn_jax.sweep.migrate import with_boolean_switches
from normattn_jax.train.migrate import with_current_names
from normattn_jax.sweep.programs import Setup
from helpers.sweeps import tiny_sweep_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def section_and_key(field):
  return field.split(".")


def test_the_switches_default_to_none_and_refuse_strings():
  c = base_config()
  assert [c[s][k] for s, k in map(section_and_key, SWITCHES)] == [None] * len(SWITCHES)
  with pytest.raises(TypeError):
    c.model.normalize = "true"  # the config's own type check, at assignment
  loaded = ml_collections.ConfigDict(json.loads(tiny_sweep_config().to_json()))  # e.g. from a file
  loaded.train.clip = "auto"
  with pytest.raises(ValueError, match=r"config.train.clip='auto': must be True, False or None"):
    validate(loaded)


@pytest.mark.parametrize("arch,warmup,clip,expected", [
    ("bert", None, None, (3, 1.0)),
    ("mte", None, None, (0, None)),
    ("bert", False, False, (0, None)),
    ("mte", True, True, (3, 1.0)),
])
def test_none_is_the_archs_own_choice(arch, warmup, clip, expected):
  c = tiny_sweep_config(**{"train.warmup": warmup, "train.clip": clip})
  validate(c)
  setup = Setup(arch, c)
  assert (setup.warmup_steps, setup.clip_norm) == expected


def test_ablation_stages_set_booleans():
  c = tiny_sweep_config(archs=("bert",))
  c.sweep.name, c.sweep.grid = "ablation", (0, 1, 2, 3, 4)
  stages = [point_config(c, point) for point in static_points(c)]
  assert [(s.train.warmup, s.train.clip, s.model.normalize, s.model.attention_gelu)
          for s in stages] == [(True, True, False, False), (False, True, False, False),
                               (False, False, False, False), (False, False, True, False),
                               (False, False, True, True)]
  assert [Setup("bert", s).warmup_steps for s in stages[:2]] == [3, 0]


def test_an_old_config_reads_with_boolean_switches():
  with open(os.path.join(REPO, "results", "fig7_mode_reduced", "config.json")) as f:
    stored = json.load(f)  # a committed run of the mode task, stored with the strings
  assert stored["model"]["normalize"] == "" and stored["train"]["warmup"] == "auto"
  tree = with_current_names(stored, "sweep")
  assert [tree[s][k] for s, k in map(section_and_key, SWITCHES)] == [None] * len(SWITCHES)
  assert stored["model"]["normalize"] == ""  # the stored tree is left as it was
  setup = Setup("bert", ml_collections.ConfigDict(tree))
  assert not setup.positional  # the counting task never had them
  assert (setup.warmup_steps, setup.clip_norm) == (60, 1.0)  # BERT's own: 600 steps / 10


def test_old_strings_map_one_to_one():
  old = {"model": {"positional": False, "normalize": "true", "attention_gelu": "false"},
         "train": {"warmup": "", "clip": "auto"}, "seed": 0}
  assert with_boolean_switches(old) == {
      "model": {"positional": False, "normalize": True, "attention_gelu": False},
      "train": {"warmup": None, "clip": None}, "seed": 0}
  today = {"model": {"positional": True, "normalize": None}, "train": {"clip": False}}
  assert with_boolean_switches(today) is today  # a config with booleans is today's
  with pytest.raises(ValueError, match="config.train.clip='yes'"):
    with_boolean_switches({"model": {}, "train": {"clip": "yes"}})


def legacy_tree(config, **strings):
  """``config``'s config.json as it was stored when the switches were strings."""
  tree = copy.deepcopy(config_json(config))
  tree["model"]["positional"] = True
  for field in SWITCHES[1:]:
    section, key = section_and_key(field)
    tree[section][key] = strings.get(key, "auto")
  return tree


def test_a_workdir_of_an_old_config_resumes_with_todays(tmp_path):
  config = tiny_sweep_config(**{"task.name": "mode_finding", "task.output": "classes",
                          "task.vocab_size": 10})
  with open(tmp_path / "config.json", "w") as f:
    json.dump(legacy_tree(config), f)
  check_workdir(str(tmp_path), config, "sweep")  # no error: the same run
  with open(tmp_path / "config.json", "w") as f:
    json.dump(legacy_tree(config, normalize="false"), f)
  with pytest.raises(WorkdirError, match="model.normalize was false, now null"):
    check_workdir(str(tmp_path), config, "sweep")

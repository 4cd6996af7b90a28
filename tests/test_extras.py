"""The core install (jax, flax, optax, chex, numpy) runs the models; the extras say when missing;
every results folder records the versions it ran with."""
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from normattn_jax import _extras
from test_grid import run, tiny_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CORE = ("jax", "flax", "optax", "chex", "numpy")
# Always outside the core install, whatever jax and flax come to depend on.
OPTIONAL = ("tensorflow_datasets", "array_record", "sentencepiece", "tokenizers", "safetensors",
            "wordfreq", "matplotlib", "ml_collections", "tqdm", "tensorboardX")


def _key(name):
  return re.sub(r"[-_.]+", "-", name).lower()


def core_closure():
  """The distributions that ``pip install normattn_jax`` brings: the core and what it requires
  (conditional requirements counted, extras not)."""
  seen, todo = set(), list(CORE)
  while todo:
    name = todo.pop()
    if _key(name) in seen:
      continue
    try:
      requires = importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
      continue
    seen.add(_key(name))
    todo += [re.match(r"[A-Za-z0-9._-]+", r).group() for r in requires if "extra ==" not in r]
  return seen


def not_in_core():
  """The import names of the installed distributions outside the core install."""
  core = core_closure() | {"normattn-jax"}
  return sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                if not any(_key(d) in core for d in dists))


CORE_ONLY = textwrap.dedent("""
    import sys

    BLOCKED = set(sys.argv[1].split(","))
    STARTUP = set(sys.modules)  # what site's .pth files loaded before any import here

    class Blocker:
      # A core install: the optional packages are not there.
      def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
          raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

    sys.meta_path.insert(0, Blocker())

    import jax
    import jax.numpy as jnp
    import numpy as np

    import normattn_jax
    from normattn_jax import MultiHeadAttention, SequenceModel, TransformerBlock
    from normattn_jax import norms, tasks
    from normattn_jax.analysis import mixing, mode_collapse
    from normattn_jax.models import bert

    key = jax.random.key(0)
    x = jax.random.normal(key, (2, 6, 8))
    for module in (MultiHeadAttention(num_heads=2, normalization="nap"),
                   TransformerBlock(num_heads=2, arch="mte")):
      assert module.apply(module.init(key, x), x).shape == x.shape
    tokens = jax.random.randint(key, (2, 6), 0, 20)
    model = SequenceModel(vocab_size=20, max_len=6, d_model=8, num_layers=1, num_heads=2)
    assert model.apply(model.init(key, tokens), tokens).shape == (2, 6)
    config = bert.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16,
                             max_position_embeddings=8)
    encoder = bert.BertModel(config)
    ids = jnp.ones((1, 5), jnp.int32)
    hidden = encoder.apply(encoder.init(key, ids), ids)["last_hidden_state"]
    assert hidden.shape == (1, 5, 8) and np.isfinite(np.asarray(hidden)).all()

    def error(call):
      try:
        call()
      except ImportError as err:
        return str(err)
      raise AssertionError(f"{call} ran without its extra")

    def imported(name):
      return lambda: __import__(name)

    print(error(lambda: bert.load_tokenizer("nowhere")))
    print(error(lambda: mixing.wordfreq_frequencies(["word"])))
    print(error(imported("normattn_jax.train")))
    print(error(imported("normattn_jax.data")))
    print(error(imported("normattn_jax.reporting.figures")))
    loaded = {name.partition(".")[0] for name in set(sys.modules) - STARTUP}
    print("loaded:", sorted(BLOCKED & loaded))
    """)


def test_core_install_runs_the_models_and_names_the_missing_extra():
  blocked = not_in_core()
  assert set(OPTIONAL) <= set(blocked)
  done = subprocess.run([sys.executable, "-c", CORE_ONLY, ",".join(blocked)], cwd=REPO,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert done.returncode == 0, done.stderr
  lines = done.stdout.splitlines()
  assert lines == [
      "normattn_jax.models.bert needs the optional package tokenizers: "
      "pip install 'normattn_jax[bert]'",
      "normattn_jax.analysis.mixing needs the optional package wordfreq: "
      "pip install 'normattn_jax[analysis]'",
      "normattn_jax.train needs the optional package ml_collections: "
      "pip install 'normattn_jax[experiments]'",
      "normattn_jax.data.tfds_text needs the optional package tensorflow_datasets: "
      "pip install 'normattn_jax[pretrain]'",
      "normattn_jax.reporting.figures needs the optional package matplotlib: "
      "pip install 'normattn_jax[experiments]'",
      "loaded: []",
  ]


def test_every_extra_named_in_the_code_is_declared():
  with open(os.path.join(REPO, "setup.py")) as f:
    setup = f.read()
  for extra in _extras.EXTRAS:
    assert f'"{extra}":' in setup, extra
  with pytest.raises(ValueError, match="unknown extra"):
    _extras.require("numpy", "plots")


def test_a_sweep_records_the_versions_it_ran_with(tmp_path):
  run(tiny_config(**{"train.num_steps": 10, "train.eval_every": 10}), tmp_path)
  with open(tmp_path / "versions.json") as f:
    recorded = json.load(f)
  assert recorded == json.loads(json.dumps(_extras.versions()))
  for name in ("normattn_jax", "jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint"):
    assert recorded["packages"][name], name
  assert recorded["python"] and recorded["device_kind"]


def test_a_resumed_run_keeps_the_versions_it_started_with(tmp_path, monkeypatch):
  from normattn_jax.train import checkpoint

  started = checkpoint.write_versions(str(tmp_path))
  later = dict(started, packages=dict(started["packages"], jax="99.0"))
  monkeypatch.setattr(checkpoint, "versions", lambda: later)
  checkpoint.write_versions(str(tmp_path))
  checkpoint.write_versions(str(tmp_path))  # the same again: recorded once
  with open(tmp_path / "versions.json") as f:
    recorded = json.load(f)
  assert {k: v for k, v in recorded.items() if k != "resumed_with"} == started
  assert recorded["resumed_with"] == [later]

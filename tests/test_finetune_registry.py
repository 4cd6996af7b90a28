"""Fine-tuning heads and tasks are registries like the normalisations': the built-in tasks (the
offline and the TFDS ones) are in the one task registry as soon as the package is imported, a
user's head and task join them from a module given to ``--plugins``, and a name already taken is
refused."""
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.finetune import heads
from normattn_jax.finetune import task as task_lib
from normattn_jax.finetune import train as ft
from normattn_jax.models.bert import BertConfig, BertModel
from normattn_jax.registry import load_plugins

from helpers import REPO, subprocess_env

PLUGIN = "finetune_registry_plugin"

# A user's module: a head with one logit and a sigmoid loss, and a task of its own (the parity of
# each sequence's second token, as ids, so no tokenizer is needed) that refuses a config too small.
PLUGIN_SOURCE = textwrap.dedent('''
    import numpy as np
    import optax

    from normattn_jax.finetune import heads
    from normattn_jax.finetune import task as task_lib
    from normattn_jax.validation import fail_config


    def sigmoid_loss(logits, batch):
      return optax.sigmoid_binary_cross_entropy(logits[:, 0], batch["label"]).mean()


    def positive(logits, batch):
      del batch
      return (logits[:, 0] > 0).astype(np.int32)


    BINARY = heads.register(heads.Head(
        "binary_logit", lambda encoder, n, rate: heads.SequenceClassifier(encoder, 1, rate),
        sigmoid_loss, positive, ("label",), labels="classes"))


    def split(count, length, seed):
      ids = np.random.default_rng(seed).integers(5, 50, (count, length)).astype(np.int32)
      return {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
              "attention_mask": np.ones_like(ids), "label": ids[:, 1] % 2}


    def load(tokenizer, c):
      del tokenizer
      count = c.max_examples or 16
      train, dev = split(count, c.max_seq_length, 0), split(count, c.max_seq_length, 1)
      labels = dev["label"]
      return task_lib.FinetuneTask(
          "second_token_parity", "binary_logit", 2, train, dev,
          lambda predictions: {"accuracy": float(np.mean(predictions == labels))},
          ("accuracy",))


    def check(c):
      if c.max_examples and c.max_examples < 4:
        fail_config("task.max_examples", c.max_examples, "must be 0 or at least 4")


    PARITY = task_lib.register(task_lib.TaskLoader("second_token_parity", load, check))
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
  """The user's module loaded as ``--plugins`` loads it; its head and task unregistered after."""
  (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
  monkeypatch.syspath_prepend(str(tmp_path))
  load_plugins([PLUGIN])
  yield sys.modules[PLUGIN]
  task_lib.unregister("second_token_parity")
  heads.unregister("binary_logit")
  del sys.modules[PLUGIN]


def task_config(**task):
  c = ft.base_finetune_config()
  c.task.update(name="second_token_parity", max_seq_length=12, max_examples=8)
  c.task.update(task)
  return c


def test_every_builtin_task_is_registered_once_the_package_is_imported():
  out = subprocess.run(
      [sys.executable, "-c", "from normattn_jax.finetune import task; print(task.names())"],
      cwd=REPO, env=subprocess_env(), capture_output=True, text=True, check=True)
  names = eval(out.stdout)
  assert {"shakespeare_genre", "shakespeare_next_line", "cola", "stsb", "squad_v2.0",
          "race"} <= set(names)
  assert len(names) == len(set(names))


def test_a_users_head_and_task_train_through_the_registries(plugin):
  assert "binary_logit" in heads.HEADS and "second_token_parity" in task_lib.FINETUNE_TASKS
  assert heads.get("binary_logit") is plugin.BINARY
  ft.validate_finetune_config(task_config(), check_paths=False)
  task = task_lib.load("second_token_parity", None, task_config().task)
  assert task.head == "binary_logit" and task.seq_len == 12
  head = heads.get(task.head)
  batch = {k: jnp.asarray(v) for k, v in task.arrays("train").items()}
  encoder = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32,
                                 max_position_embeddings=16), add_pooler=True)
  model = head.build(encoder, task.num_labels, 0.1)
  # one program each (op by op, each operation compiles)
  variables = jax.jit(model.init)(jax.random.key(0), batch)
  logits = jax.jit(model.apply)(variables, batch)
  assert logits.shape == (8, 1)
  assert np.isfinite(float(jax.jit(head.loss)(logits, batch)))
  assert set(task.score(np.asarray(jax.jit(head.predict)(logits, batch)))) == {"accuracy"}


def test_a_users_task_checks_its_config_before_anything_is_written(plugin):
  with pytest.raises(ValueError, match=r"config.task.max_examples=2: must be 0 or at least 4"):
    task_lib.check_config("second_token_parity", task_config(max_examples=2).task)


def test_an_unregistered_task_is_refused_naming_the_registered_ones(plugin):
  with pytest.raises(ValueError, match=r"config.task.name='parity'.*'second_token_parity'"):
    ft.validate_finetune_config(task_config(name="parity"), check_paths=False)


def test_a_name_already_registered_is_refused(plugin):
  with pytest.raises(ValueError, match="head 'classification' is already registered"):
    heads.register(heads.Head("classification", plugin.BINARY.build, plugin.BINARY.loss,
                              plugin.BINARY.predict, ("label",)))
  with pytest.raises(ValueError, match="fine-tuning task 'shakespeare_genre' is already "
                                       "registered"):
    task_lib.register(task_lib.TaskLoader("shakespeare_genre", plugin.load))
  with pytest.raises(ValueError, match="fine-tuning task 'second_token_parity' is already "
                                       "registered"):
    task_lib.register(task_lib.TaskLoader("second_token_parity", plugin.load))
  assert task_lib.get("shakespeare_genre").load is not plugin.load
  assert heads.get("classification").loss is not plugin.BINARY.loss


@pytest.mark.parametrize("field, value, message", [
    ("labels", "class", "labels must be one of"), ("label_fields", (), "label_fields must be")])
def test_a_head_the_checks_cannot_serve_is_refused(plugin, field, value, message):
  fields = dict(name="odd", build=plugin.BINARY.build, loss=plugin.BINARY.loss,
                predict=plugin.BINARY.predict, label_fields=("label",), labels="classes")
  with pytest.raises(ValueError, match=f"head 'odd': {message}"):
    heads.register(heads.Head(**(fields | {field: value})))
  assert "odd" not in heads.HEADS

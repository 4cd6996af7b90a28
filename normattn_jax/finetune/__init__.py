"""Fine-tuning pre-trained models on downstream tasks: data, heads, training and metrics.

The built-in tasks, the offline ones (``offline``) and those of TFDS (``tfds_tasks``), are
registered here, as the package is imported, in the one registry of fine-tuning tasks
(``task.REGISTRY``) that a user's tasks join.
"""
from normattn_jax.finetune import offline, task, tfds_tasks


def _register_builtin_tasks() -> tuple:
  return tuple(task.register(loader).name for loader in offline.LOADERS + tfds_tasks.LOADERS)


BUILTIN_FINETUNE_TASKS = _register_builtin_tasks()

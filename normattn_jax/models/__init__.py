"""Models built from the blocks: the synthetic-task ``SequenceModel``."""
from normattn_jax.models.sequence import SequenceModel

__all__ = ["SequenceModel"]

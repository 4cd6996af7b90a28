"""Pallas kernels for what XLA leaves in memory, and the rules that decide where they run.

``platform`` (which platform a program is traced for, and whether kernels run interpreted),
``ffn`` (the blocks' feed-forward sub-block, its hidden layer never in memory), ``rules`` (where
each kernel was measured faster than the XLA path, per kind of device). The lowest floor: this
package imports only jax.
"""

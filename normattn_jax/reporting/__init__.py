"""What a person reads of a finished sweep: tables (``reporting.tables``) and figures
(``reporting.figures``, which needs matplotlib, from the ``[experiments]`` extra). Both read a
sweep's ``summary.json`` and ``metrics.npz`` and never train."""

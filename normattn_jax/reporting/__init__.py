"""What a person reads of a finished sweep: tables (``reporting.tables``), figures
(``reporting.figures``, which needs matplotlib, from the ``[experiments]`` extra) and seeds
beside the NAP authors' stored ones (``sweep.seeds``). They read a sweep's ``summary.json``
and ``metrics.npz`` and never train."""

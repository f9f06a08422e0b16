"""The training engine: the LightningModule every forecaster trains in (``module``), the
metrics each declared once (``metrics``), callbacks, the learning-rate schedule, loggers,
Optuna pruning, freed memory kept between steps (``host_memory``) and DDP's test results
gathered in order (``distributed``). It knows models and data, and nothing of run
directories or entry points."""

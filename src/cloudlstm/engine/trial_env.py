"""How the Optuna sweeper names a job's trial: environment variables set by the sweeper
(``hydra.job.env_set``) and read in the job, by the pruning callback
(:mod:`cloudlstm.engine.pruning`) and by the line of a stopped job
(:mod:`cloudlstm.rundir.stops`). Environment variables, not config keys, so that they appear
neither in the run's name nor in its ``config.yaml``, which comparisons read. Standard
library only: a stopped job's line is written before torch is imported."""

from __future__ import annotations

import os

STORAGE_ENV = "CLOUDLSTM_OPTUNA_STORAGE"
STUDY_ENV = "CLOUDLSTM_OPTUNA_STUDY"
TRIAL_ENV = "CLOUDLSTM_OPTUNA_TRIAL"


def named_trial() -> tuple[str, str, int] | None:
    """``(storage URL, study name, trial number)`` of the trial this job trains, as the
    sweeper named it; None when the job is no trial of a search."""
    url, name, number = (os.environ.get(k) for k in (STORAGE_ENV, STUDY_ENV, TRIAL_ENV))
    if not (url and name and number):
        return None
    return url, name, int(number)

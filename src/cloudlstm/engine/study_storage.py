"""The Optuna study as the search (``hydra_plugins.cloudlstm_optuna``) and a trial's job
(:mod:`cloudlstm.engine.pruning`) both reach it: its storage, the faults of writing it, the
trial attribute of a pruned job, and the direction a pruned metric must improve in.
Without Lightning (and torch with it: seconds to import), which the search does not need
as it starts, nor at all where its trials run in other processes (joblib, SLURM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cloudlstm.engine.declared_metrics import monitor_mode
from cloudlstm.errors import UserError, sqlite_write_fault

if TYPE_CHECKING:
    import optuna

# Trial user attribute: the global step at which the job stopped on the pruner's word.
PRUNED_ATTR = "pruned_at_step"
# SQLite waits this long for another process's write lock before it fails: the sweeper and
# several jobs write to one file, each only briefly, so waiting is always right.
SQLITE_LOCK_TIMEOUT_S = 120


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The Optuna storage at ``url`` (any SQLAlchemy URL Optuna takes: sqlite, postgresql,
    mysql)."""
    import optuna

    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        engine_kwargs["connect_args"] = {"timeout": SQLITE_LOCK_TIMEOUT_S}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


# What to do where the study cannot be written: the same command continues the search.
STUDY_FULL_THEN = (
    "Make room (or raise the limit), then run the search's command again: it continues from "
    "what its study holds."
)


def storage_write_fault(err: BaseException, url: str) -> UserError | None:
    """The one-line error of a study in an SQLite file (``url``) that could not be written:
    a full disk, a quota, a file size limit, an I/O error
    (:func:`~cloudlstm.errors.sqlite_write_fault`); None for any other error or storage."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///")
    return sqlite_write_fault(err, path, STUDY_FULL_THEN, what="the Optuna study")


def check_direction(monitor: str, direction: str) -> None:
    """Refuse to report ``monitor`` to a study of the other ``direction`` (``minimize`` or
    ``maximize``): its pruner compares the reported values in the study's direction, so it
    would stop the trials whose metric improves most.

    Raises:
        UserError: ``monitor`` is declared to improve the other way (``val/ssim``: up).
    """
    declared = monitor_mode(monitor, default=None)
    wanted = "max" if direction == "maximize" else "min"
    if declared is not None and declared != wanted:
        raise UserError(
            f"callbacks.optuna_pruning.monitor={monitor} improves as it gets "
            f"{'higher' if declared == 'max' else 'lower'}, but the study is to {direction} "
            "(optimized_metric): its pruner would stop the best trials. Report a metric of the "
            "objective's direction (callbacks.optuna_pruning.monitor=val/mae for val/mae_best), "
            "or search without pruning (hydra/sweeper/pruner=none)."
        )

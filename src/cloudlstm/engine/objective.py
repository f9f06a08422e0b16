"""The ``val/`` keys a run logs, and a search's objective (``optimized_metric``) checked
against them before anything trains: by ``train.py`` for its run and by the Optuna sweeper
before its first trial."""

from __future__ import annotations

from cloudlstm.engine.declared_metrics import declared
from cloudlstm.engine.quantile_metrics import QUANTILE_DECLARED
from cloudlstm.errors import UserError


def validation_keys(quantiles: bool) -> list[str]:
    """The keys every validation logs: the loss, each declared metric logged at validation,
    with quantile forecasts (``quantiles``) theirs (CRPS), and the best MAE so far."""
    infos = [*declared(), *(QUANTILE_DECLARED if quantiles else ())]
    return ["val/loss", *(f"val/{i.name}" for i in infos if i.at_validation), "val/mae_best"]


def check_optimized_metric(key: object, quantiles: bool) -> None:
    """Refuse an ``optimized_metric`` that no run logs before anything trains (a search
    would find out when its first trial had finished); None or empty: no objective.
    ``quantiles``: whether the runs forecast quantiles (or a search may make them).

    Raises:
        UserError: ``key`` is none of :func:`validation_keys`.
    """
    if not key:
        return
    logged = validation_keys(quantiles)
    if str(key) in logged:
        return
    crps = "" if quantiles else " (val/crps with module.quantiles)"
    raise UserError(
        f"optimized_metric={key} is no validation metric the runs log: name one of "
        f"{', '.join(logged)}{crps}, e.g. optimized_metric=val/mae_best."
    )


def check_search_objective(key: object, quantiles: bool) -> None:
    """Refuse a search without an objective (``optimized_metric`` null or blank) before any
    trial: each trial would train in full and then have no value to return; then check the
    key as :func:`check_optimized_metric` does.

    Raises:
        UserError: ``key`` is empty, or none of :func:`validation_keys`.
    """
    if key is None or not str(key).strip():
        logged = ", ".join(validation_keys(quantiles))
        raise UserError(
            f"optimized_metric={'null' if key is None else repr(key)} gives the search no "
            f"objective: name the validation metric its trials return, one of {logged}, "
            "e.g. optimized_metric=val/mae_best."
        )
    check_optimized_metric(key, quantiles)

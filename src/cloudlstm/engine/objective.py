"""A search's objective (``optimized_metric``), checked before anything trains: by
``train.py`` for its run and by the Optuna sweeper before its first trial."""

from __future__ import annotations

import re

from cloudlstm.engine.declared_metrics import metric_names, monitor_mode
from cloudlstm.engine.quantile_metrics import is_quantile_metric
from cloudlstm.errors import UserError


def check_optimized_metric(key: object) -> None:
    """Refuse an ``optimized_metric`` that no run logs before anything trains (a search
    would find out when its first trial had finished); None or empty: no objective.

    Raises:
        UserError: ``key`` is not ``val/<the loss, a declared metric or a quantile
            forecast's metric>``, with an optional ``_best`` or ``_hNN`` as
            :func:`monitor_mode` reads it.
    """
    if not key:
        return
    stage, _, name = str(key).partition("/")
    name = re.sub(r"(_best|_h\d+)$", "", name)
    if stage == "val" and (monitor_mode(str(key), None) is not None or is_quantile_metric(name)):
        return
    names = ", ".join(f"val/{name}" for name in ("loss", *metric_names()))
    raise UserError(
        f"optimized_metric={key} is no validation metric the runs log: name one of {names} "
        "or, for quantile forecasts, val/crps (with _best for the best so far), e.g. "
        "optimized_metric=val/mae_best."
    )

"""A search's objective (``optimized_metric``) and the metric a run follows (``monitor``),
checked before anything trains: by ``train.py`` for its run and by the Optuna sweeper
before its first trial."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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


def check_monitored(cfg: Mapping[str, Any]) -> None:
    """Refuse a ``monitor`` (the top-level one, the training module's, a callback's) that
    no validation logs: Lightning would find out at the end of the first validation, after
    the steps before it had trained, with a traceback.

    Raises:
        UserError: the key is not ``val/loss``, ``val/mae_best``, ``val/<a declared
            metric>``, or ``val/crps`` for a run of quantile forecasts.
    """
    module = cfg.get("module") or {}
    logged = ["val/loss", *(f"val/{name}" for name in metric_names()), "val/mae_best"]
    if module.get("quantiles"):
        logged.append("val/crps")
    settings = [("monitor", cfg.get("monitor")), ("module.monitor", module.get("monitor"))]
    for name, node in (cfg.get("callbacks") or {}).items():
        if isinstance(node, Mapping) and node.get("monitor") is not None:
            settings.append((f"callbacks.{name}.monitor", node.get("monitor")))
    for where, key in settings:
        if key is None or str(key) in logged:
            continue
        quantile = "" if module.get("quantiles") else " (val/crps with module.quantiles)"
        raise UserError(
            f"{where}={key} is no metric a validation logs: name one of {', '.join(logged)}"
            f"{quantile}, e.g. monitor=val/mae."
        )

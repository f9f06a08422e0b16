"""The CSV logger keeps one log per run directory (cloudlstm.engine.loggers.CSVLogger); an
online W&B run that cannot start is one line, and each training logs to a W&B run of its
own (cloudlstm.engine.loggers.WandbLogger)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from cloudlstm.cli.train import train
from cloudlstm.engine.loggers import CSVLogger
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import wandb_run_id
from tests.conftest import PYTHON, ROOT, TINY, compose_train, subprocess_env
from tests.wandb_reader import finished_run


def write(save_dir, rows: list[tuple[int, dict[str, float]]]) -> None:
    """One process's logging: ``rows`` of (step, metrics), then the end of the run."""
    logger = CSVLogger(save_dir, name="csv")
    for step, metrics in rows:
        logger.log_metrics(metrics, step=step)
    logger.finalize("success")


def test_a_restart_replaces_the_rows_it_redoes_and_keeps_the_earlier_ones(tmp_path):
    write(tmp_path, [(s, {"train/loss": 1.0 + s}) for s in range(6)] + [(4, {"val/mae": 9.0})])
    # restarted from a checkpoint at step 3: steps 3 to 5 again, with other values
    write(tmp_path, [(s, {"train/loss": 10.0 + s}) for s in range(3, 6)])

    (path,) = tmp_path.glob("csv/*/metrics.csv")
    log = pd.read_csv(path)
    assert path.parent.name == "version_0"
    assert log["step"].tolist() == [0, 1, 2, 3, 4, 5]
    assert log["train/loss"].tolist() == [1.0, 2.0, 3.0, 13.0, 14.0, 15.0]
    # the killed process's validation at step 4 was redone by none: its column goes too
    assert "val/mae" not in log.columns


def test_a_new_metric_after_a_restart_gets_its_column(tmp_path):
    write(tmp_path, [(0, {"a": 1.0}), (1, {"a": 2.0})])
    write(tmp_path, [(2, {"a": 3.0, "b": 4.0})])

    log = pd.read_csv(tmp_path / "csv" / "version_0" / "metrics.csv")
    assert log[["step", "a"]].values.tolist() == [[0, 1.0], [1, 2.0], [2, 3.0]]
    assert log["b"].isna().tolist() == [True, True, False]


@pytest.mark.parametrize("cut", [2, 6], ids=["in-a-value", "in-the-step"])
def test_a_row_torn_by_a_kill_is_dropped_by_the_restart(tmp_path, cut):
    write(tmp_path, [(s, {"a": 1.0 + s, "b": 2.0}) for s in range(4)] + [(13, {"a": 5.0})])
    path = tmp_path / "csv" / "version_0" / "metrics.csv"
    text = path.read_text()
    assert text.endswith("5.0,,13\n")  # the step comes last: a cut there shortens it
    last_row = text.rindex("\n", 0, -1) + 1
    path.write_text(text[: last_row + cut])  # the last row, cut: "5." or "5.0,,1"
    write(tmp_path, [(4, {"a": 9.0, "b": 2.0})])  # no crash on the torn row, and it goes

    log = pd.read_csv(path)
    assert log["step"].tolist() == [0, 1, 2, 3, 4]
    assert log["a"].tolist() == [1.0, 2.0, 3.0, 4.0, 9.0]


@pytest.mark.parametrize(
    "line",
    ["2.0,2.0,x", "2.0,2.0,1,7", "2.0", "2.0,2.0,", "2.0,2.0,nan"],
    ids=["unreadable-step", "extra-cell", "missing-cells", "no-step", "nan-step"],
)
def test_a_complete_row_the_logger_did_not_write_stops_the_restart_in_one_line(tmp_path, line):
    write(tmp_path, [(s, {"a": 1.0 + s, "b": 2.0}) for s in range(4)])
    path = tmp_path / "csv" / "version_0" / "metrics.csv"
    text = path.read_text()
    damaged = text.replace("\n2.0,2.0,1\n", f"\n{line}\n")  # changed by hand, say
    assert damaged != text
    path.write_text(damaged)

    # a UserError: Hydra's entry point prints its message alone, without a traceback
    with pytest.raises(UserError, match=r"metrics\.csv, line 3, is not a row"):
        write(tmp_path, [(3, {"a": 9.0, "b": 2.0})])
    assert path.read_text() == damaged  # left as it was, for the user to fix


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({}, "(No API key configured"),
        # a key, and a server that refuses every connection: W&B retries until its timeout
        (
            {
                "WANDB_API_KEY": "a" * 40,
                "WANDB_BASE_URL": "http://127.0.0.1:9",
                "WANDB_INIT_TIMEOUT": "3",
            },
            "connection refused",
        ),
    ],
)
def test_an_online_wandb_run_that_cannot_start_is_one_line(tmp_path, env, reason):
    """``logger.wandb.offline=false`` without an API key, or without the server: W&B's
    error, which left ``train.py`` as a traceback, is one line with its reason and the way
    out (offline logging, then ``wandb sync``)."""
    home = {"HOME": str(tmp_path / "home"), "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config")}
    plain = {k: v for k, v in subprocess_env().items() if not k.startswith("WANDB_")}
    done = subprocess.run(
        [*PYTHON, "train.py", *TINY, "logger=wandb", "logger.wandb.offline=false",
         f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'data'}"],
        cwd=ROOT, env={**plain, **home, "WANDB_SILENT": "true", **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("logger=wandb:")]
    assert line.startswith("logger=wandb: W&B could not start the run (")
    assert reason in line
    assert line.endswith("upload the run later with `wandb sync <run dir>/wandb/offline-run-*`.")


def refused_wandb_setting(tmp_path: Path, setting: str) -> str:
    """The last line of a train.py with W&B and ``setting``, which must refuse it in one."""
    done = subprocess.run(
        [*PYTHON, "train.py", *TINY, "logger=wandb", setting,
         f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'data'}"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_a_wandb_setting_w_and_b_refuses_is_one_line(tmp_path):
    """``logger.wandb.resume=sometimes``: pydantic's ValidationError from W&B's settings
    left train.py as a traceback of several screens."""
    assert refused_wandb_setting(tmp_path, "logger.wandb.resume=sometimes") == (
        "logger.wandb.resume='sometimes': W&B refuses it (Input should be 'allow', 'must', "
        "'never' or 'auto'); correct it, or run without W&B (logger=csv)."
    )


def test_a_wandb_save_dir_that_cannot_be_written_is_one_line(tmp_path):
    """W&B wrote the run to a temporary folder instead, and train.py exited 0 without a
    word: the run directory had no wandb/."""
    line = refused_wandb_setting(tmp_path, "logger.wandb.save_dir=/proc/nope")
    assert line.startswith("logger.wandb.save_dir=/proc/nope cannot be written (")
    assert line.endswith("give a folder you can write (by default the run directory).")


@pytest.mark.parametrize("stored", ["ab/c:d?", "two words", "\x00\x00\x01"])
def test_a_stored_wandb_id_w_and_b_refuses_names_its_file(tmp_path, stored):
    """The run directory's W&B id, damaged or edited: the file is named, not only W&B's
    complaint; a new id (``resume=never``) replaces it."""
    (tmp_path / "wandb_run_id.txt").write_text(stored + "\n")
    with pytest.raises(UserError) as refused:
        wandb_run_id(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'wandb_run_id.txt'} holds ")
    assert str(refused.value).endswith("or delete the file to log to a new W&B run.")
    fresh = wandb_run_id(tmp_path, new=True)
    assert fresh.isalnum() and len(fresh) == 8 and wandb_run_id(tmp_path) == fresh


def test_a_run_refused_after_its_wandb_run_began_closes_it_for_the_next(tmp_path):
    """A report window past the test data is refused after the assembly has started the W&B
    run. Left open, Lightning's logger of the next training in this process (a sweep's
    worker, a notebook) took that run over: its logs went into the refused run's folder,
    and its own held nothing."""
    import wandb

    refused = compose_train(
        tmp_path / "refused", [*TINY, "logger=wandb", "report.figures=true", "report.window=100000"]
    )
    with pytest.raises(UserError, match=r"^report.window=100000: "):
        train(refused)
    assert wandb.run is None
    assert finished_run(Path(refused.paths.output_dir))[1].exit_code == 1  # shown as failed
    cfg = compose_train(tmp_path / "next", [*TINY, "logger=wandb"])
    train(cfg)
    _, run = finished_run(Path(cfg.paths.output_dir))
    assert run.exit_code == 0 and run.summary["test/mae"] > 0


def test_a_wandb_run_open_in_the_process_is_not_taken_over(tmp_path):
    """A notebook's own W&B run: training refuses to log into it, in one line, and leaves it
    open."""
    import wandb

    theirs = wandb.init(mode="offline", dir=tmp_path, project="notebook")
    try:
        cfg = compose_train(tmp_path / "t", [*TINY, "logger=wandb"])
        with pytest.raises(UserError) as refused:
            train(cfg)
        assert str(refused.value) == (
            f"logger=wandb: the W&B run {theirs.id} ({theirs.dir}) is still open in this "
            "process, and this run's logs would go into it: close it first (wandb.finish())."
        )
        assert wandb.run is theirs
        assert not (Path(cfg.paths.output_dir) / "wandb").exists()
    finally:
        theirs.finish()


@pytest.mark.parametrize("given", ["maybe", "no", 1])
def test_an_offline_switch_that_is_no_boolean_is_refused(tmp_path, given):
    """Any text was true: logger.wandb.offline=no logged offline, in silence."""
    from cloudlstm.engine.loggers import WandbLogger

    with pytest.raises(UserError) as err:
        WandbLogger(save_dir=str(tmp_path), offline=given)
    assert str(err.value) == (
        f"logger.wandb.offline={given!r}: give true (log offline, the default) or false (log "
        "to the W&B server)."
    )

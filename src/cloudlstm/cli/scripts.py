"""The programs: ``cloudlstm-train``, ``cloudlstm-eval`` and ``cloudlstm-predict`` (console
scripts of the installed package), which ``train.py``, ``eval.py`` and ``predict.py`` of
the repository run too.

Each runs Hydra on the configs of :func:`cloudlstm.paths.config_dir` (the checkout's
``conf/`` or the packaged copy), so the programs work from any directory. Runs are written
under ``$PROJECT_ROOT/outputs`` (``paths.log_dir``): the repository's scripts set
PROJECT_ROOT to the repository, the installed programs to the working directory, unless
it is set already.
"""

from __future__ import annotations

import atexit
import errno
import gc
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from cloudlstm.cli.ctrl_c import ctrl_c_is_a_stop
from cloudlstm.cli.invoked import MULTIRUN_FLAGS, this_program
from cloudlstm.cli.pipes import reader_may_leave
from cloudlstm.cli.sigterm_at_start import (
    BEFORE_EVALUATING,
    BEFORE_FORECASTING,
    Terminated,
    a_job_begins,
    sigterm_is_a_stop,
    stops_now_say,
)
from cloudlstm.engine.parent_watch import watch_the_starting_process
from cloudlstm.paths import config_dir

if TYPE_CHECKING:
    from cloudlstm.errors import UserError


@reader_may_leave()
@ctrl_c_is_a_stop()  # a second Ctrl-C as the line of the first is written
# SIGTERM and Ctrl-C before training begins (checking the command, reading data), with one
# line for both: then the Trainer's (engine/signals.py)
@sigterm_is_a_stop(ctrl_c=True)
def train() -> None:
    """``cloudlstm-train [group=option ...] [key=value ...]``: train and test a model."""
    from cloudlstm.cli.model_keys import checked_model_keys
    from cloudlstm.cli.process_group import check_shared_run_dir
    from cloudlstm.errors import UserError

    try:
        refuse_moved_keys(sys.argv)
        sys.argv = checked_model_keys(sys.argv)
        check_shared_run_dir(sys.argv, os.environ)  # before Hydra makes a run directory
    except UserError as err:  # before Hydra, whose error would name no new place
        sys.exit(str(err))
    _run_hydra("train", _train)


def refuse_moved_keys(argv: list[str], keep: Collection[str] = ()) -> None:
    """Refuse, in one line naming the new place, a key given in the place it had before
    ``data.source`` held a source's keys: ``data.root=...``, ``+data.path=...``.

    Hydra would answer ``Key 'root' is not in struct`` and suggest ``+data.root=``, which
    then fails in the data source's constructor. The moved keys are those of
    :data:`cloudlstm.rundir.old_configs.OLD_DATAMODULES` (older run directories' configs are
    moved the same way when they are read), but those in ``keep``: keys of ``data`` that
    the config being overridden still has (an older run's, in ``eval.py``).

    Raises:
        UserError: an override names a moved key.
    """
    from cloudlstm.errors import UserError
    from cloudlstm.rundir.old_configs import OLD_DATAMODULES

    moved = {key for _, keys in OLD_DATAMODULES.values() for key in keys} - set(keep)
    program = this_program(argv)
    for arg in argv[1:]:
        key, sep, value = arg.lstrip("+~").partition("=")
        parts = key.split(".")
        if arg.startswith("-") or len(parts) != 2 or parts[0] != "data" or parts[1] not in moved:
            continue
        new = f"data.source.{parts[1]}"
        example = f"{new}={value}" if sep else f"{new}=..."
        raise UserError(
            f"{key} moved to {new}: {program} {example} "
            "(the data's source takes its own keys under data.source)."
        )


@reader_may_leave()
@ctrl_c_is_a_stop()  # a second Ctrl-C as the line of the first is written
# SIGTERM and Ctrl-C at any moment but in Lightning's test (cli.evaluate): the line says
# whether metrics.json was written
@sigterm_is_a_stop(BEFORE_EVALUATING, logged=True, ctrl_c=True)
def evaluate() -> None:
    """``cloudlstm-eval run=<run dir> [ckpt=best|last|<path>] [key=value ...]``: test a
    trained run again."""
    from cloudlstm.cli.eval_args import (
        help_header,
        refuse_group_choices,
        refuse_training_settings,
        run_data_keys,
        wants_help,
        with_run_config,
    )
    from cloudlstm.errors import UserError

    if wants_help(sys.argv):
        # Hydra composes the config to show the help, and eval.yaml's base is a run's
        # config.yaml: an empty one stands in for it
        with tempfile.TemporaryDirectory() as stand_in:
            (Path(stand_in) / "config.yaml").write_text("{}\n")
            sys.argv = with_run_config(sys.argv, Path(stand_in))
            print(help_header())
            _run_hydra("eval", _evaluate)
        return
    try:
        sys.argv = with_run_config(sys.argv)
        refuse_group_choices(sys.argv)
        refuse_training_settings(sys.argv)
        # an older run's config.yaml may still hold a source's key at the top of data
        refuse_moved_keys(sys.argv, keep=run_data_keys(sys.argv))
    except UserError as err:  # before Hydra, which would print it the same way
        sys.exit(str(err))
    _run_hydra("eval", _evaluate)


@reader_may_leave()
@ctrl_c_is_a_stop()  # a second Ctrl-C as the line of the first is written
# SIGTERM and Ctrl-C at any moment (no Trainer runs): the line says whether the forecast was
# written
@sigterm_is_a_stop(BEFORE_FORECASTING, ctrl_c=True)
def predict() -> None:
    """``cloudlstm-predict run=<run dir> data.path=<file>``: forecast new data."""
    from cloudlstm.cli.predict import refuse_unread_overrides
    from cloudlstm.errors import UserError

    try:
        refuse_unread_overrides(sys.argv)
    except UserError as err:  # before Hydra, which would propose adding it with +
        sys.exit(str(err))
    _run_hydra("predict", _predict)


def multirun_flag_first(argv: list[str]) -> list[str]:
    """``argv`` with ``-m`` (``--multirun``) moved before the overrides.

    ``python train.py model=lstm -m seed=0,1,2`` means a sweep, but Hydra's argument parser
    takes the overrides as one run of positional arguments: those after the flag are
    "unrecognized arguments", under twenty lines of usage. The flag takes no value, so its
    place changes nothing else.
    """
    flags = [arg for arg in argv[1:] if arg in MULTIRUN_FLAGS]
    rest = [arg for arg in argv[1:] if arg not in MULTIRUN_FLAGS]
    return [argv[0], *flags[:1], *rest]


# the process that runs Hydra: jobs of the basic launcher run in it, joblib's and
# submitit's in processes of their own
_HYDRA_PID: int | None = None
# the user asked for every error's whole traceback (Hydra's own switch)
_FULL_ERROR = "HYDRA_FULL_ERROR"
# set beside it where the program, not the user, set it: a DDP process that Lightning starts
# inherits both, and must not take the program's setting for the user's
_FULL_ERROR_OURS = "CLOUDLSTM_SET_HYDRA_FULL_ERROR"
_full_error_wanted = False


def _run_hydra(config_name: str, task: Callable[[DictConfig], Any]) -> None:
    global _HYDRA_PID, _full_error_wanted
    _HYDRA_PID = os.getpid()
    _full_error_wanted = (
        os.environ.get(_FULL_ERROR) == "1" and os.environ.get(_FULL_ERROR_OURS) != "1"
    )
    os.environ.setdefault("PROJECT_ROOT", os.getcwd())
    watch_the_starting_process()  # a DDP process whose process 0 ends as it starts
    sys.argv = multirun_flag_first(sys.argv)
    _refuse_keyless(sys.argv)
    # Registered first, so run last of the exit handlers (after W&B's and Lightning's)
    atexit.register(freeze_for_a_quick_end)
    import hydra  # here: a Ctrl-C while it is imported is the program's stop (ctrl_c_is_a_stop)

    main = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name=config_name)
    with _errors_without_hydra_hint():
        main(task)()


def _refuse_keyless(argv: list[str]) -> None:
    """An override with nothing before its ``=``, refused in one line before Hydra, which
    would fail on it with a traceback (``=3``) or with a hint to add a setting ``''``."""
    from cloudlstm.cli.override_errors import refuse_keyless
    from cloudlstm.errors import UserError

    try:
        refuse_keyless(argv)
    except UserError as err:
        sys.exit(str(err))


def freeze_for_a_quick_end() -> None:
    """Freeze the garbage collector, so that the interpreter's collections at its end skip
    the millions of objects torch's imports made (seconds) to free memory that the exit
    frees anyway; but not where Triton is loaded (CUDA installs, ``make test-kernels``).
    Its bindings (nanobind) check at the end that every object of theirs was freed, and
    list each frozen one on stderr as a leak: some 30 lines after every run."""
    if "triton" not in sys.modules:
        gc.freeze()


@contextmanager
def _errors_without_hydra_hint() -> Iterator[None]:
    """Errors that escape Hydra reported by their message alone, exit status 1.

    Hydra ends every error it reports with "Set the environment variable HYDRA_FULL_ERROR=1
    for a complete stack trace", a user's error too, where there is nothing to debug. So it
    hands them on here (HYDRA_FULL_ERROR set while it runs): its own (an unknown config
    group, a key not in the config, a value of the wrong type, an override that does not
    parse) become one line (:func:`hydra_error_line`), a sweep's user errors (all
    ``CompactHydraException``) keep their message, and both lose the hint; two of its
    modes at once (``-m`` with ``--cfg``, a plain ``ValueError``) are one line with the way
    to see a sweep's settings, status 2; any other error is a bug and keeps its whole
    traceback. A user who set HYDRA_FULL_ERROR=1 gets every
    traceback, as from Hydra.
    """
    from hydra.errors import CompactHydraException

    if _full_error_wanted:
        yield
        return
    os.environ[_FULL_ERROR] = os.environ[_FULL_ERROR_OURS] = "1"
    try:
        yield
    except CompactHydraException as err:
        if _after_ctrl_c(err):
            raise KeyboardInterrupt from None
        sys.stderr.write(f"{hydra_error_line(err)}\n")
        _no_sweep_folder_if_no_job_began()
        raise SystemExit(1) from None
    except Exception as err:
        if _after_ctrl_c(err):
            raise KeyboardInterrupt from None
        if full := _hydras_write_failed(err):  # its own files, before the job: a full disk
            sys.stderr.write(f"{full}\n")
            raise SystemExit(1) from None
        if (refused := _resolvers_refusal(err)) is not None:  # ${gpus_per_node:...}, say
            sys.stderr.write(f"{refused}\n")
            raise SystemExit(1) from None
        if too_long := _name_too_long(err):  # a run folder Hydra makes, named by its config
            sys.stderr.write(f"{too_long}\n")
            raise SystemExit(1) from None
        if isinstance(err, ValueError) and str(err).startswith(_ONE_MODE):
            sys.stderr.write(f"{err}: give one. {_ONE_MODE_FIX}\n")
            raise SystemExit(2) from None
        raise
    finally:
        os.environ.pop(_FULL_ERROR, None)
        os.environ.pop(_FULL_ERROR_OURS, None)


def _hydras_write_failed(err: Exception) -> Exception | None:
    """The one line of a write of Hydra's own that failed for want of room (``.hydra/``'s
    configs, before the job begins), or None for any other error. Its ``write`` names no
    file: the file is the one Hydra's ``_save_config`` was writing, read from its frame."""
    from cloudlstm.errors import out_of_space

    path = getattr(err, "filename", None)
    tb = err.__traceback__
    while path is None and tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_save_config" and "output_dir" in frame.f_locals:
            path = Path(frame.f_locals["output_dir"]) / str(frame.f_locals.get("filename"))
        tb = tb.tb_next
    return out_of_space(err, path)


def _resolvers_refusal(err: Exception) -> UserError | None:
    """The user error that one of the package's resolvers raised (``${gpus_per_node:...}``
    of ``trainer.devices=auto``), which OmegaConf hands on wrapped in an
    InterpolationResolutionError with its own traceback; None for any other error."""
    from omegaconf.errors import InterpolationResolutionError

    from cloudlstm.errors import UserError

    link: BaseException | None = err
    while isinstance(link, InterpolationResolutionError):  # one for each nested ${...}
        link = link.__cause__ or link.__context__
    return link if link is not err and isinstance(link, UserError) else None


def _name_too_long(err: Exception) -> str | None:
    """One line for a run directory whose name the file system refuses as too long (a
    ``hydra.sweep.subdir`` of ``${hydra.job.override_dirname}`` over many overrides), or
    None for any other error."""
    if not (isinstance(err, OSError) and err.errno == errno.ENAMETOOLONG and err.filename):
        return None
    longest = max(Path(str(err.filename)).parts, key=len)
    return (
        f"Cannot make {err.filename}: its name {longest[:60]!r}... is {len(longest)} "
        "characters, more than the file system takes. Give hydra.run.dir or "
        "hydra.sweep.subdir a shorter name (e.g. the swept keys alone)."
    )


# Hydra's refusal of two of its modes at once (``-m`` with ``--cfg``, say), a plain
# ValueError that would otherwise show as a bug, with its traceback
_ONE_MODE = "Only one of --run, --multirun, --cfg"
_ONE_MODE_FIX = (
    "To see a sweep's settings, print one job's: the same overrides, one value each, "
    "with --cfg job and without -m."
)


def _after_ctrl_c(err: BaseException) -> bool:
    """Whether ``err`` followed a Ctrl-C: the ``KeyboardInterrupt`` it was raised in
    handling (or from), or a press noted. A Ctrl-C in the middle of composing the config
    can leave an OmegaConf node half made, whose clean-up then fails (``'NoneType' object
    has no attribute '_invalidate_flags_cache'``); the user asked for a stop, and gets it."""
    from cloudlstm.engine import ctrl_c_noted

    link: BaseException | None = err
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return ctrl_c_noted.pressed()


def _no_sweep_folder_if_no_job_began() -> None:
    """Remove the sweep folder this command made when it holds Hydra's ``multirun.yaml``
    alone: a job's override that names no setting is refused before any job begins, and the
    folder would be listed by ``compare`` and the dates' folders as a sweep (its date folder
    goes too, when Hydra named it and it is left empty)."""
    from cloudlstm.rundir.lock import SWEEP_DIRS_MADE

    for folder in SWEEP_DIRS_MADE:
        if folder.is_dir() and [p.name for p in folder.iterdir()] in ([], ["multirun.yaml"]):
            shutil.rmtree(folder, ignore_errors=True)
            if _stamped_now(folder):  # Hydra's date folder, not one the command named
                with suppress(OSError):  # not empty: other sweeps of that day
                    folder.parent.rmdir()


def hydra_error_line(err: Exception) -> str:
    """One line for an error of Hydra's own, whose message spans several: what failed, why
    (the OmegaConf error under it, without its key and type lines) and the fix Hydra gives,
    e.g. ``Could not override 'foo': Key 'foo' is not in struct. To append to your config
    use +foo=1``; an unknown config group's option with the options there are. A sweep's
    error (a message of its own lines, not Hydra's) is left as it is."""
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import OmegaConfBaseException

    from cloudlstm.cli.override_errors import override_error_line

    if not isinstance(err, ConfigCompositionException | OverrideParseException):
        return str(err)
    own = override_error_line(str(err), sys.argv, err.__traceback__)  # an override's form
    if own is not None:
        return own
    lines = [line.strip() for line in str(err).split("Config search path:")[0].splitlines()]
    lines = [line for line in lines if line]
    if isinstance(err, MissingConfigException) and err.options:
        return f"{lines[0]}{_nearest_option(err)}: choose one of {', '.join(err.options)}."
    if isinstance(err, OverrideParseException):  # its message does not name the override
        lines.insert(0, f"Cannot parse the override {err.override!r}")
        fix = _quoting_fix(str(err.override)) or _equals_fix(str(err.override))
        lines += [fix] if fix else []
    cause = err.__cause__
    unknown = _unknown_key_line(cause)
    if unknown is not None:
        return unknown
    if isinstance(cause, OmegaConfBaseException):  # its first line: the message, not the key
        lines.insert(1, str(cause).splitlines()[0])
    why = ". ".join(line.rstrip(".") for line in lines[1:])
    return f"{lines[0].rstrip('.')}: {why}." if why else lines[0]


def _quoting_fix(override: str) -> str:
    """How to give an override's value as one string, for a value the grammar cannot read
    unquoted (``data.source.path=/data/dü``, ``(`` in a name)."""
    from cloudlstm.cli.override_text import shell_override

    key, sep, value = override.partition("=")
    # a list, a dict or a sweep function (``choice(``) is no string gone wrong, nor is a
    # value of the characters the grammar reads unquoted (``lstm,``: a sweep cut short)
    structured = value[:1] in "[{'\"" or re.match(r"\w+\(", value)
    readable = re.fullmatch(r"[\w/.\-:~+@%, \[\]{}=*?$]*", value, re.ASCII)
    if not sep or structured or (readable and not value.startswith("~")):  # ~/data: a home
        return ""
    return f"If the value is one string (a path, say), quote it: {shell_override(key, value)}"


def _nearest_option(err: Exception) -> str:
    """`` (did you mean model=cloudlstm?)`` for an unknown option of a config group
    (``model=cloudlsmt``) near one it has; ``""`` where none is near."""
    from cloudlstm.errors import nearest_name

    found = re.search(r"Could not find '(.+)/([^/']+)'", str(err))
    if not found:
        return ""
    group, option = found.groups()
    near = nearest_name(option, getattr(err, "options", None) or [])
    return near.replace("(did you mean ", f"(did you mean {group}=") if near else ""


def _equals_fix(override: str) -> str:
    """The fix for an override without ``=`` (``model.k``, of ``model.k = 6``), but a
    deletion's (``~model.k``), which needs none."""
    if "=" in override or override.startswith("~"):
        return ""
    return f"Give it as {override}=<value>, with no space around the '='"


def _unknown_key_line(cause: BaseException | None) -> str | None:
    """The line for an override of a key the config does not have (OmegaConf's "not in
    struct"), or None for another error. Hydra's fix, ``+key=value``, adds a key that
    nothing reads, which the programs then refuse: the line names the setting meant
    instead, the same name elsewhere in the config (``bad_values`` is
    ``data.source.bad_values``) or the nearest name beside it (``trainer.max_step``)."""
    from omegaconf import DictConfig
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    from cloudlstm.cli.override_errors import key_hint
    from cloudlstm.errors import settings_listing

    missing = ConfigKeyError | ConfigAttributeError
    if not isinstance(cause, missing):
        return None
    key, parent = str(cause.full_key), cause.parent_node
    plugin = _plugin_option_line(key)
    if plugin is not None:
        return plugin
    if "not in struct" not in str(cause):
        return None
    path, _, name = key.rpartition(".")
    # data.valid_ranges (absurd_values.RANGES_OPTION, named here: cloudlstm.data imports
    # torch, which a typo is answered without): its keys are the data's channels
    if path == "data.valid_ranges":
        return (
            f"Could not override '{key}': {path} holds no range of {name} to change. Add it "
            f"with '++{key}=[lo,hi]', or replace the config's ranges with {path}=null "
            f"'{path}={{{name}:[lo,hi]}}' (null for an open end)."
        )
    hint = key_hint(key, parent._get_root()) if isinstance(parent, DictConfig) else ""
    return (
        f"Could not override '{key}': the config has no setting {key}{hint}. Correct the "
        f"name; {settings_listing()}."
    )


def _plugin_option_line(key: str) -> str | None:
    """For ``hydra.launcher.<name>`` or ``hydra.sweeper.<name>`` that the chosen launcher
    or sweeper lacks (``hydra.launcher.n_jobs`` of the basic launcher, where Hydra's fix,
    ``+hydra.launcher.n_jobs``, would add a setting nothing reads): the line naming the
    options of that group that have it (``hydra/launcher=joblib``); None for another key."""
    parts = key.split(".")
    if len(parts) < 3 or parts[0] != "hydra" or parts[1] not in ("launcher", "sweeper"):
        return None
    if parts[1:3] == ["sweeper", "params"] and len(parts) > 3:
        # hydra.sweeper.params.model.k=...: the sweeper has params, but the dots of the
        # parameter's name read as nested keys, which the struct refuses as new
        return (
            f"Could not override '{key}': a parameter of hydra.sweeper.params cannot be set "
            "by its path (the dots of a name such as model.k read as nested keys). Sweep it "
            "as an override of its own next to -m instead: e.g. 'model.k=choice(3,6)', not "
            "'hydra.sweeper.params.model.k=choice(3,6)'; it joins the search, in place of "
            "what params gives that key."
        )
    import yaml
    from hydra.core.config_store import ConfigStore

    group, name = parts[1], parts[2]
    store, having = ConfigStore.instance(), []
    for option in store.list(f"hydra/{group}"):
        if name in (store.load(f"hydra/{group}/{option}").node or {}):
            having.append(option.removesuffix(".yaml"))
    for path in sorted((config_dir() / "hydra" / group).glob("*.yaml")):  # built on those
        own = yaml.safe_load(path.read_text()) or {}
        bases = [base for base in own.get("defaults", []) if isinstance(base, str)]
        if name in own or set(bases) & set(having):
            having.append(path.stem)
    choose = (
        f"choose one that has it: {' or '.join(f'hydra/{group}={o}' for o in having)}"
        if having
        else f"none of the {group}s here has it; `--cfg hydra` prints the settings"
    )
    return f"Could not override '{key}': this {group} has no setting {name}; {choose}."


@contextmanager
def _user_errors_in_one_line() -> Iterator[None]:
    """A job's user error (:func:`_as_user_errors`) as its one line.

    In a run (not a sweep), Hydra would put "Error executing job with overrides: [...]",
    the overrides just typed, before it: the line is written here and the run ends with
    Hydra's status for an error, 1. A sweep's job raises it, for the sweep to say which
    job failed (hydra_plugins/cloudlstm_sweeper). A run stopped by a signal
    (``RunInterrupted``) has logged its line, and leaves with the signal's status: the
    caller's.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from cloudlstm.errors import UserError
    from cloudlstm.rundir.stops import RunInterrupted

    try:
        with _as_user_errors():
            yield
    except RunInterrupted:
        raise
    except UserError as err:
        if _full_error_wanted or HydraConfig.get().mode != RunMode.RUN:
            raise
        sys.stderr.write(f"{err}\n")
        raise SystemExit(1) from None


@contextmanager
def _as_user_errors() -> Iterator[None]:
    """The errors that are the user's, as :class:`~cloudlstm.errors.UserError`: those of
    :func:`cloudlstm.errors.one_line_errors`, and a ``${...}`` typed in a value that names
    no setting (:func:`_typed_interpolations`)."""
    from cloudlstm.errors import one_line_errors

    with one_line_errors(), _typed_interpolations():
        yield


@contextmanager
def _typed_interpolations() -> Iterator[None]:
    """A ``${...}`` typed in a value that names no setting of the config (a folder named
    ``a${b}``) as a user error: OmegaConf reads it as a reference wherever the value is
    used, and escaped (``\\${b}``) too, since building an object resolves the value again.
    One that no override holds is the config's own, a bug: its traceback stays."""
    from omegaconf.errors import InterpolationKeyError

    from cloudlstm.errors import UserError

    try:
        yield
    except InterpolationKeyError as err:
        found = re.search(r"Interpolation key '([^']+)' not found", str(err))
        key = found.group(1) if found else None
        typed = [a for a in sys.argv[1:] if key and "${" + key in a]
        if not typed:
            raise
        raise UserError(
            f"{typed[0]}: ${{{key}}} reads as a reference to the setting {key}, which the "
            "config does not have: name a setting (e.g. ${seed}), or, for a '${' in a file's "
            "or folder's name, rename it or give a link to it whose name has none (ln -s)."
        ) from None


def _train(cfg: DictConfig) -> float | None:
    from cloudlstm.rundir.stops import RunInterrupted
    from cloudlstm.rundir.sweep_sigterm import before_training_stop

    a_job_begins()
    try:
        return _train_job(cfg)
    except (RunInterrupted, Terminated, KeyboardInterrupt) as caught:
        stop = caught
        if not isinstance(caught, RunInterrupted):  # importing torch, reading the data
            by = "Ctrl-C" if isinstance(caught, KeyboardInterrupt) else "SIGTERM"
            stop = before_training_stop(cfg, Path(cfg.paths.output_dir), by)
        if os.getpid() != _HYDRA_PID:
            raise stop from None  # a job in its own process: the sweep reports it and fails
        # a run, or a job of the basic launcher's sweep, which stops with it: its line is
        # logged; the signal's exit status (143, 130 for Ctrl-C), not Hydra's 1 of an error
        raise SystemExit(stop.exit_code) from None


def _train_job(cfg: DictConfig) -> float | None:
    """``train.py``'s job: :func:`cloudlstm.cli.train.main`, its user errors in one line."""
    from cloudlstm.rundir.sweep_sigterm import stopped_before_training

    # a joblib sweep's job whose stop came before it began (one waiting for a worker)
    # says so at once, before it imports torch and Lightning and reads its data
    stopped = stopped_before_training(cfg, Path(cfg.paths.output_dir))
    if stopped is not None:
        raise stopped
    from cloudlstm.cli import console
    from cloudlstm.cli.train import main

    console.set_up(cfg)
    run_dir = Path(cfg.paths.output_dir)
    with (
        reader_may_leave(),  # `train.py ... | head`: inside Hydra's job, which reports
        _user_errors_in_one_line(),  # any exception as the job's error
        _no_folder_if_refused(run_dir, _stamped_now(run_dir)),
        _as_user_errors(),  # inside: a library's refusal of a value is a user error too
    ):
        return main(cfg)


def _evaluate(cfg: DictConfig) -> None:
    from cloudlstm.cli import console
    from cloudlstm.cli.evaluate import evaluate, evaluation_stop_line
    from cloudlstm.rundir.stops import RunInterrupted

    console.set_up(cfg)
    try:
        eval_dir = Path(cfg.paths.output_dir)
        stops_now_say(evaluation_stop_line(eval_dir))
        with (
            reader_may_leave(),  # `eval.py ... | head`: as for predict.py's `out=-`
            _user_errors_in_one_line(),
            _no_folder_if_refused(eval_dir, _stamped_now(eval_dir)),
            _as_user_errors(),
        ):
            evaluate(cfg)
    except RunInterrupted as stop:  # its line is logged; the signal's status, not Hydra's 1
        raise SystemExit(stop.exit_code) from None


@contextmanager
def _no_folder_if_refused(folder: Path, made_now: bool) -> Iterator[None]:
    """A run or an evaluation refused by a user error (a bad value, a checkpoint not there)
    leaves no folder: Hydra made it before the check, and it would hold only Hydra's files,
    the start of a log (and, refused by the model, the config and the data's summary),
    beside the runs (or a run's evaluations) that have results, and ``compare`` would list
    it as a run that never finished. A folder Hydra stamped with this moment (``made_now``)
    is removed when it holds nothing else (its date folder too, when that is left empty);
    one named by the command (``hydra.run.dir=``) only when it holds nothing but those files
    by their exact names (:func:`_holds_only_a_refusal`), so that a folder of the user's
    own keeps every file. A sweep's job and a stopped run keep theirs."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from cloudlstm.errors import UserError
    from cloudlstm.rundir.stops import RunInterrupted

    try:
        yield
    except RunInterrupted:
        raise
    except UserError:
        one_run = HydraConfig.get().mode == RunMode.RUN
        if one_run and made_now and folder.is_dir() and _holds_nothing_of_a_run(folder):
            shutil.rmtree(folder, ignore_errors=True)
            with suppress(OSError):  # not empty: other runs of that day
                folder.parent.rmdir()
        elif one_run and not made_now and folder.is_dir() and _holds_only_a_refusal(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _holds_nothing_of_a_run(folder: Path) -> bool:
    """Hydra's files, the log, the run's lock (released by then), and the config and data
    summary written before the model is built (a model refusing the data's sizes): nothing
    trained or tested."""
    from cloudlstm.rundir.layout import CONFIG_FILE, DATA_SUMMARY_FILE, LOCK_FILE

    before_the_model = (".hydra", LOCK_FILE, CONFIG_FILE, DATA_SUMMARY_FILE)
    return all(p.name in before_the_model or p.suffix == ".log" for p in folder.iterdir())


def _holds_only_a_refusal(folder: Path) -> bool:
    """:func:`_holds_nothing_of_a_run` by exact names, for a folder the command named: the
    program's own log, and Hydra's three files in ``.hydra``; nothing a user may keep."""
    from cloudlstm.rundir.layout import CONFIG_FILE, DATA_SUMMARY_FILE, LOCK_FILE

    logs = {f"{name}.log" for name in ("train", "eval")}
    mine = {".hydra", LOCK_FILE, CONFIG_FILE, DATA_SUMMARY_FILE, *logs}
    hydra_files = {"config.yaml", "hydra.yaml", "overrides.yaml"}
    hydra = folder / ".hydra"
    return all(p.name in mine and not p.is_symlink() for p in folder.iterdir()) and (
        not hydra.exists() or all(p.name in hydra_files for p in hydra.iterdir())
    )


def _stamped_now(folder: Path) -> bool:
    """Whether ``folder`` is one Hydra names by the moment it starts, to the microsecond
    (conf/hydra/default.yaml, conf/eval.yaml): made for this command, not named by it."""
    from cloudlstm.rundir.layout import EVAL_DIR

    stamp = folder.name if folder.parent.name == EVAL_DIR else f"{folder.parent.name}/{folder.name}"
    return re.fullmatch(r"\d{4}-\d\d-\d\d[/_]\d\d-\d\d-\d\d-\d{6}", stamp) is not None


def _predict(cfg: DictConfig) -> None:
    from cloudlstm.cli.predict import main

    # inside Hydra's job too: Hydra reports the broken pipe of `out=- | head` as an error
    # of the job ("Error executing job") before the program's own handler would see it
    with reader_may_leave(), _user_errors_in_one_line():
        main(cfg)

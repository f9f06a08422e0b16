"""Tests of the synthetic mobile traffic (``data=mobile``): the paper's published statistics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import compose_train, one_line, rebuilding_fails, run_python
from hydra.utils import instantiate
from omegaconf import OmegaConf

from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SERVICES, SyntheticMobileTraffic, mobile_traffic
from cloudlstm.errors import UserError

DAY, WEEK = 288, 2016


@pytest.fixture(scope="module")
def three_weeks():
    """All 38 services at 40 antennas for 21 days (~1 s)."""
    return SyntheticMobileTraffic(num_antennas=40, num_days=21, seed=0).load()


def acf(x: np.ndarray, lag: int) -> float:
    x = x - x.mean()
    return float((x[:-lag] * x[lag:]).mean() / x.var())


def test_stream_format_and_nonnegative_values(three_weeks):
    s = three_weeks
    assert s.values.shape == (21 * DAY, 40, 38) and s.values.dtype == np.float32
    assert np.isfinite(s.values).all() and (s.values >= 0).all() and s.mask.all()
    assert s.channel_names == [svc.name for svc in SERVICES]
    assert s.point_ids[:2] == ["a0000", "a0001"]
    assert (np.diff(s.timestamps) == np.timedelta64(5, "m")).all()
    assert s.timestamps[0] == np.datetime64("2016-09-05T00:00")
    assert s.metadata["step_minutes"] == 5 and s.metadata["steps_per_day"] == DAY
    assert s.metadata["generator"]["num_antennas"] == 40


def test_deterministic_given_seed():
    small = dict(num_antennas=12, num_services=5, num_days=2)
    a = SyntheticMobileTraffic(seed=3, **small).load()
    b = SyntheticMobileTraffic(seed=3, **small).load()
    c = SyntheticMobileTraffic(seed=4, **small).load()
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.coords, b.coords)
    assert a.metadata == b.metadata
    assert not np.allclose(a.values, c.values) and not np.allclose(a.coords, c.coords)


def test_service_shares_follow_a_power_law_with_streaming_about_half(three_weeks):
    share = three_weeks.values.sum(axis=(0, 1), dtype=np.float64)
    share /= share.sum()
    ranked = np.sort(share)[::-1]
    log_rank = np.log(np.arange(1, 39))
    slope, _ = np.polyfit(log_rank, np.log(ranked), 1)
    r2 = np.corrcoef(log_rank, np.log(ranked))[0, 1] ** 2
    assert slope < -0.8 and r2 > 0.9
    cats = np.array(three_weeks.metadata["categories"])
    by_cat = {c: share[cats == c].sum() for c in set(cats)}
    assert 0.4 < by_cat["streaming"] < 0.6
    for c in ("web", "cloud", "social", "chat"):  # paper: between 8 % and 17 %
        assert 0.07 < by_cat[c] < 0.19, (c, by_cat[c])
    assert by_cat["gaming"] < 0.01
    top10 = np.argsort(share)[::-1][:10]
    assert (cats[top10] == "streaming").sum() == 5


def test_daily_and_weekly_periodicity(three_weeks):
    total = three_weeks.values.sum(axis=(1, 2), dtype=np.float64)
    assert acf(total, DAY) > 0.8
    assert acf(total, DAY // 2) < 0.0  # night vs day
    assert acf(total, WEEK) > acf(total, DAY)  # weekends differ from weekdays
    per_antenna = [acf(three_weeks.values[:, i].sum(axis=1), DAY) for i in range(40)]
    assert np.median(per_antenna) > 0.7


def test_peak_hours_depend_on_service_and_weekday(three_weeks):
    v = three_weeks.values.sum(axis=1, dtype=np.float64)  # (T, C)
    days = v.reshape(21, DAY, 38)
    weekday_mask = np.arange(21) % 7 < 5  # the stream starts on a Monday
    weekday, weekend = days[weekday_mask].mean(0), days[~weekday_mask].mean(0)
    gmail, netflix = (three_weeks.channel_names.index(n) for n in ("Gmail", "Netflix"))
    peak_hour = np.argmax(weekday, axis=0) / 12  # (C,) hour of the weekday maximum
    assert 8 <= peak_hour[gmail] <= 15 and peak_hour[netflix] >= 19
    assert weekend[:, gmail].sum() < 0.7 * weekday[:, gmail].sum()  # little work mail at weekends


def test_antennas_are_dense_at_the_centre():
    s = SyntheticMobileTraffic(num_antennas=300, num_services=1, num_days=1, seed=1).load()
    centre = np.asarray(s.metadata["centres_km"][0])
    d = np.linalg.norm(s.coords[:, None] - s.coords[None], axis=2)
    np.fill_diagonal(d, np.inf)
    nn = d.min(axis=1)
    r = np.linalg.norm(s.coords - centre, axis=1)
    inner, outer = r < np.quantile(r, 0.25), r > np.quantile(r, 0.75)
    assert np.median(nn[inner]) < 0.5 * np.median(nn[outer])


def test_events_raise_neighbouring_antennas_together():
    args = dict(num_antennas=100, num_services=10, num_days=4, seed=2, city="city2")
    with_events = SyntheticMobileTraffic(events_per_day=1.0, **args).load()
    without = SyntheticMobileTraffic(events_per_day=0.0, **args).load()
    ratio = with_events.values / without.values  # the event factor: all else is identical

    def dist(ev: dict) -> np.ndarray:
        return np.linalg.norm(with_events.coords - [ev["x_km"], ev["y_km"]], axis=1)

    strong = [e for e in with_events.metadata["events"] if e["amplitude"] > 1.0]
    ev = max(strong, key=lambda e: (dist(e) < 0.7 * e["radius_km"]).sum())
    t0, t1 = ev["start"], ev["end"]
    near, far = dist(ev) < 0.7 * ev["radius_km"], dist(ev) > 4 * ev["radius_km"]
    assert near.sum() >= 3 and far.sum() >= 3
    names = with_events.channel_names
    insta, spotify = names.index("Instagram"), names.index("Spotify")
    peak = (t0 + t1) // 2
    assert (ratio[peak, near, insta] > 1.2).all()  # all near antennas rise...
    rise = ratio[t0:t1, near, insta]
    assert np.corrcoef(rise.T).min() > 0.9  # ...together, over the same hours
    assert np.allclose(ratio[peak, far], 1.0)
    assert np.allclose(ratio[:, :, spotify], 1.0)  # music streaming is unaffected


def test_noise_is_heavy_tailed(three_weeks):
    # log-returns of single antenna/service series: Gaussian would have excess kurtosis 0
    r = np.diff(np.log(three_weeks.values[:, :, :10].astype(np.float64)), axis=0).ravel()
    r = (r - r.mean()) / r.std()
    assert (r**4).mean() - 3 > 1.0


def test_cache_hit_and_changed_argument_regenerates(tmp_path):
    args = dict(num_antennas=30, num_services=10, num_days=7, cache_dir=tmp_path)
    gen = SyntheticMobileTraffic(**args)
    first = gen.load()
    assert not gen.last_load_from_cache and gen.cache_path.exists()
    with rebuilding_fails(SyntheticMobileTraffic, "generate"):
        again = SyntheticMobileTraffic(**args)
        second = again.load()
    assert again.last_load_from_cache
    np.testing.assert_array_equal(first.values, second.values)
    np.testing.assert_array_equal(first.coords, second.coords)
    assert second.metadata == first.metadata and second.name == first.name
    other = SyntheticMobileTraffic(**{**args, "seed": 1})
    assert other.cache_path != gen.cache_path
    other.load()
    assert not other.last_load_from_cache


def test_city_presets_and_bad_arguments():
    assert SyntheticMobileTraffic(city="city1").num_antennas == 792
    assert SyntheticMobileTraffic(city="city2").num_antennas == 260
    assert SyntheticMobileTraffic(city="city2", num_antennas=50).num_antennas == 50
    with pytest.raises(ValueError, match="unknown city='paris'"):
        SyntheticMobileTraffic(city="paris")
    with pytest.raises(ValueError, match="num_services <= 38"):
        SyntheticMobileTraffic(num_services=39)
    with pytest.raises(ValueError, match="step_minutes=7 must divide a day"):
        SyntheticMobileTraffic(step_minutes=7)
    with pytest.raises(ValueError, match="num_days must be an integer >= 1"):
        SyntheticMobileTraffic(num_days=0)


def test_source_synthetic_and_long_format_file(tmp_path):
    source = mobile_traffic(num_antennas=10, num_services=3, num_days=2)
    assert isinstance(source, SyntheticMobileTraffic)
    dm = PointCloudDataModule(source, input_steps=6, output_steps=6, batch_size=4)
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (4, 6, 10, 3) and batch["coords"].shape == (4, 10, 2)

    # the same data written in the documented long format reads back identically
    s = dm.stream
    t, n, c = s.values.shape
    table = pd.DataFrame(
        {
            "timestamp": np.repeat(s.timestamps, n),
            "id": np.tile(s.point_ids, t),
            "x": np.tile(s.coords[:, 0], t),
            "y": np.tile(s.coords[:, 1], t),
            **{name: s.values[:, :, i].ravel() for i, name in enumerate(s.channel_names)},
        }
    )
    path = tmp_path / "traffic.csv"
    table.to_csv(path, index=False)
    from_file = mobile_traffic(path=path)
    assert isinstance(from_file, LongFormatSource)
    stream = from_file.load()
    assert stream.channel_names == s.channel_names
    np.testing.assert_allclose(stream.values, s.values, rtol=1e-6)
    np.testing.assert_allclose(stream.coords, s.coords)


def test_hydra_config_builds_the_datamodule(tmp_path):
    overrides = ["data.source.num_antennas=8", "data.source.num_services=4"]
    cfg = compose_train(tmp_path, ["data=mobile", *overrides, "data.source.num_days=2"])
    assert cfg.data.input_steps == 6 and cfg.data.output_steps == 6 and cfg.data.batch_size == 32
    dm = instantiate(cfg.data)
    assert type(dm) is PointCloudDataModule and isinstance(dm.source, SyntheticMobileTraffic)
    assert dm.stream.values.shape == (2 * DAY, 8, 4)
    assert dm.source.cache_path.parent == tmp_path / "data" / "mobile"


def traffic_file(tmp_path) -> Path:
    """A small long-format traffic file of two services at four antennas, two days hourly."""
    times = pd.date_range("2024-01-01", periods=48, freq="1h")
    rng = np.random.default_rng(0)
    rows = [
        {"timestamp": t, "id": f"a{i}", "x": i % 2, "y": i // 2, "sms": rng.uniform(1, 9)}
        | {"internet": rng.uniform(10, 90)}
        for t in times
        for i in range(4)
    ]
    path = tmp_path / "traffic.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_traffic_file_s_units_are_recorded_and_compared_by_eval(tmp_path):
    """data=mobile read a user's file without data.source.units, which data=points, milan
    and metr_la take: Hydra refused the key, so a run of a file recorded no units and
    eval.py compared none."""
    from conftest import build_datamodule

    from cloudlstm.assembly.evaluated_data import check_units_and_graph_settings

    path = traffic_file(tmp_path)
    job = ["data=mobile", f"data.source.path={path}", "data.input_steps=4"]
    job += ["data.output_steps=2", "data.source.units={sms: count, internet: MB}"]
    trained = compose_train(tmp_path, job)
    _, summary = build_datamodule(trained, tmp_path)
    written = json.loads((tmp_path / "data_summary.json").read_text())
    assert written["source_metadata"]["units"] == {"sms": "count", "internet": "MB"}
    assert summary["source_metadata"]["units"] == {"sms": "count", "internet": "MB"}
    in_gb = compose_train(tmp_path / "gb", [*job[:-1], "data.source.units={internet: GB}"])
    with pytest.raises(UserError, match=r"trained on internet in MB, and these data give it in GB"):
        check_units_and_graph_settings(trained, in_gb, [], "the run")
    # a service the file does not have is refused, as data=points refuses it
    typo = compose_train(tmp_path / "typo", [*job[:-1], "data.source.units={internt: MB}"])
    with pytest.raises(UserError, match=r"data.source.units names 'internt', no channel"):
        build_datamodule(typo, tmp_path / "typo")


def test_units_of_the_generated_traffic_are_refused_in_one_line(tmp_path):
    """The generator's traffic is in no unit: a unit given for it would be a label alone."""
    from conftest import build_datamodule

    job = ["data=mobile", "data.source.num_antennas=8", "data.source.num_days=2"]
    cfg = compose_train(tmp_path, [*job, "data.source.units={sms: count}"])
    with pytest.raises(UserError) as err:
        build_datamodule(cfg, tmp_path)
    assert str(err.value) == (
        "data.source.units={'sms': 'count'} names the units of your traffic file, but "
        "data=mobile generates its traffic here (data.source.path=null), in no unit: give your "
        "file (data.source.path=/path/to/traffic.csv), or leave data.source.units out."
    )


def test_a_bad_cell_s_message_names_an_option_data_mobile_takes(tmp_path, caplog):
    """data=mobile passed only the column names and units to the long-format source, so its
    message about a bad cell named data.source.bad_values=warn, which Hydra then refused."""
    from conftest import build_datamodule

    path = traffic_file(tmp_path)
    table = pd.read_csv(path).astype({"sms": object})
    table.loc[5, "sms"] = "oops"
    table.to_csv(path, index=False)
    job = ["data=mobile", f"data.source.path={path}", "data.input_steps=4", "data.output_steps=2"]
    with pytest.raises(UserError, match=r"set bad_values=warn \(data.source.bad_values=warn\)"):
        build_datamodule(compose_train(tmp_path / "error", job), tmp_path / "error")
    warned = compose_train(tmp_path / "warn", [*job, "data.source.bad_values=warn"])
    dm, _ = build_datamodule(warned, tmp_path / "warn")
    assert dm.stream.values.shape[1:] == (4, 2)
    assert "column 'sms': 'oops'. They count as missing (bad_values=warn)" in caplog.text
    # the other reading options of data=points are there too
    for option in ("value_cols", "freq", "time_format", "time_unit", "moving", "covariate_cols"):
        assert option in warned.data.source


def test_reading_options_without_a_file_are_refused_in_one_line(tmp_path):
    """The generator reads none of a file's reading options: train.py ran on, without a word,
    as if data.source.bad_values=warn or data.source.freq had been read."""
    small = ["data.source.num_antennas=12", "data.source.num_days=2", "trainer=cpu"]
    small += ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "logger=none"]
    options = ["data.source.bad_values=warn", "data.source.freq=10min"]
    run = f"hydra.run.dir={tmp_path / 'run'}"
    proc = run_python("train.py", "data=mobile", *small, *options, run)
    assert one_line(proc) == (
        "data.source.bad_values=warn, data.source.freq=10min: data=mobile generates its "
        "traffic here (data.source.path=null) and reads no file, so nothing would read them: "
        "give your file (data.source.path=/path/to/traffic.csv), or leave them out."
    )
    assert not (tmp_path / "run").exists()


def test_generator_options_with_a_file_are_refused_in_one_line(tmp_path):
    """A file's reader runs without the generator: its days were ignored without a word."""
    path = traffic_file(tmp_path)
    run = f"hydra.run.dir={tmp_path / 'run'}"
    proc = run_python(
        "train.py", "data=mobile", f"data.source.path={path}", "data.source.num_days=30", run
    )
    assert one_line(proc) == (
        f"data.source.num_days=30: data=mobile reads your file here (data.source.path={path}), "
        "so the generator that it would set does not run: leave it out, or generate the "
        "traffic (data.source.path=null)."
    )


def test_a_command_sweep_of_options_the_source_does_not_read_is_refused_once(tmp_path):
    """A multirun's option that no job's source reads was refused job by job, a line each
    after the jobs before had run: now once, naming the sweep as given, before any job."""
    path = traffic_file(tmp_path)
    sweep = tmp_path / "sweep"
    proc = run_python(
        "train.py", "-m", "data=mobile", f"data.source.path={path}",
        "data.source.num_days=14,30", "model=persistence", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert one_line(proc) == (
        f"data.source.num_days=14,30: data=mobile reads your file here "
        f"(data.source.path={path}), so the generator that it would set does not run: leave "
        "it out, or generate the traffic (data.source.path=null)."
    )  # 14 is the config's: only the job of 30 was refused
    assert not sweep.exists()
    generated = ["data=mobile", "data.source.bad_values=warn", "model=persistence,linear"]
    proc = run_python("train.py", "-m", *generated, f"hydra.sweep.dir={sweep}")
    assert one_line(proc).startswith(
        "data.source.bad_values=warn: data=mobile generates its traffic here "
    )
    assert not sweep.exists()


def test_the_options_each_source_reads_are_named_as_the_sources_take_them():
    """The rules of the sweeps' checks name data=mobile's source and options without
    importing the sources (torch, pandas): its target is the source's, its generator's
    options mobile_traffic's, and its reading options those conf/data/points.yaml declares,
    each LongFormatSource's."""
    import inspect

    from cloudlstm.assembly.mobile_options import (
        GENERATOR_OPTIONS,
        MOBILE_TARGET,
        reading_options,
    )
    from cloudlstm.data.sources import mobile
    from cloudlstm.paths import config_dir

    target = OmegaConf.load(config_dir() / "data" / "mobile.yaml").source._target_
    assert target == f"{mobile.__name__}.{mobile.mobile_traffic.__name__}" == MOBILE_TARGET
    assert set(GENERATOR_OPTIONS) < set(inspect.signature(mobile.mobile_traffic).parameters)
    reads = set(inspect.signature(LongFormatSource.__init__).parameters)
    assert set(reading_options()) == reads - {"self", "path", "cache_dir", "units"}


def test_options_at_their_defaults_or_read_are_not_refused(tmp_path):
    """Only an option that the command sets to a value of its own is ignored: every option
    is in the config, at conf/data/mobile.yaml's value, whichever source runs."""
    from conftest import build_datamodule

    small = ["data=mobile", "data.source.num_antennas=8", "data.source.num_days=2"]
    typed = compose_train(tmp_path / "gen", [*small, "data.source.bad_values=error"])
    dm, _ = build_datamodule(typed, tmp_path / "gen")
    assert isinstance(dm.source, SyntheticMobileTraffic)
    path = traffic_file(tmp_path)
    job = ["data=mobile", f"data.source.path={path}", "data.input_steps=4"]
    read = compose_train(tmp_path / "file", [*job, "data.output_steps=2", "data.source.seed=0"])
    dm, _ = build_datamodule(read, tmp_path / "file")
    assert isinstance(dm.source, LongFormatSource)


@pytest.mark.slow
def test_an_experiments_sweep_of_generated_cities_runs_once_with_a_file(tmp_path):
    """experiment=paper/mobile sweeps data.source.city, which a file's run does not read:
    the experiment's, not the command's, so its jobs run as its comment offers, once each
    and not once per city (two jobs of the same data), with a line saying so."""
    path = traffic_file(tmp_path)
    sweep = tmp_path / "sweep"
    job = ["model=persistence", "seed=0", "trainer=cpu", "logger=none", "report.figures=false"]
    proc = run_python(
        "train.py", "-m", "experiment=paper/mobile", f"data.source.path={path}",
        "data.input_steps=4", "data.output_steps=2", *job, f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.parent.name for p in sweep.glob("*/metrics.json")) == ["0"]
    assert (
        "The config's sweep of data.source.city does not apply: data=mobile reads your file "
        f"here (data.source.path={path}), not the generator, so the jobs that differ only "
        "there run once (2 jobs -> 1)."
    ) in proc.stdout + proc.stderr


def test_a_sweep_of_cities_read_or_given_by_the_command_is_kept():
    """Only the config's sweep of an option that the job's source does not read is dropped:
    the generator's cities stay two jobs, and a city that the command sweeps with a file is
    the command's, refused before any job runs (check_command_sweeps)."""
    from cloudlstm.assembly.source_options import MOBILE_TARGET, read_sweeps

    jobs = [["data.source.city=city1", "seed=0"], ["data.source.city=city2", "seed=0"]]
    generated = OmegaConf.create({"_target_": MOBILE_TARGET, "path": None})
    assert read_sweeps(jobs, {"data.source.city"}, lambda job: generated) == (jobs, None)
    filed = OmegaConf.create({"_target_": MOBILE_TARGET, "path": "t.csv"})
    assert read_sweeps(jobs, set(), lambda job: filed) == (jobs, None)
    kept, note = read_sweeps(jobs, {"data.source.city"}, lambda job: filed)
    assert kept == [["seed=0"]] and note is not None and "(2 jobs -> 1)" in note

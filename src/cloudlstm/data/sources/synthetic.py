"""A synthetic point-cloud stream in which space matters: advected, diffusing pollutant plumes.

Several pollutant-like channels are simulated on a regular ``G x G`` grid (1 cell =
``domain_km / G`` km, 1 step = 1 hour):

* **advection** by a wind that turns slowly (it meanders around a prevailing direction, with
  gusts, a diurnal speed cycle and a weak divergence-free swirl), with a semi-Lagrangian step
  (bilinear interpolation at the departure points);
* **regional inflow**: air entering across the upwind border carries a smooth, slowly evolving
  lognormal pollution pattern (partly shared between channels), as if blown in from outside;
* explicit **diffusion** (5-point Laplacian, no-flux borders);
* channel-specific first-order **decay** (lifetimes of a few hours to a few days);
* **emission** from moving Gaussian area sources, a separate set per channel (so channels have
  different spatial structure), modulated by a channel-specific diurnal cycle, a weaker weekly
  cycle (quieter weekends) and slow per-source fluctuations.

The field is bilinearly sampled at ``N`` irregularly placed stations (a few Gaussian clusters
plus a uniform background) and independent per-station measurement noise is added. The
defaults are chosen so that space matters for *shared, isotropic* models (ones that weigh
neighbours by distance rank, not direction): the (unpredictable, direction-dependent) regional
inflow is off (``regional_share=0``); broad sources (``source_width=6`` cells) that wander
fast enough (``source_speed=0.3`` cells/h) to cross the domain within days make a station's
own history a poor guide to where the plumes will be, while its neighbours see the same plumes;
and measurement noise (``noise_std=0.2``) makes neighbours valuable for de-noising. With the
defaults a per-station linear one-step predictor using the 6 nearest neighbours has
~0.66-0.86x the MSE of one using only the station's own history (``tests/test_data.py``).
At 24 stations and 1500 steps, after the same 15 epochs, a shared seq2seq LSTM fed its
6 nearest stations has 0.82-0.85x, and a small CloudLSTM (K = 6) 0.91-0.98x, the test MSE of
the LSTM fed only each station's own history (``python -m cloudlstm.cli.space_check``,
``tests/test_spatial.py``). The earlier defaults (slow sources, ``source_speed=0.05``, width
4.5, noise 0.3) rewarded neighbours mostly for de-noising, and CloudLSTM did not reliably use
that (``docs/design.md``).

The stream is written to the cache under ``cache_dir`` (keyed by a hash of every argument)
a time chunk at a time: the simulation keeps its station samples in a scratch file next to
the cache and the values are made from them chunk by chunk, so preparing a long stream never
holds it whole in memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cloudlstm.data.cache import CachedSource, StreamWriter, check_float, check_int
from cloudlstm.data.stream import PointCloudStream

__all__ = ["SyntheticAdvectionDiffusion", "CHANNEL_PRESETS"]

# Bump when the simulation changes, so stale cache files are not reused.
GENERATOR_VERSION = 4


@dataclass(frozen=True)
class _ChannelPreset:
    name: str
    level: float  # typical mean concentration (raw units, e.g. ug/m3)
    lifetime_h: float  # e-folding lifetime of the decay
    diurnal_amp: float  # relative amplitude of the diurnal emission cycle
    peak_hour: float  # hour of maximum emission
    weekend_drop: float  # relative emission drop on weekends


CHANNEL_PRESETS: tuple[_ChannelPreset, ...] = (
    _ChannelPreset("pm25_like", 35.0, 48.0, 0.45, 20.0, 0.10),
    _ChannelPreset("no2_like", 40.0, 8.0, 0.70, 8.0, 0.30),
    _ChannelPreset("so2_like", 12.0, 24.0, 0.25, 11.0, 0.05),
    _ChannelPreset("co_like", 450.0, 72.0, 0.60, 18.0, 0.25),
    _ChannelPreset("pm10_like", 55.0, 24.0, 0.40, 14.0, 0.15),
    _ChannelPreset("nox_like", 60.0, 6.0, 0.75, 7.0, 0.35),
)


def _preset(c: int) -> _ChannelPreset:
    if c < len(CHANNEL_PRESETS):
        return CHANNEL_PRESETS[c]
    base = CHANNEL_PRESETS[c % len(CHANNEL_PRESETS)]
    return _ChannelPreset(
        f"ch{c:02d}_like",
        base.level,
        base.lifetime_h,
        base.diurnal_amp,
        (base.peak_hour + 3.0 * c) % 24.0,
        base.weekend_drop,
    )


def _bilinear(field: np.ndarray, yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of ``field (C, G0, G1)`` at fractional grid positions.

    Positions outside the grid read 0. ``yi``/``xi`` share any shape ``S``; returns
    ``(C, *S)``.
    """
    c, g0, g1 = field.shape
    flat = field.reshape(c, -1)
    yf = np.floor(yi)
    xf = np.floor(xi)
    wy = (yi - yf).ravel()
    wx = (xi - xf).ravel()
    y0 = yf.astype(np.int64).ravel()
    x0 = xf.astype(np.int64).ravel()
    out = np.zeros((c, y0.size), dtype=field.dtype)
    for dy, fy in ((0, 1.0 - wy), (1, wy)):
        ys = y0 + dy
        vy = (ys >= 0) & (ys < g0)
        for dx, fx in ((0, 1.0 - wx), (1, wx)):
            xs = x0 + dx
            valid = vy & (xs >= 0) & (xs < g1)
            idx = np.where(valid, ys * g1 + xs, 0)
            out += flat[:, idx] * (fy * fx * valid)
    return out.reshape((c,) + np.shape(yi))


class SyntheticAdvectionDiffusion(CachedSource):
    """Generator of a synthetic advection-diffusion point-cloud stream (see module docstring).

    Args:
        num_points: N stations (>= 2).
        num_channels: C pollutant-like channels (>= 1); the first six have preset names
            ``pm25_like, no2_like, so2_like, co_like, pm10_like, nox_like``.
        num_steps: T hourly steps (>= 10), starting 2020-01-01 00:00.
        grid_size: G, the simulation grid is ``G x G`` (>= 8).
        seed: seed of ``np.random.default_rng``; the output is a deterministic function of all
            arguments except ``cache_dir``.
        noise_std: measurement noise standard deviation, relative to each channel's level.
        cache_dir: folder of the stream cache; ``None`` disables caching.
        wind_speed: mean wind speed in grid cells per step (<= grid_size / 2).
        wind_turn_hours: period (hours) of the slow swing of the wind direction.
        wind_meander: amplitude (radians) of that swing around the prevailing direction.
        diffusion: diffusion number ``kappa * dt / dx**2`` of the explicit scheme (<= 0.25).
        sources_per_channel: moving emission sources per channel.
        source_width: standard deviation (grid cells) of a source's Gaussian footprint.
        source_speed: typical speed (grid cells per step) of the moving sources.
        num_clusters: Gaussian clusters of stations.
        cluster_fraction: fraction of stations placed in clusters (the rest uniformly).
        domain_km: physical side length of the domain; coordinates are in km.
        missing_rate: fraction of entries dropped at random (mask False, value NaN), half as
            isolated entries and half as station outages of a few hours.
        spin_up: simulated steps discarded before recording, so plumes fill the domain.
        regional_share: share of the mean concentration (above background) that comes from
            the regional inflow rather than the local sources.

    Raw values are non-negative, around ``level`` per channel (pm25 ~35, no2 ~40, so2 ~12,
    co ~450, ...); coordinates are ``(x_km, y_km)`` in ``[0, domain_km]``.
    """

    cache_prefix = "advdiff"

    def __init__(
        self,
        num_points: int = 64,
        num_channels: int = 4,
        num_steps: int = 2000,
        grid_size: int = 48,
        seed: int = 0,
        noise_std: float = 0.2,
        cache_dir: str | os.PathLike | None = "data/synthetic",
        wind_speed: float = 2.0,
        wind_turn_hours: float = 120.0,
        wind_meander: float = 0.4,
        diffusion: float = 0.25,
        sources_per_channel: int = 4,
        source_width: float = 6.0,
        source_speed: float = 0.3,
        num_clusters: int = 3,
        cluster_fraction: float = 0.6,
        domain_km: float = 96.0,
        missing_rate: float = 0.0,
        spin_up: int = 150,
        regional_share: float = 0.0,
    ) -> None:
        def _int(name: str, value, lo: int) -> int:
            return check_int(type(self).__name__, name, value, lo)

        def _float(name: str, value, lo: float, hi: float = np.inf, lo_open=False) -> float:
            return check_float(type(self).__name__, name, value, lo, hi, lo_open)

        self.num_points = _int("num_points", num_points, 2)
        self.num_channels = _int("num_channels", num_channels, 1)
        self.num_steps = _int("num_steps", num_steps, 10)
        self.grid_size = _int("grid_size", grid_size, 8)
        self.seed = _int("seed", seed, 0)
        self.noise_std = _float("noise_std", noise_std, 0.0)
        self.wind_speed = _float("wind_speed", wind_speed, 0.0, 0.5 * self.grid_size)
        self.wind_turn_hours = _float("wind_turn_hours", wind_turn_hours, 0.0, lo_open=True)
        self.wind_meander = _float("wind_meander", wind_meander, 0.0, np.pi)
        self.diffusion = _float("diffusion", diffusion, 0.0, 0.25)
        self.sources_per_channel = _int("sources_per_channel", sources_per_channel, 1)
        self.source_width = _float("source_width", source_width, 0.0, lo_open=True)
        self.source_speed = _float("source_speed", source_speed, 0.0)
        self.num_clusters = _int("num_clusters", num_clusters, 0)
        self.cluster_fraction = _float("cluster_fraction", cluster_fraction, 0.0, 1.0)
        self.domain_km = _float("domain_km", domain_km, 0.0, lo_open=True)
        self.missing_rate = _float("missing_rate", missing_rate, 0.0, 0.9)
        self.spin_up = _int("spin_up", spin_up, 0)
        self.regional_share = _float("regional_share", regional_share, 0.0, 1.0)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    # ------------------------------------------------------------------ config / caching
    def config(self) -> dict:
        """Every argument that determines the output (everything except ``cache_dir``)."""
        return {
            "version": GENERATOR_VERSION,
            "num_points": self.num_points,
            "num_channels": self.num_channels,
            "num_steps": self.num_steps,
            "grid_size": self.grid_size,
            "seed": self.seed,
            "noise_std": self.noise_std,
            "wind_speed": self.wind_speed,
            "wind_turn_hours": self.wind_turn_hours,
            "wind_meander": self.wind_meander,
            "diffusion": self.diffusion,
            "sources_per_channel": self.sources_per_channel,
            "source_width": self.source_width,
            "source_speed": self.source_speed,
            "num_clusters": self.num_clusters,
            "cluster_fraction": self.cluster_fraction,
            "domain_km": self.domain_km,
            "missing_rate": self.missing_rate,
            "spin_up": self.spin_up,
            "regional_share": self.regional_share,
        }

    @property
    def name(self) -> str:
        return f"synthetic_advdiff_s{self.seed}"

    # ------------------------------------------------------------------ simulation
    def _station_positions(self, rng: np.random.Generator) -> np.ndarray:
        """``(N, 2)`` station positions in fractional grid units (row, col)."""
        g = self.grid_size
        lo, hi = 1.0, g - 2.0
        n = self.num_points
        n_clustered = int(round(self.cluster_fraction * n)) if self.num_clusters > 0 else 0
        centers = rng.uniform(0.2 * g, 0.8 * g, size=(max(self.num_clusters, 1), 2))
        widths = rng.uniform(0.06 * g, 0.12 * g, size=max(self.num_clusters, 1))
        pts = []
        which = rng.integers(0, max(self.num_clusters, 1), size=n_clustered)
        for k in which:
            while True:  # rejection sampling keeps stations inside the domain
                p = centers[k] + widths[k] * rng.standard_normal(2)
                if (p >= lo).all() and (p <= hi).all():
                    break
            pts.append(p)
        for _ in range(n - n_clustered):
            pts.append(rng.uniform(lo, hi, size=2))
        pts = np.asarray(pts, dtype=np.float64)
        return pts[rng.permutation(n)]

    def _wind(self, rng: np.random.Generator, t_all: np.ndarray) -> np.ndarray:
        """Uniform wind per step, ``(total, 2)`` in grid cells per step (rows, cols).

        The direction meanders by +-``wind_meander`` rad around a random prevailing direction
        with period ``wind_turn_hours`` plus red noise; the speed has a diurnal cycle (windier
        afternoons) and red-noise gusts.
        """
        total = len(t_all)
        theta0 = rng.uniform(0.0, 2.0 * np.pi)
        phase = rng.uniform(0.0, 2.0 * np.pi)
        e_dir = rng.standard_normal(total)
        e_spd = rng.standard_normal(total)
        dir_noise = np.zeros(total)
        spd_noise = np.zeros(total)
        for t in range(1, total):
            dir_noise[t] = 0.95 * dir_noise[t - 1] + 0.08 * e_dir[t]
            spd_noise[t] = 0.9 * spd_noise[t - 1] + 0.08 * e_spd[t]
        theta = (
            theta0
            + self.wind_meander * np.sin(2.0 * np.pi * t_all / self.wind_turn_hours + phase)
            + dir_noise
        )
        hour = np.mod(t_all, 24.0)
        speed = (
            self.wind_speed
            * np.exp(spd_noise)
            * (1.0 + 0.25 * np.sin(2 * np.pi * (hour - 9.0) / 24.0))
        )
        return np.stack([speed * np.sin(theta), speed * np.cos(theta)], axis=1)

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Run the simulation (ignores an existing cache). With ``cache_path`` the stream is
        written there chunk by chunk and the stream returned reads from that cache."""
        with self.writer(cache_path, self.num_steps, self.num_points, self.num_channels) as out:
            return self._simulate(out)

    def _simulate(self, out: StreamWriter) -> PointCloudStream:
        """The simulation, written into ``out``: the station samples of every step first
        (a scratch array), then the values made from them a time chunk at a time. Every
        random draw comes from one generator, in a fixed order."""
        rng = np.random.default_rng(self.seed)
        presets = [_preset(c) for c in range(self.num_channels)]
        total = self.spin_up + self.num_steps
        t_all = np.arange(total, dtype=np.float64) - self.spin_up  # hours since 2020-01-01
        stations = self._station_positions(rng)
        samples, means = self._sample_field(rng, out, presets, t_all, stations)
        self._write_values(out, rng, presets, t_all[self.spin_up :], samples, means)
        if self.missing_rate > 0:
            self._drop_readings(out, rng)
        coords = stations[:, ::-1] * (self.domain_km / self.grid_size)  # (x_km, y_km)
        timestamps = np.datetime64("2020-01-01T00:00", "s") + np.arange(
            self.num_steps
        ) * np.timedelta64(3600, "s")
        return out.finish(
            coords=coords,
            channel_names=[p.name for p in presets],
            point_ids=[f"s{i:03d}" for i in range(self.num_points)],
            timestamps=timestamps,
            name=self.name,
            metadata={"generator": self.config()},
        )

    def _sample_field(
        self,
        rng: np.random.Generator,
        out: StreamWriter,
        presets: list[_ChannelPreset],
        t_all: np.ndarray,
        stations: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the grid simulation over ``t_all`` (spin-up included).

        Returns:
            ``samples (T, 2C, N)`` float64, the field at the stations after the spin-up (a
            scratch array of ``out``): channels ``[0, C)`` hold pollution from the local
            sources, ``[C, 2C)`` the regional inflow; and their ``(2C,)`` means (> 0).
        """
        g, c_num, n_pts = self.grid_size, self.num_channels, self.num_points
        wind = self._wind(rng, t_all)
        flow = _Flow(rng, wind, t_all, g, self.wind_speed, self.wind_turn_hours)
        sources = _Sources(
            rng, c_num, self.sources_per_channel, g, self.source_speed, self.source_width
        )
        cycle = _emission_cycle(presets, t_all)  # (total, C)
        regional = _RegionalInflow(rng, c_num, flow.wind)
        field = np.zeros((2 * c_num, g, g), dtype=np.float64)
        field[c_num:] = regional(flow.yy.ravel(), flow.xx.ravel(), 0).reshape(c_num, g, g)
        lifetimes = np.array([p.lifetime_h for p in presets])
        decay = np.exp(-1.0 / np.concatenate([lifetimes, lifetimes]))[:, None, None]
        samples = out.scratch("samples", (self.num_steps, 2 * c_num, n_pts), np.float64)
        sums = np.zeros(2 * c_num)  # of the samples over time and stations, per channel
        for t in range(len(t_all)):
            field = self._transport(field, t, flow, regional)
            field *= decay  # first-order decay
            field[:c_num] += sources.emission(rng, cycle[t])
            sources.move(rng)
            if t >= self.spin_up:
                sampled = _bilinear(field, stations[:, 0], stations[:, 1])  # (2C, N)
                samples[t - self.spin_up] = sampled
                sums += sampled.sum(axis=1)
        return samples, np.maximum(sums / (self.num_steps * n_pts), 1e-12)

    def _transport(
        self, field: np.ndarray, t: int, flow: _Flow, regional: _RegionalInflow
    ) -> np.ndarray:
        """``field (2C, G, G)`` advected by step ``t``'s wind (semi-Lagrangian, bilinear at
        the departure points), with the regional inflow entering across the borders, then
        diffused (explicit, no-flux borders)."""
        c_num, g = self.num_channels, self.grid_size
        dep_r, dep_c = flow.departure(t)
        field = _bilinear(field, dep_r, dep_c)
        outside = (dep_r < 0) | (dep_r > g - 1) | (dep_c < 0) | (dep_c > g - 1)
        if outside.any():
            field[:c_num, outside] = 0.0  # inflowing air carries no local pollution
            field[c_num:, outside] = regional(dep_r[outside], dep_c[outside], max(t - 1, 0))
        if self.diffusion > 0:
            p = np.pad(field, ((0, 0), (1, 1), (1, 1)), mode="edge")
            lap = p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:]
            field += self.diffusion * (lap - 4.0 * field)
        return field

    def _write_values(
        self,
        out: StreamWriter,
        rng: np.random.Generator,
        presets: list[_ChannelPreset],
        t_rec: np.ndarray,
        samples: np.ndarray,
        means: np.ndarray,
    ) -> None:
        """Values from the samples, a time chunk at a time (the random draws come in the
        same order as for the whole): each component normalised to mean 1, mixed, scaled to
        pollutant-like magnitudes on top of a spatially uniform background with a slow
        (synoptic) modulation, plus measurement noise."""
        c_num = self.num_channels
        share = self.regional_share
        levels = np.array([p.level for p in presets])
        synoptic = 1.0 + 0.3 * np.sin(2 * np.pi * t_rec / (24.0 * 9.3) + rng.uniform(0, 2 * np.pi))
        observed = None
        for a, b in out.chunks():
            local = samples[a:b, :c_num].transpose(0, 2, 1)  # (steps, N, C)
            inflow = samples[a:b, c_num:].transpose(0, 2, 1)
            mixed = (1.0 - share) * local / means[:c_num]
            mixed = mixed + share * inflow / means[c_num:]
            background = 0.2 * levels[None, None, :] * synoptic[a:b, None, None]
            values = background + 0.8 * levels * mixed
            noise = self.noise_std * levels * rng.standard_normal(values.shape)
            if observed is None or len(observed) != b - a:
                observed = np.ones(values.shape, dtype=bool)
            out.write(a, np.maximum(values + noise, 0.0).astype(np.float32), observed)

    def _drop_readings(self, out: StreamWriter, rng: np.random.Generator) -> None:
        """Mark ``missing_rate`` of the entries missing (NaN values): half of them isolated,
        half in station outages of 6 steps."""
        n_pts, c_num = self.num_points, self.num_channels
        for a, b in out.chunks():
            out.mask[a:b] = rng.random((b - a, n_pts, c_num)) >= 0.5 * self.missing_rate
        outage_len = 6
        n_out = int(round(0.5 * self.missing_rate * self.num_steps * n_pts / outage_len))
        for _ in range(n_out):
            i = rng.integers(0, n_pts)
            t0 = rng.integers(0, self.num_steps)
            out.mask[t0 : t0 + outage_len, i, :] = False
        for a, b in out.chunks():
            out.values[a:b][~out.mask[a:b]] = np.nan


def _emission_cycle(presets: list[_ChannelPreset], t_all: np.ndarray) -> np.ndarray:
    """``(total, C)`` emission factor of every step: each channel's diurnal cycle, lower on
    weekends (2020-01-01, hour 0, was a Wednesday)."""
    diurnal_amp = np.array([p.diurnal_amp for p in presets])
    peak_hour = np.array([p.peak_hour for p in presets])
    weekend_drop = np.array([p.weekend_drop for p in presets])
    dow = (2 + np.floor(t_all / 24.0).astype(np.int64)) % 7  # 0 = Monday
    hour = np.mod(t_all, 24.0)
    cycle = 1.0 + diurnal_amp[None, :] * np.cos(2 * np.pi * (hour[:, None] - peak_hour) / 24)
    cycle *= 1.0 - weekend_drop[None, :] * (dow[:, None] >= 5)
    return cycle


class _Flow:
    """The wind of every step: the uniform ``wind (total, 2)`` (grid cells per step, rows
    and columns) plus a weak, divergence-free swirl (the curl of ``psi = sin(k1 y + p1)
    sin(k2 x + p2)``) whose strength swings slowly, so plumes bend a little."""

    def __init__(
        self,
        rng: np.random.Generator,
        wind: np.ndarray,
        t_all: np.ndarray,
        grid_size: int,
        wind_speed: float,
        wind_turn_hours: float,
    ) -> None:
        g = grid_size
        self.wind = wind
        self.yy, self.xx = np.meshgrid(
            np.arange(g, dtype=np.float64), np.arange(g, dtype=np.float64), indexing="ij"
        )
        k1, k2 = rng.uniform(0.5, 1.5, size=2) * 2.0 * np.pi / g
        ph1, ph2 = rng.uniform(0, 2 * np.pi, size=2)
        norm = np.sqrt(k1 * k2)
        self.swirl_r = -k2 * np.sin(k1 * self.yy + ph1) * np.cos(k2 * self.xx + ph2) / norm
        self.swirl_c = k1 * np.cos(k1 * self.yy + ph1) * np.sin(k2 * self.xx + ph2) / norm
        self.swirl_amp = 0.3 * wind_speed * np.sin(2 * np.pi * t_all / (2.7 * wind_turn_hours))

    def departure(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(G, G)`` rows and columns the air at each cell came from one step before."""
        dep_r = self.yy - (self.wind[t, 0] + self.swirl_amp[t] * self.swirl_r)
        dep_c = self.xx - (self.wind[t, 1] + self.swirl_amp[t] * self.swirl_c)
        return dep_r, dep_c


class _Sources:
    """The local emission: per channel, ``S`` moving Gaussian area sources whose strength
    flickers slowly; they wander with random heading changes, reflected at the margins."""

    def __init__(
        self,
        rng: np.random.Generator,
        num_channels: int,
        per_channel: int,
        grid_size: int,
        speed: float,
        width: float,
    ) -> None:
        shape = (num_channels, per_channel)
        g = grid_size
        self.grid_size = g
        self.margin = 0.12 * g
        self.pos = rng.uniform(self.margin, g - self.margin, size=(*shape, 2))  # (C, S, 2)
        self.dir = rng.uniform(0, 2 * np.pi, size=shape)
        self.speed = speed * rng.uniform(0.3, 1.7, size=shape)
        self.strength = rng.lognormal(0.0, 0.5, size=shape)
        self.width = width * rng.uniform(0.7, 1.3, size=(*shape, 1))
        self.log_flicker = np.zeros(shape)
        self.grid = np.arange(g, dtype=np.float64)

    def emission(self, rng: np.random.Generator, cycle: np.ndarray) -> np.ndarray:
        """``(C, G, G)`` emitted this step, under the channels' ``(C,)`` emission cycle."""
        self.log_flicker = 0.95 * self.log_flicker + 0.2 * rng.standard_normal(self.dir.shape)
        rate = cycle[:, None] * self.strength * np.exp(self.log_flicker)  # (C, S)
        gy = np.exp(-0.5 * ((self.grid - self.pos[..., 0:1]) / self.width) ** 2)  # (C, S, G)
        gx = np.exp(-0.5 * ((self.grid - self.pos[..., 1:2]) / self.width) ** 2)
        return np.einsum("cs,csi,csj->cij", rate, gy, gx)

    def move(self, rng: np.random.Generator) -> None:
        """One step on: a random heading change, then reflection at the margins."""
        g, margin, pos = self.grid_size, self.margin, self.pos
        self.dir += 0.15 * rng.standard_normal(self.dir.shape)
        pos[..., 0] += self.speed * np.sin(self.dir)
        pos[..., 1] += self.speed * np.cos(self.dir)
        for ax in (0, 1):
            low = pos[..., ax] < margin
            high = pos[..., ax] > g - margin
            pos[..., ax] = np.where(low, 2 * margin - pos[..., ax], pos[..., ax])
            pos[..., ax] = np.where(high, 2 * (g - margin) - pos[..., ax], pos[..., ax])
            self.dir = np.where(low | high, self.dir + np.pi, self.dir)


class _RegionalInflow:
    """Regional pollution blowing in from outside: a "frozen" lognormal random field per
    channel (partly shared between channels: one shared set of modes and one per channel)
    carried by the mean wind and slowly evolving. It enters the grid wherever a departure
    point lies outside the domain."""

    def __init__(self, rng: np.random.Generator, num_channels: int, wind: np.ndarray) -> None:
        self.n_modes = n_modes = 16
        self.sets = sets = num_channels + 1
        k_mag = 2.0 * np.pi / rng.uniform(20.0, 48.0, size=(sets, n_modes))
        k_dir = rng.uniform(0.0, 2.0 * np.pi, size=(sets, n_modes))
        self.k_vec = np.stack([k_mag * np.sin(k_dir), k_mag * np.cos(k_dir)]).reshape(2, -1)
        self.k_phase = rng.uniform(0.0, 2.0 * np.pi, size=sets * n_modes)
        self.k_omega = 2.0 * np.pi / rng.uniform(24.0, 96.0, size=sets * n_modes)
        self.k_omega *= rng.choice([-1.0, 1.0], size=sets * n_modes)
        self.rho, self.sigma = 0.5, 0.6  # share of the common set; log-std
        self.drift = np.cumsum(wind, axis=0)  # displacement of the frozen field, (total, 2)

    def __call__(self, py: np.ndarray, px: np.ndarray, t: int) -> np.ndarray:
        """``(C, P)`` inflow concentration (mean 1) at grid positions ``(py, px)`` at step
        ``t``."""
        q = np.stack([py - self.drift[t, 0], px - self.drift[t, 1]], axis=1)  # (P, 2)
        z = np.cos(q @ self.k_vec + (self.k_phase + self.k_omega * t))
        z = z.reshape(-1, self.sets, self.n_modes)
        z = np.sqrt(2.0 / self.n_modes) * z.sum(-1).T  # (sets, P), unit variance
        z = self.rho * z[:1] + np.sqrt(1.0 - self.rho**2) * z[1:]
        return np.exp(self.sigma * z - 0.5 * self.sigma**2)

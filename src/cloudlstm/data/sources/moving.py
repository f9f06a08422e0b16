"""Synthetic moving points: a vehicle fleet on looping routes, sampling a space-time field.

Each vehicle drives round one of a few smooth closed routes in a square city (``extent_km``
wide), in either direction. Its speed varies smoothly: a per-vehicle AR(1) factor, slower
traffic at the rush hours (8:00 and 17:30) and in the city centre. So positions are
forecastable from their recent past, and vehicles on the same stretch of road move alike.

Each vehicle measures ``num_channels`` channels:

* pollutant-like fields (``pm25_like``, ``no2_like``, ...): a background level, a gentle
  gradient and a few Gaussian hotspots that drift slowly across the city, with a daily cycle,
  sampled at the vehicle's position plus measurement noise (``noise_std`` of the level);
* ``speed_kmh`` (channel 1 when ``num_channels >= 2``): its own speed, measured with noise.

Values thus depend on where a vehicle is: nearby vehicles read similar values, which is what
makes neighbours useful. Results are cached under ``cache_dir`` (the stream cache of
:mod:`cloudlstm.data.cache`), keyed by a hash of every argument.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cloudlstm.data.cache import CachedSource, check_float, check_int
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import UserError

__all__ = ["SyntheticMovingPoints"]

# Bump when the generator changes, so stale cache files are not reused.
GENERATOR_VERSION = 1

FIELD_NAMES = ("pm25_like", "no2_like", "o3_like", "co_like")
_SPEED_JITTER = (0.4, 1.8)  # bounds of the per-vehicle speed factor: keeps steps bounded
MAX_SPEED_KMH = 1000.0  # the highest mean_speed_kmh taken
_ROUTE_SPEED = (0.8, 1.2)  # per-route speed factor (main roads are faster)
_HOTSPOTS = 4  # per field


def _route_polyline(rng: np.random.Generator, extent: float, samples: int = 512) -> np.ndarray:
    """``(samples, 2)`` points of a smooth closed loop (a wobbly, rotated ellipse) in km."""
    theta = np.linspace(0.0, 2.0 * np.pi, samples, endpoint=False)
    ph2, ph3, rot = rng.uniform(0.0, 2.0 * np.pi, size=3)
    radius = 1.0 + 0.15 * np.cos(2 * theta + ph2) + 0.05 * np.cos(3 * theta + ph3)
    ax = rng.uniform(0.8, 1.0, size=2)
    loop = radius[:, None] * np.c_[ax[0] * np.cos(theta), ax[1] * np.sin(theta)]
    loop = loop @ np.array([[np.cos(rot), np.sin(rot)], [-np.sin(rot), np.cos(rot)]])
    centre = rng.uniform(0.3, 0.7, size=2) * extent
    pts = centre + rng.uniform(0.25, 0.4) * extent * loop
    # shrink towards the centre where needed so the loop stays 5 % inside the domain
    lo, hi = 0.05 * extent, 0.95 * extent
    fit = min(
        1.0,
        *((centre - lo) / np.maximum(centre - pts.min(axis=0), 1e-9)),
        *((hi - centre) / np.maximum(pts.max(axis=0) - centre, 1e-9)),
    )
    return centre + fit * (pts - centre)


class _Route:
    """A closed polyline parametrised by arc length (km)."""

    def __init__(self, pts: np.ndarray) -> None:
        self.closed = np.vstack([pts, pts[:1]])  # (P + 1, 2)
        seg = np.linalg.norm(np.diff(self.closed, axis=0), axis=1)
        self.arc = np.r_[0.0, np.cumsum(seg)]
        self.length = float(self.arc[-1])

    def at(self, s: np.ndarray) -> np.ndarray:
        """``(len(s), 2)`` positions at arc lengths ``s`` (any real, wraps around)."""
        s = np.mod(s, self.length)
        return np.c_[
            np.interp(s, self.arc, self.closed[:, 0]), np.interp(s, self.arc, self.closed[:, 1])
        ]


class SyntheticMovingPoints(CachedSource):
    """Seeded synthetic fleet of ``num_points`` vehicles on ``num_routes`` looping routes.

    Args:
        num_points: N vehicles (spread evenly over the routes).
        num_steps: T time steps.
        num_channels: C; channel 0 is a pollutant-like field, channel 1 the vehicle's speed,
            further channels more fields.
        step_minutes: sampling period.
        seed: everything random derives from it.
        cache_dir: where to cache the result (``None``: no cache).
        num_routes: number of closed routes.
        extent_km: side of the square domain.
        mean_speed_kmh: typical speed outside rush hours and the centre.
        noise_std: measurement noise, as a fraction of each field's level.
        start: the first timestamp.

    ``load()`` returns a stream with ``trajectory (T, N, 2)`` in km (``coords`` its first
    step), values ``(T, N, C)`` (all observed), point ids ``v000...``, timestamps and
    metadata ``step_minutes``, ``steps_per_day``, ``generator`` (the config) and ``routes``
    (each vehicle's route index).
    """

    cache_prefix = "moving"

    def __init__(
        self,
        num_points: int = 32,
        num_steps: int = 2000,
        num_channels: int = 2,
        step_minutes: float = 1.0,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
        num_routes: int = 4,
        extent_km: float = 10.0,
        mean_speed_kmh: float = 25.0,
        noise_std: float = 0.05,
        start: str = "2021-03-01T06:00",
    ) -> None:
        owner = type(self).__name__
        self.num_points = check_int(owner, "num_points", num_points, 2)
        self.num_steps = check_int(owner, "num_steps", num_steps, 2)
        self.num_channels = check_int(owner, "num_channels", num_channels, 1)
        self.step_minutes = check_float(owner, "step_minutes", step_minutes, 1e-3, 1440.0)
        self.seed = check_int(owner, "seed", seed, 0)
        self.num_routes = check_int(owner, "num_routes", num_routes, 1)
        self.extent_km = check_float(owner, "extent_km", extent_km, 1e-3)
        # a road fleet: beyond an airliner's speed a vehicle laps its route between samples
        self.mean_speed_kmh = check_float(
            owner, "mean_speed_kmh", mean_speed_kmh, 0.0, MAX_SPEED_KMH
        )
        self.noise_std = check_float(owner, "noise_std", noise_std, 0.0)
        try:
            self.start = str(np.datetime64(start, "s"))
        except ValueError as err:
            raise UserError(
                f"{owner}: start={start!r} is not an ISO date/time such as '2021-03-01T06:00'."
            ) from err
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    @property
    def name(self) -> str:
        return f"synthetic_moving_s{self.seed}"

    @property
    def channel_names(self) -> list[str]:
        fields = [
            FIELD_NAMES[i] if i < len(FIELD_NAMES) else f"field{i}_like"
            for i in range(max(self.num_channels - 1, 1))
        ]
        return fields[:1] + (["speed_kmh"] if self.num_channels > 1 else []) + fields[1:]

    @property
    def max_step_km(self) -> float:
        """An upper bound of the distance a vehicle covers in one step."""
        hours = self.step_minutes / 60.0
        return self.mean_speed_kmh * _ROUTE_SPEED[1] * _SPEED_JITTER[1] * hours

    def config(self) -> dict:
        """Every argument that determines the output (everything except ``cache_dir``)."""
        return {
            "version": GENERATOR_VERSION,
            "num_points": self.num_points,
            "num_steps": self.num_steps,
            "num_channels": self.num_channels,
            "step_minutes": self.step_minutes,
            "seed": self.seed,
            "num_routes": self.num_routes,
            "extent_km": self.extent_km,
            "mean_speed_kmh": self.mean_speed_kmh,
            "noise_std": self.noise_std,
            "start": self.start,
        }

    # ------------------------------------------------------------------ simulation
    def _drive(self, rng: np.random.Generator, hours: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(T, N, 2)`` positions, ``(T, N)`` true speeds (km/h), ``(N,)`` route indices."""
        n, t_num, ext = self.num_points, self.num_steps, self.extent_km
        routes = [_Route(_route_polyline(rng, ext)) for _ in range(self.num_routes)]
        which = rng.permutation(np.arange(n) % self.num_routes)
        route_speed = rng.uniform(*_ROUTE_SPEED, size=self.num_routes)[which]
        direction = rng.choice([-1.0, 1.0], size=n)
        s = np.array([rng.uniform(0.0, routes[k].length) for k in which])
        # rush hours slow everyone down (up to 35 %); so does the centre (up to 30 %)
        rush = 0.35 * np.maximum(
            np.exp(-0.5 * ((hours - 8.0) / 1.0) ** 2), np.exp(-0.5 * ((hours - 17.5) / 1.2) ** 2)
        )
        centre = np.full(2, ext / 2.0)
        phi = np.exp(-self.step_minutes / 10.0)  # speed changes over ~10 minutes
        jitter = rng.standard_normal(n)
        pos = np.empty((t_num, n, 2))
        speed = np.empty((t_num, n))
        for t in range(t_num):
            for k, route in enumerate(routes):
                on = which == k
                pos[t, on] = route.at(s[on])
            slow = 1.0 - 0.3 * np.exp(-((pos[t] - centre) ** 2).sum(1) / (2 * (0.15 * ext) ** 2))
            factor = np.clip(np.exp(0.25 * jitter), *_SPEED_JITTER)
            speed[t] = self.mean_speed_kmh * route_speed * (1.0 - rush[t]) * slow * factor
            s += direction * speed[t] * self.step_minutes / 60.0
            jitter = phi * jitter + np.sqrt(1.0 - phi**2) * rng.standard_normal(n)
        return pos, speed, which

    def _fields(self, rng: np.random.Generator, pos: np.ndarray, hours: np.ndarray) -> np.ndarray:
        """``(T, N, F)`` pollutant-like fields at the positions ``pos (T, N, 2)``."""
        ext, t_num = self.extent_km, self.num_steps
        num_fields = max(self.num_channels - 1, 1)
        t_hours = np.arange(t_num) * self.step_minutes / 60.0
        out = np.empty((t_num, pos.shape[1], num_fields))
        for f in range(num_fields):
            level = rng.uniform(10.0, 60.0)
            # hotspots drift at 0.3-1 km/h and bounce off the domain edges (a triangle wave)
            start = rng.uniform(0.1, 0.9, size=(_HOTSPOTS, 2)) * ext
            vel = rng.uniform(0.3, 1.0, size=(_HOTSPOTS, 1)) * _unit(rng, _HOTSPOTS)
            drift = start[None] + t_hours[:, None, None] * vel[None]  # (T, G, 2)
            centres = ext - np.abs(ext - np.mod(drift, 2.0 * ext))
            width = rng.uniform(0.1, 0.2, size=_HOTSPOTS) * ext
            amp = rng.lognormal(0.0, 0.4, size=_HOTSPOTS)
            d2 = ((pos[:, :, None, :] - centres[:, None]) ** 2).sum(-1)  # (T, N, G)
            spots = (amp * np.exp(-d2 / (2.0 * width**2))).sum(-1)
            gradient = 0.2 * ((pos - ext / 2.0) / ext) @ _unit(rng, 1)[0]
            daily = 1.0 + 0.3 * np.cos(2.0 * np.pi * (hours - rng.uniform(6.0, 20.0)) / 24.0)
            out[:, :, f] = level * (0.3 + gradient + spots) * daily[:, None]
            out[:, :, f] += self.noise_std * level * rng.standard_normal(out.shape[:2])
        return np.maximum(out, 0.0)

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Simulate the whole stream in memory (ignores an existing cache); with
        ``cache_path`` also cache it there and return the stream read from the cache."""
        rng = np.random.default_rng(self.seed)
        start = np.datetime64(self.start, "s")
        step = np.timedelta64(int(round(self.step_minutes * 60.0)), "s")
        timestamps = start + np.arange(self.num_steps) * step
        midnight = start.astype("datetime64[D]").astype("datetime64[s]")
        hours = ((timestamps - midnight) / np.timedelta64(1, "h")) % 24.0

        pos, speed, which = self._drive(rng, hours)
        fields = self._fields(rng, pos, hours)
        if self.num_channels > 1:
            measured = speed * (1.0 + 0.03 * rng.standard_normal(speed.shape))
            values = np.concatenate(
                [fields[:, :, :1], np.maximum(measured, 0.0)[:, :, None], fields[:, :, 1:]], axis=2
            )
        else:
            values = fields
        stream = PointCloudStream(
            values=values.astype(np.float32),
            mask=np.ones(values.shape, dtype=bool),
            coords=pos[0],
            channel_names=self.channel_names,
            point_ids=[f"v{i:03d}" for i in range(self.num_points)],
            timestamps=timestamps,
            name=self.name,
            metadata={
                "step_minutes": self.step_minutes,
                "steps_per_day": int(round(1440.0 / self.step_minutes)),
                "generator": self.config(),
                "routes": which.tolist(),
                "source": "synthetic vehicle fleet (positions in km)",
            },
            trajectory=pos,
        )
        return self.cached(stream, cache_path)


def _unit(rng: np.random.Generator, count: int) -> np.ndarray:
    """``(count, 2)`` random unit vectors."""
    angle = rng.uniform(0.0, 2.0 * np.pi, size=count)
    return np.c_[np.cos(angle), np.sin(angle)]

"""Synthetic multi-service mobile traffic at city antennas, shaped like the paper's operator data.

The paper's mobile traffic data (traffic in MB of 38 mobile services at the 792 antennas of
City 1 and the 260 of City 2, 85 days in 5-minute bins) is not public. This generator
reproduces its published statistics (paper appendix "Mobile Traffic Dataset"):

* **services**: shares of the total traffic follow a power law over rank
  (``share ~ rank ** -share_exponent``); streaming takes about half, with five streaming
  services in the top ten; web ~17 %, social ~12 %, cloud ~9 %, chat ~8.5 % (paper: 8-17 %
  each); gaming ~1 % (paper: 0.5 %).
* **cycles**: a daily profile per service category (service-specific peak hours) and a
  weekly one (weekends start later, carry less work traffic and more streaming), modulated
  per antenna by how central ("business") or residential its location is.
* **layout**: antennas are dense around a city centre, with a few sub-centres and a sparse
  background; per-antenna load is lognormal.
* **fluctuations** (all multiplicative, so values stay positive): a spatially smooth AR(1)
  field (city-wide mobility, shared by neighbouring antennas), a per-antenna AR(1) term, a
  city-wide day-to-day factor and rare heavy-tailed (Pareto) bursts.
* **events**: a crowd gathers for a few hours over a ~1 km neighbourhood and raises social,
  chat and (some) video traffic at all antennas around it together; music streaming is
  unaffected (the paper's example). The events are listed in ``metadata["events"]``.

Generation runs day by day in float32, each day with its own seeded random stream, so the
output depends only on the arguments. Each day is written to the stream cache under
``cache_dir`` (keyed by a hash of every argument) as soon as it is made, so generating a
city at full size holds one day in memory, not the whole stream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cloudlstm.data.cache import CachedSource, check_float, check_int
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.units_option import units_option
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import UserError

__all__ = ["CITY_PRESETS", "SERVICES", "SyntheticMobileTraffic", "mobile_traffic"]

log = logging.getLogger(__name__)

# Bump when the generator changes, so stale cache files are not reused.
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class _Service:
    name: str
    category: str
    event_gain: float  # how strongly a crowd event raises this service


# In rank order: the rank sets the power-law share. Five streaming services in the top ten.
SERVICES: tuple[_Service, ...] = (
    _Service("YouTube", "streaming", 0.4),
    _Service("Google Search", "web", 0.3),
    _Service("Netflix", "streaming", 0.0),
    _Service("Facebook", "social", 1.0),
    _Service("WhatsApp", "chat", 0.9),
    _Service("iCloud", "cloud", 0.2),
    _Service("Amazon Prime Video", "streaming", 0.0),
    _Service("Instagram", "social", 1.2),
    _Service("Spotify", "streaming", 0.0),
    _Service("Twitch", "streaming", 0.5),
    _Service("Google Drive", "cloud", 0.0),
    _Service("Messenger", "chat", 0.8),
    _Service("Google Photos", "cloud", 0.4),
    _Service("Snapchat", "social", 1.2),
    _Service("Disney+", "streaming", 0.0),
    _Service("Wikipedia", "web", 0.1),
    _Service("Dropbox", "cloud", 0.0),
    _Service("Telegram", "chat", 0.7),
    _Service("Twitter", "social", 1.0),
    _Service("OneDrive", "cloud", 0.0),
    _Service("Amazon", "web", 0.0),
    _Service("Apple Music", "streaming", 0.0),
    _Service("Skype", "chat", 0.2),
    _Service("Google Maps", "maps", 0.6),
    _Service("Gmail", "mail", 0.1),
    _Service("Pinterest", "web", 0.3),
    _Service("Deezer", "streaming", 0.0),
    _Service("LinkedIn", "social", 0.2),
    _Service("Outlook", "mail", 0.0),
    _Service("Waze", "maps", 0.4),
    _Service("Viber", "chat", 0.5),
    _Service("SoundCloud", "streaming", 0.0),
    _Service("Uber", "maps", 0.8),
    _Service("eBay", "web", 0.0),
    _Service("Tinder", "social", 0.5),
    _Service("Booking.com", "web", 0.0),
    _Service("Clash of Clans", "gaming", 0.0),
    _Service("Pokemon GO", "gaming", 0.3),
)


@dataclass(frozen=True)
class _Category:
    weekday: tuple[tuple[float, float, float], ...]  # daily bumps: (peak hour, width h, weight)
    weekend: tuple[tuple[float, float, float], ...]
    weekend_level: float  # weekend volume relative to weekdays
    sigma: float  # std of the per-antenna log fluctuation (bursty services fluctuate more)


CATEGORIES: dict[str, _Category] = {
    "streaming": _Category(((12.5, 1.5, 0.3), (21.5, 2.0, 1.0)),
                           ((11.0, 3.0, 0.4), (16.0, 2.5, 0.5), (21.5, 2.0, 1.0)), 1.15, 0.25),
    "web": _Category(((10.0, 2.5, 0.8), (15.0, 2.5, 0.7), (21.0, 2.0, 0.5)),
                     ((12.0, 3.0, 0.7), (20.0, 3.0, 0.6)), 0.9, 0.2),
    "social": _Category(((8.0, 1.2, 0.5), (12.5, 1.2, 0.6), (18.0, 1.5, 0.6), (22.0, 1.5, 0.8)),
                        ((11.0, 2.0, 0.6), (17.0, 3.0, 0.7), (22.5, 1.5, 0.9)), 1.05, 0.2),
    "cloud": _Category(((9.0, 1.5, 0.6), (14.0, 3.0, 0.8), (23.0, 1.5, 0.5)),
                       ((11.0, 3.0, 0.5), (23.5, 1.5, 0.5)), 0.75, 0.35),
    "chat": _Category(((9.0, 2.0, 0.6), (13.0, 2.0, 0.6), (19.0, 3.0, 0.8)),
                      ((12.0, 3.0, 0.7), (20.0, 3.0, 0.8)), 1.0, 0.2),
    "maps": _Category(((8.0, 1.0, 1.0), (18.0, 1.2, 1.0)),
                      ((11.0, 2.0, 0.6), (16.0, 2.0, 0.6)), 0.8, 0.3),
    "mail": _Category(((9.0, 1.5, 1.0), (14.0, 2.0, 0.7)), ((11.0, 3.0, 0.3),), 0.5, 0.3),
    "gaming": _Category(((13.0, 1.0, 0.3), (21.0, 2.0, 1.0)),
                        ((15.0, 3.0, 0.7), (21.0, 2.5, 1.0)), 1.3, 0.35),
}  # fmt: skip

# num_antennas and city extent of the paper's two cities (extent: our choice, plausible).
CITY_PRESETS: dict[str, dict[str, float]] = {
    "city1": {"num_antennas": 792, "extent_km": 20.0, "num_subcentres": 3},
    "city2": {"num_antennas": 260, "extent_km": 12.0, "num_subcentres": 2},
}

_TAU_LOCAL_MIN = 45.0  # correlation time of the per-antenna fluctuation
_TAU_SMOOTH_MIN = 180.0  # correlation time of the spatially smooth (mobility) field
_SIGMA_SMOOTH = 0.15  # std of the smooth log field
_NUM_BASIS = 24  # spatial basis functions of the smooth field


# ---------------------------------------------------------------------- the generator
def _bumps(hours: np.ndarray, bumps: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """Sum of periodic (von Mises) bumps over the day at ``hours`` (any shape)."""
    out = np.zeros_like(hours)
    for peak, width, weight in bumps:
        kappa = (24.0 / (2.0 * np.pi * width)) ** 2
        out += weight * np.exp(kappa * (np.cos(2.0 * np.pi * (hours - peak) / 24.0) - 1.0))
    return out


def _work_hours(hours: np.ndarray) -> np.ndarray:
    """Smooth 0..1 indicator of office hours (about 8:30-18:00)."""
    return 1.0 / ((1.0 + np.exp(-(hours - 8.5) * 2.0)) * (1.0 + np.exp((hours - 18.0) * 2.0)))


class SyntheticMobileTraffic(CachedSource):
    """Seeded synthetic mobile traffic (MB per bin) of ``num_services`` at ``num_antennas``.

    Args:
        num_antennas: N; ``None`` = the city's preset (792 for ``city1``, 260 for ``city2``).
        num_services: C <= 38, the top-C services of :data:`SERVICES` by rank.
        num_days: length; T = ``num_days * 1440 / step_minutes`` steps.
        step_minutes: bin width; must divide a day.
        seed: everything random derives from it.
        city: ``"city1"`` or ``"city2"`` (antenna count, city extent, sub-centres).
        cache_dir: where to cache the result (``None``: no cache).
        share_exponent: alpha of the rank power law of service shares.
        mean_total_mb: mean total traffic of an antenna per bin, over all 38 services.
        load_sigma: std of the log of the per-antenna load (lognormal heterogeneity).
        noise_level: multiplies every fluctuation's std (0 = smooth cycles only).
        events_per_day: mean number of crowd events per day.
        start: the first timestamp (2016-09-05 is a Monday).

    ``load()`` returns a stream with values ``(T, N, C)`` float32 (all observed), coords
    ``(N, 2)`` in km, channel names = service names, point ids ``a0000...``, timestamps, and
    metadata ``step_minutes``, ``steps_per_day``, ``generator`` (the config),
    ``categories`` (per channel), ``centres_km`` (city centre first) and ``events``.

    Memory: the result is ``4 * T * N * C`` bytes plus a ``T * N * C`` bool mask; the paper's
    City 1 size (24,480 x 792 x 38, the defaults) is 2.9 GB + 0.7 GB; generating it took 35 s
    and 4.8 GB peak on 2 CPU cores, reading its cache 9 s.
    """

    cache_prefix = "mobile"

    def __init__(
        self,
        num_antennas: int | None = None,
        num_services: int = 38,
        num_days: int = 85,
        step_minutes: int = 5,
        seed: int = 0,
        city: str = "city1",
        cache_dir: str | os.PathLike | None = None,
        share_exponent: float = 1.15,
        mean_total_mb: float = 100.0,
        load_sigma: float = 0.8,
        noise_level: float = 1.0,
        events_per_day: float = 0.5,
        start: str = "2016-09-05T00:00",
    ) -> None:
        owner = type(self).__name__
        if city not in CITY_PRESETS:
            raise UserError(f"{owner}: unknown city={city!r}; use one of {list(CITY_PRESETS)}.")
        self.city = city
        preset = CITY_PRESETS[city]
        if num_antennas is None:
            num_antennas = preset["num_antennas"]
        self.num_antennas = check_int(owner, "num_antennas", num_antennas, 2)
        self.num_services = check_int(owner, "num_services", num_services, 1)
        if self.num_services > len(SERVICES):
            raise UserError(
                f"{owner}: num_services={num_services} but only {len(SERVICES)} services are "
                f"modelled; use num_services <= {len(SERVICES)}."
            )
        self.num_days = check_int(owner, "num_days", num_days, 1)
        self.step_minutes = check_int(owner, "step_minutes", step_minutes, 1)
        if 1440 % self.step_minutes:
            raise UserError(
                f"{owner}: step_minutes={step_minutes} must divide a day (1440 minutes), "
                "e.g. 5, 10, 15, 30 or 60."
            )
        self.seed = check_int(owner, "seed", seed, 0)
        self.share_exponent = check_float(owner, "share_exponent", share_exponent, 0.0)
        self.mean_total_mb = check_float(owner, "mean_total_mb", mean_total_mb, 0.0)
        self.load_sigma = check_float(owner, "load_sigma", load_sigma, 0.0, 3.0)
        self.noise_level = check_float(owner, "noise_level", noise_level, 0.0, 4.0)
        self.events_per_day = check_float(owner, "events_per_day", events_per_day, 0.0, 100.0)
        try:
            self.start = str(np.datetime64(start, "s"))
        except ValueError as err:
            raise UserError(
                f"{owner}: start={start!r} is not an ISO date/time such as '2016-09-05T00:00'."
            ) from err
        self.extent_km = float(preset["extent_km"])
        self.num_subcentres = int(preset["num_subcentres"])
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    @property
    def steps_per_day(self) -> int:
        return 1440 // self.step_minutes

    @property
    def num_steps(self) -> int:
        return self.num_days * self.steps_per_day

    @property
    def name(self) -> str:
        return f"mobile_{self.city}_s{self.seed}"

    def physical_ranges(self) -> dict[str, tuple[float | None, float | None]]:
        """Traffic cannot be negative: a value below 0 is refused at load
        (:mod:`cloudlstm.data.pipeline.absurd_values`)."""
        return dict.fromkeys((s.name for s in SERVICES[: self.num_services]), (0.0, None))

    def config(self) -> dict:
        """Every argument that determines the output (everything except ``cache_dir``)."""
        return {
            "version": GENERATOR_VERSION,
            "city": self.city,
            "num_antennas": self.num_antennas,
            "num_services": self.num_services,
            "num_days": self.num_days,
            "step_minutes": self.step_minutes,
            "seed": self.seed,
            "share_exponent": self.share_exponent,
            "mean_total_mb": self.mean_total_mb,
            "load_sigma": self.load_sigma,
            "noise_level": self.noise_level,
            "events_per_day": self.events_per_day,
            "start": self.start,
        }

    def _rng(self, *part: int) -> np.random.Generator:
        # Independent streams per part (layout, events, each day...): changing one part, e.g.
        # events_per_day, leaves the others unchanged.
        return np.random.default_rng([self.seed, *part])

    # ------------------------------------------------------------------ static structure
    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """``(N, 2)`` antenna positions and ``(1 + S, 2)`` centres (main first), in km."""
        rng, n, ext, s = self._rng(0), self.num_antennas, self.extent_km, self.num_subcentres
        main = ext / 2.0 + rng.uniform(-0.05, 0.05, size=2) * ext
        angle = rng.uniform(0.0, 2.0 * np.pi, size=s)
        dist = rng.uniform(0.22, 0.35, size=s) * ext
        centres = np.vstack([main, main + dist[:, None] * np.c_[np.cos(angle), np.sin(angle)]])
        # mixture: 55 % around the centre, 30 % around sub-centres, 15 % uniform background;
        # radius ~ Gamma(2, scale) gives an areal density decaying as exp(-r / scale)
        probs = np.r_[0.55 if s else 0.85, np.full(s, 0.30 / max(s, 1)), 0.15]
        scales = np.r_[0.09, np.full(s, 0.045), 0.0] * ext
        pts = np.empty((0, 2))
        while len(pts) < n:
            comp = rng.choice(len(probs), size=2 * n, p=probs)
            r = rng.gamma(2.0, 1.0, size=2 * n) * scales[comp]
            theta = rng.uniform(0.0, 2.0 * np.pi, size=2 * n)
            p = centres[np.minimum(comp, s)] + r[:, None] * np.c_[np.cos(theta), np.sin(theta)]
            background = comp == s + 1
            p[background] = rng.uniform(0.0, ext, size=(int(background.sum()), 2))
            pts = np.vstack([pts, p[((p >= 0.0) & (p <= ext)).all(axis=1)]])
        return pts[:n], centres

    def _business_weight(self, pos: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """``(N,)`` in [0, 1]: 1 in the central business district, ~0 in residential areas."""
        d = np.linalg.norm(pos[:, None, :] - centres[None], axis=2)  # (N, 1 + S)
        strength = np.r_[1.0, np.full(len(centres) - 1, 0.5)]
        return (strength * np.exp(-d / (0.12 * self.extent_km))).max(axis=1)

    def _profiles(self, rng: np.random.Generator) -> np.ndarray:
        """``(2, steps_per_day, C)`` service profiles (weekday, weekend), weekly mean 1."""
        hours = (np.arange(self.steps_per_day) + 0.5) * self.step_minutes / 60.0
        out = np.empty((2, self.steps_per_day, self.num_services))
        for c, svc in enumerate(SERVICES[: self.num_services]):
            cat = CATEGORIES[svc.category]
            shifted = hours - rng.uniform(-0.75, 0.75)  # service-specific peak hours
            weekday = 0.15 + _bumps(shifted, cat.weekday)
            weekend = 0.15 + _bumps(shifted, cat.weekend)
            weekend *= cat.weekend_level * weekday.mean() / weekend.mean()
            out[:, :, c] = np.stack([weekday, weekend]) / ((5 * weekday + 2 * weekend).mean() / 7)
        return out

    def _location_profiles(self, business: np.ndarray) -> np.ndarray:
        """``(2, steps_per_day, N)`` antenna factors (weekday, weekend): offices by day."""
        hours = (np.arange(self.steps_per_day) + 0.5) * self.step_minutes / 60.0
        work = _work_hours(hours)[:, None]
        b, r = business[None, :], 1.0 - business[None, :]
        weekday = b * (0.5 + 1.0 * work) + r * (1.15 - 0.35 * work)
        weekend = b * (0.8 + 0.2 * work) + r * np.ones_like(work)
        return np.stack([weekday, weekend])

    def _events(self, pos: np.ndarray) -> list[dict]:
        """Crowd events: when, where, how strong, and the gain of every service."""
        rng, spd = self._rng(2), self.steps_per_day
        gains = np.array([s.event_gain for s in SERVICES[: self.num_services]])
        events = []
        for _ in range(rng.poisson(self.events_per_day * self.num_days)):
            day = int(rng.integers(self.num_days))
            start = day * spd + int(rng.uniform(9.0, 21.0) * spd / 24.0)
            length = max(int(rng.uniform(2.0, 5.0) * spd / 24.0), 2)
            centre = pos[rng.integers(len(pos))] + rng.normal(0.0, 0.3, size=2)
            events.append(
                {
                    "start": start,
                    "end": min(start + length, self.num_steps),
                    "x_km": float(centre[0]),
                    "y_km": float(centre[1]),
                    "radius_km": float(rng.uniform(0.5, 1.2)),
                    "amplitude": float(rng.uniform(0.5, 2.0)),
                    "gains": (gains * rng.lognormal(0.0, 0.3, size=len(gains))).tolist(),
                }
            )
        return sorted(events, key=lambda e: e["start"])

    # ------------------------------------------------------------------ generation
    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Simulate the whole stream (ignores an existing cache). With ``cache_path`` each day
        is written there as it is made and the stream returned reads from that cache."""
        n, c, spd = self.num_antennas, self.num_services, self.steps_per_day
        model, states = self._model()
        start = np.datetime64(self.start, "s")
        first_day = start.astype("datetime64[D]")
        weekend = (first_day.astype(np.int64) + 3 + np.arange(self.num_days)) % 7 >= 5
        timestamps = start + np.arange(self.num_steps) * np.timedelta64(60 * self.step_minutes, "s")
        services = SERVICES[:c]
        with self.writer(cache_path, self.num_steps, n, c) as out:
            observed = np.ones((spd, n, c), dtype=bool)
            for d in range(self.num_days):
                day, states = self._day(d, bool(weekend[d]), model, states)
                out.write(d * spd, day, observed)
            return out.finish(
                coords=model.pos,
                channel_names=[s.name for s in services],
                point_ids=[f"a{i:04d}" for i in range(n)],
                timestamps=timestamps,
                name=self.name,
                metadata={
                    "step_minutes": self.step_minutes,
                    "steps_per_day": spd,
                    "generator": self.config(),
                    "categories": [s.category for s in services],
                    "centres_km": model.centres.tolist(),
                    "events": model.events,
                    "source": "synthetic mobile traffic (MB per bin)",
                },
            )

    def _model(self) -> tuple[_TrafficModel, tuple[np.ndarray, np.ndarray]]:
        """What every day shares, and the fluctuations' initial (stationary) AR(1) states
        ``(N, C)`` and ``(K, C)``. The draws of ``self._rng(1)`` come in a fixed order:
        profiles, loads and service mix, basis anchors, initial states."""
        pos, centres = self._layout()
        rng = self._rng(1)
        profiles = self._profiles(rng).astype(np.float32)
        location = self._location_profiles(self._business_weight(pos, centres)).astype(np.float32)
        base, sigma_local, sigma_smooth = self._volumes(rng)
        basis = self._smooth_basis(rng, pos)
        model = _TrafficModel(
            pos=pos,
            centres=centres,
            profiles=profiles,
            location=location,
            base=base,
            sigma_local=sigma_local,
            sigma_smooth=sigma_smooth,
            basis=basis,
            phi_local=np.float32(np.exp(-self.step_minutes / _TAU_LOCAL_MIN)),
            phi_smooth=np.float32(np.exp(-self.step_minutes / _TAU_SMOOTH_MIN)),
            events=self._events(pos),
        )
        state_local = rng.standard_normal((len(pos), self.num_services), dtype=np.float32)
        state_smooth = rng.standard_normal((basis.shape[1], self.num_services), dtype=np.float32)
        return model, (state_local, state_smooth)

    def _volumes(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
        """``(N, C)`` mean volume of each antenna and service, the ``(C,)`` std of the
        per-antenna log fluctuation and that of the smooth field (float32, float32, float)."""
        n, c = self.num_antennas, self.num_services
        ranks = np.arange(1, len(SERVICES) + 1, dtype=np.float64)
        share = ranks**-self.share_exponent
        share = share[:c] / share.sum()  # shares of all 38, so a subset keeps its volumes
        load = rng.lognormal(-0.5 * self.load_sigma**2, self.load_sigma, size=(n, 1))
        affinity = rng.lognormal(-0.5 * 0.3**2, 0.3, size=(n, c))  # per-antenna service mix
        categories = [CATEGORIES[s.category] for s in SERVICES[:c]]
        sigma_local = self.noise_level * np.array([cat.sigma for cat in categories])
        sigma_smooth = self.noise_level * _SIGMA_SMOOTH
        # E[exp(x)] = exp(var / 2) for Gaussian x: divide it out so the shares hold on average
        base = self.mean_total_mb * share * load * affinity
        base *= np.exp(-0.5 * (sigma_local**2 + sigma_smooth**2))
        return base.astype(np.float32), sigma_local.astype(np.float32), sigma_smooth

    def _smooth_basis(self, rng: np.random.Generator, pos: np.ndarray) -> np.ndarray:
        """``(N, K)`` float32 unit-norm rows of Gaussian bumps around K random antennas: the
        spatially smooth field is their AR(1)-weighted sum."""
        n = len(pos)
        k = min(_NUM_BASIS, n)
        anchors = pos[rng.choice(n, size=k, replace=False)]
        d2 = ((pos[:, None, :] - anchors[None]) ** 2).sum(axis=2)
        basis = np.exp(-d2 / (2.0 * (0.1 * self.extent_km) ** 2))
        return (basis / np.sqrt((basis**2).sum(axis=1, keepdims=True))).astype(np.float32)

    def _day(
        self,
        d: int,
        weekend: bool,
        model: _TrafficModel,
        states: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """Day ``d``'s ``(steps_per_day, N, C)`` float32 traffic and the AR(1) states after
        it; each day draws from its own seeded stream, so the days need no other order."""
        spd, n, c = self.steps_per_day, self.num_antennas, self.num_services
        k = model.basis.shape[1]
        day_rng = self._rng(3, d)
        x = day_rng.standard_normal((spd, n, c), dtype=np.float32)
        state_local = _ar1(x, states[0], model.phi_local)
        a = day_rng.standard_normal((spd, k, c), dtype=np.float32)
        state_smooth = _ar1(a, states[1], model.phi_smooth)
        x *= model.sigma_local
        x += np.float32(model.sigma_smooth) * np.matmul(model.basis, a)  # (spd, N, C)
        day = np.exp(x, out=x)
        day *= model.base
        day *= model.profiles[int(weekend)][:, None, :]
        day *= model.location[int(weekend)][:, :, None]
        day_factor = np.exp(0.05 * self.noise_level * day_rng.standard_normal(c))
        day *= day_factor.astype(np.float32)
        _bursts(day, day_rng, self.noise_level)
        _apply_events(day, d * spd, model.pos, model.events)
        return day, (state_local, state_smooth)


@dataclass(frozen=True)
class _TrafficModel:
    """What every simulated day shares (float32 where it multiplies the day's values)."""

    pos: np.ndarray  # (N, 2) antenna positions, km
    centres: np.ndarray  # (1 + S, 2) city centre then sub-centres, km
    profiles: np.ndarray  # (2, steps_per_day, C) service profiles, weekday / weekend
    location: np.ndarray  # (2, steps_per_day, N) antenna factors, weekday / weekend
    base: np.ndarray  # (N, C) mean volume per bin
    sigma_local: np.ndarray  # (C,) std of the per-antenna log fluctuation
    sigma_smooth: float  # std of the spatially smooth log field
    basis: np.ndarray  # (N, K) spatial basis of the smooth field
    phi_local: np.float32  # AR(1) coefficients per step
    phi_smooth: np.float32
    events: list[dict]  # crowd events (see SyntheticMobileTraffic._events)


def _ar1(x: np.ndarray, state: np.ndarray, phi: np.float32) -> np.ndarray:
    """Turn white noise ``x (T, ...)`` in place into a unit-variance AR(1) continuing ``state``.

    Returns the last state. A loop over T is much faster than ``scipy.signal.lfilter`` here
    (which works in float64) because each step is one vectorised operation on ``(...)``.
    """
    scale = np.float32(np.sqrt(1.0 - phi**2))
    for t in range(len(x)):
        state = phi * state + scale * x[t]
        x[t] = state
    return state


def _bursts(day: np.ndarray, rng: np.random.Generator, level: float) -> None:
    """Multiply a sparse 0.2 % of entries by ``1 + Pareto(2.5)``: rare heavy-tailed spikes."""
    if level == 0:
        return
    flat = day.reshape(-1)
    count = rng.poisson(0.002 * flat.size)
    idx = rng.integers(0, flat.size, size=count)
    flat[idx] *= (1.0 + level * rng.pareto(2.5, size=count)).astype(np.float32)


def _apply_events(values: np.ndarray, first: int, pos: np.ndarray, events: list[dict]) -> None:
    """Raise ``values`` in place around each event (smooth in time and space): the steps
    ``[first, first + len(values))`` of the stream, ``(steps, N, C)``. Chunk by chunk, each
    entry gets the same factors in the same order as the whole stream at once would."""
    last = first + len(values)
    for ev in events:
        t0, t1 = ev["start"], ev["end"]
        if t1 <= t0 or t1 <= first or t0 >= last:
            continue
        d2 = (pos[:, 0] - ev["x_km"]) ** 2 + (pos[:, 1] - ev["y_km"]) ** 2
        weight = np.exp(-d2 / (2.0 * ev["radius_km"] ** 2))
        near = np.flatnonzero(weight > 0.01)
        envelope = np.sin(np.pi * (np.arange(t1 - t0) + 0.5) / (t1 - t0)) ** 2  # smooth ramps
        factor = 1.0 + ev["amplitude"] * (
            envelope[:, None, None] * weight[near][None, :, None] * np.asarray(ev["gains"])
        )
        a, b = max(t0, first), min(t1, last)
        values[a - first : b - first, near] *= factor[a - t0 : b - t0].astype(np.float32)


def mobile_traffic(
    path: str | os.PathLike | None = None,
    city: str = "city1",
    num_antennas: int | None = None,
    num_services: int = 38,
    num_days: int = 85,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    units: Mapping[str, str] | None = None,
    **reading: Any,
) -> CachedSource:
    """The source of ``data=mobile``: your traffic file, or else the generator.

    Args:
        path: a long-format CSV/Parquet file (one row per time and antenna: ``time_col``,
            ``id_col``, ``coord_cols`` and one column per service) read with
            :class:`~cloudlstm.data.sources.long_format.LongFormatSource`; ``None`` = the
            generator.
        city, num_antennas, num_services, num_days, seed: the
            :class:`SyntheticMobileTraffic` arguments (not read with ``path``: the command
            that sets one is refused, :mod:`cloudlstm.assembly.source_options`).
        cache_dir: where the generator caches its traffic, or the file's pivoted stream.
        units: the file's services' units, ``{service: unit}``, as
            :class:`~cloudlstm.data.sources.long_format.LongFormatSource` takes them (None:
            none recorded).
        **reading: the file's other reading options (``time_col``, ``bad_values``,
            ``freq``, ...), as :class:`~cloudlstm.data.sources.long_format.LongFormatSource`
            takes them; ``data=mobile`` declares the same ones as ``data=points``, so every
            option a reading message names can be set (read with ``path`` alone, as
            ``city`` ... ``seed`` are read without it).

    Raises:
        UserError: ``units`` given without ``path``: the generated traffic has no unit,
            and a unit recorded for it would only let ``eval.py`` compare a label.
    """
    if path is not None:
        return LongFormatSource(path, cache_dir=cache_dir, units=units, **reading)
    given = units_option(units)  # a mapping of text, as a file's would have to be
    if given:
        raise UserError(
            f"data.source.units={given} names the units of your traffic file, but "
            "data=mobile generates its traffic here (data.source.path=null), in no unit: give "
            "your file (data.source.path=/path/to/traffic.csv), or leave data.source.units "
            "out."
        )
    return SyntheticMobileTraffic(
        num_antennas=num_antennas,
        num_services=num_services,
        num_days=num_days,
        seed=seed,
        city=city,
        cache_dir=cache_dir,
    )

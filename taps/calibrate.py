"""Calibrated reach: the expected acceptance the size choice and the figures read.

An estimator's reach (the product of its q along a path) ranks nodes; whether it is *right* on
average is another matter: on validation pools the learned scorer is well calibrated, on other
text it can be 20% over-confident, and the marginal product is under-confident. Two corrections,
applied to every estimator's reach in this order:

1. **Static** (`ReachMap`): per depth band, a monotone map of reach fitted by isotonic regression
   on pools from the training corpus's validation split that the target verified in full (the
   nodes TAPS would verify there at budgets 8-64), one map per estimator and temperature. It ships
   beside the scorer as `calibration.json` (`python -m taps.train calibrate`).
2. **Online** (`DepthCorrection`): per depth, the ratio of what this session's verified nodes
   were accepted (their path's target probability at T > 0) to the static reach predicted for them,
   shrunk toward 1 by a prior of 16 predicted nodes (chosen on validation and out-of-corpus prompts,
   `docs/calibration.md`); applied edge by edge, so that a node's reach is its static reach times
   its depth's ratio wherever no edge's q reaches 1. It depends only on the session's own tokens, so
   the same prompt and settings give the same trees, however busy the machine.

After each, reach never grows along a path (the static map caps a node at its parent's reach and
its children at that reach together; the online step keeps every q at most 1), so the top-B nodes
by reach are still a prefix-closed tree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import kernels

CALIBRATION_FILE = "calibration.json"
FORMAT = 1
DEPTH_BANDS = (1, 2, 3, 4, 6, 9)          # band b holds depths DEPTH_BANDS[b] .. DEPTH_BANDS[b + 1] - 1
CALIBRATIONS = ("online", "static", "off")
FIT_TEMPERATURES = (0.0, 0.7, 1.0)
# reach grid the fit bins nodes on before the isotonic pass: fine near 0, where most nodes are
# the saved reach curve a batch plan starts from is, rank by rank, this percentile over the validation
# pools, not their mean: text the plan serves may be harder than the validation split (held-out code's
# tau at budget 16 runs about a quarter below it), and drafting on a wrong belief at a large batch
# costs several plain steps, so a plan drafts before it has seen its text only where even the harder
# quarter of the validation pools would pay
CURVE_QUANTILE = 25
_GRID = np.concatenate([[0.0], np.geomspace(1e-4, 0.1, 16), np.linspace(0.15, 1.0, 18)])


def depth_band(depths: np.ndarray) -> np.ndarray:
    """The band index of each depth (depth 0, the root, falls in band 0 and is never mapped)."""
    return np.maximum(np.searchsorted(DEPTH_BANDS, np.asarray(depths), side="right") - 1, 0)


# ------------------------------------------------------------------------------------ the fit
def isotonic(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted pool-adjacent-violators on points sorted by x: the non-decreasing step fit's blocks
    as (weighted mean x, fitted y) knots."""
    xs, ys, ws = [], [], []
    for xi, yi, wi in zip(x, y, w):
        xs.append(xi * wi)
        ys.append(yi * wi)
        ws.append(wi)
        while len(ys) > 1 and ys[-2] / ws[-2] > ys[-1] / ws[-1]:
            wsum = ws[-2] + ws[-1]
            xs[-2:] = [xs[-2] + xs[-1]]
            ys[-2:] = [ys[-2] + ys[-1]]
            ws[-2:] = [wsum]
    ws_a = np.asarray(ws)
    return np.asarray(xs) / ws_a, np.asarray(ys) / ws_a


def fit_band(pred: np.ndarray, observed: np.ndarray, min_nodes: int = 30) -> tuple[list[float], list[float]]:
    """Knots (x, y) of one band's map: nodes binned on a reach grid (bins with fewer than
    `min_nodes` merged into the next), an isotonic fit of the bins' observed shares, anchored at
    (0, 0) and (1, 1). Too few nodes: the identity."""
    pred, observed = np.asarray(pred, dtype=np.float64), np.asarray(observed, dtype=np.float64)
    if len(pred) < min_nodes:
        return [0.0, 1.0], [0.0, 1.0]
    which = np.clip(np.searchsorted(_GRID, pred, side="right") - 1, 0, len(_GRID) - 2)
    xs, ys, ws = [], [], []
    acc_x = acc_y = acc_w = 0.0
    for b in range(len(_GRID) - 1):
        sel = which == b
        acc_x += float(pred[sel].sum())
        acc_y += float(observed[sel].sum())
        acc_w += float(sel.sum())
        if acc_w >= min_nodes or (b == len(_GRID) - 2 and acc_w > 0):
            xs.append(acc_x / acc_w)
            ys.append(acc_y / acc_w)
            ws.append(acc_w)
            acc_x = acc_y = acc_w = 0.0
    kx, ky = isotonic(np.asarray(xs), np.asarray(ys), np.asarray(ws))
    kx = np.concatenate([[0.0], kx, [1.0]])
    ky = np.concatenate([[0.0], np.clip(ky, 0.0, 1.0), [1.0]])
    keep = np.concatenate([[True], np.diff(kx) > 1e-12])       # interp needs increasing x
    return [round(float(v), 6) for v in kx[keep]], [round(float(v), 6) for v in ky[keep]]


@dataclass
class ReachMap:
    """Per depth band, a monotone piecewise-linear map of reach (knots of an isotonic fit)."""

    xs: list[list[float]]
    ys: list[list[float]]
    nodes: list[int] = field(default_factory=list)     # nodes each band was fitted on (for the record)

    @classmethod
    def identity(cls) -> "ReachMap":
        return cls([[0.0, 1.0]] * len(DEPTH_BANDS), [[0.0, 1.0]] * len(DEPTH_BANDS), [0] * len(DEPTH_BANDS))

    @classmethod
    def fit(cls, pred: np.ndarray, observed: np.ndarray, depths: np.ndarray) -> "ReachMap":
        band = depth_band(depths)
        xs, ys, nodes = [], [], []
        for b in range(len(DEPTH_BANDS)):
            sel = (band == b) & (np.asarray(depths) > 0)
            x, y = fit_band(pred[sel], observed[sel])
            xs.append(x)
            ys.append(y)
            nodes.append(int(sel.sum()))
        return cls(xs, ys, nodes)

    def scaled(self, factors: np.ndarray) -> "ReachMap":
        """Each band's map times its factor (values kept at most 1; a band without nodes unchanged)."""
        ys = [list(np.minimum(np.asarray(y) * (f if n else 1.0), 1.0).round(6)) if 0 < f < np.inf else list(y)
              for y, f, n in zip(self.ys, factors, self.nodes)]
        return ReachMap(self.xs, [[float(v) for v in y] for y in ys], self.nodes)

    def capped(self, parents: np.ndarray, depths: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """The map applied, then `cap_down`: the static reach (as `kernels.calibrated_reach` gives it)."""
        return cap_down(parents, depths, self.apply(reach, depths))

    def apply(self, reach: np.ndarray, depths: np.ndarray) -> np.ndarray:
        out = np.asarray(reach, dtype=np.float64).copy()
        band = depth_band(depths)
        for b in range(len(DEPTH_BANDS)):
            sel = band == b
            if sel.any():
                out[sel] = np.interp(out[sel], self.xs[b], self.ys[b])
        return out

    def to_json(self) -> dict:
        return {"x": self.xs, "y": self.ys, "nodes": self.nodes}

    @classmethod
    def from_json(cls, raw: dict) -> "ReachMap":
        xs, ys = raw["x"], raw["y"]
        if len(xs) != len(DEPTH_BANDS) or len(ys) != len(DEPTH_BANDS):
            raise ValueError(f"a reach map needs {len(DEPTH_BANDS)} depth bands, got {len(xs)}")
        for x, y in zip(xs, ys):
            if len(x) != len(y) or len(x) < 2 or np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0):
                raise ValueError("a reach map's knots must be increasing in x and non-decreasing in y")
        return cls([list(map(float, x)) for x in xs], [list(map(float, y)) for y in ys], list(raw.get("nodes", [])))


@dataclass
class Calibration:
    """The static maps shipped with a scorer: per estimator, per fitted temperature."""

    maps: dict[str, dict[float, ReachMap]]
    meta: dict = field(default_factory=dict)
    # per estimator, per fitted temperature, per budget B: rank by rank, the CURVE_QUANTILE-th
    # percentile over the validation pools of their B best calibrated reaches, best first (root
    # excluded): the cautious reach curve a batch plan starts from
    curves: dict[str, dict[float, dict[int, list[float]]]] = field(default_factory=dict)

    def reach_map(self, estimator: str, temperature: float) -> ReachMap | None:
        """The map fitted at the temperature nearest `temperature` (None: this estimator has none)."""
        by_t = self.maps.get(estimator)
        if not by_t:
            return None
        return by_t[min(by_t, key=lambda t: (abs(t - temperature), t))]

    def reach_curve(self, estimator: str, temperature: float, budget: int) -> np.ndarray | None:
        """[budget]: the cautious curve of a validation pool's best calibrated reaches, best first (the
        CURVE_QUANTILE-th percentile rank by rank), at the fitted temperature nearest `temperature`
        and the fitted budget nearest `budget` (cut or padded with zeros to it); the online estimator
        reads the marginal's (its starting point). None when this estimator has none (a file fitted
        before the curves were kept)."""
        by_t = self.curves.get("marginal" if estimator == "online" else estimator)
        if not by_t or budget < 1:
            return None
        by_b = by_t[min(by_t, key=lambda t: (abs(t - temperature), t))]
        fitted = by_b[min(by_b, key=lambda b: (abs(b - budget), -b))]
        out = np.zeros(budget)
        out[:min(budget, len(fitted))] = fitted[:budget]
        return out

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / CALIBRATION_FILE
        raw = {"format": FORMAT, "depth_bands": list(DEPTH_BANDS), **self.meta,
               "estimators": {name: {f"{t:g}": m.to_json() for t, m in sorted(by_t.items())}
                              for name, by_t in self.maps.items()},
               "reach_curves": {name: {f"{t:g}": {str(b): [round(float(v), 6) for v in curve]
                                                   for b, curve in sorted(by_b.items())}
                                       for t, by_b in sorted(by_t.items())}
                                for name, by_t in self.curves.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(raw, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "Calibration | None":
        """The calibration in `folder` (a scorer's), None when there is none; a damaged file raises
        ValueError naming it."""
        path = Path(folder) / CALIBRATION_FILE
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text())
            if raw.get("format") != FORMAT or list(raw.get("depth_bands", [])) != list(DEPTH_BANDS):
                raise ValueError(f"format {raw.get('format')} with depth bands {raw.get('depth_bands')}; this "
                                 f"version reads format {FORMAT} with bands {list(DEPTH_BANDS)}")
            maps = {name: {float(t): ReachMap.from_json(m) for t, m in by_t.items()}
                    for name, by_t in raw["estimators"].items()}
            curves = {name: {float(t): {int(b): [float(v) for v in curve] for b, curve in by_b.items()}
                             for t, by_b in by_t.items()}
                      for name, by_t in raw.get("reach_curves", {}).items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a reach calibration this version reads ({exc}); refit it with "
                             f"`python -m taps.train calibrate`") from exc
        meta = {k: v for k, v in raw.items() if k not in ("format", "depth_bands", "estimators", "reach_curves")}
        return cls(maps, meta, curves)


# ------------------------------------------------------------------------------------ at run time
def cap_down(parents: np.ndarray, depths: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Each node's reach at most its parent's, and a parent's children together at most its reach
    (depth by depth, so a parent is final before its children are scaled)."""
    out = np.clip(np.asarray(reach, dtype=np.float64), 0.0, 1.0)
    out[0] = 1.0
    if len(out) <= 1:
        return out
    for d in range(1, int(depths.max()) + 1):
        nodes = np.flatnonzero(depths == d)
        if nodes.size == 0:
            continue
        up = parents[nodes]
        sums = np.bincount(up, weights=out[nodes], minlength=len(out))
        scale = np.where(sums > out, out / np.maximum(sums, 1e-300), 1.0)
        # the min guards against rounding: x * (p / x) can come out a hair above p, and a child
        # ranked above its parent could be selected without it
        out[nodes] = np.minimum(out[nodes] * scale[up], out[up])
    return out


def conditional(parents: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """q(v | parent) = r(v) / r(parent) of a prefix-monotone reach (q[0] = 1; 0 under a parent of reach 0)."""
    reach = np.asarray(reach, dtype=np.float64)
    q = np.ones(len(reach))
    if len(reach) > 1:
        up = reach[parents[1:]]
        q[1:] = np.where(up > 0, reach[1:] / np.where(up > 0, up, 1.0), 0.0)
    return np.clip(q, 0.0, 1.0)


@dataclass
class DepthCorrection:
    """This session's ratio, per depth d, of what its verified nodes at d were accepted (their
    path's target probability at T > 0) to the static reach predicted for them, shrunk toward 1
    by a prior of `prior` predicted nodes: rho_d = (accepted_d + prior) / (predicted_d + prior)."""

    prior: float = 16.0
    accepted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def ratios(self, max_depth: int) -> np.ndarray:
        """[rho_0 = 1, rho_1, ..., rho_max_depth]."""
        a, p = np.zeros(max_depth + 1), np.zeros(max_depth + 1)
        n = min(len(self.accepted), max_depth + 1)
        a[:n], p[:n] = self.accepted[:n], self.predicted[:n]
        rho = (a + self.prior) / (p + self.prior)
        rho[0] = 1.0
        return rho

    def observe(self, depths: np.ndarray, predicted: np.ndarray, outcome: np.ndarray) -> None:
        top = int(depths.max()) + 1 if len(depths) else 0
        if top > len(self.accepted):
            self.accepted = np.concatenate([self.accepted, np.zeros(top - len(self.accepted))])
            self.predicted = np.concatenate([self.predicted, np.zeros(top - len(self.predicted))])
        np.add.at(self.accepted, depths, outcome)
        np.add.at(self.predicted, depths, predicted)

    @property
    def observations(self) -> float:
        return float(self.predicted.sum())


@dataclass
class Calibrator:
    """One session's calibration of one estimator's reach: the static map (if any), then the
    online correction (with mode 'online')."""

    reach_map: ReachMap | None = None
    mode: str = "online"
    correction: DepthCorrection = field(default_factory=DepthCorrection)

    def __post_init__(self):
        # the map as the kernel reads it: knots padded per band, and each depth's band
        bands = self.reach_map if self.reach_map is not None else ReachMap.identity()
        width = max(len(x) for x in bands.xs)
        self._knots_x = np.ones((len(DEPTH_BANDS), width))
        self._knots_y = np.ones((len(DEPTH_BANDS), width))
        for b, (x, y) in enumerate(zip(bands.xs, bands.ys)):
            self._knots_x[b, :len(x)], self._knots_y[b, :len(y)] = x, y
        self._knots_n = np.array([len(x) for x in bands.xs], dtype=np.int64)
        self._band_of_depth = depth_band(np.arange(65)).astype(np.int64)

    @property
    def learns(self) -> bool:
        return self.mode == "online"

    def both(self, pool, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the static reach, the reach TAPS uses) in one compiled pass (`kernels.calibrated_reach`;
        its numpy twin is `tests/oracles.py`'s `calibrated_reach`): the map and its caps, then each
        edge's q at depth d times rho_d / rho_(d-1), at most 1. Siblings are not scaled back within
        their parent in the online step: the static reach already fills that bound for many
        parents, and a cap that takes the ratio's rises but not its falls made the corrected reach
        3-6% low on validation prompts (`docs/calibration.md`)."""
        if self.mode == "off" or pool.size == 0:
            return reach, reach
        parents, depths = np.asarray(pool.parents, dtype=np.int64), np.asarray(pool.depths, dtype=np.int64)
        learned = self.learns and self.correction.observations > 0
        rho = self.correction.ratios(int(depths.max())) if learned else np.ones(int(depths.max()) + 1)
        use_map = self.reach_map is not None
        static, online = kernels.calibrated_reach(parents, depths, np.asarray(reach, dtype=np.float64),
                                                  self._knots_x, self._knots_y, self._knots_n, self._band_of_depth,
                                                  rho, use_map)
        if not use_map:
            static = reach
        return static, (online if learned else static)

    def observe(self, pool, static_reach: np.ndarray, selected: np.ndarray, edge_target: np.ndarray) -> None:
        """Learn from a verified round: `static_reach` the static map's reach of the pool's nodes,
        `selected` the verified nodes (root first), `edge_target` the target's verdict per edge
        (`taps.verify.edge_feedback`). A verified node's outcome is the product of its path's
        verdicts: 1/0 (accepted or not) at T = 0, its path's target probability at T > 0."""
        if not self.learns or len(selected) <= 1:
            return
        parents = np.asarray(pool.parents, dtype=np.int64)
        path = kernels.reach_from_edges(parents, np.nan_to_num(np.asarray(edge_target, dtype=np.float64), nan=0.0))
        nodes = np.asarray(selected[1:], dtype=np.int64)
        self.correction.observe(np.asarray(pool.depths, dtype=np.int64)[nodes], static_reach[nodes], path[nodes])

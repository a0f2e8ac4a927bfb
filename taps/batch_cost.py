"""Verify cost at a batch, and the batch's shared tree width (issue 52). Pure numpy, no torch.

A batched round (`taps.batch`) verifies every request's tree in one target forward, each tree padded
to the widest: B requests with at most w draft nodes each cost one forward over B x (w + 1) rows
after each request's own cached context. `BatchVerify` holds that cost measured on a grid of batch
sizes and widths (`taps.eval.measure.measure_batch_verify`, interleaved repeats, medians made
non-decreasing in the width) or estimated by the roofline (`roofline_batch`), and prices any
(batch, width) by interpolating the grid (past it, by the least-squares plane below). Its fit,

    verify(B, w) ~ a + b x B + c x B x (w + 1)      (a: the weights, read once per forward;
                                                     b: each request's cached context; c: each row)

is stated with its error: how far a one-line account of the cost "against the batch's total verified
tokens" is from what was measured.

`shared_width` is the batch-aware choice: one width for the whole forward, the w that maximises the
batch's expected tokens per second,

    sum over requests of (1 + the sum of its w best reaches)  /  (the requests' round overheads + verify(B, w)),

so a request's tree shrinks toward a chain (or to its root alone) as the batch grows and the forward
stops being free, and grows back when the batch is small. `plan_step` adds the last step: when even
the best width earns less per second than a plain autoregressive step (no drafter pass, each
request's root alone), the batch stops drafting, judged from each request's last drafted round,
until the batch changes. Both read only a saved profile: the same profile and reaches give the
same decisions on an idle machine and a busy one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from .cost_model import monotone_fit
from .policies import AR

BATCH_KINDS = ("measured", "roofline")


@dataclass
class BatchVerify:
    batches: list[int]               # requests in the forward, ascending
    widths: list[int]                # draft nodes per request (each tree padded to this; root not counted), ascending
    seconds: list[list[float]]       # [batch][width]: one forward, non-decreasing in the width
    context_length: int = 0          # each request's cached positions when measured
    kind: str = "measured"           # measured | roofline
    source: str = ""
    raw_seconds: list[list[float]] = field(default_factory=list)   # medians before the monotone fit
    spread: list[list[float]] = field(default_factory=list)        # interquartile range / median, per point
    repeats: int = 0
    # per request and round in a batched step, the seconds besides the forward, by run label ("ar",
    # "taps/online"): measured in real batched decodes (`taps.eval.measure.measure_batch_host`)
    host_s: dict = field(default_factory=dict)
    host_batch: int = 0              # the batch size those were measured at
    # the same at every batch size measured, by run label: {"taps/online": {"1": s, "2": s, ...}};
    # a batch drafts in one pass, so a request's share of a step's host work shrinks as it grows
    host_batches: dict = field(default_factory=dict)

    def __post_init__(self):
        grid = np.asarray(self.seconds, dtype=np.float64)
        if grid.shape != (len(self.batches), len(self.widths)) or not self.batches or not self.widths:
            raise ValueError(f"a batch verify grid needs {len(self.batches)} x {len(self.widths)} times, "
                             f"got shape {grid.shape}")
        if list(self.batches) != sorted(set(self.batches)) or list(self.widths) != sorted(set(self.widths)):
            raise ValueError("batch sizes and widths must be ascending and distinct")
        if self.kind not in BATCH_KINDS:
            raise ValueError(f"kind must be one of {', '.join(BATCH_KINDS)}, got {self.kind!r}")
        # computed once here, read-only afterwards: a plan prices widths twice per step, and the
        # plane's least squares is 40 times dearer than the interpolation it corrects
        self._grid = grid
        self._fit = self._fit_plane(grid)

    # ------------------------------------------------------------------ prices
    def time(self, batch: int, width: int | np.ndarray) -> np.ndarray:
        """Seconds of one forward of `batch` requests at `width` draft nodes each: the grid
        interpolated (linearly in the width, then in the batch size); past its largest batch or
        width, the fitted plane lifted to meet the grid's edge."""
        grid = self._grid
        widths = np.asarray(width, dtype=np.float64)
        inside = np.minimum(widths, self.widths[-1])

        def row(i: int) -> np.ndarray:
            return np.interp(inside, self.widths, grid[i])

        b = float(batch)
        if b <= self.batches[-1]:
            hi = int(np.searchsorted(self.batches, b))
            if hi == 0 or self.batches[hi] == b:
                out = row(hi)
            else:
                lo = hi - 1
                share = (b - self.batches[lo]) / (self.batches[hi] - self.batches[lo])
                out = row(lo) + share * (row(hi) - row(lo))
        else:
            out = row(-1) + self._plane(b, inside) - self._plane(self.batches[-1], inside)
        out = out + np.maximum(self._plane(b, widths) - self._plane(b, inside), 0.0)
        return float(out) if np.ndim(out) == 0 else out

    def _plane(self, batch: float, width) -> np.ndarray:
        a, b, c = self._fit["coefficients"]
        return a + b * batch + c * batch * (np.asarray(width, dtype=np.float64) + 1)

    def _fit_plane(self, grid: np.ndarray) -> dict:
        bs, ws = np.meshgrid(np.asarray(self.batches, float), np.asarray(self.widths, float), indexing="ij")
        design = np.stack([np.ones(bs.size), bs.ravel(), (bs * (ws + 1)).ravel()], axis=1)
        weight = 1.0 / np.maximum(grid.ravel(), 1e-12)
        coef, *_ = np.linalg.lstsq(design * weight[:, None], grid.ravel() * weight, rcond=None)
        error = np.abs(design @ coef / grid.ravel() - 1.0)
        return {"coefficients": tuple(float(c) for c in coef), "median_error": float(np.median(error)),
                "max_error": float(np.max(error))}

    def fit(self) -> dict:
        """The plane verify ~ a + b B + c B (w + 1) fitted to the grid by least squares in relative
        error: {"coefficients": (a, b, c), "median_error", "max_error"} (|fit / grid - 1|)."""
        return dict(self._fit)

    def describe(self) -> str:
        fit = self.fit()
        a, b, c = fit["coefficients"]
        return (f"{self.kind} batch verify grid, batches {self.batches[0]}-{self.batches[-1]}, widths "
                f"{self.widths[0]}-{self.widths[-1]}, context {self.context_length}; plane a + b·B + c·B·(w+1) "
                f"with a = {a * 1e3:.2f} ms, b = {b * 1e3:.3f} ms, c = {c * 1e3:.4f} ms: median error "
                f"{fit['median_error']:.1%}, max {fit['max_error']:.1%}")

    def describe_host(self) -> str:
        """One line: the host cost per request and round at each batch size measured ("" if none)."""
        if not self.host_batches:
            return ""
        parts = []
        for label, by in self.host_batches.items():
            sizes = sorted((int(n), float(v)) for n, v in by.items())
            parts.append(f"{label} " + ", ".join(f"{1e3 * v:.2f}" for _, v in sizes)
                         + f" ms at {', '.join(str(n) for n, _ in sizes)} requests")
        return "host cost per request and round besides the forward, measured in batched decodes: " + "; ".join(parts)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "BatchVerify":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})


def of_profile(profile) -> BatchVerify | None:
    """A latency profile's verify cost at a batch (its `batch_verify`), or None when it has none."""
    raw = getattr(profile, "batch_verify", None)
    return BatchVerify.from_dict(raw) if raw else None


def measured_grid(batches: list[int], widths: list[int], medians: list[list[float]], spread: list[list[float]],
                  context_length: int, repeats: int, source: str = "") -> BatchVerify:
    """A measured grid: each batch size's medians made non-decreasing in the width."""
    return BatchVerify(batches=list(batches), widths=list(widths), seconds=[monotone_fit(row) for row in medians],
                       context_length=context_length, kind="measured", source=source, raw_seconds=medians,
                       spread=spread, repeats=repeats)


def host_seconds(profile, grid: BatchVerify, label: str, batch: int | None = None) -> float:
    """Per request and round in a batched step of `batch` requests, the seconds besides the forward
    for run label `label`: the grid's measured batch host cost at that batch size when it has them
    (interpolated between the sizes measured, the nearest one's past them), else at the one batch
    size it was measured at, else the profile's solo round cost (AR: its round less its forward;
    others: `overhead`)."""
    by_batch = grid.host_batches.get(label)
    if batch is not None and by_batch:
        sizes = sorted((int(n), float(s)) for n, s in by_batch.items())
        return float(np.interp(batch, [n for n, _ in sizes], [s for _, s in sizes]))
    if label in grid.host_s:
        return float(grid.host_s[label])
    if label == AR.run_label():
        return max(float(profile.ar_step_s) - float(profile.verify_time(0)), 0.0)
    return float(profile.overhead(label))


def step_seconds(profile, grid: BatchVerify, label: str, requests: int, width: int, drafted: bool = True) -> float:
    """One batched step on the profile's clock: each of its `requests` pays its round cost besides
    the forward for run label `label` (AR's when the step drafted nothing), and the batch one forward
    of `requests` trees `width` nodes wide."""
    host = host_seconds(profile, grid, label if drafted else AR.run_label(), requests)
    return requests * host + float(grid.time(requests, width))


# ---------------------------------------------------------------------------- the shared width
def expected_tokens(reaches_desc: list[np.ndarray], max_width: int) -> np.ndarray:
    """[requests, max_width + 1]: request b's expected tokens at width w, 1 + the sum of its w best
    reaches (a request with fewer candidates keeps its total past them)."""
    out = np.ones((len(reaches_desc), max_width + 1))
    for b, reach in enumerate(reaches_desc):
        top = np.asarray(reach, dtype=np.float64)[:max_width]
        sums = np.concatenate([[0.0], np.cumsum(top)])
        out[b, :len(sums)] += sums
        out[b, len(sums):] += sums[-1]
    return out


def shared_width(reaches_desc: list[np.ndarray], overhead_s: float, verify: BatchVerify, max_width: int) -> int:
    """The width w <= max_width maximising the batch's expected tokens per second (the module's
    formula); `reaches_desc`: each request's candidate reaches, best first (root excluded), and
    `overhead_s` the requests' round costs besides verify, summed. Ties go to the smaller tree."""
    return _best_width(reaches_desc, overhead_s, verify, max_width)[0]


def _best_width(reaches_desc: list[np.ndarray], overhead_s: float, verify: BatchVerify,
                max_width: int) -> tuple[int, float]:
    """(the shared width, the batch's expected tokens per second at it)."""
    if not reaches_desc:
        return 0, 0.0
    tokens = expected_tokens(reaches_desc, max_width).sum(axis=0)
    seconds = overhead_s + verify.time(len(reaches_desc), np.arange(max_width + 1))
    rate = tokens / seconds
    width = int(np.flatnonzero(rate >= rate.max() * (1 - 1e-12))[0])
    return width, float(rate[width])


class StepPlan(NamedTuple):
    """A batched step's two choices priced on the profile: drafting at the shared `width` (expected
    tokens per second `drafted_rate`, a step of `drafted_s`) and a plain autoregressive step (one
    token per request, `plain_rate`, a step of `plain_s`)."""

    width: int
    drafted_rate: float
    plain_rate: float
    drafted_s: float
    plain_s: float

    @property
    def drafts(self) -> bool:
        return self.drafted_rate > self.plain_rate


def plan_rates(reaches_desc: list[np.ndarray], draft_host_s: float, ar_host_s: float, verify: BatchVerify,
               max_width: int) -> StepPlan:
    """The `StepPlan` of a batched step of len(reaches_desc) requests: drafting pays every request's
    round overhead, `draft_host_s` each, and the forward at the shared width (`shared_width`); a
    plain step `ar_host_s` per request and the forward of the roots alone."""
    batch = len(reaches_desc)
    width, drafted = _best_width(reaches_desc, batch * draft_host_s, verify, max_width)
    plain_s = batch * ar_host_s + float(verify.time(batch, 0))
    drafted_s = batch * draft_host_s + float(verify.time(batch, width))
    return StepPlan(width, drafted, batch / plain_s if batch else 0.0, drafted_s, plain_s)


def plan_step(reaches_desc: list[np.ndarray], draft_host_s: float, ar_host_s: float, verify: BatchVerify,
              max_width: int) -> tuple[bool, int]:
    """(draft, width) for a batched step of len(reaches_desc) requests: the shared width as in
    `shared_width`, and whether drafting pays at all: its expected tokens per second above a plain
    autoregressive step's (`plan_rates`)."""
    plan = plan_rates(reaches_desc, draft_host_s, ar_host_s, verify, max_width)
    return plan.drafts, plan.width


PROBE_LOSS = 0.01    # what probing may cost a plan that does not draft, as a share of its throughput


def probe_wait(plan: StepPlan) -> int:
    """Plain autoregressive steps a batch plan takes before it drafts once more to see ("probes")
    when by its running estimate drafting does not pay (`plan`): a probe of drafted_s seconds earns
    the shortfall s = 1 - drafted_rate / plain_rate less than plain steps would in its time, so
    waiting w plain steps of plain_s between probes costs s x drafted_s / (w x plain_s + drafted_s)
    of the throughput; the least w that keeps it within PROBE_LOSS. Close to paying it probes often
    (a shortfall of 2% with a drafted step three plain steps long: every third step), far from it
    seldom or never within a decode (a shortfall of 20%: once in 57); 0 while drafting pays (it
    drafts). (A cap that probed at least every 4 steps after a first estimate, doubling after each
    probe that found no pay, left batch-aware TAPS at 0.83x AR in decoding CPU time at 16 requests
    with a profile that priced drafting far from paying: each probe there costs four plain steps.)"""
    if plan.drafts or plan.plain_rate <= 0:
        return 0
    shortfall = 1.0 - plan.drafted_rate / plan.plain_rate
    wait = plan.drafted_s * (shortfall - PROBE_LOSS) / (PROBE_LOSS * plan.plain_s)
    return max(int(np.ceil(wait - 1e-9)), 0)

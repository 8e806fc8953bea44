"""The answer of a comparison, declared once: what `diff` and `gate` return, print
(model.comparing.gate_answer, report.render.diff_render), write as gate.json and give
the agent. TypedDicts for the reason contract.report gives: the answer is a JSON object
built up key by key (an op's row is judged in several steps) and written as it is, and
the type checker sees each key where it is set or read.

The keys of an op's row, of the step and of the answer are documented in
docs/how-to/ci-perf-gate.md. Keys starting with ``_`` are the judging's working values
(log ratios, p-values, a cause): gate_answer.answer drops them before the answer leaves.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, TypedDict

import msgspec

from ..guard.limits import MAX_PROCESSES
from .report import Machine

# a count of pairs read back from gate.json (rejudge budgets its looks by it): in the
# command line's range, so no loop runs to a number read from a file
Pairs = Annotated[int, msgspec.Meta(ge=1, le=int(MAX_PROCESSES.high))]

Outcome = Literal["pass", "regression", "inconclusive"]
Interval = list[Optional[float]]        # [low, high] as percent changes
# an op's change as a log ratio: (point, low, high, pair-to-pair spread or None, pairs)
LogChange = tuple[float, float, float, Optional[float], int]


class Blocker(TypedDict):
    """What makes the two sides not comparable: its kind (``--allow`` names it) and text."""
    kind: str
    text: str


class MoreWork(TypedDict):
    """An op's calls per step rose: from, to, by how much and what the calls added."""
    calls_a: float
    calls_b: float
    pct: float
    added_us: float
    priced: str


class UnscaledStep(TypedDict):
    """The step's change as timed, before the machine's speed was taken out."""
    change_pct: Optional[float]
    ci_pct: Optional[Interval]


class ComparedRow(TypedDict, total=False):
    """One quantity compared: an op's row in ``ops`` (the step time's is a ComparedStep)."""
    op: str
    share: float
    gated: bool
    new: bool
    basis: str                   # time, new, calls, dtype, layout, shapes
    statistic: str
    spread_known: bool
    a_us: Optional[float]
    b_us: Optional[float]
    raw_pct: Optional[float]
    change_pct: Optional[float]
    ci_pct: Optional[Interval]
    half_width_pct: Optional[float]
    pair_sd_pct: Optional[float]
    added_us: Optional[float]
    added_ci_us: list[Optional[float]]
    status: Optional[str]
    why: Optional[str]
    significant: bool
    significant_change: bool
    p_value: float
    pairs_to_decide: Optional[int]
    work: str
    per_call_ratio: Optional[float]
    more_work: MoreWork
    decides: bool
    # working values, dropped before the answer leaves
    _log: LogChange
    _p: float
    _p_faster: float
    _cause: str


class ComparedStep(ComparedRow, total=False):
    """The step time compared (``step``): a row, with how it was measured, each side's
    steps, and (at one machine speed) the change as timed."""
    source: str
    samples: list[int]
    unscaled: Optional[UnscaledStep]


class Regression(TypedDict):
    """One regression as the gate names it: what, the value gated, its basis and source."""
    what: str
    basis: str
    source: str
    change_pct: Optional[float]
    ci_pct: Optional[Interval]
    added_ms: Optional[float]
    detail: Optional[str]


class SideSamples(TypedDict, total=False):
    """What one side's steps gave: processes, steps, those used, waited, scaled."""
    steps: int
    runs: int
    used_steps: int
    waited_steps: int
    scaled_processes: int


class FalseAlarm(TypedDict):
    """The false-alarm budget one look of the gate spent and what it found significant."""
    bound_pct: float
    looks: int
    look_alpha: float
    spent: float
    tests: int
    significant: list[str]


class Speed(TypedDict):
    """The machine's speed as each process's probe timed it, and whether times were
    scaled to one speed."""
    reference_ms: float
    a_ms: list[float]
    b_ms: list[float]
    spread_pct: float
    change_pct: Optional[float]
    scaled: bool
    why: Optional[str]


class Syncs(TypedDict):
    """Sync points only B has, those B no longer has, and those whose line moved."""
    new: list[str]
    vanished: list[str]
    moved: list[str]


class Look(TypedDict):
    """One look of a growing gate: its pairs, answer, and the step's change."""
    pairs: Optional[int]
    outcome: str
    step_change_pct: Optional[float]
    step_ci_pct: Optional[Interval]


class GateSide(TypedDict, total=False):
    """What one side of a gate ran."""
    given: str
    target: str
    args: list[str]
    module: bool
    cwd: str
    env: dict[str, str]
    env_from: dict[str, str]


class GateRun(TypedDict, total=False):
    """How a gate ran (``gate``): its folder, pairs, looks, why it stopped, threads."""
    dir: str
    processes: Pairs
    first_look: Pairs
    max_processes: Pairs
    budget_s: Optional[float]
    looks: list[Look]
    stopped: Optional[str]
    threads: Optional[int]
    steps: int
    order: list[str]
    wall_s: float
    threads_from: str
    sides: dict[str, GateSide]
    notes: list[str]
    rejudged: bool


class VerdictPair(TypedDict):
    """Each side's verdict label (its first report's)."""
    a: Optional[str]
    b: Optional[str]


class MachinePair(TypedDict):
    """Each side's machine (its first report's ``machine``, contract.report.Machine)."""
    a: Optional[Machine]
    b: Optional[Machine]


class SamplesPair(TypedDict):
    a: SideSamples
    b: SideSamples


class Noise(TypedDict, total=False):
    """How much the machine and the processes moved: `diff`'s drift of every op and the
    op noise between processes; the gate's pairs, its false-alarm look and the speed
    probe; the sides that ran on a contended machine."""
    drift_pct: Optional[float]
    op_noise_pct: Optional[float]
    drift_witnesses: int
    contended: list[str]
    pairs: Optional[int]
    false_alarm: FalseAlarm
    speed: Optional[Speed]


class MemoryRise(TypedDict):
    """A holder group whose MiB at the peak rose (model.comparing.memory_change)."""
    kind: str
    module: Optional[str]
    op: Optional[str]
    line: Optional[str]
    added_mib: float


class MemoryChange(TypedDict):
    """Memory between the sides (model.comparing.memory_change): peaks and memory held at
    the last step's end as [lowest, median, highest] over each side's processes."""
    status: str
    threshold_mib: float
    threshold_from: str
    relative: bool
    device: Optional[str]
    a_peak_mib: list[float]
    b_peak_mib: list[float]
    rise_mib: float
    least_rise_mib: float
    a_held_mib: Optional[list[float]]
    b_held_mib: Optional[list[float]]
    rises: list[MemoryRise]


class Comparison(Noise, total=False):
    """What `diff` and `gate` answer (docs/how-to/ci-perf-gate.md)."""
    outcome: Outcome
    exit_code: int
    mode: str
    reasons: list[str]
    advice: list[str]
    comparability: list[Blocker]
    source: str
    fail_above_pct: float
    min_step_share_pct: float
    samples: SamplesPair
    detectable_pct: Optional[float]
    step: Optional[ComparedStep]
    verdict: VerdictPair
    machine: MachinePair
    syncs: Syncs
    ops: list[ComparedRow]
    regressions: list[Regression]
    inconclusive: list[str]
    undecided: list[str]
    memory: Optional[MemoryChange]
    a_label: str
    b_label: str
    gate: GateRun

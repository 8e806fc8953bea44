"""The records nsbridge writes and reads back, each declared once as a TypedDict: a run's
manifest.json (``Manifest``), a profiled process's child.json (``ChildRecord``), a rank's
summary.json (``RankSummary``), a rank's output of a pass (``Output``) and what the ranks
tell each other through the job's store (``Word``, ``Mark``);
a gate's gate.json is checked against its types, contract.comparison. The type checker
reads the declarations where a record is built or read; each record is untrusted when read
back (edited by hand, damaged, written by another version, planted in a folder), so its one
reader (rundir.load_record, given the declaration) checks it against the shape derived
from it (``shape_for``, schema.shape.shape_of) and refuses it naming the file and the first
field that is wrong. Stdlib only (typing_extensions before Python 3.11, as torch installs
it): the profiled process builds child.json with these types. The report declares the
parts it copies from these records with these same types (contract.report's Environment
and Error; its MachineThreads is records.Threads bounded as a report read back must be),
and collect.machine's readers return the types here.

Numbers are finite and bounded (shape.HUGE); ranks and world sizes are whole numbers
below ``MAX_RANKS``; file names a record points to are bare names in its own folder.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any, Optional, TypedDict, Union

from .shape import _SIGNED, Shape, _Atom, misshapen, record_shape

if sys.version_info >= (3, 11):
    from typing import Required
else:
    from typing_extensions import Required

__all__ = ["MARK_SHAPE", "CHILD_SHAPE", "MANIFEST_SHAPE", "MAX_RANKS", "OUTPUT_SHAPE",
           "SUMMARY_SHAPE", "WORD_SHAPE", "Mark", "RunAt", "Around", "ChildRecord", "ChildStep", "Cores",
           "Environment", "GitState", "GpuProcess", "GpuState", "Manifest", "ManifestPass",
           "Output", "PassError", "PassRank", "PassSpec", "ProcessMachine", "RankSummary",
           "RecordError", "RunSource", "Snapshot", "StepLap", "SyncRecord", "Throttling", "Window",
           "Word",
           "record_problem", "shape_for"]

MAX_RANKS = 1 << 20   # more ranks than any job runs: a world_size above it is refused


def _whole(low: int, high: int) -> _Atom:
    """A whole number from ``low`` to ``high``."""
    return _Atom(f"a whole number from {low} to {high}",
                 lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high)


def _is_file_name(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 255 and value not in (".", "..")
            and not any(c in value for c in "/\\\0"))


_RANK = _whole(0, MAX_RANKS - 1)
_WORLD = _whole(1, MAX_RANKS)
_EXIT = _whole(-(1 << 31), (1 << 31) - 1)
_FILE = _Atom("a file name in the record's folder", _is_file_name)
_VARIABLES = _Atom("an object of strings", lambda v: isinstance(v, dict) and all(
    isinstance(k, str) and isinstance(x, str) for k, x in v.items()))
_SECTION = _Atom("a [name, object] pair", lambda v: isinstance(v, list) and len(v) == 2
                 and isinstance(v[0], str) and isinstance(v[1], dict))

# what collect.machine's readers return (the machine around a run): the report's machine
# facts take Cores, Throttling and GpuState as they are, so the type checker holds them to
# contract.report's MachineCores, MachineCgroupThrottling and MachineGpu
class Cores(TypedDict, total=False):
    """Cores this process may run on: all, its affinity, the cgroup's quota, the least."""

    logical: Optional[float]
    affinity: Optional[int]
    cgroup_quota: Optional[float]
    usable: Optional[float]


class Throttling(TypedDict, total=False):
    """The cgroup's CPU controller: periods, those throttled, time throttled (ms)."""

    periods: Optional[int]
    throttled: Optional[float]
    throttled_ms: Optional[float]


class Snapshot(TypedDict):
    """Counters to difference later (``between``), and the load average then."""

    at: float
    load: Optional[list[float]]
    cpu: Optional[dict[str, int]]
    cgroup: Optional[Throttling]


class Around(TypedDict, total=False):
    """What the machine did around a run (``between``), with the usable cores."""

    load_before: Optional[list[float]]
    load_after: Optional[list[float]]
    steal_share: Optional[float]
    cgroup_throttling: Optional[Throttling]
    seconds: Optional[float]
    cores: Cores


class GpuProcess(TypedDict):
    pid: int
    used_mib: Optional[float]


class GpuState(TypedDict, total=False):
    """One GPU's clocks, throttle reasons, temperature and others' processes on it."""

    index: Required[Any]
    name: Optional[str]
    sm_clock_mhz: Optional[float]
    sm_clock_max_mhz: Optional[float]
    throttle_reasons: Optional[list[str]]
    temperature_c: Optional[float]
    other_processes: Optional[list[Any]]


# manifest.json: what `analyze RUN`, `deep --run`, `timeline --run`, `gate` and `load` use
class RecordError(TypedDict, total=False):
    """Why a process, pass or rank failed: its kind, message, when, and where."""

    type: str
    message: str
    at: Annotated[float, _SIGNED]
    rank: Annotated[int, _RANK]
    file: Optional[str]
    line: Optional[int]
    signal: Optional[int]


# a pass's or the run's failure as manifest.json and report.json hold it ("pass": a keyword)
PassError = TypedDict("PassError", {"type": Optional[str], "message": Optional[str],
                                    "file": Optional[str], "line": Optional[int],
                                    "pass": Optional[str], "signal": Optional[int],
                                    "rank": Optional[int]}, total=False)


class MathSettings(TypedDict, total=False):
    """Whether fp32 matmuls and convolutions may run on Tensor Cores as TF32."""

    matmul_allow_tf32: bool
    cudnn_allow_tf32: bool
    float32_matmul_precision: str


class Environment(TypedDict, total=False):
    """The profiled process's environment (child.json's env; a manifest's environment)."""

    python: str
    torch: str
    cuda: Optional[str]
    cuda_available: bool
    host: str
    platform: str
    gpus: list[Any]
    math: MathSettings


class GitState(TypedDict, total=False):
    """The git checkout holding the script: its commit, and whether it had changes."""

    commit: str
    dirty: bool


class RunSource(TypedDict, total=False):
    """What a rerun of a run needs besides the script: threads, checked variables, git."""

    threads: Optional[int]
    env: dict[str, str]
    git: Optional[GitState]


class PassRank(TypedDict, total=False):
    """A rank's line in a pass's manifest entry when the pass ran on several ranks: how it
    ended (its numbers are in the report)."""

    rank: Required[Annotated[int, _RANK]]
    host: Optional[str]
    status: Optional[str]
    exit_code: Optional[Annotated[int, _EXIT]]
    error: Optional[str]


class ManifestPass(TypedDict, total=False):
    """One pass of a run in manifest.json: how it ended, how long it took, and the tool it
    ran (``machine``: the report's machine facts, contract.report.Machine, checked with the
    report; ``argv``: the tool's command line, one per capture when there were several;
    ``inputs``: the files given to analyze, or their count)."""

    name: str
    status: str
    exit_code: Annotated[int, _EXIT]
    error: Optional[PassError]
    wall_s: float
    runs: float
    steps_seen: float
    step_source: Optional[str]
    machine: dict[str, Any]
    environment: Optional[Environment]
    argv: Union[list[str], list[list[str]]]
    inputs: Union[int, list[str]]
    nsys: str
    nsys_version: Optional[str]
    nsys_found_by: str
    qdstrm_imported_with: Optional[str]
    ncu: str
    ncu_version: Optional[str]
    ranks: list[PassRank]
    world_size: Optional[int]


class Manifest(TypedDict, total=False):
    """manifest.json: what ran, how, and each pass."""

    nsbridge_version: str
    command: Required[str]
    status: Required[str]
    target: Required[str]
    started_at: str
    finished_at: str
    platform: str
    python: str
    args: list[str]
    module: bool
    cwd: str
    argv: list[str]
    threads: Annotated[Optional[int], _whole(1, 1 << 16)]
    env: Annotated[dict[str, str], _VARIABLES]
    git: Optional[GitState]
    profile: dict[str, Any]
    host: str
    pid: Annotated[int, _EXIT]
    launcher: list[str]
    passes: list[ManifestPass]
    error: Optional[PassError]
    environment: Environment


# child.json (and its nsys/ncu siblings): the profiled process's record
class StepLap(TypedDict, total=False):
    """A step's clock lap (collect.machine.ProcessClock.lap and what the session adds)."""

    wall_ms: float
    cpu_ms: float
    wait_ms: Optional[float]
    loop_wait_ms: Optional[float]   # the training loop's thread's own wait for a CPU
    nivcsw: float
    compile_ms: float
    probe_ms: float
    nsbridge_ms: float
    run: int             # which process of a pooled series (set when pooled, 1..N)


class ChildStep(TypedDict, total=False):
    """One step's clock: wall, CPU and run-queue wait time, and its phase."""

    index: Required[Annotated[int, _SIGNED]]
    wall_ms: Required[float]
    cpu_ms: float
    wait_ms: Optional[float]
    loop_wait_ms: Optional[float]
    nivcsw: float
    phase: Required[str]
    compile_ms: float
    probe_ms: float
    nsbridge_ms: float
    run: int             # which process of a pooled series (set when pooled, 1..N)


class SyncRecord(TypedDict, total=False):
    """One call site that made the host wait for the device, over the run."""

    kind: Required[str]
    op: str
    device: Required[str]
    file: Required[str]
    line: Required[Annotated[int, _SIGNED]]
    function: str
    code: Optional[str]
    library: bool
    via: Optional[str]
    count: Required[int]
    cost_ms: Required[float]
    steps: Required[int]
    first_step: Annotated[int, _SIGNED]
    last_step: Annotated[int, _SIGNED]
    max_in_one_step: int


class Threads(TypedDict, total=False):
    """torch's thread pools and the environment variables that size them."""

    intra_op: int
    inter_op: int
    env: dict[str, str]
    requested: Optional[int]   # the count nsbridge set (--threads), added by the parent


class ProcessMachine(TypedDict, total=False):
    """What the profiled process saw of its machine: threads, load, the GPU."""

    threads: Threads
    load_at_start: Optional[list[float]]
    load_at_end: Optional[list[float]]
    run_wait_measured: Optional[bool]
    gpu: Any


class Window(TypedDict, total=False):
    """What the recording covers and what stopped it."""

    kind: str
    stopped_by: Optional[str]
    seconds: float
    grew_mib: float
    limit_mib: float
    wait_for_step_s: Optional[float]
    window_s: Optional[float]
    after_steps: int
    budget_error: str


class StepsSampling(TypedDict):
    """How the step records were thinned: ``exact`` kept, ``sampled`` of ``later``."""

    exact: int
    later: int
    sampled: int


class NvtxSummary(TypedDict, total=False):
    """The NVTX ranges the timeline pass's process emitted, by kind."""

    domain: str
    emitted: dict[str, int]
    total: int


class ChildRecord(TypedDict, total=False):
    """child.json: how the profiled process ended and what it recorded."""

    status: Required[str]
    exit_code: Required[Annotated[int, _EXIT]]
    error: Optional[RecordError]
    step_source: Optional[str]
    step_count: int
    mode: str
    steps: list[ChildStep]
    steps_seen: int
    steps_sampling: Optional[StepsSampling]
    traces: list[Annotated[str, _FILE]]
    table: Annotated[Optional[str], _FILE]
    schedule_note: Optional[str]
    use_cuda: bool
    syncs: list[SyncRecord]
    machine: ProcessMachine
    window: Window
    compile_wait_s: float
    env: Environment
    wall_s: float
    nvtx: NvtxSummary


# rank-NN/summary.json: what the cross-rank merge (model.ranks.cross_rank) uses
class RankCollective(TypedDict, total=False):
    """One kind of collective on a rank, over the window."""

    kind: str
    count: Optional[int]
    bytes: Optional[int]
    time_us: Required[float]
    per_step: float
    time_per_step_us: float
    source: str


class RankOp(TypedDict, total=False):
    """One op's totals on a rank."""

    name: Required[str]
    calls: float
    cpu_self_us: float
    device_self_us: Optional[float]


class RankNumbers(TypedDict, total=False):
    device_busy_pct: Optional[float]


class RankComm(TypedDict, total=False):
    comm_us: Optional[float]
    overlap_pct: Optional[float]


class RankSummary(TypedDict, total=False):
    """rank-NN/summary.json: one rank's analysis, small, for the merge."""

    rank: Required[Annotated[int, _RANK]]
    world_size: Required[Annotated[int, _WORLD]]
    status: Required[str]
    exit_code: Required[Annotated[Optional[int], _EXIT]]   # None in memory: a hung rank
    error: Optional[RecordError]
    host: Optional[str]
    profiled: bool
    trace: Annotated[Optional[str], _FILE]
    step_ms: list[float]
    wait_ms: list[float]      # per measured step: the loop thread's wait for a CPU
    collective_ms: list[float]
    verdict: Optional[str]
    numbers: Optional[RankNumbers]
    has_device: bool
    device_busy_pct: Optional[float]
    comm: Optional[RankComm]
    collectives: list[RankCollective]
    ops: list[RankOp]


# the job mailbox: rank 0's word (ranks-next.json) and a rank's output of a pass
class PassSpec(TypedDict, total=False):
    """What every rank needs to run its share of a pass (job.mailbox.pass_spec): the
    script, the profile, the ranks that run the tool, the pass's id; ``env``: variables a
    rank sets (a fresh rendezvous store); the deep pass's own: ``plan`` (its NcuPlan, as the
    report declares it), ``op_shapes``, ``verdict``; a spec file for ranks started by
    torch.distributed.run names ``kind`` (the pass) and ``run_dir`` too."""

    target: Required[str]
    args: Required[list[str]]
    module: Required[bool]
    cwd: Required[str]
    timeout: Optional[float]
    profile: Required[str]
    ranks: Required[list[Annotated[int, _RANK]]]
    pass_id: Required[str]
    env: Annotated[dict[str, str], _VARIABLES]
    plan: dict[str, Any]
    op_shapes: dict[str, list[str]]
    verdict: Optional[str]
    kind: str
    run_dir: str


# rank 0's word to the others on a pass, in the job's store (job.store): go, or why not;
# "pass" is a keyword
Word = TypedDict("Word", {"pass": Required[str], "go": Required[bool], "spec": Optional[PassSpec],
                          "why": str}, total=False)


class Output(TypedDict, total=False):
    """A rank's output of a pass, for rank 0 to merge."""

    pass_id: Required[str]
    name: Required[str]
    status: Required[str]
    exit_code: Required[Annotated[int, _EXIT]]
    error: Optional[PassError]
    manifest: ManifestPass         # its entry in manifest.json's passes (run.PassOutput)
    core: dict[str, Any]
    section: Annotated[Optional[list[Any]], _SECTION]
    op_key: Optional[str]
    op_columns: dict[str, Any]
    notes: list[str]
    sources: dict[str, str]
    recommendations: list[dict[str, Any]]
    files: dict[str, Any]


class RunAt(TypedDict):
    """Node 0's word to the other machines of a job nsbridge starts on several: the run
    directory they write their ranks' folders into (job.store)."""

    run_dir: str


class Mark(TypedDict, total=False):
    """A rank's mark in the job's store (job.store): it has done something (profiled its
    rank, read rank 0's word, run its share of a pass), with its exit status and the
    pass's id."""

    exit_code: Optional[Annotated[int, _EXIT]]
    pass_id: str


def shape_for(kind: type) -> Shape:
    """The shape of the record declared as ``kind``, derived once."""
    return _shape_for(kind)


_shape_for = functools.cache(record_shape)
MANIFEST_SHAPE = shape_for(Manifest)
CHILD_SHAPE = shape_for(ChildRecord)
SUMMARY_SHAPE = shape_for(RankSummary)
WORD_SHAPE = shape_for(Word)
OUTPUT_SHAPE = shape_for(Output)
MARK_SHAPE = shape_for(Mark)


def record_problem(record: object, shape: Shape) -> Optional[str]:
    """Why ``record`` does not have ``shape``, naming the first field that is wrong
    ('world_size is 10000000, not a whole number from 1 to 1048576'); None when it has."""
    if not isinstance(record, dict):
        return "it is not a JSON object"
    return misshapen(record, shape)

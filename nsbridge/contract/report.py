"""report.json's shape, declared once: a TypedDict per section, read by the type checker
and checked at run time by msgspec (``report_problem`` in contract.check).

Why TypedDicts and not msgspec Structs or dataclasses: a report is built by several
passes that each add their section to the same JSON object, written as JSON and read back
as JSON by ``load``, ``diff``, ``gate``, ``analyze RUN_DIR`` and the agent; a TypedDict is
that object as it is, so the type checker sees each key where the report is built or read
while nothing changes at run time, and msgspec validates a decoded report against the same
declaration (``msgspec.convert``) without building a second copy of it. Every key may be
missing or null unless declared ``Required`` or not Optional: a report from a run that
stopped early has only what it got to.

Numbers: ``Amount`` finite and 0 or more (``Count``: a whole one), ``Positive`` above 0,
``Signed`` any finite number; each below ``HUGE``. Sections whose keys are open (ncu's quantities, named by the
profile's metric set) are ``dict[str, Any]``.

docs/reference/report-json.md documents every key declared here (tests/test_report_types.py
holds the two to each other), and every report a test writes is checked against these
types with its undeclared keys refused (``NSBRIDGE_STRICT_REPORTS``, set by tests/conftest.py).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal, Mapping, Optional, TypedDict, Union, cast

import msgspec

from ..schema import records
from ..schema.report import RUNNING, SCHEMA_VERSION
from ..schema.shape import HUGE

if sys.version_info >= (3, 11):
    from typing import Required
else:
    from typing_extensions import Required

Amount = Annotated[float, msgspec.Meta(ge=0, lt=HUGE)]
Positive = Annotated[float, msgspec.Meta(gt=0, lt=HUGE)]
Signed = Annotated[float, msgspec.Meta(gt=-HUGE, lt=HUGE)]
Count = Annotated[int, msgspec.Meta(ge=0, lt=int(HUGE))]
RankedBy = Literal["cpu_self_us", "device_self_us"]
# a run's files by kind: a name in the run directory (or a path given to analyze), several,
# or null where the kind was not written
Files = dict[str, Union[str, list[str], None]]

# the top-level keys a finished report (status "ok") must have
FINISHED_KEYS = ("target", "ops", "sync_points")


class Collective(TypedDict, total=False):
    bytes: Optional[int]
    count: Optional[int]
    host_time_us: Optional[Signed]
    kind: Optional[str]
    per_step: Optional[Signed]
    source: Optional[str]
    time_per_step_us: Optional[Signed]
    time_source: Optional[str]
    time_sources: Optional[dict[str, Any]]
    time_us: Optional[Signed]


class DeviceAttribution(TypedDict, total=False):
    external_id: Optional[int]
    launch_containment: Optional[int]
    launched_before_window: Optional[int]
    outside_ops: Optional[int]


class DeviceComm(TypedDict, total=False):
    comm_us: Optional[Signed]
    overlap_pct: Optional[Signed]
    overlap_us: Optional[Signed]


class DeviceCopy(TypedDict, total=False):
    bytes: Optional[int]
    count: Optional[int]
    name: Optional[str]
    total_us: Optional[Signed]


class DeviceCudaGraph(TypedDict, total=False):
    by_op: Optional[list[Any]]
    device_us: Optional[Signed]
    kernels: Optional[int]
    launches: Optional[int]


class DeviceIdleGap(TypedDict, total=False):
    device: Optional[int]
    dur_us: Optional[Signed]
    host_op: Optional[str]
    host_top_op: Optional[str]
    start_us: Optional[Signed]




class DevicePerDevice(TypedDict, total=False):
    busy_pct: Optional[Signed]
    busy_us: Optional[Signed]
    device: Optional[int]
    kernels: Optional[int]


class DeviceTritonByKernel(TypedDict, total=False):
    calls: Optional[int]
    device_us: Optional[Signed]
    kernel: Optional[str]
    op: Optional[str]
    source: Optional[str]


class DeviceTriton(TypedDict, total=False):
    by_kernel: Optional[list[DeviceTritonByKernel]]
    device_us: Optional[Signed]
    kernels: Optional[int]
    with_source: Optional[int]


class DeviceWork(TypedDict, total=False):
    attribution: Optional[str]
    bytes: Optional[int]
    calls: Optional[int]
    device_us: Optional[Signed]
    kind: Optional[str]
    launch: Optional[str]
    launch_configs: Optional[int]
    name: Optional[str]
    op: Optional[str]
    source: Optional[str]
    via: Optional[str]


class Device(TypedDict, total=False):
    attribution: Optional[DeviceAttribution]
    busy_pct: Optional[Signed]
    comm: Optional[DeviceComm]
    copies: Optional[list[DeviceCopy]]
    cuda_graph: Optional[DeviceCudaGraph]
    idle_gaps: Optional[list[DeviceIdleGap]]
    kernels: Optional[int]
    kernels_per_s: Optional[Signed]
    kernels_per_step: Optional[Signed]
    launched_before_window: Optional[DeviceLaunchedBeforeWindow]
    linking: Optional[str]
    median_kernel_us: Optional[Signed]
    per_device: Optional[list[DevicePerDevice]]
    triton: Optional[DeviceTriton]
    window: Optional[str]
    window_us: Optional[list[Signed]]
    work: Optional[list[DeviceWork]]


class DistributedCollective(Collective, total=False):
    """A collective kind on one rank."""
    rank: Optional[int]


class DistributedRanksBreakdownMs(TypedDict, total=False):
    communication: Optional[Signed]
    compute: Optional[Signed]
    idle: Optional[Signed]
    overlap: Optional[Signed]


class DistributedRank(TypedDict, total=False):
    breakdown_ms: Optional[DistributedRanksBreakdownMs]
    busy_pct: Optional[Signed]
    collective_ms_per_step: Optional[Signed]
    comm_overlap_pct: Optional[Signed]
    device_busy_pct: Optional[Signed]
    exit_code: Optional[int]
    file: Optional[str]
    host: Optional[str]
    max_step_ms: Optional[Signed]
    min_step_ms: Optional[Signed]
    ops: Optional[int]
    profiled: Optional[bool]
    rank: Optional[int]
    status: Optional[str]
    step_ms: Optional[Signed]
    verdict: Optional[str]
    work_ms_per_step: Optional[Signed]


class DistributedHeat(TypedDict, total=False):
    max_us: Optional[list[list[Signed]]]
    ops: Optional[list[str]]
    ranks: Optional[list[list[int]]]
    source: Optional[str]


class DistributedSkew(TypedDict, total=False):
    excess_us: Optional[Signed]
    max_rank: Optional[int]
    max_us: Optional[Signed]
    median_us: Optional[Signed]
    min_us: Optional[Signed]
    op: Optional[str]
    skew_pct: Optional[Signed]
    source: Optional[str]


class DistributedStep(TypedDict, total=False):
    max_ms: Optional[Signed]
    median_ms: Optional[Signed]
    min_ms: Optional[Signed]
    slowest_over_median_pct: Optional[Signed]
    slowest_rank: Optional[int]


class DistributedStraggler(TypedDict, total=False):
    evidence: Optional[list[str]]
    excess_ci_ms: Optional[list[Signed]]
    excess_ms: Optional[Signed]
    excess_pct: Optional[Signed]
    floor_ms: Optional[Signed]
    metric: Optional[str]
    rank: Optional[int]
    recommendation: Any
    verdict: Optional[str]


class Distributed(TypedDict, total=False):
    collectives: Optional[list[DistributedCollective]]
    failed: Optional[list[Any]]
    heat: Optional[DistributedHeat]
    profiled: Optional[list[int]]
    ranks: Optional[list[DistributedRank]]
    shown_rank: Optional[int]
    skew: Optional[list[DistributedSkew]]
    step: Optional[DistributedStep]
    straggler: Optional[DistributedStraggler]
    world_size: Optional[int]


# the profiled process's environment, as child.json declares it
Environment = records.Environment


# the script's or a pass's failure, as manifest.json declares it
Error = records.PassError


class MachineCgroupThrottling(TypedDict, total=False):
    periods: Optional[int]
    throttled: Optional[Amount]
    throttled_ms: Optional[Signed]


class MachineContention(TypedDict, total=False):
    contended: Optional[bool]
    evidence: Optional[str]
    fix: Optional[str]
    oversubscribed: Optional[bool]
    reasons: Optional[list[str]]
    share: Optional[Signed]


class MachineCores(TypedDict, total=False):
    affinity: Optional[int]
    cgroup_quota: Optional[Signed]
    logical: Optional[Amount]
    usable: Optional[Amount]


class MachineGpu(TypedDict, total=False):
    index: Required[Any]
    name: Optional[str]
    other_processes: Optional[list[Any]]
    sm_clock_max_mhz: Optional[Signed]
    sm_clock_mhz: Optional[Signed]
    temperature_c: Optional[Signed]
    throttle_reasons: Optional[list[str]]


class MachineLoad(TypedDict, total=False):
    after: Optional[list[Amount]]
    at_end: Optional[list[Signed]]
    at_start: Optional[list[Signed]]
    before: Optional[list[Amount]]


class Spread(TypedDict, total=False):
    ci_high: Optional[Signed]
    ci_low: Optional[Signed]
    max: Optional[Signed]
    mean: Optional[Signed]
    median: Optional[Signed]
    min: Optional[Signed]
    n: Optional[int]
    p10: Optional[Signed]
    p90: Optional[Signed]


class ProcessClock(TypedDict, total=False):
    cpu_ms_per_step: Optional[Signed]
    cpu_per_wall: Optional[Amount]
    n: Optional[int]
    nivcsw_per_step: Optional[Amount]
    wait_ms_per_step: Optional[Amount]
    wait_share: Optional[Amount]
    wall_ms: Optional[Spread]


class MachineThreads(TypedDict, total=False):
    """torch's threads in the profiled process (child.json's records.Threads, bounded as a
    report read back must be: a thread count past any machine is refused, not rendered)."""
    intra_op: Count
    inter_op: Count
    env: dict[str, str]
    requested: Optional[Count]


class MachineUnprofiledSteps(TypedDict, total=False):
    cpu_ms_per_step: Optional[Signed]
    cpu_per_wall: Optional[Signed]
    n: Optional[int]
    nivcsw_per_step: Optional[Signed]
    wait_ms_per_step: Optional[Signed]
    wait_share: Optional[Signed]
    wall_ms: Optional[Spread]


class Machine(TypedDict, total=False):
    cgroup_throttling: Optional[MachineCgroupThrottling]
    contention: Optional[MachineContention]
    cores: Optional[MachineCores]
    gpu: Optional[list[MachineGpu]]
    load: Optional[MachineLoad]
    measured_steps: Optional[ProcessClock]
    run_wait_measured: Optional[bool]
    steal_share: Optional[Amount]
    threads: Optional[MachineThreads]
    unprofiled_steps: Optional[MachineUnprofiledSteps]


class MemoryPoints(TypedDict, total=False):
    allocated_mib: Optional[list[Any]]
    reserved_mib: Optional[list[Any]]
    t_ms: Optional[list[Any]]


class MemoryKindLevel(TypedDict, total=False):
    """Bytes of one kind live at the peak (model.device.memory_holders.KINDS)."""
    kind: Required[str]
    mib: Optional[Signed]
    blocks: Optional[int]


class MemoryHolder(TypedDict, total=False):
    """Blocks live at the peak with the same kind, module, op and user line."""
    kind: Required[str]
    module: Optional[str]
    op: Optional[str]
    line: Optional[str]
    mib: Optional[Signed]
    blocks: Optional[int]


class MemoryHolders(TypedDict, total=False):
    """What holds the peak (model.device.memory_holders)."""
    at_ms: Optional[Signed]
    named_mib: Optional[Signed]
    blocks: Optional[int]
    before_mib: Optional[Signed]
    named_pct: Optional[Signed]
    with_stacks: Optional[bool]
    kinds: Optional[list[MemoryKindLevel]]
    rows: Optional[list[MemoryHolder]]
    per_step_end: Optional[list[dict[str, Signed]]]


class SnapshotHolders(TypedDict, total=False):
    """What holds memory after one history entry of an allocator snapshot."""
    entry: Optional[int]
    allocated_mib: Optional[Signed]
    reserved_mib: Optional[Signed]
    live_mib: Optional[Signed]
    blocks: Optional[int]
    named_pct: Optional[Signed]
    kinds: Optional[list[MemoryKindLevel]]
    rows: Optional[list[MemoryHolder]]


class Fragmentation(TypedDict, total=False):
    """The caching allocator's state when its snapshot was taken."""
    reserved_mib: Optional[Signed]
    allocated_mib: Optional[Signed]
    cached_free_mib: Optional[Signed]
    largest_free_mib: Optional[Signed]
    free_blocks: Optional[int]
    segments: Optional[int]
    ooms: Optional[int]


class AllocatorOom(TypedDict, total=False):
    """The last out-of-memory in an allocator snapshot's history."""
    entry: Optional[int]
    request_mib: Optional[Signed]
    line: Optional[str]
    device_free_mib: Optional[Signed]
    held: Optional[SnapshotHolders]
    advice: Optional[list[str]]


class AllocatorSnapshot(TypedDict, total=False):
    """An allocator snapshot (model.device.snapshot_memory): its history's peak and what
    holds it, fragmentation, and the out-of-memory that ended the run."""
    device: Optional[str]
    entries: Optional[int]
    from_profile: Optional[bool]
    free_entries: Optional[str]
    start_mib: Optional[Signed]
    end_mib: Optional[Signed]
    peak_mib: Optional[Signed]
    peak_entry: Optional[int]
    reserved_peak_mib: Optional[Signed]
    peak: Optional[SnapshotHolders]
    fragmentation: Optional[Fragmentation]
    oom: Optional[AllocatorOom]


class Memory(TypedDict, total=False):
    device: Optional[str]
    end_mib: Optional[Signed]
    events: Optional[int]
    holders: Optional[MemoryHolders]
    peak_at_ms: Optional[Signed]
    peak_mib: Optional[Signed]
    peak_ops: Optional[list[str]]
    peak_step: Optional[int]
    per_step_end_mib: Optional[list[Signed]]
    points: Optional[MemoryPoints]
    relative: Optional[bool]
    relative_why: Optional[str]
    reserved_peak_mib: Optional[Signed]
    start_mib: Optional[Signed]


class NcuChosenOp(TypedDict, total=False):
    """An op the deep pass profiles, and why it was chosen."""
    op: Required[str]
    reason: Optional[str]


class NcuPlannedOp(NcuChosenOp, total=False):
    """A chosen op with what the triage expects of it: its kernels (names, at most five),
    launches per measured step (null without a GPU triage), the NVTX op ranges its kernels
    can run within, and their kernel families."""
    kernels: Optional[list[str]]
    launches_per_step: Optional[Amount]
    ranges: Optional[list[str]]
    kernel_families: Optional[list[str]]


class NcuCapture(TypedDict, total=False):
    """One ncu run of the plan: its ops, filter ranges, launches skipped and profiled."""
    ops: Optional[list[str]]
    ranges: Optional[list[str]]
    launch_skip: Optional[Count]
    launch_count: Optional[Count]
    capped: Optional[bool]


class PickedRank(TypedDict, total=False):
    """A rank the deep pass profiles: its role (asked, slowest, median) and why."""
    rank: Required[int]
    role: Optional[str]
    reason: Optional[str]


class NcuPlan(TypedDict, total=False):
    """What the deep pass set out to profile (model.nsight.deep_plan.plan)."""
    ops: Optional[list[NcuPlannedOp]]
    captures: Optional[list[NcuCapture]]
    launch_skip: Optional[Count]
    launch_count: Optional[Count]
    capped: Optional[bool]
    passes_per_kernel: Optional[Amount]
    estimate_s: Optional[Amount]
    estimate_note: Optional[str]
    launch_counts_known: Optional[bool]
    ranks: Optional[list[PickedRank]]


class ToolRank(TypedDict, total=False):
    """A rank's row in a pass's ``ranks`` when the pass ran on several ranks
    (model.ranks.cross_rank.tool_rank_row): how its tool ended, then the tool's numbers."""
    rank: Required[int]
    host: Optional[str]
    reason: Optional[str]
    status: Required[str]
    error: Optional[str]
    wall_s: Optional[Amount]
    files: Optional[Files]


class TimelineRankNumbers(TypedDict, total=False):
    """The nsys pass's headline numbers of one rank (passes.nsys_pass rank_numbers)."""
    gpu_busy_pct: Optional[Signed]
    kernels: Optional[int]
    copies: Optional[int]
    memsets: Optional[int]
    nsbridge_ranges: Optional[int]
    sync_calls: Optional[Amount]
    sync_us: Optional[Signed]
    kernel_us: Optional[Signed]
    comm_kernel_us: Optional[Signed]
    files: Optional[Files]


class TimelineRank(ToolRank, TimelineRankNumbers, total=False):
    """``timeline.ranks[]``: a rank's status and its nsys numbers."""


class NcuRankOp(TypedDict, total=False):
    """One op's ncu numbers on one rank."""
    duration_ns: Optional[Signed]
    sm_pct: Optional[Signed]
    memory_pct: Optional[Signed]
    achieved_occupancy_pct: Optional[Signed]
    tensor_pct: Optional[Signed]
    bound: Optional[str]


class NcuRankNumbers(TypedDict, total=False):
    """The deep pass's headline numbers of one rank (passes.ncu_pass rank_numbers)."""
    launches: Optional[int]
    attribution: Optional[dict[str, int]]
    ops: Optional[dict[str, NcuRankOp]]
    files: Optional[Files]


class NcuRank(ToolRank, NcuRankNumbers, total=False):
    """``ncu.ranks[]``: a rank's status and its ncu numbers."""


class Ncu(TypedDict, total=False):
    attribution: Optional[dict[str, int]]
    families: Optional[list[dict[str, Any]]]
    file: Optional[str]
    kernels: Optional[list[dict[str, Any]]]
    launches: Optional[int]
    missing_quantities: Optional[list[str]]
    ncu_version: Optional[str]
    notes: Optional[list[Any]]
    plan: Optional[NcuPlan]
    ranks: Optional[list[NcuRank]]
    shown_rank: Optional[int]
    source: Optional[str]


class OpGroup(TypedDict, total=False):
    """An op's calls of one group (``op_groups``): its count and torch's four times."""
    calls: Optional[int]
    cpu_self_us: Optional[Signed]
    cpu_total_us: Optional[Signed]
    device_self_us: Optional[Signed]
    device_total_us: Optional[Signed]
    name: Optional[str]


class OpGroupsByShape(OpGroup, total=False):
    shape: Optional[str]


class OpGroupsBySource(OpGroup, total=False):
    source: Optional[str]


class OpGroups(TypedDict, total=False):
    by_shape: Optional[list[OpGroupsByShape]]
    by_source: Optional[list[OpGroupsBySource]]
    notes: Optional[list[str]]


class OpCopy(TypedDict, total=False):
    bytes: Optional[int]
    calls: Optional[int]
    device_us: Optional[Signed]
    kind: Optional[str]
    name: Required[str]
    source: Optional[str]
    via: Optional[str]


class OpKernel(TypedDict, total=False):
    calls: Optional[int]
    device_us: Optional[Signed]
    name: Required[str]
    source: Optional[str]
    via: Optional[str]
    within: Optional[list[str]]


class OpNsys(TypedDict, total=False):
    copies: Optional[int]
    copy_bytes_dtod: Optional[int]
    copy_bytes_dtoh: Optional[int]
    copy_bytes_htod: Optional[int]
    copy_bytes_other: Optional[int]
    copy_us: Optional[Signed]
    gpu_us: Optional[Signed]
    idle_before_us: Optional[Signed]
    kernel_us: Optional[Signed]
    kernels: Optional[int]
    launch_latency_us: Optional[Signed]
    memset_us: Optional[Signed]
    memsets: Optional[int]
    range_us: Optional[Signed]
    ranges: Optional[int]
    sync_us: Optional[Signed]


class WorkSignature(TypedDict, total=False):
    calls: Required[Amount]
    dtypes: Optional[str]
    layout: Optional[str]
    shape: Required[str]
    us: Required[Amount]


class TensorCoreMark(TypedDict, total=False):
    dtype: Optional[str]
    evidence: Optional[str]
    reason: Optional[str]
    status: Optional[str]
    triage_status: Optional[str]


class Op(TypedDict, total=False):
    calls: Optional[Amount]
    copies: Optional[list[OpCopy]]
    cpu_self_us: Optional[Amount]
    cpu_total_us: Optional[Amount]
    device_self_us: Optional[Amount]
    device_total_us: Optional[Amount]
    kernels: Optional[list[OpKernel]]
    mem_mib: Optional[Signed]
    mem_net_mib: Optional[Signed]
    name: Required[str]
    ncu: Optional[dict[str, Any]]
    nsys: Optional[OpNsys]
    per_step_us: Optional[list[Amount]]
    self_pct: Optional[Amount]
    shape_work: Optional[list[WorkSignature]]
    shapes: Optional[list[Any]]
    spread_pct: Optional[Signed]
    tensor_cores: Optional[TensorCoreMark]


class Overhead(TypedDict, total=False):
    kind: Optional[str]
    note: Optional[str]
    profiled_step_ms: Optional[Signed]
    profiled_steps: Optional[int]
    ratio: Optional[Signed]
    ratio_ci: Optional[list[Signed]]
    unprofiled_step_ms: Optional[Signed]
    unprofiled_steps: Optional[int]


class Recommendation(TypedDict, total=False):
    addresses_verdict: Optional[bool]
    fix: Optional[str]
    id: Optional[str]
    impact: Optional[Signed]
    source: Optional[str]
    title: Optional[str]
    url: Optional[str]
    why: Optional[str]


class StepsMeanShares(TypedDict, total=False):
    backward: Optional[Signed]
    data: Optional[Signed]
    forward: Optional[Signed]
    optimizer: Optional[Signed]
    other: Optional[Signed]


class StepsMean(TypedDict, total=False):
    backward_ms: Optional[Signed]
    data_ms: Optional[Signed]
    forward_ms: Optional[Signed]
    optimizer_ms: Optional[Signed]
    other_ms: Optional[Signed]
    shares: Optional[StepsMeanShares]
    wall_ms: Optional[Signed]


class StepsPerStep(TypedDict, total=False):
    backward_ms: Optional[Signed]
    cpu_ms: Optional[Amount]
    data_ms: Optional[Signed]
    forward_ms: Optional[Signed]
    gpu_done_ms: Optional[Amount]
    optimizer_ms: Optional[Signed]
    other_ms: Optional[Signed]
    probe_ms: Optional[Amount]
    run: Optional[Amount]
    step: Optional[int]
    wait_ms: Optional[Amount]
    wall_ms: Required[Amount]


class Steps(TypedDict, total=False):
    count: Required[Amount]
    detected_by: Optional[str]
    gpu_done: Optional[Spread]
    mean: Optional[StepsMean]
    per_step: Optional[list[StepsPerStep]]
    spread: Optional[Spread]
    unprofiled: Optional[Spread]
    unprofiled_ms: Optional[list[Positive]]
    unprofiled_runs: Optional[list[int]]
    unprofiled_wait_ms: Optional[list[Optional[Amount]]]


class SyncPoint(TypedDict, total=False):
    call: Optional[str]
    code: Optional[str]
    count: Optional[Amount]
    counted_over: Optional[str]
    device: Optional[str]
    file: Optional[str]
    function: Optional[str]
    gpu_idle_ms: Optional[Signed]
    host_ms: Optional[Signed]
    kind: Required[str]
    library: Optional[bool]
    line: Any
    op: Optional[str]
    per_s: Optional[Signed]
    per_step: Optional[Signed]
    placement: Optional[str]
    placement_why: Optional[str]
    run_count: Optional[int]
    source: Optional[str]
    via: Optional[str]


class WorkCounts(TypedDict, total=False):
    copies: Optional[int]
    kernels: Optional[int]
    memsets: Optional[int]


class TimelineAttribution(TypedDict, total=False):
    graph_node_capture: Optional[WorkCounts]
    no_launch_in_capture: Optional[WorkCounts]
    nvtx_push_pop: Optional[WorkCounts]
    outside_op_ranges: Optional[WorkCounts]


class TimelineIdleGap(TypedDict, total=False):
    device: Optional[int]
    dur_us: Optional[Signed]
    module: Optional[str]
    op: Optional[str]
    start_ns: Optional[Signed]
    step: Optional[str]


class UnlaunchedWork(TypedDict, total=False):
    copies: Optional[int]
    copy_us: Optional[Signed]
    kernel_us: Optional[Signed]
    kernels: Optional[int]
    memset_us: Optional[Signed]
    memsets: Optional[int]


class DeviceLaunchedBeforeWindow(UnlaunchedWork, total=False):
    """GPU work in the window that was launched before it, and why it is left out."""
    explanation: Optional[str]


class TimelineNvtx(TypedDict, total=False):
    emitted: Optional[int]
    recorded: Optional[int]
    warning: Optional[str]


class TimelineOp(TypedDict, total=False):
    copies: Optional[int]
    copy_bytes_dtod: Optional[int]
    copy_bytes_dtoh: Optional[int]
    copy_bytes_htod: Optional[int]
    copy_bytes_other: Optional[int]
    copy_us: Optional[Signed]
    gpu_us: Optional[Signed]
    idle_before_us: Optional[Signed]
    kernel_us: Optional[Signed]
    kernels: Optional[int]
    launch_latency_us: Optional[Signed]
    memset_us: Optional[Signed]
    memsets: Optional[int]
    op: Optional[str]
    range_us: Optional[Signed]
    ranges: Optional[int]
    sync_us: Optional[Signed]


class TimelineWindow(TypedDict, total=False):
    end_ns: Optional[Signed]
    kind: Optional[str]
    start_ns: Optional[Signed]
    steps: Optional[list[int]]
    why: Optional[str]


class Timeline(TypedDict, total=False):
    attribution: Optional[TimelineAttribution]
    copies: Optional[int]
    files: Optional[Files]
    gpu_busy_pct: Optional[Signed]
    gpu_traced: Optional[bool]
    idle_gaps: Optional[list[TimelineIdleGap]]
    kernels: Optional[int]
    memsets: Optional[int]
    module_ranges: Optional[int]
    no_launch: Optional[UnlaunchedWork]
    note: Optional[str]
    nsbridge_ranges: Optional[int]
    nsys_version: Optional[str]
    nvtx: Optional[TimelineNvtx]
    op_ranges: Optional[int]
    ops: Optional[list[TimelineOp]]
    osrt_calls: Optional[int]
    other_domains: Optional[list[Any]]
    outside_ops: Optional[UnlaunchedWork]
    ranges: Optional[int]
    ranks: Optional[list[TimelineRank]]
    runtime_calls: Optional[int]
    schema_version: Optional[str]
    shown_rank: Optional[int]
    sync_calls: Optional[Amount]
    sync_us: Optional[Signed]
    window: Optional[TimelineWindow]


class VerdictAlternative(TypedDict, total=False):
    label: Optional[str]
    why: Optional[str]


class VerdictNumbers(TypedDict, total=False):
    data_share: Optional[Signed]
    data_share_ci: Optional[list[Signed]]
    device_busy_pct: Optional[Signed]
    host_ops_per_sync: Optional[Signed]
    step_ms: Optional[Signed]
    sync_blocked_ms_per_step: Optional[Signed]
    sync_blocked_share: Optional[Signed]
    sync_calls: Optional[Amount]
    sync_calls_per_step: Optional[Signed]
    sync_gpu_idle_ms_per_step: Optional[Signed]
    sync_gpu_idle_share: Optional[Signed]
    syncs_decide: Optional[bool]
    window_s: Optional[Signed]


class Verdict(TypedDict, total=False):
    alternatives: Optional[list[VerdictAlternative]]
    cannot_conclude: Optional[list[Any]]
    confidence: Optional[str]
    confidence_reasons: Optional[list[str]]
    contention: Optional[str]
    evidence: Optional[list[Any]]
    label: Required[str]
    numbers: Optional[VerdictNumbers]
    settle: Optional[list[Any]]


class Window(TypedDict, total=False):
    asked: Optional[str]
    end_us: Optional[Signed]
    kind: Optional[str]
    notes: Optional[list[str]]
    per: Optional[str]
    runs: Optional[int]
    seconds: Optional[Amount]
    start_us: Optional[Signed]
    steps: Optional[int]


class Report(TypedDict, total=False):
    collectives: Optional[list[Collective]]
    command: Optional[str]
    device: Optional[Device]
    distributed: Optional[Distributed]
    environment: Optional[Environment]
    error: Optional[Error]
    files: Optional[Files]
    machine: Optional[Machine]
    memory: Optional[Memory]
    memory_snapshot: Optional[AllocatorSnapshot]
    ncu: Optional[Ncu]
    notes: Optional[list[str]]
    nsbridge_version: Optional[str]
    op_groups: Optional[OpGroups]
    ops: list[Op]
    overhead: Optional[Overhead]
    ranked_by: Optional[RankedBy]
    recommendations: Optional[list[Recommendation]]
    schema_version: Optional[int]
    sources: Optional[dict[str, str]]
    status: Required[str]
    steps: Optional[Steps]
    sync_points: list[SyncPoint]
    target: str
    tensor_cores: Optional[dict[str, int]]
    timeline: Optional[Timeline]
    verdict: Optional[Verdict]
    window: Optional[Window]


class ReportStatus(TypedDict, total=False):
    """What every report, finished or not, must get right."""

    status: Required[str]
    error: Optional[Error]


def empty_report(*, command: str, target: str, version: str, status: str = RUNNING,
                 error: Optional[Error] = None) -> Report:
    """The skeleton every report starts as (the run before any pass, Run.create, and the
    torch.profiler pass's report, build_report): every top-level key present, nothing
    measured, device fields null (never 0), lists empty, ``verdict`` null."""
    return {"schema_version": SCHEMA_VERSION, "nsbridge_version": version, "command": command,
            "target": target, "status": status, "error": error,
            "verdict": None, "ranked_by": None, "window": None, "ops": [], "steps": None,
            "device": None, "sync_points": [], "recommendations": [], "collectives": [],
            "overhead": None, "machine": None, "environment": None,
            "files": {}, "notes": [], "sources": {}}


def as_report(document: Mapping[str, Any]) -> Report:
    """A report assembled or read as a plain JSON object, as the type checker reads it.
    Nothing is checked here: every report is checked against these types where it is
    written and where it is read back (contract.check.report_problem)."""
    return cast(Report, document)


def as_document(report: Report) -> dict[str, Any]:
    """The report as a plain JSON object, for the code that merges sections by name
    (run.Run.add: each pass's section under its own key)."""
    return cast(dict[str, Any], report)


def verdict_label(report: Report) -> Optional[str]:
    """The verdict's label ('cpu-bound', ...), None for a report without a verdict."""
    verdict = report.get("verdict")
    return verdict["label"] if verdict else None


def per_step_of(report: Report) -> list[StepsPerStep]:
    """A report's measured steps ([] without a steps section)."""
    steps = report.get("steps")
    return (steps.get("per_step") if steps else None) or []


def pass_numbers(op: Op, key: str) -> dict[str, Any]:
    """An op's numbers from the pass ``key`` names (``nsys``, ``ncu``, a view's own key),
    {} where that pass did not see the op: passes add their keys by name."""
    value = cast(Mapping[str, Any], op).get(key)
    return value if isinstance(value, dict) else {}

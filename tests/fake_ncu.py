"""A stand-in for `ncu` and `nvidia-smi`, for orchestration tests (a process-boundary double).

As `nvidia-smi -L` it lists one GPU. As `ncu` (behaviour by environment variables):
  FAKE_NCU_LOG    file to append each argv to (JSON lines)
  FAKE_NCU_MODE   ok (runs the child, writes the report) | perm (ERR_NVGPUCTRPERM) |
                  nokernels (runs the child, profiles nothing) | fail (exit 1)
  FAKE_NCU_CSV    a real raw-page CSV that `ncu --import ... --csv` prints
"""

import json
import os
import subprocess
import sys


def main() -> int:
    argv = sys.argv[1:]
    if os.path.basename(sys.argv[0]) == "nvidia-smi":
        print("GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)")
        return 0
    with open(os.environ["FAKE_NCU_LOG"], "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    if argv[:1] == ["--version"]:
        print("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 "
              "NVIDIA Corporation\nVersion 2099.1.0.0 (build 1) (public-release)")
        return 0
    if argv[:1] == ["--import"]:
        sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
        return 0
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    if mode == "perm":
        print("==PROF== Connected to process 1")
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
              "GPU Performance Counters on the target device 0.")
        return 1
    if mode == "fail":
        print("==ERROR== An error occurred while trying to profile.")
        return 1
    child = argv[argv.index("--force-overwrite") + 1:]
    code = subprocess.call(child)
    if mode == "nokernels":
        print("==WARNING== No kernels were profiled.")
        return code
    out = argv[argv.index("--export") + 1]
    print(f"==PROF== Report: {out}.ncu-rep")
    with open(out + ".ncu-rep", "w") as fh:
        fh.write("not a real report")
    return code


if __name__ == "__main__":
    sys.exit(main())

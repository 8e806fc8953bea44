"""A stand-in for the `nsys` executable, for orchestration tests (a process-boundary double).

Behaviour is chosen by environment variables:
  FAKE_NSYS_LOG     file to append each argv to (JSON lines)
  FAKE_NSYS_MODE    ok (writes .nsys-rep) | qdstrm (leaves only .qdstrm) | fail (exit 1) |
                    start-race (the first profile fails before starting the program, with
                    the message a real nsys 2022.4 printed on a busy machine; later ones work)
  FAKE_NSYS_SQLITE  a real export that `nsys export` copies to its --output
"""

import json
import os
import shutil
import subprocess
import sys


# what nsys 2022.4 printed when two of it started at once and the program never ran
_START_RACES = {
    "start-race": "Dynamic exception type: boost::wrapexcept<QuadDCommon::RuntimeException>\n"
                  "std::exception::what: RuntimeException\n"
                  "[QuadDCommon::tag_message*] = Local Endpoint is not available.",
    "agent-lost": "Connection to the Agent lost.",   # both ranks of a CI run, 2026-11-28
    "reset": "Connection reset by peer",             # one rank of a CI run, 2026-12-07
}


def main() -> int:
    argv = sys.argv[1:]
    with open(os.environ["FAKE_NSYS_LOG"], "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    if argv[:1] == ["--version"]:
        print("NVIDIA Nsight Systems version 2099.1.1-fake")
        return 0
    if argv[:1] == ["export"]:
        out = argv[argv.index("--output") + 1]
        shutil.copyfile(os.environ["FAKE_NSYS_SQLITE"], out)
        return 0
    if argv[:1] == ["profile"]:
        mode = os.environ.get("FAKE_NSYS_MODE", "ok")
        if mode == "fail":
            print("ERROR: Failed to create profiling session: fake", file=sys.stderr)
            return 1
        marker = os.environ["FAKE_NSYS_LOG"] + ".raced"
        if mode in _START_RACES and not os.path.exists(marker):
            open(marker, "w").close()
            print(_START_RACES[mode], file=sys.stderr)
            return 1
        out = argv[argv.index("--output") + 1]
        child = argv[argv.index("false", argv.index("--stats")) + 1:]
        code = subprocess.call(child)
        print("[1/1] [========================100%] fake.nsys-rep")
        with open(out + (".qdstrm" if mode == "qdstrm" else ".nsys-rep"), "w") as fh:
            fh.write("fake report")
        return code
    print(f"fake nsys: unsupported {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

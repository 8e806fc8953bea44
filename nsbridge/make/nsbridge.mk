# nsbridge make targets for perf workflows. Include it from your Makefile, anywhere:
#     include nsbridge.mk          (write it with: nsbridge make-targets > nsbridge.mk)
# It leaves your default goal alone: plain `make` still runs your Makefile's first target.
# then:
#     make profile-triage  SCRIPT=train.py ARGS="--epochs 1"
#     make profile-timeline SCRIPT=train.py ARGS="--epochs 1"
#     make profile-deep    OP=aten::addmm [RUN=nsbridge-runs/...]   (or TOP=5)
#     make perf-gate       BASE=runs/main NEW=runs/pr [PROCESSES=3 MAX_PROCESSES=10 GATE_STEPS=25 THRESHOLD=10]
#     make perf-gate       BASE=../main NEW=. SCRIPT=bench/train.py ARGS="--steps 40"
#                          [MIN_STEP_SHARE=2] [INCONCLUSIVE=exit|pass|fail] [ALLOW=args]
#     make perf-diff       BASE=runs/main NEW=runs/pr    (two runs as recorded: no reruns)
#     make nsbridge-help   (every target and variable, with its default)
#   perf-gate runs `nsbridge gate`: both sides measured again, interleaved (BASE and NEW
#   are run directories, or checkouts with SCRIPT). It and perf-diff fail when nsbridge
#   exits 1 (regression), 4 (inconclusive: the data cannot decide; INCONCLUSIVE=pass or
#   fail maps it to 0 or 1) or 5 (runs it cannot compare, a gate process that failed).
#   make prints "Error 1", "Error 4" or "Error 5" and, like any failed make, exits 2.
# Every variable can be set on the command line or before the include. Each value is passed
# to nsbridge as one argument, quoted for the shell (spaces and quotes in paths are safe),
# except ARGS, which is shell syntax split into the script's arguments, and OP, which is
# split on spaces into one --kernel per op. NSBRIDGE is one program path; to run nsbridge
# another way set NSBRIDGE_CMD, in shell syntax (NSBRIDGE_CMD="python -m nsbridge").

# Targets defined here must not become the includer's default goal: remember it and put it
# back at the end. Included first, the remembered goal is empty, and resetting it to empty
# lets the includer's first target become the default, as if this file were not there.
nsbridge_saved_goal := $(.DEFAULT_GOAL)

NSBRIDGE   ?= nsbridge
NSBRIDGE_CMD ?= $(call nsbridge_q,$(NSBRIDGE))
SCRIPT     ?=
ARGS       ?=
PROFILE    ?=
OUT        ?=
RUN        ?=
OP         ?=
TOP        ?= 5
BASE       ?=
NEW        ?=
THRESHOLD  ?= 10
PROCESSES  ?= 3
MAX_PROCESSES ?= 10
GATE_BUDGET ?= 600
GATE_STEPS ?= 25
MIN_STEP_SHARE ?= 2
INCONCLUSIVE ?= exit
ALLOW      ?=
GATE_FORMAT ?= text

# $(call nsbridge_q,VALUE): VALUE as one single-quoted shell word ('\'' for each quote in it)
nsbridge_q = '$(subst ','\'',$(1))'
nsbridge_out = $(if $(OUT),--out $(call nsbridge_q,$(OUT)))
nsbridge_run = $(if $(RUN),--run $(call nsbridge_q,$(RUN)))
nsbridge_script = $(if $(SCRIPT),$(call nsbridge_q,$(SCRIPT)) -- $(ARGS))
nsbridge_ops = $(if $(OP),$(foreach op,$(OP),--kernel $(call nsbridge_q,$(op))),\
    --top $(call nsbridge_q,$(TOP)))
nsbridge_judge = --fail-above $(call nsbridge_q,$(THRESHOLD)) \
    --min-step-share $(call nsbridge_q,$(MIN_STEP_SHARE)) \
    --inconclusive $(call nsbridge_q,$(INCONCLUSIVE)) \
    $(if $(ALLOW),--allow $(call nsbridge_q,$(ALLOW))) --format $(call nsbridge_q,$(GATE_FORMAT))

.PHONY: profile-triage profile-timeline profile-deep perf-gate perf-diff nsbridge-help

profile-triage:
	@test -n $(call nsbridge_q,$(SCRIPT)) || { echo "profile-triage: set SCRIPT=path/to/train.py"; exit 2; }
	$(NSBRIDGE_CMD) triage --profile $(call nsbridge_q,$(or $(PROFILE),default)) $(nsbridge_out) $(nsbridge_script)

profile-timeline:
	@test -n $(call nsbridge_q,$(SCRIPT)$(RUN)) || { echo "profile-timeline: set SCRIPT=... or RUN=..."; exit 2; }
	$(NSBRIDGE_CMD) timeline $(if $(PROFILE),--profile $(call nsbridge_q,$(PROFILE))) $(nsbridge_out) $(nsbridge_run) $(nsbridge_script)

profile-deep:
	$(NSBRIDGE_CMD) deep $(nsbridge_ops) $(nsbridge_run) $(nsbridge_script)

perf-gate:
	@test -n $(call nsbridge_q,$(BASE)) && test -n $(call nsbridge_q,$(NEW)) || { echo "perf-gate: set BASE=... NEW=... (run directories, or checkouts with SCRIPT=...)"; exit 2; }
	$(NSBRIDGE_CMD) gate --processes $(call nsbridge_q,$(PROCESSES)) --max-processes $(call nsbridge_q,$(MAX_PROCESSES)) --budget $(call nsbridge_q,$(GATE_BUDGET)) --steps $(call nsbridge_q,$(GATE_STEPS)) $(nsbridge_judge) $(call nsbridge_q,$(BASE)) $(call nsbridge_q,$(NEW)) $(nsbridge_script)

perf-diff:
	@test -n $(call nsbridge_q,$(BASE)) && test -n $(call nsbridge_q,$(NEW)) || { echo "perf-diff: set BASE=run-dir NEW=run-dir"; exit 2; }
	$(NSBRIDGE_CMD) diff $(call nsbridge_q,$(BASE)) $(call nsbridge_q,$(NEW)) $(nsbridge_judge)

# Named nsbridge-help, not help, so that it cannot clash with the includer's own help target.
nsbridge-help:
	@echo 'nsbridge make targets (from nsbridge.mk; nsbridge make-targets rewrites it):'
	@echo '  profile-triage     nsbridge triage of SCRIPT (needs SCRIPT)'
	@echo '  profile-timeline   nsbridge timeline: Nsight Systems on SCRIPT, or added to RUN'
	@echo '  profile-deep       nsbridge deep: Nsight Compute on the kernels of OP (else the TOP'
	@echo '                     ops) of RUN, of a triage of SCRIPT, else of the latest run'
	@echo '  perf-gate          nsbridge gate BASE NEW [SCRIPT]: both sides run again,'
	@echo '                     interleaved; fails on a regression (nsbridge exit 1),'
	@echo '                     inconclusive (4) or a refused/failed run (5); make exits 2'
	@echo '  perf-diff          nsbridge diff BASE NEW: two runs as they were recorded'
	@echo '  nsbridge-help      this list'
	@echo 'Variables (NAME=default), set on the command line or before the include:'
	@echo '  NSBRIDGE=nsbridge      the nsbridge program, one path (quoted for you)'
	@echo '  NSBRIDGE_CMD=<NSBRIDGE, quoted>'
	@echo '                         the whole nsbridge command, in shell syntax, used instead'
	@echo '                         of NSBRIDGE (e.g. NSBRIDGE_CMD="python -m nsbridge")'
	@echo '  SCRIPT=                the script to profile (triage, timeline, deep; perf-gate'
	@echo '                         on checkouts: its path inside each)'
	@echo '  ARGS=                  the script arguments, in shell syntax: split into words,'
	@echo "                         so quote inside it: ARGS=\"--data 'my dir'\""
	@echo '  PROFILE=               triage and timeline profile: a built-in name or a YAML file (triage: default; timeline: the RUN'\''s own, else default)'
	@echo '  OUT=                   run directory to create (triage, timeline; must not exist)'
	@echo '  RUN=                   an existing run to add to (timeline, deep)'
	@echo '  OP=                    profile-deep ops, separated by spaces (aten::mm aten::addmm)'
	@echo '  TOP=5                  without OP: profile-deep takes the TOP ops by device time'
	@echo '  BASE=                  perf-gate, perf-diff: the baseline run directory (or, for'
	@echo '                         perf-gate, a checkout of the base code, with SCRIPT)'
	@echo '  NEW=                   perf-gate, perf-diff: the run (or checkout) to judge'
	@echo '  PROCESSES=3            perf-gate: processes per side to start with, in pairs A B, B A'
	@echo '  MAX_PROCESSES=10       perf-gate: the most per side while the answer is inconclusive'
	@echo '  GATE_BUDGET=600        perf-gate: seconds; no pair starts that would end past them'
	@echo '  GATE_STEPS=25          perf-gate: measured steps per process (the script runs more)'
	@echo '  THRESHOLD=10           fail on a significant slowdown of about this percent or more'
	@echo '  MIN_STEP_SHARE=2       ignore ops adding under this percent of a step'
	@echo '  INCONCLUSIVE=exit      when the data cannot decide: exit (4), pass or fail'
	@echo '  ALLOW=                 run differences to accept (args,torch,gpu,threads,'
	@echo '                         cores,target)'
	@echo '  GATE_FORMAT=text       perf-gate, perf-diff report: text, md or json'
	@echo 'Each value but ARGS and OP reaches nsbridge as one argument, so paths may hold spaces.'

.DEFAULT_GOAL := $(nsbridge_saved_goal)

# nsbridge make targets for perf workflows. Include it from your Makefile:
#     include nsbridge.mk          (write it with: nsbridge make-targets > nsbridge.mk)
# then:
#     make profile-triage  SCRIPT=train.py ARGS="--epochs 1"
#     make profile-timeline SCRIPT=train.py ARGS="--epochs 1"
#     make profile-deep    OP=aten::addmm [RUN=nsbridge-runs/...]   (or TOP=5)
#     make perf-gate       BASE=runs/main NEW=runs/pr THRESHOLD=10 [MIN_STEP_SHARE=2]
#                          [INCONCLUSIVE=exit|pass|fail] [ALLOW=args,threads]
#   perf-gate exits 0 (no regression), 1 (regression) or 4 (inconclusive: the data cannot
#   decide; INCONCLUSIVE=pass or fail maps it to 0 or 1)
# Every variable can be set on the command line or before the include.

NSBRIDGE   ?= nsbridge
SCRIPT     ?=
ARGS       ?=
PROFILE    ?= default
OUT        ?=
RUN        ?=
OP         ?=
TOP        ?= 5
BASE       ?=
NEW        ?=
THRESHOLD  ?= 10
MIN_STEP_SHARE ?= 2
INCONCLUSIVE ?= exit
ALLOW      ?=
GATE_FORMAT ?= text

nsbridge_out = $(if $(OUT),--out $(OUT),)
nsbridge_run = $(if $(RUN),--run $(RUN),)

.PHONY: profile-triage profile-timeline profile-deep perf-gate

profile-triage:
	@test -n "$(SCRIPT)" || { echo "profile-triage: set SCRIPT=path/to/train.py"; exit 2; }
	$(NSBRIDGE) triage --profile $(PROFILE) $(nsbridge_out) $(SCRIPT) -- $(ARGS)

profile-timeline:
	@test -n "$(SCRIPT)$(RUN)" || { echo "profile-timeline: set SCRIPT=... or RUN=..."; exit 2; }
	$(NSBRIDGE) timeline --profile $(PROFILE) $(nsbridge_out) $(nsbridge_run) $(SCRIPT) $(if $(SCRIPT),-- $(ARGS),)

profile-deep:
	$(NSBRIDGE) deep $(if $(OP),$(foreach op,$(OP),--kernel '$(op)'),--top $(TOP)) $(nsbridge_run) $(SCRIPT) $(if $(SCRIPT),-- $(ARGS),)

perf-gate:
	@test -n "$(BASE)" -a -n "$(NEW)" || { echo "perf-gate: set BASE=run-dir NEW=run-dir"; exit 2; }
	$(NSBRIDGE) diff $(BASE) $(NEW) --fail-above $(THRESHOLD) --min-step-share $(MIN_STEP_SHARE) --inconclusive $(INCONCLUSIVE) $(if $(ALLOW),--allow $(ALLOW),) --format $(GATE_FORMAT)

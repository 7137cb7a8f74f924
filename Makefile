# One command per job. Each target first creates or refreshes the virtual environment in
# .venv (Python 3.11, every pinned dependency, the library in editable mode), so each is
# complete on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JOBS ?= 2
SUBMISSIONS ?= submissions

.PHONY: help setup book test lint unit notebooks chapter-checks book-tests bench lab exercises grade sandbox clean

help:
	@echo "make book       execute the chapters and build the HTML book into _build/html"
	@echo "make test       lint and every test (library, chapters, exercises, browser)"
	@echo "make matrix     the chapters that train, under three numeric configurations (part of make test)"
	@echo "make bench      benchmarks: our code against PyTorch's and transformers', as ratios"
	@echo "make lab        open the chapters in JupyterLab"
	@echo "make exercises  build the student release and autograders from the instructor notebooks"
	@echo "make grade SUBMISSIONS=folder   grade a folder of submitted notebooks into grades.csv"

# These run one process per core at once (pytest -n, the matrix's jobs, the book's executor), so each
# process gets one thread rather than PyTorch's default of one per core, which oversubscribes the
# cores: on 2 cores nbval of every chapter took 249 s with the default and 225 s with one thread each
# (and every check passed both ways). Chapters run in Jupyter (make lab) keep PyTorch's default.
unit notebooks chapter-checks matrix book: export OMP_NUM_THREADS = 1

# (pip compiles every module up front, 43 s of a fresh environment's 132 s here: without it, the
# graders' sandboxes, which see the environment read-only, compiled torch again for every notebook)
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

setup: $(STAMP)

book: $(STAMP)
	@test -f _book_static/widgets/embed-amd.js || tools/ensure_command.sh npm npm
	$(BIN)/python tools/build_book.py

lint: $(STAMP)
	$(BIN)/ruff check .

# the library, exercises and tools (everything but the built book)
unit: $(STAMP) sandbox
	$(BIN)/python -m pytest tests -n $(JOBS) --dist loadfile -m "not book" --durations=15

# every chapter, top to bottom, with the outputs of checked cells compared (nbval)
notebooks: $(STAMP)
	$(BIN)/python -m pytest --nbval-lax -n $(JOBS) --dist loadscope chapters --durations=10

# the same checks on the book's own execution of the chapters (tools/nbval_replay.py): each cell ran
# without error, and the cells tagged nbval-check-output print what the notebook stores. It saves
# executing every chapter a second time (about 225 s of make test here); a chapter the book does not
# execute (one outside _toc.yml) is executed by nbval as usual
chapter-checks: book
	$(BIN)/python -m pytest -p tools.nbval_replay --nbval-replay _build/.jupyter_cache --nbval-lax \
		-n $(JOBS) --dist loadscope chapters --durations=5

# the built book in headless Chromium, plus an internal link check. The checks at a phone's width run
# in a second process beside the others (most of a page's time is waiting on it); its report follows
book-tests: book
	tools/ensure_command.sh chromium chromium
	@mkdir -p _build
	$(BIN)/python -m pytest tests/test_book.py -m "book and phone" > _build/phone-tests.log 2>&1 & phone=$$!; \
	status=0; $(BIN)/python -m pytest tests/test_book.py -m "book and not phone" --durations=10 || status=$$?; \
	wait $$phone || status=$$?; cat _build/phone-tests.log; exit $$status

# the checks that depend on a training run, under three numeric configurations besides the default
# (tools/numeric_matrix.py: PyTorch's kernels without vector code, with AVX2, and MKL's reproducible
# path; each changes a training step's last bits). Measured under all four before the fix: chapter 11
# failed under all three, chapter 10 under MKL's path (both pinned one run); chapters 9, 13 and 14
# passed under all four; the ch09 test of 800-step runs and the ch11-ex3 solution quoted values that
# moved. The widget tests of chapters 10 and 11 read the chapter's recorded models, which running the
# chapter covers. Measured once under all three and left out of make test, since they passed: chapters
# 1-8 with every exercise solution and their widget tests (350 tests), and chapters 12-19 (nbval).
MATRIX_CONFIGS ?= aten-default,aten-avx2,mkl-compatible
# (the slowest first: each runs as its own process under each configuration, $(JOBS) at a time)
MATRIX_SET ?= tests/test_ch09_widgets.py::test_the_deep_post_norm_stack_is_slower_not_stuck \
	chapters/11_full_transformer.ipynb "tests/test_solutions.py::test_solution_runs[ch11-ex3]" \
	chapters/10_decoder.ipynb
.PHONY: matrix
matrix: $(STAMP)
	$(BIN)/python tools/numeric_matrix.py --configs $(MATRIX_CONFIGS) --jobs $(JOBS) \
		$(foreach s,$(MATRIX_SET),--select $(s)) -- --nbval-lax

test: lint unit chapter-checks matrix book-tests

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# a small GPT on tiny Shakespeare with nanoGPT's CPU settings, into transformer_lib/records/shakespeare/char.json
# (about 5 minutes on one thread); SHAKESPEARE_ARGS="--steps 10000 --name char_long" for longer.
# Each training target runs on the CPU unless given a device: SHAKESPEARE_ARGS="--device cuda" (likewise
# TRANSLATION_ARGS, ABLATIONS_ARGS) trains on an NVIDIA GPU, and the record notes the device
SHAKESPEARE_ARGS ?=
.PHONY: shakespeare
shakespeare: $(STAMP)
	$(BIN)/python scripts/train_shakespeare.py $(SHAKESPEARE_ARGS)

# the English -> French Transformer on the Tatoeba pairs, into transformer_lib/records/translation/ (model.pt,
# results.json and test_translations.json.gz; about 9 minutes in all on an idle 2-core machine, 6.9 of them training steps on one thread); TRANSLATION_ARGS="--steps 100 --out /tmp/t" to try;
# TRANSLATION_ARGS="--decode-only" rewrites only the test translations, from the saved model.pt
TRANSLATION_ARGS ?=
.PHONY: translation
translation: $(STAMP)
	$(BIN)/python scripts/train_translation.py $(TRANSLATION_ARGS)

# the ablations of chapter 17: every variant of the small GPT x 3 seeds, two runs at a time, into
# transformer_lib/records/ablations/results.json (finished runs are kept, so a stopped run continues); prints the table
ABLATIONS_ARGS ?=
.PHONY: ablations
ablations: $(STAMP)
	$(BIN)/python scripts/ablations.py $(ABLATIONS_ARGS)

# chapter 16's GPT with each part of today's decoders (RMSNorm, SwiGLU, rotary half, GQA, MQA) and all, x 3 seeds,
# one run at a time, into transformer_lib/records/modern/results.json (finished runs are kept); prints the table
MODERN_ARGS ?=
.PHONY: modern
modern: $(STAMP)
	$(BIN)/python scripts/modern_parts.py $(MODERN_ARGS)

# the two toy models whose attention chapters 10 and 11 read, into transformer_lib/records/toy_models/
# (weights, settings and what each run recorded; about a minute on one thread)
.PHONY: toy-models
toy-models: $(STAMP)
	$(BIN)/python scripts/train_toy_models.py

lab: $(STAMP)
	$(BIN)/jupyter lab chapters

exercises: $(STAMP)
	$(BIN)/python exercises/release.py --jobs $(JOBS)

# grading runs each submission as its own user in bubblewrap when run as root (exercises.md)
sandbox:
	@if [ "$$(id -u)" = 0 ]; then tools/ensure_command.sh bwrap bubblewrap; fi

grade: $(STAMP) sandbox
	@ls exercises/release/*/autograder/*-autograder_*.zip >/dev/null 2>&1 || $(MAKE) exercises
	$(BIN)/python exercises/grade.py "$(SUBMISSIONS)" --jobs $(JOBS)

clean:
	rm -rf _build .pytest_cache

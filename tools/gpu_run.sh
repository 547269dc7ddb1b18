#!/usr/bin/env bash
# Produce the book's GPU outputs and run the GPU tests, on a GPU machine with PyTorch, nvcc and
# pytest but no Jupyter packages and no network (see course-design.md section 9).
#
#   tools/gpu_run.sh STAGE...    stages, in the order given:
#     builds    time a cold and a cached build of every kernel (book/results/build_times.csv)
#     execute   run every notebook in place, recording environment and kernel-source hashes
#     nbval     pytest --nbval over chapters/ and solutions/ (timings are not compared, so it
#               runs with fewer repetitions and writes its measurements to a scratch folder)
#     tests     the GPU test suites (kernels, validator, sanitizers) and the reliability report;
#               REQUIRE_GPU=1 here and in nbval: a GPU torch cannot reach fails them, not skips
#     targets   the benchmark scripts that print each target ratio
#     smallgpu  every notebook as a small GPU runs it: kernels built for compute_75 (PTX that the
#               driver compiles, so the pre-Hopper paths run), GPU memory capped at 15 GiB, fewer
#               timing repetitions; copies under /tmp/small-gpu (packed into $OUT/small_gpu.tgz),
#               each notebook's time and outcome in book/results/small_gpu_run.csv
#
# Jupyter's packages come as wheels in .whl/ (../shared/tools/gpu-wheelhouse.sh .whl).
# With $OUT set, everything produced is packed into $OUT/outputs.tgz (and the small-GPU copies
# into $OUT/small_gpu.tgz), again after each notebook, so a run cut off by a time limit still
# returns the notebooks it finished; the packs of several calls can be unpacked in turn. With
# $DEADLINE (seconds), the notebook and target stages start nothing once the run is older than
# that, and say what they skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELS_BUILD_DIR=${KERNELS_BUILD_DIR:-/tmp/kernels-build}
# $NOTEBOOKS (space-separated) narrows the execute and nbval stages; $TARGETS the targets stage
# (names of bench/<name>_targets.py: reduction cross_entropy operator llm_cross_entropy, each
# started only within $DEADLINE too); $BUILD_FILES the builds;
# $TESTS the tests stage (test files or folders), whose records for the reliability page are
# kept in book/results/reliability_records.jsonl: to split the suites over two calls, copy the
# first call's file into the checkout (the device's copy is replaced by the checkout's at each
# call), then run the second with RELIABILITY_RESULTS=book/results/reliability_records.jsonl
# KEEP_RECORDS=1.
read -r -a notebooks <<< "${NOTEBOOKS:-$(python3 -m kernels.course.book | tr '\n' ' ')}"
status=0
# outputs.tgz holds only the files this call wrote: the notebooks it executed and the results,
# pages and records it produced, found as newer than a marker made when the call began (one per
# $OUT, so a second invocation in the same call, nbval after execute, packs the first one's
# files too). The checkout's other copies never go back: unpacked after a later call's, they
# would put its older results in place of the new ones.
if [ -n "${OUT:-}" ] && [ ! -f "$OUT/gpu_run_started" ]; then touch "$OUT/gpu_run_started"; fi

pack() {  # what this call produced so far, into $OUT
  [ -n "${OUT:-}" ] || return 0
  local produced
  mapfile -t produced < <(find chapters solutions book -type f -newer "$OUT/gpu_run_started" \
    \( -name '*.ipynb' -o -path 'book/results/*' -o -name status.md -o -name reliability.md \) \
    -not -path '*/.ipynb_checkpoints/*' -not -path 'book/_build/*' | sort)
  if [ ${#produced[@]} -gt 0 ]; then tar czf "$OUT/outputs.tgz" "${produced[@]}"; fi
  if [ -d /tmp/small-gpu ]; then tar czf "$OUT/small_gpu.tgz" -C /tmp/small-gpu .; fi
}

in_time() {  # false, with a message, once the run is older than $DEADLINE
  if [ -n "${DEADLINE:-}" ] && (( SECONDS > DEADLINE )); then
    echo "skipped $1: the run is past DEADLINE=$DEADLINE s"; return 1
  fi
}

for stage in "$@"; do
  echo "=== $stage"
  case $stage in
    builds)  python3 bench/build_times.py --keep "$KERNELS_BUILD_DIR" ${BUILD_FILES:-} || status=1 ;;
    execute) for nb in "${notebooks[@]}"; do
               in_time "$nb" || continue
               python3 tools/execute.py "$nb" || status=1
               python3 tools/status.py
               pack
             done ;;
    nbval)   for nb in "${notebooks[@]}"; do
               in_time "$nb" || continue
               REQUIRE_GPU=1 KERNELS_RESULTS_DIR=/tmp/nbval-results KERNELS_BENCH_REPS=10 \
               python3 -m pytest -q -p no:cacheprovider --nbval-current-env --nbval \
                 --nbval-sanitize-with nbval_sanitize.cfg -o addopts="" "$nb" || status=1
             done ;;
    tests)   records=${RELIABILITY_RESULTS:-/tmp/reliability.jsonl} kept=book/results/reliability_records.jsonl
             [ -n "${KEEP_RECORDS:-}" ] || rm -f "$records"  # KEEP_RECORDS=1: a run split over calls
             if [ -n "${KEEP_RECORDS:-}" ] && [ ! -f "$records" ]; then  # the first call's are lost
               echo "KEEP_RECORDS=1 but $records is missing: put the first call's records there"
               echo "before the second call (a fresh copy of the checkout does not have them)"; exit 2
             fi
             REQUIRE_GPU=1 RELIABILITY_RESULTS=$records python3 -m pytest -q -p no:cacheprovider \
               -o addopts="" ${TESTS:-tests/gpu} --timeout 900 || status=1
             [ ! -f "$records" ] || [ "$records" -ef "$kept" ] || cp "$records" "$kept"  # the page's data comes back
             python3 tools/reliability_report.py "$records" || status=1 ;;
    targets) for script in ${TARGETS:-reduction cross_entropy operator llm_cross_entropy}; do
               in_time "bench/${script}_targets.py" || continue
               python3 "bench/${script}_targets.py" || status=1
             done ;;
    smallgpu) for nb in "${notebooks[@]}"; do
                in_time "$nb" || continue
                KERNELS_ARCHS=7.5+PTX KERNELS_BENCH_REPS=10 KERNELS_RESULTS_DIR=/tmp/small-results \
                KERNELS_BUILD_DIR=/tmp/kernels-build-sm75 python3 tools/execute.py --out /tmp/small-gpu \
                  --memory-gib 15 --summary book/results/small_gpu_run.csv "$nb" || status=1
                pack
              done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
pack
exit $status

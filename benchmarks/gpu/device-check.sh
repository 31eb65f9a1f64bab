#!/usr/bin/env bash
# The GPU pass for issue 32 (the sweep's time, graph and device timing against nccl-tests -G, the
# GPU tests) and issue 33's nccl api and placement: ../shared/gpu/device-check.sh with the steps
# this work needs, most wanted first. On this machine: ../shared/gpu/prepare.sh <nccl-tests git
# dir>, then cp benchmarks/gpu/device-check.sh benchmarks/gpu/against_nccl_tests.py .gpu/; on the
# GPU machine: OUT=<folder> bash .gpu/device-check.sh. Every step has its own limit, and no step
# runs past DEADLINE seconds from the start (default 400): what is left is skipped, said in the log.
# API=1 adds issue 33's nccl api and placement step.
set -u
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT"
P=$PWD; R=$P/.gpu; L=$OUT/log.txt; W=/tmp/work; mkdir -p $W
DEADLINE=${DEADLINE:-400}
export PYTHONUNBUFFERED=1 COLUMNS=100
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
run() {
  local t=$1; shift; local l=$(( $(left) - 5 )); [ $l -lt $t ] && t=$l
  if [ $t -lt 5 ]; then echo "--- skipped (deadline): $*" >>$L; return; fi
  ( cd $W && timeout -k 5 $t "$@" ) >>$L 2>&1; echo "--- rc=$? after $(( $(date +%s) - T0 ))s (limit ${t}s)" >>$L
}
timed() { local s=$(date +%s.%N); run "$@"; echo "--- wall $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" >>$L; }
trap 'cp $L $W/ 2>/dev/null; tar -czf $OUT/files.tgz -C $W --exclude=nt --exclude="*.o" . 2>/dev/null' EXIT
step "machine"
{ nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv; nproc; python3 -V; } >>$L 2>&1
python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.get_device_name(0))" >>$L 2>&1
step "venv: the image's torch through a .pth, the carried wheels, the project from source"
python3 -m venv --without-pip /tmp/v >>$L 2>&1
SP=$(python3 -c "import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))")
VSP=$(/tmp/v/bin/python -c "import sysconfig;print(sysconfig.get_paths()['purelib'])")
echo "$SP" > $VSP/image.pth; echo "$P" > $VSP/project.pth
python3 -m pip install -q --ignore-installed --no-index --no-deps --no-compile --prefix /tmp/v $R/whl/*.whl >>$L 2>&1
export PATH=/tmp/v/bin:$PATH
run 60 python -c "import collbench, mpi4py.MPI as M, torch; print('ok', M.Get_library_version()[:12], torch.cuda.is_available())"
if [ -d $R/nccl-tests ]; then
  step "nccl-tests build in the background, against torch's own libnccl"
  NH=$(python -c "import nvidia.nccl as n;print(list(n.__path__)[0])")
  mkdir -p /tmp/nccl/lib; ln -sf $NH/include /tmp/nccl/include; ln -sf $NH/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so
  CH=$(dirname $(dirname $(command -v nvcc || echo /usr/local/cuda/bin/nvcc)))
  export LD_LIBRARY_PATH=/tmp/nccl/lib:$NH/lib:$CH/lib64:${LD_LIBRARY_PATH:-}
  ( cd $R/nccl-tests/src && timeout 200 make -j12 BUILDDIR=$W/nt NCCL_HOME=/tmp/nccl CUDA_HOME=$CH \
     NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
     BIN_FILES_LIST="all_gather reduce_scatter alltoall gather scatter" build ) >$W/build.log 2>&1 &
  BUILD=$!
fi
step "collbench env"
run 40 python -m collbench env
step "the GPU tests (every timing side by side, a wrong result caught on the GPU)"
run 120 python -m pytest -q -p no:cacheprovider $P/tests -m gpu
step "the sweep a user runs, default rounds (issue 32's target: 60 s or less on one H100)"
timed 130 python -m collbench all --backend nccl --sizes 1K-1G:x4 -o nccl-all.json
run 20 python -c "import json; d=json.load(open('nccl-all.json')); print([(r.get('round'), r.get('seconds'), r.get('spent_s')) for r in d['metadata'].get('rounds', [])]); print(sorted({r['check'] for r in d['rows']}))"
step "every timing of allgather, 3 rounds (graph: CUDA graph replays; device: events, the stream held)"
timed 90 python -m collbench allgather --backend nccl --sizes 1K-1G:x4 --timing latency,throughput,graph,device --rounds 3 -o timings.json
run 30 python -m collbench report timings.json
run 20 python -c "import json; [print(r['timing'], r['size_bytes'], round(r['time_us_p50'], 2), r.get('unheld'), [d.get('calls_per_sample') for d in r.get('round_details', [])], r['check']) for r in json.load(open('timings.json'))['rows']]"
if [ -n "${BUILD:-}" ]; then
  step "nccl-tests -G beside collbench's graph timing"
  wait $BUILD; echo "build rc=$?" >>$L; tail -3 $W/build.log >>$L
  for t in all_gather reduce_scatter alltoall gather scatter; do
    run 25 sh -c "$W/nt/${t}_perf -b 1K -e 1G -f 4 -g 1 -w 10 -n 50 -G 20 >>$W/nccl-tests-G.txt 2>&1"
  done
  cat $W/nccl-tests-G.txt >>$L
  timed 70 python -m collbench all --backend nccl --sizes 1K-1G:x4 --timing graph --rounds 2 -o graph.json
  run 20 python $R/against_nccl_tests.py timings.json $W/nccl-tests-G.txt
  run 20 python $R/against_nccl_tests.py graph.json $W/nccl-tests-G.txt
fi
step "barrier: the host's timings only (a note), and one line where only device timings are asked"
run 40 python -m collbench barrier --backend nccl --timing latency,graph,device --rounds 2 --no-save
run 30 python -m collbench barrier --backend nccl --timing graph,device --no-save
step "every collective, three timings, at 80 columns: the notes (an empty graph, the barrier) and the overhead"
COLUMNS=80 run 60 python -m collbench all --backend nccl --sizes 1K,1G --timing throughput,graph,device --rounds 1 --no-save
if [ "${API:-0}" = 1 ]; then
  step "issue 33: nccl non-blocking (overlap behind a GPU kernel) and in place beside out of place, checked"
  timed 60 python -m collbench all --backend nccl --api blocking,nonblocking --placement out-of-place,in-place --sizes 1K,1M,64M,1G --rounds 2 -o api.json
  run 20 python -c "import json; [print(r['collective'], r['api'], r['placement'], r['size_bytes'], round(r['time_us_p50'], 1), r.get('overlap_pct'), r['check']) for r in json.load(open('api.json'))['rows']]"
fi
step "done, $(left) s before the deadline"

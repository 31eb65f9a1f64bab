#!/usr/bin/env bash
# The GPU pass for issues 32 and 33 (device-side check, graph and device timing; api and placement): ../shared/gpu/device-check.sh
# with the steps this work needs. On this machine: ../shared/gpu/prepare.sh <nccl-tests git dir>, then
# cp benchmarks/gpu/device-check.sh benchmarks/gpu/against_nccl_tests.py .gpu/; on the GPU machine:
# OUT=<folder> bash .gpu/device-check.sh (about 9 minutes; each step has its own limit).
set -u
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT"
P=$PWD; R=$P/.gpu; L=$OUT/log.txt; W=/tmp/work; mkdir -p $W
export PYTHONUNBUFFERED=1 COLUMNS=100
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
run() { local t=$1; shift; ( cd $W && timeout -k 5 $t "$@" ) >>$L 2>&1; echo "--- rc=$? after $(( $(date +%s) - T0 ))s" >>$L; }
timed() { local s=$(date +%s.%N); run "$@"; echo "--- wall $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" >>$L; }
trap 'tar -czf $OUT/files.tgz -C $W --exclude=nt --exclude="*.o" . 2>/dev/null' EXIT
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
  ( cd $R/nccl-tests/src && timeout 240 make -j14 BUILDDIR=$W/nt NCCL_HOME=/tmp/nccl CUDA_HOME=$CH \
     NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
     BIN_FILES_LIST="all_gather reduce_scatter alltoall gather scatter" build ) >$W/build.log 2>&1 &
  BUILD=$!
fi
step "collbench env; the GPU tests (timings side by side, a wrong result caught on the GPU)"
run 60 python -m collbench env
run 200 python -m pytest -q -p no:cacheprovider $P/tests -m gpu
step "the sweep a user runs, default rounds (target: 60 s or less on one H100)"
timed 240 python -m collbench all --backend nccl --sizes 1K-1G:x4 -o nccl-all.json
run 30 python -c "import json; d=json.load(open('nccl-all.json')); print([(r['round'], r['seconds'], r.get('spent_s')) for r in d['metadata']['rounds']])"
step "every timing of the out-of-place collectives, 3 rounds"
timed 200 python -m collbench allgather --backend nccl --sizes 1K-1G:x4 --timing latency,throughput,graph,device --rounds 3 -o timings.json
run 60 python -m collbench report timings.json
if [ -n "${BUILD:-}" ]; then
  step "nccl-tests -G beside collbench's graph timing"
  wait $BUILD; echo "build rc=$?" >>$L
  for t in all_gather reduce_scatter alltoall; do
    timeout -k 5 60 $W/nt/${t}_perf -b 1K -e 1G -f 4 -g 1 -w 10 -n 50 -G 20 >>$W/nccl-tests-G.txt 2>&1
  done
  cat $W/nccl-tests-G.txt >>$L
  timed 150 python -m collbench reduce_scatter --backend nccl --sizes 1K-1G:x4 --timing graph --rounds 2 -o rs.json
  run 30 python $R/against_nccl_tests.py timings.json $W/nccl-tests-G.txt
  run 30 python $R/against_nccl_tests.py rs.json $W/nccl-tests-G.txt
fi
step "issue 33: nccl non-blocking (overlap behind a GPU kernel) and in place beside out of place, checked"
timed 120 python -m collbench all --backend nccl --api blocking,nonblocking --placement out-of-place,in-place --sizes 1K,1M,64M,1G --rounds 2 -o api.json
run 60 python -c "import json; [print(r['collective'], r['api'], r['placement'], r['size_bytes'], round(r['time_us_p50'], 1), r['overlap_pct'], r['check']) for r in json.load(open('api.json'))['rows']]"
step "done"

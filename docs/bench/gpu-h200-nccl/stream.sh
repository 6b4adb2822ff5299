#!/usr/bin/env bash
# One-off: the TF GPU kernels' C++ path (enqueue_on_stream on a real CUDA
# stream, the event poller, NCCL or staging) without TF: tests/gpu/standin/stream's
# stream_driver, built on the development machine against this wheel's core,
# run as 2 processes on the one GPU with the real libcuda. Usage: stream.sh SITE
set -u
SITE=$1
cd "$(dirname "$0")"
T0=$(date +%s)
LD_LIBRARY_PATH=$SITE/pytfcomm ldd ./stream_driver | grep -E "cuda|pytfcomm"
for mode in collectives mismatch missing; do
  for tr in nccl staged; do
    port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    for r in 0 1; do
      LD_LIBRARY_PATH=$SITE/pytfcomm NCCL_MULTI_RANK_GPU_ENABLE=1 PYTFCOMM_GPU_TRANSPORT=$tr \
        timeout -k 5 60 ./stream_driver "$mode" "$r" 2 "$port" >"/tmp/sd.$r" 2>&1 &
    done
    wait
    for r in 0 1; do echo "=== $mode $tr process $r"; cat "/tmp/sd.$r"; done
  done
done
echo "stream driver: $(( $(date +%s) - T0 )) s"

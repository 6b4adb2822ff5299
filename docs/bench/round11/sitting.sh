#!/bin/bash
# Round11: ranks bound to cores (pytfcomm-run --bind-to core, now the default; the
# benchmarks bind every library's ranks alike, benchmarks/_pin.py), on the 2-core VM.
#  1. bound against unbound, in alternating invocations (the binding is per invocation):
#     N=4 and N=2 over TCP and shared memory beside MPI, and the TF benchmark;
#  2. issue 19's table, bound (the default), as round8 measured it;
#  3. the README's core tables, N=2 and N=4, every backend, bound.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round11
rm -f $O/*.txt $O/*.json $O/*.err $O/*.png
PY=.venv/bin/python
AR="$PY -m benchmarks.allreduce --quiet"
stamp() { echo "$1 $(date -u '+%F %T') UTC" >> $O/sitting.txt; }
stamp "start (commit $(git rev-parse --short HEAD))"
for i in 1 2 3; do
  for b in none core; do
    $AR --np 4 --sizes 4K,16K,64K,256K,1M,2M,4M --iters 50 --rounds 3 --bind-to $b \
      --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --json $O/bind_tcp4_${b}_$i.json > $O/bind_tcp4_${b}_$i.txt 2>&1
    $AR --np 2 --sizes 4K..64M --iters 50 --rounds 2 --bind-to $b \
      --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --json $O/bind_np2_${b}_$i.json > $O/bind_np2_${b}_$i.txt 2>&1
  done
done
stamp "binding, allreduce done"
for b in none core; do
  $PY -m benchmarks.tf_multiworker --np 2 --repeat 3 --bind-to $b --json $O/bind_tf_multiworker_$b.json \
    > $O/bind_tf_multiworker_$b.txt 2> $O/bind_tf_multiworker_$b.err
done
stamp "binding, tf_multiworker done"
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker.json > $O/tf_multiworker.txt 2> $O/tf_multiworker.err
$AR --np 2 --sizes 4M,16M,64M --backends pytfcomm,mpi-shm --iters 20 --rounds 5 --json $O/shm2.json > $O/shm2.txt 2>&1
$AR --np 2 --sizes 1M,4M,16M,64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp2.json > $O/tcp2.txt 2>&1
$AR --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
stamp "issue rows done"
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
stamp "tf_local done"
ALL=pytfcomm,pytfcomm-tcp,gloo,mpi-shm,mpi-tcp,tf-ring
$AR --np 2 --sizes 4K..256M --iters 50 --rounds 3 --backends $ALL --json $O/allreduce_np2.json --plot $O/allreduce_np2.png > $O/allreduce_np2.txt 2>&1
$AR --np 4 --sizes 4K..256M --iters 30 --tf-max-size 16M --rounds 3 --backends $ALL --json $O/allreduce_np4.json --plot $O/allreduce_np4.png > $O/allreduce_np4.txt 2>&1
stamp "end"

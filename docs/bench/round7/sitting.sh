#!/bin/bash
# Issue 19's TF rows in one sitting (round7): benchmarks/tf_multiworker.py --repeat 5 with
# the workers started as pytfcomm-run starts ranks (GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
# the default) and without (--no-malloc-hugepages, as before), alternating twice.
# The core tables are unchanged by this round (no core change; benchmarks/allreduce does
# not use the tunable): their last sitting is round6.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round7
rm -f $O/*.txt $O/*.json $O/*.err
PY=.venv/bin/python
echo "start $(date -u '+%F %T') UTC, commit $(git rev-parse --short HEAD)" > $O/sitting.txt
for pass in 1 2; do
  $PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/hp$pass.json > $O/hp$pass.txt 2> $O/hp$pass.err
  echo "hugepages pass $pass done $(date -u '+%T')" >> $O/sitting.txt
  $PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --no-malloc-hugepages --json $O/nohp$pass.json > $O/nohp$pass.txt 2> $O/nohp$pass.err
  echo "no hugepages pass $pass done $(date -u '+%T')" >> $O/sitting.txt
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt

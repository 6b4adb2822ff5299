#!/bin/bash
# Round17: issue 19's rows on the new default (PYTFCOMM_SHM_BYREF_BYTES 2 MiB), with round16's
# commands exactly (docs/bench/round16/sitting.sh), outputs in docs/bench/round17/issue/.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p docs/bench/round17/issue
sed -e 's|docs/bench/round16|docs/bench/round17/issue|g' -e '/^cd /d' docs/bench/round16/sitting.sh | bash

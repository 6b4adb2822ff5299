#!/bin/bash
# Round10: the log-depth negotiation over frames and the one-shot limit over frames,
# back on 2fda433 (the deadline verdict they needed) after their revert in 705fab4;
# before/after in one sitting: round9's sitting, with 2fda433's build as the base.
O=docs/bench/round10 BASE_COMMIT=2fda433 exec bash "$(dirname "$0")/../round9/sitting.sh"

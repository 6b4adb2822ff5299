# shellcheck shell=bash
# Sourced by scripts/main.sh: `quiet_tf CMD ARGS...` runs CMD with TensorFlow's start-up
# log lines taken out of its stderr, and returns CMD's exit status.
#
# TensorFlow's start-up lines (its INFO and WARNING logs; absl's notice about logging
# before InitializeLog; oneDNN's and the CPU-feature INFO lines, which TF prints before
# it reads TF_CPP_MIN_LOG_LEVEL) say nothing about the run. They are kept out of the
# output; errors (E and F lines, Python tracebacks) and everything else pass through.
# A line may carry pytfcomm-run's "[rank] " prefix. TF_CPP_MIN_LOG_LEVEL=0 in the
# environment shows them all again.
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
TF_NOISE='^(\[[0-9]+\] )?(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$'
TF_NOISE+='|I[0-9]{4} [0-9:.]+ +[0-9]+ [A-Za-z0-9_]+\.cc:[0-9]+\] '
TF_NOISE+='|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$)'
quiet_tf() {  # run "$@" with its stderr filtered; its exit status stays
  if [[ $TF_CPP_MIN_LOG_LEVEL == 0 ]]; then "$@"; return; fi
  local status
  { "$@" 2>&1 1>&3 3>&- | { grep --line-buffered -v -E "$TF_NOISE" >&2 || true; }
    status=${PIPESTATUS[0]}; } 3>&1
  return "$status"
}

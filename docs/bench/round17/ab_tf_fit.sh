#!/bin/bash
# Round17 A/B on 3396f49 (a local commit with the code of 34e881e, reworded before landing;
# both settings given explicitly), a second look at the Horovod-style `fit` rows, whose medians
# moved most in ab_tf.sh (keras-fit-steady 0.92, keras-fit 0.73 new/old over four passes): the
# same two settings, pytfcomm-horovod alone, eight more passes, order alternating.
# Summary: python docs/bench/round17/ab_tf_summary.py docs/bench/round17/ab_tf_fit
O=docs/bench/round17/ab_tf_fit PASSES=8 BACKENDS=pytfcomm-horovod \
  exec bash "$(dirname "$0")/ab_tf.sh"

"""hvd.elastic with TensorFlowState under pytfcomm-run --restarts.

Run by tests/horovod/test_horovod_elastic.py.

Eight deterministic steps; on the first run rank 1 dies before step 5. The
restarted job resumes from the commit after step 4 and must end with exactly
the weights of an uninterrupted run. Writes <out>/rank<r>.json.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

import pytfcomm.horovod.tensorflow as hvd

out_dir = sys.argv[1]
hvd.init()
attempt = int(os.environ["PYTFCOMM_RESTART_COUNT"])
w = tf.Variable(np.zeros(4, np.float32))
state = hvd.elastic.TensorFlowState([w], step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(state.step)])


@hvd.elastic.run
def train(state):
    first = state.step
    for step in range(state.step, 8):
        if attempt == 0 and step == 5 and hvd.rank() == 1:
            os._exit(3)  # a crash: no cleanup, no goodbye to the peers
        x = np.arange(4, dtype=np.float32) * (step + 1) * (hvd.rank() + 1)
        g = hvd.allreduce(tf.constant(x), op=hvd.Average)
        w.assign_sub(0.01 * g)
        state.step = step + 1
        state.commit()
    return first


first = train(state)
with open(os.path.join(out_dir, f"rank{hvd.rank()}.json"), "w") as f:
    json.dump({"attempt": attempt, "first": first, "resets": resets, "w": w.numpy().tolist()}, f)

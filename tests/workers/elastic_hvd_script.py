"""hvd.elastic with TensorFlowState under pytfcomm-run --elastic (3 ranks).

Run by tests/reliability/test_elastic.py. Eight steps of ``w -= 0.01 * mean(g)`` with
``g = arange(4) * (step + 1) * (i + 1)`` for worker id ``i`` (the rank it was started
as), committed after each step. Before step 5 worker 2 SIGKILLs itself; the survivors'
step-5 all-reduce fails, ``hvd.elastic.run`` restores the commit after step 4, re-forms
the job with 2 ranks in the same processes, runs the reset callbacks, syncs and goes
on. Writes <out>/rank<i>.json.
"""

import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

import pytfcomm.horovod.tensorflow as hvd

out_dir = sys.argv[1]
hvd.init()
me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
w = tf.Variable(np.zeros(4, np.float32))
state = hvd.elastic.TensorFlowState([w], step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append([state.step, hvd.rank(), hvd.size()])])
seen = []
starts = []
next_step_at = None


@hvd.elastic.run
def train(state):
    global next_step_at
    starts.append(state.step)
    for step in range(state.step, 8):
        if step == 5 and me == 2:
            with open(os.path.join(out_dir, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        x = np.arange(4, dtype=np.float32) * (step + 1) * (me + 1)
        g = hvd.allreduce(tf.constant(x), op=hvd.Average)
        w.assign_sub(0.01 * g)
        seen.append([hvd.rank(), hvd.size()])
        if hvd.size() == 2 and next_step_at is None:
            next_step_at = time.time()
        state.step = step + 1
        state.commit()


train(state)
result = {"pid": os.getpid(), "starts": starts, "resets": resets, "seen": seen}
result["w"] = w.numpy().tolist()
result["next_step_at"] = next_step_at
with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
    json.dump(result, f)

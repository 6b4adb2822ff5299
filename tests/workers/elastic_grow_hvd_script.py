"""hvd.elastic with TensorFlowState under pytfcomm-run --elastic --host-discovery-script.

Run by tests/reliability/test_elastic_grow.py. Steps of ``w -= 0.01 * mean(g)`` with
``g = arange(4) * (step + 1) * (i + 1)`` for worker id ``i``, committed after each step
(``state.commit()``, which asks whether workers wait to join). Rank 0 writes <out>/step5
at step 5; the test then offers a third slot. The joiner's ``hvd.init()`` waits for its
admission; at the next commit every original rank gets ``HostsUpdatedInterrupt``,
``hvd.elastic.run`` re-forms with 3 ranks, runs the reset callbacks, syncs (the joiner
gets rank 0's state) and calls ``train`` again. Each ``train`` runs until the job has 3
ranks and 3 steps were done since it (re)started. Writes <out>/rank<i>.json.
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import pytfcomm.horovod.tensorflow as hvd

out_dir = sys.argv[1]
me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
joiner = os.environ.get("PYTFCOMM_ELASTIC_JOINER") == "1"
with open(os.path.join(out_dir, f"starts{me}.jsonl"), "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "joiner": joiner}) + "\n")
hvd.init()  # a joiner waits here until the ranks admit it
w = tf.Variable(np.zeros(4, np.float32))
state = hvd.elastic.TensorFlowState([w], step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append([state.step, hvd.rank(), hvd.size()])])
seen = []
starts = []
full_at = None
synced_w = None


@hvd.elastic.run
def train(state):
    global full_at, synced_w
    starts.append([state.step, hvd.rank(), hvd.size()])
    if synced_w is None:
        synced_w = w.numpy().tolist()
    begin = state.step
    while not (hvd.size() >= 3 and state.step >= begin + 3) and state.step < 2000:
        step = state.step
        x = np.arange(4, dtype=np.float32) * (step + 1) * (me + 1)
        g = hvd.allreduce(tf.constant(x), op=hvd.Average)
        w.assign_sub(0.01 * g)
        seen.append([step, hvd.rank(), hvd.size()])
        if hvd.size() >= 3 and full_at is None:
            full_at = time.time()
        if step == 5 and hvd.rank() == 0:
            with open(os.path.join(out_dir, "step5"), "w") as f:
                f.write("")
        state.step = step + 1
        time.sleep(0.02)
        state.commit()


train(state)
result = {"pid": os.getpid(), "starts": starts, "resets": resets, "seen": seen}
result.update(w=w.numpy().tolist(), full_at=full_at, synced_w=synced_w)
with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
    json.dump(result, f)

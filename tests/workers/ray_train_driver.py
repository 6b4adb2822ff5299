"""Ray driver of tests/launch/test_ray_train.py: ``python ray_train_driver.py OUT_DIR``.

Starts a one-node Ray cluster on 127.0.0.1 (the test runs this in a network namespace
of its own whose only interface is loopback, since Ray's servers listen on every
interface), runs ray_train_workers.train in 2 TensorflowTrainer workers, stops Ray.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.tensorflow import TensorflowTrainer

HERE = Path(__file__).resolve().parent


def main(out: str) -> None:
    ray.init(
        address="local",
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        num_cpus=2,
        runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}},
    )
    try:
        from ray_train_workers import train

        trainer = TensorflowTrainer(
            train,
            train_loop_config={"out": out},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(storage_path=os.path.join(out, "ray-storage"), name="ptc"),
        )
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main(sys.argv[1])

"""For tests/tf/test_tf_placement.py: ``python placement_probe.py SPEC_JSON``.

SPEC_JSON: ``{"gpus": N, "call": {pin_gpu kwargs}, "fakes": {"logical": [names],
"initialized": bool}}``. tf.config's device functions are replaced by fakes that list N
GPUs and record what is asked of them (as TF does, changing the visible devices after
initialisation raises RuntimeError); prints one JSON line: what pin_gpu returned or
raised, and the calls it made.
"""

from __future__ import annotations

import json
import sys

import tensorflow as tf

import pytfcomm.tf as ptf


def main() -> None:
    spec = json.loads(sys.argv[1])
    fakes = spec["fakes"]
    gpus = [
        tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
        for i in range(spec["gpus"])
    ]
    short = {g: g.name.rsplit("/physical_device:", 1)[1] for g in gpus}
    log: dict = {"set_visible": [], "growth": []}
    visible = list(gpus)

    def list_physical_devices(device_type=None):
        return list(gpus) if device_type in (None, "GPU") else []

    def set_visible_devices(devices, device_type=None):
        if fakes.get("initialized") and list(devices) != visible:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        log["set_visible"].append([[short[d] for d in devices], device_type])
        visible[:] = devices

    def get_visible_devices(device_type=None):
        return list(visible)

    def get_logical_device_configuration(device):
        return ["logical"] if short[device] in fakes.get("logical", []) else None

    def set_memory_growth(device, enable):
        log["growth"].append([short[device], enable])

    tf.config.list_physical_devices = list_physical_devices
    tf.config.set_visible_devices = set_visible_devices
    tf.config.get_visible_devices = get_visible_devices
    tf.config.get_logical_device_configuration = get_logical_device_configuration
    tf.config.experimental.set_memory_growth = set_memory_growth
    try:
        log["returned"] = [short[d] for d in ptf.pin_gpu(**spec["call"])]
    except Exception as exc:
        log["error"] = type(exc).__name__
        log["message"] = str(exc)
    print(json.dumps(log))


if __name__ == "__main__":
    main()

"""tf.distribute: mirrored replicas equal one device; two workers agree; a dead worker fails."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from seqvae.training.distribute import replica_slices

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIRRORED = r"""
import json, sys, dataclasses
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
from conftest import tiny_config, run_weights, SMILES
from seqvae.training.loop import train

config = tiny_config(encoder_bidirectional=True)
# Every batch padded to 32 tokens: one trace of the replicated step (each new batch length
# retraces it once more, some 10 s on 2 cores)
config = dataclasses.replace(config, data=dataclasses.replace(config.data, bucket_width=32),
                             train=dataclasses.replace(config.train, batch_size=12,
                                                       free_bits=0.05, max_steps=3, epochs=3))
runs = {}
for name, strategy in (("one", tf.distribute.get_strategy()),
                       ("two", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
    summary = train(config, sys.argv[2] + "-" + name, SMILES, strategy=strategy)
    runs[name] = (summary, run_weights(sys.argv[2] + "-" + name))
(one, one_w), (two, two_w) = runs["one"], runs["two"]
diff = max(float(np.abs(a - b).max()) for a, b in zip(one_w, two_w))
print(json.dumps({"one": one["last"]["loss"], "two": two["last"]["loss"], "weight_diff": diff,
                  "replicas": [one["replicas"], two["replicas"]],
                  "steps": [one["steps"], two["steps"]]}))
"""


def test_replica_slices_cover_the_batch_in_order():
    parts = replica_slices(np.arange(7), 2)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6]]


@pytest.mark.slow
def test_mirrored_two_logical_devices_equal_one_device(tmp_path):
    result = subprocess.run([sys.executable, "-c", MIRRORED, os.path.join(ROOT, "tests"),
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # The whole train() path on one device and on two replicas: same global batches, same noise
    # rows, global-batch averages, so equal up to float summation order.
    assert out["replicas"] == [1, 2] and out["steps"] == [3, 3]
    np.testing.assert_allclose(out["one"], out["two"], rtol=1e-5)
    assert out["weight_diff"] < 1e-5


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _worker_env(ports, index, collective_timeout: int = 30):
    env = dict(os.environ)
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                   "task": {"type": "worker", "index": index}})
    env["SEQVAE_COLLECTIVE_TIMEOUT"] = str(collective_timeout)
    return env


def _worker_command(data, out, steps):
    return [sys.executable, "-m", "seqvae", "train", str(data), "--out", str(out),
            "--strategy", "multi-worker", "--max-steps", str(steps),
            "--set", "model.encoder_units=16", "--set", "model.decoder_units=16",
            "--set", "model.decoder_layers=1", "--set", "model.latent_dim=4",
            "--set", "train.batch_size=8", "--set", "train.checkpoint_every=2",
            "--set", "train.export_at_end=false",
            "--set", "data.bucket_width=32"]  # one batch length: one trace of the step


@pytest.mark.slow
def test_two_workers_train_and_end_with_identical_weights(tmp_path):
    from conftest import SMILES

    data = tmp_path / "data.smi"
    data.write_text("\n".join(SMILES) + "\n")
    ports = _free_ports(2)
    workers = [subprocess.Popen(_worker_command(data, tmp_path / "run", 4) + (
        ["--set", "train.log_every=1"]), env=_worker_env(ports, i), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [w.communicate(timeout=400) for w in workers]
    for worker, (stdout, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stderr[-3000:]
    assert "trained 4 steps" in outputs[0][0] and "trained 4 steps" in outputs[1][0]
    weights = [line for line in outputs[0][0].splitlines() + outputs[1][0].splitlines()
               if line.startswith("weights checksum")]
    assert len(weights) == 2 and weights[0] == weights[1]
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "checkpoint")  # the chief's


@pytest.mark.slow
def test_a_dead_worker_makes_the_other_fail_not_hang(tmp_path):
    from conftest import SMILES

    data = tmp_path / "data.smi"
    data.write_text("\n".join(SMILES * 20) + "\n")
    ports = _free_ports(2)
    workers = [subprocess.Popen(_worker_command(data, tmp_path / "run", 100000),
                                env=_worker_env(ports, i, collective_timeout=15),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(2)]  # both warm by the kill: 15 s is long for a step here
    deadline = time.monotonic() + 120
    checkpoints = tmp_path / "run" / "checkpoints" / "checkpoint"
    while not checkpoints.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert checkpoints.exists(), "training did not start"
    workers[1].kill()
    started = time.monotonic()
    _, stderr = workers[0].communicate(timeout=240)
    assert time.monotonic() - started < 240
    assert workers[0].returncode == 2, stderr[-3000:]
    assert "seqvae: error:" in stderr and "worker" in stderr.lower()
    workers[1].communicate()

"""The examples run as users would run them."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_custom_loop_example_gets_every_gradient():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "custom_loop.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Valid Encoder Gradients: True" in result.stdout
    assert "Valid Decoder Gradients: True" in result.stdout

"""Tests for seqvae/__init__.py: what importing the package sets up before TensorFlow starts."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _allocator_after_import(environment: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    env.update(environment, PYTHONPATH=REPO)
    code = ("import os, sys, seqvae; assert 'tensorflow' not in sys.modules; "
            "print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("given, expected", [({}, "true"),
                                             ({"TF_CPU_ALLOCATOR_USE_BFC": "false"}, "false")])
def test_import_chooses_the_bfc_allocator_unless_the_user_did(given, expected):
    # set before TensorFlow is imported, or TensorFlow never reads it
    assert _allocator_after_import(given) == expected

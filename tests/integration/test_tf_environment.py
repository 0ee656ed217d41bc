"""TensorFlow's import-time environment: oneDNN's CPU kernels on unless the user said otherwise
(asked of a fresh Python of TensorFlow's environment, as a rank starts)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import SCRIPTS, framework_python

PROBE = "from scalebench.train.tf import runtime; print(runtime.onednn_enabled(), runtime.tf.__version__)"


def onednn_after_import(**env: str) -> str:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    child_env.update(env, PYTHONPATH=str(SCRIPTS))
    result = subprocess.run(
        [framework_python("tensorflow"), "-c", PROBE], capture_output=True, text=True, env=child_env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()[0]


@pytest.mark.parametrize(("exported", "expected"), [({}, "True"), ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "False")])
def test_onednn_is_on_by_default_and_the_users_setting_wins(exported, expected):
    assert onednn_after_import(**exported) == expected

"""tools/pins.py: the supported Pythons and the pins for each, from envs/*.yaml, the one place a pin
that must differ between Pythons says so (a python_version marker)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
from pins import PinError, pins_for, supported_pythons  # noqa: E402

# each environment's files (install.sh): the pipeline's, and one per framework
ENVIRONMENTS = {
    "pipeline": [str(REPO / "envs" / name) for name in ("pipeline.yaml", "dev.yaml")],
    "torch": [str(REPO / "envs" / "torch.yaml")],
    "tensorflow": [str(REPO / "envs" / "tensorflow.yaml")],
}
ENVS = [path for paths in ENVIRONMENTS.values() for path in paths]

HEAD = "name: x\ndependencies:\n  - python>=3.11,<3.14\n  - pip\n  - pip:\n"


def env_file(tmp_path, name: str, pins: str, head: str = HEAD) -> str:
    path = tmp_path / name
    path.write_text(head + pins)
    return str(path)


def test_the_files_name_the_supported_pythons_and_every_one_gets_every_package():
    pythons = supported_pythons(ENVS)
    assert pythons == ["3.11", "3.12", "3.13"]
    names = {
        environment: {python: set(pins_for(paths, python)) for python in pythons}
        for environment, paths in ENVIRONMENTS.items()
    }
    for environment, each in names.items():  # no package missing for one Python
        assert len({frozenset(packages) for packages in each.values()}) == 1, (environment, each)
    # the pipeline has neither framework, and each framework its own Horovod and not the other framework
    assert {"snakemake", "scipy", "pytest"} <= names["pipeline"]["3.12"]
    assert not {"torch", "tensorflow", "horovod"} & names["pipeline"]["3.12"]
    assert {"torch", "horovod"} <= names["torch"]["3.12"] and "tensorflow" not in names["torch"]["3.12"]
    assert {"tensorflow", "tf-keras", "horovod"} <= names["tensorflow"]["3.12"] and "torch" not in names["tensorflow"][
        "3.12"
    ]


def test_a_pin_that_differs_between_pythons_carries_a_marker_and_applies_to_its_pythons_only(tmp_path):
    path = env_file(
        tmp_path,
        "a.yaml",
        '      - scipy==1.17.1; python_version < "3.12"  # 1.18 needs 3.12\n'
        "      - scipy==1.18.0 ; python_version>='3.12'\n"
        "      - numpy==2.4.6\n",
    )
    assert pins_for([path], "3.11") == {"scipy": "1.17.1", "numpy": "2.4.6"}
    assert pins_for([path], "3.12") == {"scipy": "1.18.0", "numpy": "2.4.6"}
    assert pins_for([path], "3.13")["scipy"] == "1.18.0"
    printed = subprocess.run(
        [sys.executable, str(REPO / "tools" / "pins.py"), path, "--python", "3.13", "--exclude", "numpy"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == "scipy==1.18.0\n"  # the lock file install.sh hands pip: no markers left to evaluate


def test_pins_that_contradict_each_other_or_cannot_be_read_are_refused_by_file_and_line(tmp_path):
    both = env_file(tmp_path, "both.yaml", '      - scipy==1.17.1\n      - scipy==1.18.0; python_version >= "3.12"\n')
    assert pins_for([both], "3.11") == {"scipy": "1.17.1"}
    with pytest.raises(PinError, match=r"scipy==1.18.0 conflicts with scipy==1.17.1 .* for Python 3.12"):
        pins_for([both], "3.12")
    platform = env_file(tmp_path, "platform.yaml", '      - pywin32==311; sys_platform == "win32"\n')
    with pytest.raises(PinError, match=r"platform.yaml:6: marker 'sys_platform == \"win32\"': only python_version"):
        pins_for([platform], "3.12")
    other = env_file(tmp_path, "other.yaml", "", head=HEAD.replace("<3.14", "<3.13"))
    with pytest.raises(PinError, match="the files name different Pythons"):
        supported_pythons(ENVS + [other])
    bare = env_file(tmp_path, "bare.yaml", "", head=HEAD.replace("python>=3.11,<3.14", "python=3.11"))
    with pytest.raises(PinError, match=r"no `- python>=3.X,<3.Y` line"):
        supported_pythons([bare])


def test_the_pages_that_name_the_supported_pythons_name_the_files_range():
    """The range is stated once in envs/*.yaml; install.sh's usage and the install paragraphs that
    repeat it for a reader are checked against it, so a range bump that forgets one fails here."""
    first, *_, last = supported_pythons(ENVS)
    usage = (REPO / "install.sh").read_text()
    assert f"# The Python: CPython {first} to {last} (the `python` line of envs/*.yaml)" in usage
    pythons = ", ".join(supported_pythons(ENVS)[:-1]) + f" or {last}"
    for page in (REPO / "README.md", REPO / "docs" / "user-guide.md"):
        assert f"CPython {pythons}" in " ".join(page.read_text().split()), page.name

"""The README's configuration reference is generated from the schema and must match it."""

import subprocess
import sys

from conftest import REPO


def test_readme_holds_the_current_configuration_reference():
    table = subprocess.run(
        [sys.executable, str(REPO / "tools" / "config_reference.py")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert table in (REPO / "README.md").read_text(), "run: python tools/config_reference.py --write"


def test_every_config_key_is_documented():
    sys.path.insert(0, str(REPO / "tools"))
    import yaml
    from config_reference import rows

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    undocumented = [key for key, _, _, meaning in rows(schema) if not meaning]
    assert not undocumented, f"add a description to config/schema.yaml for {undocumented}"

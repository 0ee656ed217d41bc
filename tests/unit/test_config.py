"""The study config: defaults, the matrix of cells, and bad input rejected with the key named."""

from __future__ import annotations

import copy

import pytest
from conftest import tiny_config
from scalebench import backends
from scalebench import config as sb_config


def test_defaults_fill_every_section(schema):
    resolved = sb_config.validate({}, schema)
    assert resolved["dataset"]["image_size"] == [768, 1024]
    assert resolved["training"]["loader"]["workers"] == 2
    assert resolved["cluster"]["time"]["floor_min"] == 15
    assert resolved["launchers"] == backends.default_launchers()
    # torchrun as torch's environment runs it (scalebench/environments.py fills {python})
    assert "{python} -m torch.distributed.run " in resolved["launchers"]["local"]["torch_native"]


def test_validate_does_not_modify_its_input(schema):
    original = tiny_config()
    snapshot = copy.deepcopy(original)
    sb_config.validate(original, schema)
    assert original == snapshot


def test_matrix_expands_to_every_combination(schema):
    config = sb_config.validate(
        tiny_config(
            matrix={
                "frameworks": ["torch", "tensorflow"],
                "backends": ["native", "horovod"],
                "gpus": [16, 1, 2, 4, 8],
                "seeds": [3, 1, 2],
            },
            dataset={"synthetic": {"count": 400}},
            training={"batch_per_gpu": 2},
        ),
        schema,
    )
    cells = sb_config.cells(config)
    assert len(cells) == 60
    assert len(set(cells)) == 60
    assert cells[0] == sb_config.Cell("torch", "native", 1, 1)
    assert cells[0].path == "torch/native/g1/s1"
    # gpus and seeds come out sorted, frameworks and backends in config order
    assert [c.gpus for c in cells[:15:3]] == [1, 2, 4, 8, 16]


BAD_CONFIGS = [
    ({"colour": "red"}, "unknown config key 'colour'"),
    ({"training": {"epoch": 3}}, "unknown config key 'training.epoch'"),
    ({"training": {"epochs": "ten"}}, "config key 'training.epochs': 'ten' is not of type 'integer'"),
    ({"matrix": {"gpus": []}}, "config key 'matrix.gpus': the list is empty"),
    ({"matrix": {"gpus": [0, 1]}}, "config key 'matrix.gpus[0]': 0 is less than the minimum of 1"),
    ({"matrix": {"gpus": [-2]}}, "config key 'matrix.gpus[0]': -2 is less than the minimum of 1"),
    ({"matrix": {"seeds": [1, 1]}}, "config key 'matrix.seeds': duplicate values [1]"),
    ({"matrix": {"frameworks": ["jax"]}}, "config key 'matrix.frameworks[0]': 'jax' is not one of"),
    ({"matrix": {"backends": ["native", "native"]}}, "config key 'matrix.backends': duplicate values ['native']"),
    ({"dataset": {"image_size": [100, 128]}}, "config key 'dataset.image_size': 100 x 128 is not divisible by 16"),
    ({"dataset": {"source": "s3"}}, "config key 'dataset.source': 's3' is not one of"),
    ({"training": {"batch_per_gpu": 32}}, "config key 'training.batch_per_gpu': 32 is larger than the shard"),
    (  # 40 pairs less 8 test and 4 validation, on 2 ranks (without validation 32 / 2 = 16 would fit)
        {"training": {"batch_per_gpu": 15}},
        "config key 'training.batch_per_gpu': 15 is larger than the shard of the training set on 2 ranks "
        "(28 training pairs / 2 = 14)",
    ),
    (
        {"training": {"stop_at_target": True, "eval_every": 0}},
        "config key 'training.stop_at_target': needs training.eval_every > 0",
    ),
    (
        {"dataset": {"val_fraction": 0.8}},
        "config key 'dataset.synthetic.count': 40 pairs leave no training data after 8 test and 32 validation",
    ),
    ({"training": {"base_lr": 0}}, "config key 'training.base_lr': 0 is less than or equal to the minimum"),
    ({"dataset": {"source": "folder"}}, "config key 'dataset.folder': required when dataset.source is folder"),
    ({"cluster": {"gres": "gpu:4"}}, "config key 'cluster.gres': 'gpu:4' does not match"),
    ({"cluster": {"gpu_binding": "socket"}}, "config key 'cluster.gpu_binding': 'socket' is not one of"),
    (
        {"cluster": {"gpu_binding": "task", "gpus_per_node": 0}},
        "config key 'cluster.gpu_binding': task binds GPUs to tasks, but cluster.gpus_per_node is 0",
    ),
    (
        {"launchers": {"local": {"torch_native": "torchrun {nprocs} {program}"}}},
        "config key 'launchers.local.torch_native': unknown placeholder {nprocs}",
    ),
    (
        {"matrix": {"gpus": [10]}, "cluster": {"gpus_per_node": 4}},
        "config key 'matrix.gpus': 10 GPUs cannot be spread evenly over 3 nodes of 4",
    ),
    (
        {"legacy": [{"path": "a", "framework": "torch", "label": "old"}] * 2},
        "config key 'legacy[1].label': 'old' is already used",
    ),
    (
        {"legacy": [{"path": "a", "framework": "torch", "label": "scalebench"}]},
        "config key 'legacy[0].label': 'scalebench' is already used",
    ),
]


@pytest.mark.parametrize(("override", "message"), BAD_CONFIGS, ids=[m for _, m in BAD_CONFIGS])
def test_bad_config_is_rejected_naming_the_key(schema, override, message):
    config = tiny_config()
    for section, values in override.items():
        if isinstance(values, dict) and isinstance(config.get(section), dict):
            config[section].update(values)
        else:
            config[section] = values
    if override.get("matrix", {}).get("gpus") == [10]:
        config["dataset"]["synthetic"]["count"] = 1000
        config["training"]["batch_per_gpu"] = 1
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate(config, schema)
    assert message in str(error.value)


def test_uneven_placement_allowed_when_asked(schema):
    config = tiny_config(
        matrix={"gpus": [10]},
        cluster={"gpus_per_node": 4, "allow_uneven": True},
        dataset={"synthetic": {"count": 1000}},
        training={"batch_per_gpu": 1},
    )
    assert sb_config.validate(config, schema)["cluster"]["allow_uneven"] is True


def test_framework_and_backend_names_are_the_schemas(schema):
    matrix = schema["properties"]["matrix"]["properties"]
    assert tuple(matrix["frameworks"]["items"]["enum"]) == sb_config.FRAMEWORKS
    assert tuple(matrix["backends"]["items"]["enum"]) == sb_config.BACKENDS


# --- strings from --config: Snakemake reads `matrix={"gpus": [1, 2]}` with YAML's BaseLoader,
# so every scalar inside a structure arrives as a string.


def test_strings_become_the_schemas_types(schema):
    config = tiny_config(
        matrix={"gpus": ["1", "2"], "seeds": ["7"]},
        training={
            "epochs": "2",
            "base_lr": "0.5",
            "max_loss": "1e3",
            "decay_factor": "1",
            "batch_norm": "false",
            "deterministic": "true",
            "threads_per_rank": "null",
            "collective_timeout_s": "~",
            "loader": {"pin_memory": "False", "workers": "0"},
        },
        cluster={"time": {"base_min": "2.5"}, "peak_tflops": {"X1": {"fp32": "10"}}},
    )
    config["partial"] = "true"
    resolved = sb_config.validate(config, schema)
    assert resolved["matrix"]["gpus"] == [1, 2] and resolved["matrix"]["seeds"] == [7]
    training = resolved["training"]
    assert (training["epochs"], training["base_lr"], training["max_loss"]) == (2, 0.5, 1000.0)
    assert type(training["epochs"]) is int and type(training["decay_factor"]) is int
    assert training["batch_norm"] is False and training["deterministic"] is True
    assert training["threads_per_rank"] is None and training["collective_timeout_s"] is None
    assert training["loader"] == {
        "placement": "auto",
        "device_memory_share": 0.25,
        "pin_memory": False,
        "workers": 0,
        "prefetch_factor": 2,
    }
    assert resolved["cluster"]["time"]["base_min"] == 2.5
    assert resolved["cluster"]["peak_tflops"] == {"X1": {"fp32": 10}}
    assert resolved["partial"] is True


def test_genuine_strings_stay_strings(schema):
    config = tiny_config(cluster={"partition": "123", "account": "null", "extra": "true", "gres": "gpu:{n}"})
    config["legacy"] = [{"path": "1", "framework": "torch", "label": "2"}]
    resolved = sb_config.validate(config, schema)
    cluster = resolved["cluster"]
    assert (cluster["partition"], cluster["account"], cluster["extra"]) == ("123", "null", "true")
    assert resolved["legacy"] == [{"path": "1", "framework": "torch", "label": "2"}]


def test_coerce_reads_enums_without_a_type_and_leaves_the_input_alone():
    schema = {"type": "object", "properties": {"level": {"enum": [1, 2, None]}, "name": {"enum": ["a", "b"]}}}
    original = {"level": "2", "name": "b", "unknown": "3"}
    assert sb_config.coerce(original, schema) == {"level": 2, "name": "b", "unknown": "3"}
    assert sb_config.coerce({"level": "null"}, schema) == {"level": None}
    assert original == {"level": "2", "name": "b", "unknown": "3"}


STRINGS_THAT_DO_NOT_FIT = [
    ({"matrix": {"gpus": ["1", "abc"]}}, "config key 'matrix.gpus[1]': 'abc' is not of type 'integer'"),
    ({"training": {"epochs": "2.0"}}, "config key 'training.epochs': '2.0' is not of type 'integer'"),
    ({"training": {"base_lr": "0.5x"}}, "config key 'training.base_lr': '0.5x' is not of type 'number'"),
    ({"training": {"batch_norm": "yes"}}, "config key 'training.batch_norm': 'yes' is not of type 'boolean'"),
    ({"training": {"epochs": "null"}}, "config key 'training.epochs': 'null' is not of type 'integer'"),
    (
        {"training": {"threads_per_rank": "0"}},
        "config key 'training.threads_per_rank': 0 is less than the minimum of 1",
    ),
    ({"matrix": {"seeds": ["1", "1"]}}, "config key 'matrix.seeds': duplicate values [1]"),
]


@pytest.mark.parametrize(("override", "message"), STRINGS_THAT_DO_NOT_FIT, ids=[m for _, m in STRINGS_THAT_DO_NOT_FIT])
def test_strings_that_do_not_fit_are_rejected_naming_the_key(schema, override, message):
    config = tiny_config(**override)
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate(config, schema)
    assert message in str(error.value)


def test_settings_changes_name_each_key_that_differs():
    trained = {"training": {"epochs": 2, "loader": {"workers": 0}}, "cell": {"gpus": 2}}
    now = {"training": {"epochs": 3, "loader": {"workers": 0}, "deterministic": None}, "cell": {"gpus": 2}}
    assert sb_config.settings_changes(trained, now) == [
        'training.deterministic: "(not set)" -> null',
        "training.epochs: 2 -> 3",
    ]
    assert sb_config.settings_changes(now, now) == []


def test_cpu_binding_is_cores_or_none_and_only_none_reaches_a_cell_s_settings(schema):
    with pytest.raises(sb_config.ConfigError, match=r"config key 'cluster.cpu_binding': 'sockets' is not one of"):
        sb_config.validate({"cluster": {"cpu_binding": "sockets"}}, schema)
    cell = sb_config.Cell("torch", "native", 2, 1)
    default = sb_config.train_settings(sb_config.validate({}, schema), cell)
    unbound = sb_config.train_settings(sb_config.validate({"cluster": {"cpu_binding": "none"}}, schema), cell)
    assert "cpu_binding" not in default and unbound["cpu_binding"] == "none"
    # a cell finished before the key existed ran with today's default: not retrained; none retrains it
    assert sb_config.settings_changes(default, default, default) == []
    assert sb_config.settings_changes(default, unbound, default) == ['cpu_binding: "(not set)" -> "none"']


def test_a_profile_window_inside_the_run_is_accepted_from_command_line_text(schema):
    config = sb_config.validate(tiny_config(training={"profile": {"epoch": "3", "steps": "3"}}), schema)
    assert config["training"]["profile"] == {"epoch": 3, "steps": 3}
    assert sb_config.validate(tiny_config(), schema)["training"]["profile"] is None  # off by default


def test_a_profile_for_a_framework_without_its_profiler_is_refused_naming_the_key(schema, monkeypatch):
    # asked of torch's environment itself (environments.probe): its profiler's file, its package's folder
    from scalebench import environments

    monkeypatch.setitem(environments.PROFILERS, "torch", "no/such/profiler.py")
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate(tiny_config(training={"profile": {"epoch": 1, "steps": 1}}), schema)
    said = str(error.value)
    assert "config key 'training.profile': the torch cells cannot be traced: torch's environment" in said
    assert "has no profiler (torch/no/such/profiler.py)" in said
    monkeypatch.setitem(environments.PACKAGES, "torch", "no_such_framework_package")
    with pytest.raises(sb_config.ConfigError, match="it has no no_such_framework_package package"):
        sb_config.validate(tiny_config(training={"profile": {"epoch": 1, "steps": 1}}), schema)

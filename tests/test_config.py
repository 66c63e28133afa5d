"""Tests for seqvae.config: frozen typed defaults, strict parsing of files and --set overrides."""

import dataclasses
import json

import pytest

from seqvae import config as config_module
from seqvae.config import Config, DataConfig, ModelConfig, TrainConfig, load_config
from seqvae.presets import demo_config
from seqvae.errors import SeqvaeError


def _choices(name, value):
    """The choices of a str field: seqvae.config's constant named after it (``kl_schedule`` ->
    ``KL_SCHEDULES``), so a new choice field is covered without editing this test."""
    if name == "tokenizer":  # not checked by the config; read by seqvae.data
        return ("smiles", "selfies", "char", "word")
    if name == "properties":  # names checked by seqvae.data.properties
        return ("logp,qed",)
    choices = getattr(config_module, name.upper() + "S", None)
    if choices is None:  # a free-form string such as data.column
        return (value + "_x",)
    assert value in choices, (name, value, choices)
    return choices


def _not_default(name, value):
    """A valid value of the same type that differs from the default ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):  # in range for every float field: rates, fractions, weights
        return 0.25 if value != 0.25 else 0.5
    return next(c for c in _choices(name, value) if c != value)


# Fields whose non-default values exclude each other (model.grammar_features needs SMILES,
# teacher forcing and no scheduled sampling): each round trip keeps one side at its defaults.
EXCLUSIVE = (("model.grammar_features",),
             ("data.tokenizer", "model.decoder_input", "train.scheduled_sampling"))


def non_default_config(keep: tuple[str, ...] = ()) -> Config:
    """Every field of every section set to a value other than its default, but those in
    ``keep`` (``section.name``)."""
    sections = {}
    for section in dataclasses.fields(Config):
        default = getattr(Config(), section.name)
        sections[section.name] = dataclasses.replace(default, **{
            f.name: _not_default(f.name, getattr(default, f.name))
            for f in dataclasses.fields(default) if f"{section.name}.{f.name}" not in keep})
    return Config(**sections)


def _toml(values) -> str:
    def scalar(value):
        return str(value).lower() if isinstance(value, bool) else json.dumps(value)
    return "".join(f"[{section}]\n" + "".join(f"{key} = {scalar(v)}\n" for key, v in entries.items())
                   for section, entries in values.items())


def test_defaults_build():
    config = Config()
    assert config.model == ModelConfig() and config.data == DataConfig()
    assert config.train == TrainConfig()


@pytest.mark.parametrize("keep", EXCLUSIVE)
def test_every_field_round_trips_with_a_non_default_value(tmp_path, keep):
    """to_dict/from_dict, JSON and TOML files and --set all give back exactly the values set.

    Every value differs from its default (but ``keep``: the two runs cover both), so a field
    that is dropped or ignored on the way (and silently takes its default) makes the round trip
    unequal.
    """
    config = non_default_config(keep)
    defaults = Config().to_dict()
    values = config.to_dict()
    for section, entries in values.items():
        for key, value in entries.items():
            name = f"{section}.{key}"
            assert (value != defaults[section][key]) != (name in keep), name
    (tmp_path / "c.json").write_text(json.dumps(values))
    (tmp_path / "c.toml").write_text(_toml(values))
    overrides = [f"{section}.{key}={str(v).lower() if isinstance(v, bool) else v}"
                 for section, entries in values.items() for key, v in entries.items()]
    round_trips = {
        "from_dict": Config.from_dict(values),
        "json file": load_config(tmp_path / "c.json"),
        "toml file": load_config(tmp_path / "c.toml"),
        "--set": Config().with_overrides(overrides),
        "demo": Config.from_dict(demo_config().to_dict()),
    }
    for how, result in round_trips.items():
        expected = demo_config() if how == "demo" else config
        assert result == expected, how
        for section, entries in result.to_dict().items():  # same types, not just equal values
            for key, value in entries.items():
                assert type(value) is type(expected.to_dict()[section][key]), (how, section, key)


def test_config_is_frozen():
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.model.latent_dim = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train = TrainConfig()


def test_missing_keys_take_defaults():
    config = Config.from_dict({"model": {"latent_dim": 7}})
    assert config.model.latent_dim == 7
    assert config.model.decoder_units == ModelConfig().decoder_units
    assert config.train == TrainConfig()


@pytest.mark.parametrize("values, fragment", [
    ({"optim": {}}, "unknown section 'optim'"),
    ({"model": {"latent": 3}}, "unknown key 'model.latent'"),
    ({"model": 3}, "section 'model' must be a table"),
    ({"model": {"latent_dim": "64"}}, "model.latent_dim must be of type int"),
    ({"model": {"latent_dim": 6.5}}, "model.latent_dim must be of type int"),
    ({"model": {"latent_dim": True}}, "model.latent_dim must be of type int"),
    ({"model": {"encoder_bidirectional": 1}}, "must be of type bool"),
    ({"train": {"learning_rate": "fast"}}, "train.learning_rate must be of type float"),
    ({"train": {"learning_rate": False}}, "train.learning_rate must be of type float"),
    ({"data": {"column": 3}}, "data.column must be of type str"),
    ([1, 2], "expected a table of sections"),
])
def test_from_dict_rejects_bad_values(values, fragment):
    with pytest.raises(SeqvaeError) as info:
        Config.from_dict(values, source="cfg.json")
    assert fragment in str(info.value)
    assert str(info.value).startswith("cfg.json")


def test_ints_are_accepted_for_floats():
    config = Config.from_dict({"train": {"learning_rate": 1, "time_budget": 5}})
    assert config.train.learning_rate == 1.0 and isinstance(config.train.learning_rate, float)


@pytest.mark.parametrize("values, fragment", [
    ({"model": {"decoder_input": "x"}}, "model.decoder_input must be one of"),
    ({"model": {"encoder": "lstm"}}, "model.encoder must be one of"),
    ({"model": {"z_conditioning": "zero"}}, "model.z_conditioning must be one of"),
    ({"model": {"latent_dim": 0}}, "model.latent_dim must be at least 1"),
    ({"model": {"rejection_rounds": -1}}, "model.rejection_rounds must be >= 0"),
    ({"model": {"decoder_dropout": 1.0}}, "model.decoder_dropout"),
    ({"model": {"embedding_dim": -1}}, "model.embedding_dim"),
    ({"train": {"kl_schedule": "cosine"}}, "train.kl_schedule must be one of"),
    ({"train": {"lr_schedule": "linear"}}, "train.lr_schedule must be one of"),
    ({"train": {"precision": "float16"}}, "train.precision must be one of"),
    ({"train": {"batch_size": 0}}, "train.batch_size"),
    ({"train": {"learning_rate": 0.0}}, "train.learning_rate"),
    ({"train": {"word_dropout": 1.5}}, "train.word_dropout"),
    ({"data": {"validation_fraction": 1.0}}, "data.validation_fraction"),
    ({"data": {"bucket_width": -1}}, "data.bucket_width"),
    # Divisors of the training loop and schedules: 0 would crash it with ZeroDivisionError.
    ({"train": {"log_every": 0}}, "train.log_every must be at least 1"),
    ({"train": {"checkpoint_every": 0}}, "train.checkpoint_every must be at least 1"),
    ({"train": {"keep_checkpoints": 0}}, "train.keep_checkpoints must be at least 1"),
    ({"train": {"kl_cycles": 0}}, "train.kl_cycles must be at least 1"),
    ({"train": {"lr_decay_steps": 0}}, "train.lr_decay_steps must be at least 1"),
    ({"train": {"epochs": -1}}, "train.epochs must be >= 0"),
    ({"train": {"free_bits": -0.5}}, "train.free_bits must be >= 0"),
    ({"train": {"kl_weight_end": -1.0}}, "train.kl_weight_end must be >= 0"),
    ({"train": {"lr_decay_rate": 0.0}}, "train.lr_decay_rate must be in (0, 1]"),
])
def test_invalid_choices_and_ranges(values, fragment):
    with pytest.raises(SeqvaeError) as info:
        Config.from_dict(values)
    assert fragment in str(info.value)


def test_set_parses_each_type():
    config = Config().with_overrides([
        "model.latent_dim=64", "train.learning_rate=1e-3", "train.jit_compile=true",
        "data.bucket=off", "data.column=smiles", "model.encoder=conv", " train.seed = 5 ",
        "train.clip_norm=0",
    ])
    assert config.model.latent_dim == 64
    assert config.train.learning_rate == pytest.approx(1e-3)
    assert config.train.jit_compile is True and config.data.bucket is False
    assert config.data.column == "smiles" and config.model.encoder == "conv"
    assert config.train.seed == 5 and config.train.clip_norm == 0.0
    assert Config().with_overrides([]) == Config()


@pytest.mark.parametrize("raw, expected", [
    ("true", True), ("True", True), ("1", True), ("yes", True), ("on", True),
    ("false", False), ("0", False), ("no", False), ("OFF", False),
])
def test_set_bools(raw, expected):
    assert Config().with_overrides([f"data.bucket={raw}"]).data.bucket is expected


@pytest.mark.parametrize("item, fragment", [
    ("model.latent_dim", "expected section.key=value"),
    ("latent_dim=3", "expected section.key=value"),
    ("optim.lr=3", "unknown section 'optim'"),
    ("model.latent=3", "unknown key 'latent' in section 'model'"),
    ("model.latent_dim=abc", "expected int"),
    ("model.latent_dim=6.5", "expected int"),
    ("model.latent_dim=", "expected int"),
    ("train.learning_rate=fast", "expected float"),
    ("data.bucket=maybe", "expected true or false"),
    ("model.decoder_input=x", "model.decoder_input must be one of"),
    ("model.latent_dim=0", "model.latent_dim must be at least 1"),
    ("train.learning_rate=nan", "expected a finite number"),
    ("train.time_budget=inf", "expected a finite number"),
    ("train.log_every=0", "train.log_every must be at least 1"),
])
def test_set_rejects_bad_items(item, fragment):
    with pytest.raises(SeqvaeError) as info:
        Config().with_overrides([item])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_overrides_do_not_change_the_original():
    config = Config()
    changed = config.with_overrides(["model.latent_dim=3"])
    assert ModelConfig().latent_dim != 3
    assert changed.model.latent_dim == 3  # the override took effect on the copy ...
    assert config.model.latent_dim == ModelConfig().latent_dim and config == Config()  # ... only


def test_load_json_and_toml(tmp_path):
    json_path = tmp_path / "c.json"
    json_path.write_text(json.dumps({"model": {"latent_dim": 12}, "train": {"lr_schedule": "cosine"}}))
    toml_path = tmp_path / "c.toml"
    toml_path.write_text('[model]\nlatent_dim = 12\n\n[train]\nlr_schedule = "cosine"\n')
    from_json, from_toml = load_config(json_path), load_config(toml_path)
    assert from_json == from_toml
    assert from_json.model.latent_dim == 12 and from_json.train.lr_schedule == "cosine"


@pytest.mark.parametrize("name, text, fragment", [
    ("bad.json", '{"model": {', "not valid JSON"),
    ("bad.toml", "[model\nlatent_dim = ", "not valid TOML"),
    ("bad2.toml", "[model]\nlatent_dim = = 3\n", "not valid TOML"),
    ("list.json", "[1, 2]", "expected a table of sections"),
    ("unknown.toml", "[model]\nlatent = 3\n", "unknown key 'model.latent'"),
    ("type.json", '{"model": {"latent_dim": "3"}}', "must be of type int"),
    ("nan.toml", "[train]\nlearning_rate = nan\n", "train.learning_rate must be of type float"),
])
def test_load_config_errors_name_the_file(tmp_path, name, text, fragment):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SeqvaeError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path)) and fragment in message
    assert "\n" not in message


def test_load_config_missing_and_binary(tmp_path):
    with pytest.raises(SeqvaeError, match="cannot read config file"):
        load_config(tmp_path / "missing.toml")
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SeqvaeError, match="not UTF-8"):
        load_config(path)


# --- hostile config files and --set values: a Config or one line --------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KEYS = [f"{section}.{field.name}" for section, cls in (("model", ModelConfig), ("data", DataConfig),
                                                        ("train", TrainConfig))
         for field in dataclasses.fields(cls)]
_VALUES = st.one_of(
    st.text(max_size=20), st.integers().map(str), st.floats().map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "9" * 5000, "true", "", " 3", "0x10",
                     "1_000", "１２", "None", "[1]"]))


def _one_line(error: SeqvaeError) -> None:
    assert str(error) and "\n" not in str(error)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.tuples(st.one_of(st.sampled_from(_KEYS), st.text(max_size=12)), _VALUES)
                      .map(lambda kv: f"{kv[0]}={kv[1]}")
                      | st.text(max_size=20), max_size=4))
def test_any_set_values_give_a_config_or_one_line(items):
    try:
        config = Config().with_overrides(items)
    except SeqvaeError as error:
        _one_line(error)
        return
    assert Config.from_dict(config.to_dict()) == config  # what was accepted is a valid config


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
                     | st.sampled_from([10**400, -10**400, 2**63]),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_SECTIONS = st.dictionaries(
    st.sampled_from(["model", "data", "train", "other"]),
    st.dictionaries(st.sampled_from([key.split(".")[1] for key in _KEYS]) | st.text(max_size=6),
                    _JSON, max_size=4) | _JSON, max_size=3)


@settings(max_examples=300, deadline=None)
@given(content=st.one_of(_SECTIONS.map(json.dumps), _JSON.map(json.dumps), st.binary(max_size=200)),
       suffix=st.sampled_from([".json", ".toml"]))
def test_any_config_file_gives_a_config_or_one_line(tmp_path_factory, content, suffix):
    path = tmp_path_factory.mktemp("config") / f"config{suffix}"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    try:
        load_config(path)
    except SeqvaeError as error:
        _one_line(error)


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes, but no surrogate pairs (TOML escapes code points) and
    DEL escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # nan, inf and -inf are TOML floats too
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()
                           if v is not None) + "}"


def _as_toml(sections: dict) -> str:
    """A TOML document of ``sections``: scalars first, then a [table] per dict (TOML has no null:
    None values are left out)."""
    lines = [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in sections.items()
             if not isinstance(v, dict) and v is not None]
    for name, table in sections.items():
        if isinstance(table, dict):
            lines.append(f"[{_toml_string(name)}]")
            lines += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in table.items()
                      if v is not None]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(sections=_SECTIONS)
def test_any_toml_config_gives_a_config_or_one_line(tmp_path_factory, sections):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    path = tmp_path_factory.mktemp("config") / "config.toml"
    path.write_text(_as_toml(sections))
    tomllib.loads(path.read_text())  # valid TOML: what is fuzzed is the config layer behind it
    try:
        config = load_config(path)
    except SeqvaeError as error:
        _one_line(error)
        return
    assert Config.from_dict(config.to_dict()) == config


def test_an_integer_too_large_for_a_float_is_one_line():  # found by the fuzzing above
    with pytest.raises(SeqvaeError, match="train.learning_rate must be of type float"):
        Config.from_dict({"train": {"learning_rate": 10**400}})

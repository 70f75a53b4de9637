"""`export_policy` (runs/export.py) on checkpoints the real Trainer writes: transformers loads the
folder and its log-probs are the trainer's at that step; a 2-worker (FSDP2) checkpoint exports the
1-worker one's weights; the model's own dtype is kept; a step pruned from the full checkpoints
still exports, from its policy snapshot, exactly as before the prune; `export --help`'s examples
run as written; bad input is one line and loses nothing."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.engine.train.gloo import run_ranks
from tests.engine.train.helpers import batches
from tests.helpers.run_folder import checkpointed_run
from workbench.engine.batch import PackedGroups
from workbench.engine.model.forward import causal_lm_forward
from workbench.engine.run.actors import trainer_parts
from workbench.engine.train.trainer import Trainer
from workbench.errors import UserError
from workbench.rl.head import token_logprobs
from workbench.runs.checkpoint import SNAPSHOT_ALIASES, CheckpointStore
from workbench.runs.export import EXPORT_MARKER, export_policy, step_list


@pytest.fixture
def trained(tiny_config, tmp_path):
    cfg = tiny_config({"train.lr": 1e-2, "train.grad_clip": 1e9}, for_actors=True)
    steps = batches(cfg, 3)
    tr = Trainer(**trainer_parts(cfg))

    def step_then_save(i):
        def save(path):
            tr.train_step(steps[i], i)
            tr.save(path)
        return save

    run = checkpointed_run(tmp_path / "run", cfg, {1: step_then_save(0), 2: step_then_save(1)})
    return cfg, tr, run, steps


def test_the_export_loads_in_transformers_and_gives_the_trainers_logprobs(trained, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, tr, run, steps = trained
    result = export_policy(run, tmp_path / "out")
    assert result.step == 2 and result.out == (tmp_path / "out").resolve()
    names = {p.name for p in result.out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", EXPORT_MARKER} <= names
    model = AutoModelForCausalLM.from_pretrained(result.out, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(result.out)
    assert tok.decode(tok.encode("12+34=")) == "12+34="  # the run's tokenizer came along
    _, rows, _ = tr.prepare(PackedGroups.from_groups(steps[2]))
    pos = rows.loss_mask > 0
    with torch.no_grad():
        want, _ = tr.policy(rows.input_ids, rows.attention_mask, pos, 1.0, None)
        logits, _ = causal_lm_forward(model, rows.input_ids, rows.attention_mask, fp32_head=True)
        got = token_logprobs(logits[:, :-1], rows.input_ids[:, 1:])[pos]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    # an earlier step is another policy
    first = export_policy(run, tmp_path / "first", step=1)
    a = AutoModelForCausalLM.from_pretrained(first.out).state_dict()
    assert any(not torch.equal(a[k], v) for k, v in model.state_dict().items())


def test_a_checkpoint_loaded_and_pushed_is_what_the_trainer_pushed_at_that_step(trained, tmp_path):
    """load_policy + policy_push, how a scorer puts a checkpoint into a running engine, give the very
    bytes the trainer sent its generators after that step (compute dtype, FP32 head), and refill one
    model step after step; an unknown step is the export's one line."""
    from workbench.engine.weights import policy_push
    from workbench.runs.export import load_policy

    cfg, tr, run, _ = trained
    sent = tr.get_weights().tensors()  # the trainer is at step 2, its last save
    model = load_policy(run, 2)
    pushed = policy_push(model, tr.precision.compute, cfg.recipe.fp32_head).tensors()
    assert sorted(pushed) == sorted(sent) and all(torch.equal(pushed[k], sent[k]) for k in sent)
    assert load_policy(run, 1, model) is model  # refilled in place: another policy
    assert any(not torch.equal(v, sent[k].to(v.dtype)) for k, v in model.state_dict().items() if k in sent)
    with pytest.raises(UserError, match="saved no checkpoint at step 5"):
        load_policy(run, 5, model)


def test_the_export_keeps_the_models_own_dtype(trained, tmp_path):
    from safetensors import safe_open

    cfg, tr, run, _ = trained
    model_cfg = json.loads((Path(cfg.model.path) / "config.json").read_text())
    model_cfg["torch_dtype"] = "bfloat16"
    model_cfg.pop("dtype", None)
    src = tmp_path / "bf16-model"
    shutil.copytree(cfg.model.path, src)
    (src / "config.json").write_text(json.dumps(model_cfg))
    data = json.loads((run / "config.json").read_text())
    data["model"]["path"] = str(src)
    (run / "config.json").write_text(json.dumps(data))
    result = export_policy(run, tmp_path / "bf16")
    assert result.dtype == "bfloat16"
    with safe_open(str(result.out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


def test_bad_input_is_one_line_and_loses_nothing(trained, tmp_path):
    cfg, _, run, _ = trained
    with pytest.raises(UserError, match="saved no checkpoint at step 7: the steps that can be exported are 1, 2$") as e:
        export_policy(run, tmp_path / "x", step=7)
    assert "\n" not in str(e.value)
    empty = checkpointed_run(tmp_path / "empty", cfg, {})
    (empty / "checkpoints").mkdir(exist_ok=True)
    with pytest.raises(UserError, match="holds no checkpoint to export"):
        export_policy(empty, tmp_path / "y")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="is not an earlier export"):
        export_policy(run, mine)
    assert (mine / "notes.txt").read_text() == "keep me" and not list(tmp_path.glob(".mine.tmp"))
    export_policy(run, tmp_path / "again")
    export_policy(run, tmp_path / "again", step=1)  # an earlier export is replaced
    assert json.loads((tmp_path / "again" / EXPORT_MARKER).read_text())["step"] == 1


def test_the_command_exports_and_refuses_in_one_line(trained, tmp_path):
    _, _, run, _ = trained
    ok = subprocess.run([sys.executable, "-m", "workbench.cli", "export", str(run), "--out", str(tmp_path / "cli")],
                        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "policy of step 2 exported to" in ok.stdout and (tmp_path / "cli" / "model.safetensors").is_file()
    bad = subprocess.run([sys.executable, "-m", "workbench.cli", "export", str(run), "--step", "9"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().endswith("saved no checkpoint at step 9: the steps that can be exported are 1, 2")


def _sharded_save(rank, world, ranks, cfg, steps, path):
    tr = ranks.trainer(cfg)
    for i, s in enumerate(steps):
        tr.train_step(s, i)
    tr.save(path)
    weights = tr.get_weights()  # every rank gathers; rank 0 gets the full weights
    return {k: v.clone() for k, v in weights.tensors().items()} if weights is not None else None


def test_a_two_worker_checkpoint_exports_the_one_worker_weights(tiny_config, tmp_path):
    from safetensors.torch import load_file

    cfg = tiny_config({"train.lr": 1e-3}, for_actors=True)
    steps = batches(cfg, 2)
    full: list = []
    run2 = checkpointed_run(tmp_path / "two", cfg, {2: lambda path: full.extend(run_ranks(_sharded_save, 2, cfg, steps, path))})
    two = load_file(str(export_policy(run2).out / "model.safetensors"))
    assert len(two) > 10
    for k, v in two.items():  # the sharded checkpoint's export is the workers' whole policy
        torch.testing.assert_close(v, full[0][k], atol=0, rtol=0, msg=k)
    # the same state resaved by one worker (DCP reshards): the same export
    one = Trainer(**trainer_parts(cfg))
    one.load(str(CheckpointStore(run2 / "checkpoints").path_for(2)))
    run1 = checkpointed_run(tmp_path / "one", cfg, {2: one.save})
    again = load_file(str(export_policy(run1).out / "model.safetensors"))
    assert again.keys() == two.keys()
    for k in two:
        torch.testing.assert_close(again[k], two[k], atol=0, rtol=0, msg=k)


def test_a_session_and_a_run_view_export_the_same_policy(trained, tmp_path):
    from safetensors.torch import load_file

    from workbench.runs.view import RunView
    from workbench.session import Session

    _, _, run, _ = trained
    by_view = RunView.open(run).export(tmp_path / "view", step=1)
    by_session = Session.open(run).export(tmp_path / "session", step=1)
    assert by_view.step == by_session.step == 1
    a, b = load_file(str(by_view.out / "model.safetensors")), load_file(str(by_session.out / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert Session.open(run).export().out == run / "policy"  # the default: where a finished run leaves it


def test_the_steps_that_can_be_exported_read_short():
    assert step_list([1, 2]) == "1, 2"
    assert step_list([50, 100, 150, 200, 230]) == "50 to 200 every 50, 230"  # the end of a run off the cadence
    assert step_list([10, 50, 100, 150, 200, 250, 300]) == "10, 50 to 300 every 50"


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_a_pruned_step_exports_the_trainers_weights_of_that_step(tiny_config, tmp_path):
    """checkpoint.every_steps small, 4 saves, keep 2: steps 1 and 2 lose their full state (disk
    bounded) but keep their policy, and each exports the weights the trainer had at that step."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    cfg = tiny_config({"train.lr": 1e-2, "train.grad_clip": 1e9}, for_actors=True)
    steps = batches(cfg, 4)
    tr = Trainer(**trainer_parts(cfg))
    held: dict[int, dict] = {}
    before: list = []  # step 1's export while its full checkpoint is still there

    def step_then_save(i):
        def save(path):
            if i == 2:  # the commit of step 3 prunes step 1
                before.append(export_policy(path_run, tmp_path / "before", step=1))
            tr.train_step(steps[i], i)
            held[i + 1] = {k: v.clone() for k, v in tr.get_weights().tensors().items()}
            tr.save(path)
        return save

    path_run = tmp_path / "run"
    run = checkpointed_run(path_run, cfg, {i + 1: step_then_save(i) for i in range(4)})
    store = CheckpointStore(run / "checkpoints")
    assert store.steps() == [3, 4] and store.snapshot_steps() == [1, 2] and store.exportable_steps() == [1, 2, 3, 4]
    assert not store.path_for(1).exists()
    # the builtin GPT ties its head to its embedding: the snapshot holds that tensor once
    aliases = json.loads((store.policy_path(1) / SNAPSHOT_ALIASES).read_text())
    assert [set(pair) for pair in aliases.items()] == [{"lm_head.weight", "transformer.wte.weight"}]
    assert _size(store.policy_path(1)) < _size(store.path_for(3)) / 2  # weights only, no AdamW moments
    for step in (1, 2):
        result = export_policy(run, tmp_path / f"s{step}", step=step)
        assert result.step == step
        model = AutoModelForCausalLM.from_pretrained(result.out, dtype=torch.float32)
        got = model.state_dict()
        for k, v in held[step].items():  # the model's own dtype is float32: the trainer's weights exactly
            torch.testing.assert_close(got[k], v, atol=0, rtol=0, msg=k)
    assert any(not torch.equal(held[1][k], held[2][k]) for k in held[1])  # two steps, two policies
    a, b = load_file(str(before[0].out / "model.safetensors")), load_file(str(tmp_path / "s1" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the prune changed nothing


def test_a_snapshot_is_kept_in_the_models_own_dtype_and_exports_as_the_checkpoint_did(tiny_config, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    cfg = tiny_config({"train.lr": 1e-2}, for_actors=True)
    src = tmp_path / "bf16-model"
    shutil.copytree(cfg.model.path, src)
    model_cfg = json.loads((src / "config.json").read_text())
    model_cfg.pop("dtype", None)
    (src / "config.json").write_text(json.dumps({**model_cfg, "torch_dtype": "bfloat16"}))
    from workbench.config import run_config_from_dict
    from workbench.configtools import to_dict

    cfg = run_config_from_dict(to_dict(cfg), {"model.path": str(src)})
    steps = batches(cfg, 3)
    tr = Trainer(**trainer_parts(cfg))
    before: list = []
    run_dir = tmp_path / "run"

    def save(i):
        def go(path):
            if i == 2:
                before.append(export_policy(run_dir, tmp_path / "before", step=1))
            tr.train_step(steps[i], i)
            tr.save(path)
        return go

    run = checkpointed_run(run_dir, cfg, {1: save(0), 2: save(1), 3: save(2)})
    snap = CheckpointStore(run / "checkpoints").policy_path(1)
    for part in snap.glob("*.safetensors"):
        with safe_open(str(part), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    after = export_policy(run, tmp_path / "after", step=1)
    assert after.dtype == before[0].dtype == "bfloat16"
    a, b = load_file(str(before[0].out / "model.safetensors")), load_file(str(after.out / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_export_helps_own_examples_run_as_written(tiny_config, tmp_path, monkeypatch):
    """`workbench export --help`'s examples, run as printed, in a project whose runs/quickstart saved
    every 50 of 800 steps as the quickstart does: --step 400 long since pruned to its snapshot."""
    from workbench.cli import main

    help_out = io.StringIO()
    with contextlib.redirect_stdout(help_out), pytest.raises(SystemExit):
        main(["export", "--help"])
    examples = [line.strip() for line in help_out.getvalue().splitlines() if line.strip().startswith("workbench export ")]
    assert len(examples) == 2 and any("--step 400" in e for e in examples)
    cfg = tiny_config({}, for_actors=True)
    tr = Trainer(**trainer_parts(cfg))
    monkeypatch.chdir(tmp_path)
    checkpointed_run(Path("runs/quickstart"), cfg, {s: tr.save for s in range(50, 801, 50)})
    for example in examples:
        argv = shlex.split(example)[1:]
        assert main(argv) == 0, example
        out = Path(argv[argv.index("--out") + 1])
        marker = json.loads((out / EXPORT_MARKER).read_text())
        assert marker["step"] == (400 if "--step" in argv else 800) and (out / "model.safetensors").is_file()
    with pytest.raises(UserError) as e:
        export_policy("runs/quickstart", step=425)
    assert str(e.value).endswith("saved no checkpoint at step 425: the steps that can be exported are 50 to 800 every 50")


def test_a_real_run_saving_every_2_steps_exports_its_first_checkpoint_at_the_end(ray_cluster, tiny_config, tmp_path):
    """The coordinator prunes as it commits: after 6 steps saved every 2 (keep 2), step 2 exports."""
    from safetensors.torch import load_file

    from workbench.engine.run.launch import run_to_end

    cfg = tiny_config({"train.max_steps": 6, "checkpoint.every_steps": 2, "tracking.mlflow": False}, name="pruned")
    summary = run_to_end(cfg, resume=False, timeout=600)
    assert summary["status"] == "finished", summary.get("error")
    store = CheckpointStore(Path(cfg.out_dir) / "checkpoints")
    assert store.steps() == [4, 6] and store.snapshot_steps() == [2]
    early, last = export_policy(cfg.out_dir, tmp_path / "p2", step=2), export_policy(cfg.out_dir, tmp_path / "p6")
    assert (early.step, last.step) == (2, 6)
    a, b = load_file(str(early.out / "model.safetensors")), load_file(str(last.out / "model.safetensors"))
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)  # step 2's policy, not the last

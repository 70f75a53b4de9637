"""Kept samples (workbench/runs/samples.py): a real generator's texts and rendered prompts into
Parquet files, the groups a step keeps with the advantage and loss weight a real trainer trained
each with (or not: zero variance), the disk bound (older steps thinned, not dropped), the
readers' filters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.config import SamplesConfig
from workbench.engine.batch import PackedGroups
from workbench.engine.rollout.torch_backend import Evaluator, Generator
from workbench.engine.run.actors import generator_parts
from workbench.errors import UserError
from workbench.runs.samples import (
    COLUMNS, SAMPLES_KEY, SampleWriter, file_notes, folder_bytes, pick_groups, read_samples, step_files, step_samples,
    take_notes,
)  # fmt: skip
from workbench.runs.view import RunView


@pytest.fixture(scope="module")
def chunk_and_parts(tmp_path_factory, model_cache):
    from workbench.config import run_config_from_dict
    from workbench.engine.run.actors import actor_config
    from workbench.tasks.base import load_task

    cfg = run_config_from_dict({
        "out_dir": str(tmp_path_factory.mktemp("run")),
        "model": {"path": "builtin:tiny", "sft_steps": 150, "n_embd": 32, "n_layer": 1, "n_head": 2, "cache_dir": str(model_cache)},
        "task": {"name": "addition", "difficulty": 1, "num_train": 80, "num_val": 20},
        "generation": {"max_new_tokens": 6, "max_batch_sequences": 64}, "eval": {"num_prompts": 10},
        "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
    })  # fmt: skip
    cfg = actor_config(cfg, load_task(cfg.task))
    gen = Generator(**generator_parts(cfg))
    return cfg, gen, gen.generate(chunk_id=3, prompt_ids=list(range(8)), n_per_prompt=4, seed=0)


def test_a_chunk_carries_each_groups_texts_as_the_generator_decoded_them(chunk_and_parts):
    cfg, gen, chunk = chunk_and_parts
    packed = chunk.packed
    assert len(chunk.notes) == len(packed) == 8
    off = np.concatenate([[0], np.cumsum(packed.t_len)])
    for g, note in enumerate(chunk.notes):
        assert len(note["texts"]) == len(note["verdicts"]) == 4
        i = 4 * g  # the group's first completion: its text is the decoded tokens (EOS left out)
        toks = packed.tokens[off[i] : off[i + 1]].tolist()
        toks = toks[:-1] if toks and toks[-1] == gen.eos_id else toks
        assert note["texts"][0] == gen.tokenizer.decode(toks, skip_special_tokens=True)
        assert [v == "pass" for v in note["verdicts"]] == packed.correct[i : i + 4].tolist()


def test_a_step_keeps_its_groups_with_every_column(chunk_and_parts, tmp_path):
    cfg, gen, chunk = chunk_and_parts
    packed = chunk.packed
    store: dict = {}
    file_notes(store, packed, chunk.notes)
    assert take_notes(store, packed.select(slice(0, 3))) == chunk.notes[:3] and len(store) == 5  # a step may take part of a chunk
    file_notes(store, packed.select(slice(0, 3)), chunk.notes[:3])
    twice = PackedGroups.concat([packed.select(slice(0, 1))] * 2)  # a prompt drawn twice in a chunk: two notes, in order
    file_notes(store, twice, [{"texts": ["a"]}, {"texts": ["b"]}])
    assert take_notes(store, twice) == [chunk.notes[0], {"texts": ["a"]}]
    store[(3, int(packed.prompt_id[0]))].insert(0, chunk.notes[0])
    kept = step_samples(packed, take_notes(store, packed), gen.task.train, 2)
    assert store == {(3, int(packed.prompt_id[0])): [{"texts": ["b"]}]}
    picked = sorted({r["group"] for r in kept.records})
    assert len(kept.records) == 8 and kept.rows == [4 * g + j for g in picked for j in range(4)]  # each one's sequence
    SampleWriter(tmp_path, SamplesConfig()).write(5, "train", kept.trained(None), trained_version=4)
    df = read_samples(tmp_path)
    assert set(COLUMNS) <= set(df.columns) and (df["step"] == 5).all() and (df["kind"] == "train").all()
    assert df["prompt"].tolist() == [gen._prompt_text("train", int(p)) for p in df["prompt_id"]]  # as tokenised
    assert (df["staleness"] == 4 - df["version"]).all() and (df["length"] > 0).all()
    assert df["truncated"].tolist() == [not f for f in _finished(packed, df)]
    assert not df["trained"].any() and df["advantage"].isna().all()  # no trainer's word: nothing claimed


def _finished(packed: PackedGroups, df: pd.DataFrame) -> list[bool]:
    out = []
    for g in sorted(set(df["group"])):
        s = int(np.sum(packed.size[:g]))
        out += packed.finished[s : s + int(packed.size[g])].tolist()
    return out


def test_pick_groups_prefers_the_mixed_groups_the_trainer_learns_from():
    # mixed groups first: the best and the worst of them
    assert pick_groups([[False, True], [False, False], [True, True], [True, True, False], [False, False, True]], 2) == [3, 4]
    assert pick_groups([[False, True], [False, False], [True, True]], 2) == [0, 2]  # one mixed, then the passing group
    # no mixed group: a passing and a failing one, as before
    assert pick_groups([[False, False], [True, True], [True, True]], 2) == [0, 1]
    assert pick_groups([[False, False], [False, False], [False, False]], 2) == [0, 1]  # no passing group: two still kept
    assert pick_groups([[True], [False], [True]], 1) == [0]
    assert pick_groups([[True], [False]], 0) == [] and pick_groups([], 2) == []


def test_the_evaluator_returns_its_first_completions_up_to_the_cap(tiny_config):
    ev = Evaluator(**generator_parts(tiny_config(for_actors=True), evaluator=True), rank=-1)
    res = ev.evaluate(None, 3, num_prompts=10, k=2, seed=0, keep_samples=5)
    recs = res[SAMPLES_KEY]
    assert len(recs) == 5 and [r["prompt_id"] for r in recs] == [0, 0, 1, 1, 2]
    assert all(r["version"] == 3 and isinstance(r["completion"], str) for r in recs)
    assert SAMPLES_KEY not in ev.evaluate(None, 3, num_prompts=10, k=2, seed=0)  # no cap: nothing extra travels


def _records(n: int, *, text: str = "x", passed: bool = False, domain: str = "") -> list[dict]:
    return [{"group": i // 2, "prompt_id": i // 2, "domain": domain, "prompt": f"p{i // 2}", "completion": f"{text} {i}",
             "passed": passed, "verdict": "pass" if passed else "fail", "reward": 1.0 if passed else -1.0,
             "advantage": float("nan"), "version": 0, "version_last": 0, "staleness": 0, "length": 3,
             "truncated": False, "interrupted": False} for i in range(n)]  # fmt: skip


def test_the_folder_stays_under_its_bound_with_older_steps_thinned(tmp_path):
    rng = np.random.default_rng(0)
    w = SampleWriter(tmp_path, SamplesConfig(max_mb=0.15))
    for step in range(1, 201):
        noise = "".join(rng.choice(list("abcdefghij"), 300))  # incompressible enough to fill the bound
        w.write(step, "train", _records(4, text=noise))
        assert folder_bytes(tmp_path) <= 0.15 * 1024 * 1024
    steps = list(step_files(tmp_path))
    assert steps[0] == 1 and steps[-1] == 200  # the first and the newest kept
    assert 10 < len(steps) < 200
    gaps = np.diff(steps)
    assert gaps[: len(gaps) // 3].mean() > gaps[-len(gaps) // 3 :].mean()  # sparser early, denser late
    assert gaps[-1] == 1  # the newest steps whole


def test_the_bound_holds_even_when_the_first_and_newest_steps_exceed_it(tmp_path):
    rng = np.random.default_rng(1)
    noise = ["".join(rng.choice(list("abcdefghij"), 300)) for _ in range(3)]
    one = SampleWriter(tmp_path / "probe", SamplesConfig()).write(0, "val", _records(8, text=noise[0])).stat().st_size
    bound_mb = 1.5 * one / (1024 * 1024)  # one step fits, two do not
    w = SampleWriter(tmp_path, SamplesConfig(max_mb=bound_mb))
    for step, text in enumerate(noise):
        w.write(step, "val", _records(8, text=text))
        assert folder_bytes(tmp_path) <= bound_mb * 1024 * 1024
    assert list(step_files(tmp_path)) == [2]  # the newest stays; the first gives way when the bound needs it


def test_filters_and_an_unknown_step(tmp_path, tiny_config):
    w = SampleWriter(tmp_path, SamplesConfig())
    w.write(0, "val", _records(4, text="zero", passed=True, domain="math"))
    w.write(2, "train", _records(4, text="Two", domain="code"))
    view = RunView(tiny_config({"out_dir": str(tmp_path)}))
    assert view.samples(passed=True, kind="val")[["step", "prompt", "completion", "passed", "reward", "version"]].shape == (4, 6)
    assert len(read_samples(tmp_path)) == 8
    assert read_samples(tmp_path, passed=False)["step"].unique().tolist() == [2]
    assert read_samples(tmp_path, domain="math")["completion"].str.startswith("zero").all()
    assert len(read_samples(tmp_path, contains="two")) == 4  # case-insensitive, in the completion
    assert len(read_samples(tmp_path, contains="P1")) == 4  # in the prompt
    assert read_samples(tmp_path, kind="val")["kind"].unique().tolist() == ["val"]
    with pytest.raises(UserError, match=r"no samples at step 1 .*steps kept: 0, 2"):
        read_samples(tmp_path, step=1)
    assert list(read_samples(tmp_path / "nothing").columns) == COLUMNS  # none kept: an empty frame


def test_a_restart_takes_back_the_steps_after_its_checkpoint_and_zero_mb_keeps_none(tmp_path):
    w = SampleWriter(tmp_path, SamplesConfig())
    for s in (1, 2, 3):
        w.write(s, "train", _records(2))
    w.back_to(1)
    assert list(step_files(tmp_path)) == [1]
    off = SampleWriter(tmp_path / "off", SamplesConfig(max_mb=0))
    assert off.write(1, "train", _records(2)) is None and not (tmp_path / "off").exists()


def test_samples_config_refuses_a_negative_bound():
    from workbench.config import run_config_from_dict
    from workbench.configtools import ConfigError

    with pytest.raises(ConfigError, match="samples.max_mb must be >= 0"):
        run_config_from_dict({"samples": {"max_mb": -1}})


def test_each_reward_functions_value_is_a_column(tmp_path, monkeypatch):
    """With reward.functions, a kept sample shows each function's own value beside the weighted sum."""
    import json
    from pathlib import Path

    from tests.tasks.test_reward_scoring import FUNCTIONS, HELPERS
    from workbench.config import TaskConfig
    from workbench.engine.model.sampling import Completion
    from workbench.engine.rollout.scoring import verdict_groups
    from workbench.rl.reward_functions import load_reward_functions
    from workbench.tasks.base import check_batch, load_task

    monkeypatch.syspath_prepend(str(HELPERS))
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": 2 * i} for i in range(12)]
    Path(tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_task(TaskConfig(name="jsonl", path=str(tmp_path / "d.jsonl"), num_val=4, chat_template=True, answer_format="boxed"))
    task.reward_functions = load_reward_functions(FUNCTIONS)
    ex = task.train[1]
    texts = [f"\\boxed{{{ex.answer}}}", ex.answer, "\\boxed{999}", "no"]
    verdicts = check_batch(task, texts, [ex] * 4)
    outs = [Completion(prompt_tokens=[1], tokens=[2, 3], versions=[0, 0], finished=True) for _ in texts]
    groups, _ = verdict_groups(0, [1], 4, outs, verdicts, texts)
    packed = PackedGroups.from_groups(groups)
    recs = step_samples(packed, [groups[0].note], task.train, 1).records
    SampleWriter(tmp_path, SamplesConfig()).write(1, "train", recs, trained_version=0)
    df = read_samples(tmp_path)
    assert df["completion"].tolist() == texts and df["reward"].tolist() == [1.5, 1.0, 0.5, 0.0]
    assert df["reward/correct_number"].tolist() == [1.0, 1.0, 0.0, 0.0]  # by the function's name, as its metrics
    assert df["reward/format_reward"].tolist() == [1.0, 0.0, 1.0, 0.0]


def _shape(group, rewards: list[float], lengths: list[int]) -> None:
    """Set a generated group's rewards and its completions' lengths (tokens repeated or cut)."""
    group.rewards, group.correct = list(rewards), [r > 0 for r in rewards]
    for c, n in zip(group.completions, lengths):
        c.tokens, c.logprobs = (c.tokens * n)[:n], (c.logprobs * n)[:n]
        c.versions, c.sampled, c.finished, c.interrupted = [0] * n, [True] * n, True, False


def test_the_samples_show_the_advantage_and_loss_weight_the_trainer_trained_with(tiny_config, tmp_path):
    """The kept samples' advantages and loss weights are the trainer's own (rl/step.prepare_step,
    through Trainer.train_step's StepResult.trained and the coordinator's _finish_step), per
    sample: after the overlong penalty and the zero-variance filter, the groups it dropped marked
    trained=False."""
    from workbench.engine.run.actors import trainer_parts
    from workbench.engine.run.coordinator import RunCoordinator
    from workbench.engine.run.weight_sync import WeightSync
    from workbench.engine.train.trainer import Trainer
    from workbench.rl.advantages import group_advantages

    cfg = tiny_config({"recipe.length_control.type": "penalty", "recipe.length_control.l_max": 6,
                       "recipe.length_control.l_cache": 3, "generation.max_new_tokens": 6}, for_actors=True)  # fmt: skip
    gen = Generator(**generator_parts(cfg))
    groups = gen.generate(0, [0, 1, 2, 3], 4, seed=0).groups
    _shape(groups[0], [1.0] * 4, [2] * 4)  # all pass, short: zero variance, not trained
    _shape(groups[1], [1.0] * 4, [2, 2, 2, 5])  # all pass, one overlong: the penalty alone gives it signal
    _shape(groups[2], [1.0, -1.0, -1.0, -1.0], [2, 3, 2, 3])  # one passes
    _shape(groups[3], [-1.0] * 4, [3] * 4)  # all fail: not trained
    packed = PackedGroups.from_groups(groups)
    tr = Trainer(**trainer_parts(cfg))
    _, rows, _ = tr.prepare(packed)  # what the loss gets, before the step
    result, weights = tr.train_step(packed, 0)
    assert result.skipped is None and weights is not None
    # the coordinator's way: the groups kept when the step was sent, written with the step's result
    coord = RunCoordinator(cfg, resume=False)
    coord.clock = type("Clock", (), {"tick": lambda self: None})()
    meta = {"gen": {"gen_seconds": 0, "swaps": 0}, "samples": step_samples(packed, [g.note for g in groups], gen.task.train, 4)}
    no_push = WeightSync([], "ppo-off-policy")  # no generators; round_done=False: nothing pushed
    coord._finish_step(type("NoWorkers", (), {"sync": no_push, "num_generators": 1})(), result, weights, meta, False)
    df = read_samples(cfg.output_dir(), step=1)
    assert df["group"].tolist() == [g for g in range(4) for _ in range(4)]
    assert df["trained"].tolist() == [False] * 4 + [True] * 8 + [False] * 4
    on = df[df["trained"]]
    assert on["advantage"].tolist() == pytest.approx(rows.advantages.tolist(), abs=1e-6)  # sample by sample
    assert on["loss_weight"].tolist() == pytest.approx(rows.weights.sum(1).tolist(), abs=1e-6)
    assert on["loss_weight"].sum() == pytest.approx(1.0, abs=1e-5)
    off = df[~df["trained"]]
    assert off["advantage"].isna().all() and (off["loss_weight"] == 0).all()
    g1 = df[df["group"] == 1]["advantage"].tolist()
    assert g1[3] < 0 < g1[0] and (df[df["group"] == 1]["reward"] == 1.0).all()  # penalised, though it passed
    # what the samples used to show: the raw rewards centred over every row, the dropped groups included
    raw = group_advantages(torch.as_tensor(packed.rewards), torch.as_tensor(packed.group_of_sequence), "prompt")
    assert raw[4:8].abs().max() == 0.0 != abs(g1[3])
    # a step the trainer skips (every group zero variance) trains no sample
    flat = PackedGroups.from_groups([groups[0], groups[3]])
    skipped, _ = tr.train_step(flat, 1)
    assert skipped.skipped and len(skipped.trained) == 8 and not skipped.trained.trained.any()
    recs = step_samples(flat, [groups[0].note, groups[3].note], gen.task.train, 2).trained(skipped.trained)
    assert len(recs) == 8 and not any(r["trained"] for r in recs)


def test_the_prompt_shown_is_the_one_the_model_saw_system_turn_and_chat_template(tmp_path):
    """Train and validation samples show the prompt as the generator tokenised it."""
    from tests.helpers.tiny_hf import build_tiny_hf, task_texts
    from workbench.config import run_config_from_dict
    from workbench.tasks.base import load_task

    task = {"name": "addition", "difficulty": 1, "num_train": 20, "num_val": 8, "chat_template": True,
            "system_prompt": "Answer with the number only."}  # fmt: skip
    base = {"out_dir": str(tmp_path / "run"), "task": task, "generation": {"max_new_tokens": 4}, "eval": {"num_prompts": 2},
            "recipe": {"base": "scalerl", "length_control": {"type": "none"}}}  # fmt: skip
    d = build_tiny_hf(tmp_path / "qwen", "qwen2", corpus=task_texts(load_task(run_config_from_dict(base).task)))
    cfg = run_config_from_dict(base, {"model.path": str(d)})
    gen = Generator(**generator_parts(cfg))
    chunk = gen.generate(0, [0, 1], 2, seed=0)
    recs = step_samples(chunk.packed, chunk.notes, gen.task.train, 2).records
    ex = gen.task.train[0]
    want = ("<|im_start|>system\nAnswer with the number only.<|im_end|>\n"
            f"<|im_start|>user\n{ex.prompt}<|im_end|>\n<|im_start|>assistant\n")
    assert recs[0]["prompt"] == want
    ids = chunk.packed.prompt[: chunk.packed.p_len[0]].tolist()  # the tokens the model was given
    assert gen.tokenizer(recs[0]["prompt"], add_special_tokens=False)["input_ids"] == ids
    ev = Evaluator(**generator_parts(cfg, evaluator=True), rank=-1)
    val = ev.evaluate(None, 0, num_prompts=2, k=1, seed=0, keep_samples=2)
    assert val[SAMPLES_KEY][0]["prompt"].startswith("<|im_start|>system\nAnswer with the number only.")
    assert gen.task.val[0].prompt in val[SAMPLES_KEY][0]["prompt"] and val[SAMPLES_KEY][0]["prompt"].endswith("assistant\n")

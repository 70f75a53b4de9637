"""`workbench run` with a hub model id and an `hf` dataset, offline: a tiny random Qwen2 seeded in a
hub cache as "Org/tiny-qwen", a GSM8K-shaped parquet folder (train / test, "#### N" answers).

The CLI runs in this process on the session's Ray cluster (its closing ray.shutdown is held back
so the cluster stays up for the other tests). The run trains its steps, its saved config names
the snapshot folder and commit the driver resolved (what every actor read), it is in MLflow without
any tracking flag, and it leaves its final policy in <out>/policy.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

from tests.helpers.hub_cache import offline_hub, seed_model
from tests.helpers.tiny_hf import build_tiny_hf


def gsm_like(n: int, start: int) -> list[dict]:
    return [{"question": f"{i}+{i % 7}=", "answer": f"{i} plus {i % 7} is <<{i}+{i % 7}>>.\n#### {i + i % 7}"}
            for i in range(start, start + n)]  # fmt: skip


@pytest.mark.slow
def test_workbench_run_with_a_hub_id_and_an_hf_dataset_completes_offline(tmp_path, monkeypatch, ray_cluster, capsys):
    import ray

    from workbench.cli import main
    from workbench.runs.folder import saved_config

    data = tmp_path / "gsm"
    data.mkdir()
    train, test = gsm_like(40, 10), gsm_like(10, 60)
    pd.DataFrame(train).to_parquet(data / "train.parquet")
    pd.DataFrame(test).to_parquet(data / "test.parquet")
    model = build_tiny_hf(tmp_path / "built", "qwen2", corpus=[r["question"] + r["answer"] for r in train + test])
    offline_hub(monkeypatch, tmp_path / "hf")
    snap = seed_model(tmp_path / "hf", "Org/tiny-qwen", model)
    cfg = {
        "name": "hub-run",
        "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
        "model": {"path": "Org/tiny-qwen"},
        "task": {"name": "hf", "path": str(data), "split": "train", "val_split": "test", "prompt_key": "question",
                 "answer_key": "answer", "answer_regex": "#### *(.+)", "num_val": 4},
        "generation": {"max_new_tokens": 12, "max_batch_sequences": 16},
        "train": {"prompts_per_step": 2, "generations_per_prompt": 2, "lr": 1e-3, "warmup_steps": 1, "max_steps": 2},
        "eval": {"every_steps": 2, "num_prompts": 4, "samples_per_prompt": 1},
        "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5, "evaluator_cpus": 0.5},
        "checkpoint": {"every_steps": 2, "keep": 1},
    }  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: None)  # the session's cluster outlives this run
    rc = main(["run", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-report"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads(out[: out.rindex("}") + 1])
    assert summary["status"] == "finished" and summary["steps"] == 2
    saved = saved_config(tmp_path / "out")
    assert (saved.model.path, saved.model.revision) == (str(snap), snap.name)
    assert saved.task.path == str(data)
    # tracked in MLflow with no tracking flag (the suite's store: $MLFLOW_TRACKING_URI), params resolved
    from mlflow import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("workbench")
    (run,) = client.search_runs([experiment.experiment_id],
                                filter_string=f"tags.`workbench.out_dir` = '{(tmp_path / 'out').resolve()}'")  # fmt: skip
    assert run.info.status == "FINISHED" and run.data.params["model.path"] == str(snap)
    # and it left its final policy, which transformers loads
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "policy").config.vocab_size > 0

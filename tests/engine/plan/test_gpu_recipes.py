"""The GPU recipes in configs/gpu/: each one, as shipped, fits the hardware it names in the memory
plan (a real card's memory, from the model's published config.json; no weights), the 7B one keeps
the paper's batch and length, and the launch guard holds a run to the nodes its recipe names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.config import load_run_config, run_config_from_dict
from workbench.configtools import ConfigError
from workbench.engine.plan.build import cluster_shape, plan_for
from workbench.engine.plan.memory import GB
from workbench.engine.run.preflight import check_nodes, toy_budget
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[3]
RECIPES = sorted((REPO / "configs" / "gpu").glob("*.yaml"))
SHIPPED = REPO / "tests" / "data" / "model_configs"
# the hub id each recipe names -> its published config.json here (nothing is downloaded in tests)
CONFIG_JSON = {"Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b", "Qwen/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
               "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b"}  # fmt: skip
CARDS_GB = {24, 40, 48, 80, 94, 141}  # memory of GPUs as sold: L4/A10G, A100-40G, L40S, H100/A100-80G, H100 NVL, H200
# the longest prompt each recipe is planned for: GSM8K / HumanEval under a chat template stay well
# under 512 tokens; the paper's math prompts get 2,048 of its 16,384 tokens
PROMPT_TOKENS = {"qwen7b-math-8gpu": 2048, "llama8b-math-2node": 2048}


def recipe(path: Path):
    """The recipe as shipped, its hub id pointed at the published config.json (no hub here)."""
    hub_id = load_run_config(path).model.path
    assert hub_id in CONFIG_JSON, f"{path.name}: model.path {hub_id!r} is not a hub id with a shipped config.json"
    return load_run_config(path, [f"model.path={SHIPPED / CONFIG_JSON[hub_id]}"])


def test_the_recipes_are_shipped():
    assert {p.stem for p in RECIPES} >= {"qwen0.5b-gsm8k-1gpu", "qwen7b-math-8gpu", "qwen1.5b-mathcode-4gpu", "llama8b-math-2node"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_each_recipe_fits_the_hardware_it_names(path):
    cfg = recipe(path)
    r = cfg.resources
    assert r.num_gpus and r.nodes and r.gpu_memory_gb in CARDS_GB, "a recipe names GPUs per node, nodes and a real card"
    assert cfg.generation.backend == "vllm" and toy_budget(cfg) is None  # no builtin-toy generation budget
    cluster = cluster_shape(cfg=cfg)  # no Ray here: the hardware the recipe names
    assert (cluster.gpus_per_node, cluster.nodes, round(cluster.gpu_memory / 1e9)) == (r.num_gpus, r.nodes, r.gpu_memory_gb)
    plan = plan_for(cfg, cluster, prompt=PROMPT_TOKENS.get(path.stem, 512))
    assert plan.fits, plan.table()
    assert not any("the config gives no GPU shares" in n for n in plan.notes)  # its own layout is planned
    gpus = r.generator_gpus * cfg.generation.num_generators + r.trainer_gpus * r.trainer_workers + r.evaluator_gpus
    assert gpus <= r.num_gpus * r.nodes and gpus > r.num_gpus * (r.nodes - 1), "the recipe uses the nodes it names"


def test_the_7b_recipe_keeps_the_papers_batch_length_and_schedule():
    cfg = recipe(REPO / "configs" / "gpu" / "qwen7b-math-8gpu.yaml")
    t, g = cfg.train, cfg.generation
    assert (t.prompts_per_step, t.generations_per_prompt) == (48, 16)
    assert PROMPT_TOKENS["qwen7b-math-8gpu"] + g.max_new_tokens == 16384 and t.micro_batch_tokens >= 16384
    assert (t.lr, t.warmup_steps, t.adam_eps, t.weight_decay) == (5e-7, 100, 1e-15, 0.01)
    lc = cfg.recipe.length_control
    assert (lc.type, lc.budget_min, lc.budget_max, lc.answer_budget) == ("interrupt", 10240, 12288, 2048)
    assert (cfg.eval.every_steps, cfg.eval.samples_per_prompt) == (100, 16)
    plan = plan_for(cfg, cluster_shape(cfg=cfg), prompt=2048)
    assert plan.fits and (r := cfg.resources).num_gpus == 8 and r.nodes == 1
    assert not plan_for(cfg, cluster_shape(8, 24), prompt=2048).fits  # the same recipe on 24 GB cards does not


def test_workbench_plan_plans_a_recipe_on_its_own_hardware_without_flags(capsys):
    path = REPO / "configs" / "gpu" / "qwen0.5b-gsm8k-1gpu.yaml"
    rc = main(["plan", "--config", str(path), "--model", str(SHIPPED / "qwen2.5-0.5b"), "--prompt-tokens", "512"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 node(s) x 1 GPU(s) x 24 GB [the config's resources.*]" in out and out.rstrip().endswith("fits")


def test_the_lora_recipe_fits_a_7b_on_one_48gb_gpu_where_full_fine_tuning_does_not(capsys):
    path = REPO / "configs" / "gpu" / "qwen7b-lora-1gpu.yaml"
    cfg = recipe(path)
    assert cfg.model.lora is not None and cfg.model.lora.rank == 16 and cfg.resources.gpu_memory_gb == 48
    assert 7e9 < plan_for(cfg, cluster_shape(cfg=cfg), prompt=512).shape.params < 8e9
    full = plan_for(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=None)), cluster_shape(cfg=cfg), prompt=512)
    assert not full.fits and "the trainer needs" in full.verdict  # fp32 states of 7.6B parameters: 122 GB
    rc = main(["plan", "--config", str(path), "--model", str(SHIPPED / "qwen2.5-7b"), "--prompt-tokens", "512"])
    out = capsys.readouterr().out
    assert rc == 0 and out.rstrip().endswith("fits")
    for term in ("frozen base (bf16)", "adapters (fp32)", "adapter AdamW states (fp32)", "LoRA buffers"):
        assert term in out, out
    assert "master weights (fp32)" not in out
    # no third copy on the GPU: the evaluator is the torch generator on the host, a row of its own
    plan = plan_for(cfg, cluster_shape(cfg=cfg), prompt=512)
    ev = next(r for r in plan.roles if r.name == "evaluator")
    assert ev.device == "host (not planned)" and "evaluator on host (not planned)" in out
    assert ev.terms["weights"] == 4 * plan.shape.params and 40 * GB < ev.need < 45 * GB  # fp32; 21 GB in bf16 (its note)
    assert "21.11 GB in bfloat16 on a CPU with native bf16" in " ".join(ev.notes)


def _nodes(*gpus: float, dead: int = 0) -> list[dict]:
    alive = [{"Alive": True, "Resources": {"CPU": 16.0, **({"GPU": g} if g else {})}} for g in gpus]
    return alive + [{"Alive": False, "Resources": {"CPU": 16.0, "GPU": 8.0}}] * dead


def test_the_launch_refuses_a_cluster_with_fewer_nodes_than_the_recipe_names():
    cfg = run_config_from_dict({}, {"resources.nodes": 2, "resources.num_gpus": 8, "resources.trainer_gpus": 1,
                                    "resources.trainer_workers": 8, "resources.generator_gpus": 1,
                                    "generation.num_generators": 8})  # fmt: skip
    check_nodes(cfg, _nodes(8, 8))  # two GPU nodes: it starts
    check_nodes(cfg, _nodes(8, 8, 0))  # a CPU-only head node beside them does not matter
    for cluster in (_nodes(8), _nodes(8, 0), _nodes(8, dead=1)):  # one GPU node, a CPU node, a dead node
        with pytest.raises(UserError, match=r"resources.nodes=2: .* has 1 nodes with GPUs") as e:
            check_nodes(cfg, cluster)
        assert "\n" not in str(e.value)
    check_nodes(run_config_from_dict({}, {}), _nodes(0))  # unset: any cluster
    with pytest.raises(UserError, match="has 1 nodes:"):  # a CPU run counts every node
        check_nodes(run_config_from_dict({}, {"resources.nodes": 2}), _nodes(0))


def test_gpu_shares_are_checked_against_gpus_per_node_times_nodes():
    sixteen = {"resources.num_gpus": 8, "resources.trainer_gpus": 1, "resources.trainer_workers": 8,
               "resources.generator_gpus": 1, "generation.num_generators": 8}  # fmt: skip
    run_config_from_dict({}, {**sixteen, "resources.nodes": 2})
    with pytest.raises(ConfigError, match=r"add up to 16 .* resources.num_gpus=8: "):
        run_config_from_dict({}, sixteen)  # one node of 8: refused as before
    with pytest.raises(ConfigError, match="resources.nodes must be >= 1"):
        run_config_from_dict({}, {"resources.nodes": 0})


def test_a_hugging_face_model_with_the_toys_generation_budget_is_told_before_launch(tmp_path, monkeypatch):
    from tests.helpers.tiny_hf import build_tiny_hf
    from workbench.engine.run import preflight as pf

    d = build_tiny_hf(tmp_path / "m", "qwen2", corpus=["12+34=46"])
    base = {"model.path": str(d), "out_dir": str(tmp_path / "run"), "task.num_train": 20, "task.num_val": 10,
            "eval.num_prompts": 5, "recipe.length_control.type": "none"}  # fmt: skip
    cfg = run_config_from_dict({}, base)  # generation.max_new_tokens: the default, 8
    said = toy_budget(cfg)
    assert said is not None and "generation.max_new_tokens=8" in said and str(d) in said and "\n" not in said
    told: list[str] = []
    monkeypatch.setattr(pf.log, "warning", told.append)
    pf.preflight(cfg, build_model=False)
    assert told == [said]  # said before any actor starts
    assert toy_budget(run_config_from_dict({}, {**base, "generation.max_new_tokens": 64})) is None
    assert toy_budget(run_config_from_dict({}, {})) is None  # the builtin toy: its budget is right for it


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_the_gpu_guides_table_quotes_each_recipes_plan(path):
    """docs/howto/gpu.md's row of each recipe: the trainer's need and budget and the sequences vLLM
    holds at once are what the plan prints (at the table's prompt lengths)."""
    import re

    guide = (REPO / "docs" / "howto" / "gpu.md").read_text()
    row = next((line for line in guide.splitlines() if line.startswith(f"| `configs/gpu/{path.name}`")), None)
    assert row is not None, f"docs/howto/gpu.md has no row for {path.name}"
    cfg = recipe(path)
    plan = plan_for(cfg, cluster_shape(cfg=cfg), prompt=PROMPT_TOKENS.get(path.stem, 512))
    trainer, generator = plan.roles[0], plan.roles[1]
    need, budget = re.search(r"trainer ([\d.]+) of ([\d.]+) GB", row).groups()
    assert (float(need), float(budget)) == (round(trainer.need / GB, 1), round(trainer.budget / GB, 1)), row
    seqs = int(re.search(r"([\d,]+) sequences of", row).group(1).replace(",", ""))
    assert f"{seqs:,} sequences of" in " ".join(generator.notes), (row, generator.notes)

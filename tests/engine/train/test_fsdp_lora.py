"""`model.lora` on 2 FSDP2 trainer workers (gloo, CPU, spawned processes, no Ray): the workers
start from the base with fresh adapters (B = 0), train the adapters alone, push the adapters
alone, and their adapter-only checkpoints resume into either worker count to the same next step."""

from __future__ import annotations

from tests.engine.train.gloo import run_ranks
from tests.engine.train.helpers import batches, next_step, same_step
from workbench.engine.run.actors import trainer_parts
from workbench.engine.train.trainer import Trainer

LORA = {"model.lora": {"rank": 4, "alpha": 8.0}, "train.micro_batch_size": 5, "train.adam_eps": 1e-8, "train.lr": 1e-3}


def _two_lora_workers(rank, world, ranks, cfg, steps, one_ckpt, two_ckpt):
    """2 workers: the start's push, two steps, a save, the next step; then a fresh group resumed
    from the 1-worker checkpoint (1 -> 2)."""
    tr = ranks.trainer(cfg)
    start = tr.get_weights()
    frozen = sum(p.numel() for p in tr.policy.parameters() if not p.requires_grad)
    for i in range(2):
        tr.train_step(steps[i], i)
    tr.save(two_ckpt)
    out = {"start": None if start is None else {k: v.clone() for k, v in start.tensors().items()},
           "frozen": frozen, "continued": next_step(tr, steps[2], 2)}  # fmt: skip
    tr = ranks.trainer(cfg)
    assert tr.load(one_ckpt) == 2
    out["1->2"] = next_step(tr, steps[2], 2)
    return out


def test_lora_trains_on_two_fsdp2_workers_and_its_checkpoints_resume_across_worker_counts(tiny_config, tmp_path):
    import torch.distributed.checkpoint as dcp

    cfg = tiny_config(LORA, for_actors=True)
    steps = batches(cfg, 3)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    tr = Trainer(**trainer_parts(cfg))
    for i in range(2):
        tr.train_step(steps[i], i)
    tr.save(one)
    fresh = Trainer(**trainer_parts(cfg))
    assert fresh.load(one) == 2
    fresh.share_prompts = False  # the sharded workers run every row whole (test_trainer.py says why)
    one_to_one = next_step(fresh, steps[2], 2)

    rank0, rank1 = run_ranks(_two_lora_workers, 2, cfg, steps, one, two)
    assert rank1["start"] is None and "weights" not in rank1["continued"]  # rank 1 takes part, rank 0 sends
    start = rank0["start"]
    assert start and all(".lora_A." in k or ".lora_B." in k for k in start)  # the push is the adapters alone
    assert all(v.abs().max() == 0 for k, v in start.items() if ".lora_B." in k)  # B = 0: step 0 is the base
    assert rank0["frozen"] > 0  # the base stays frozen under FSDP2
    same_step(rank0["1->2"], one_to_one, atol=1e-5)  # a 1-worker LoRA checkpoint resumes on 2 = on 1
    saved = dcp.FileSystemReader(str(tmp_path / "two" / "trainer_dcp")).read_metadata().state_dict_metadata
    weights = [k for k in saved if k.startswith("model.")]
    assert weights and all(".lora_" in k for k in weights)  # the sharded checkpoint holds no base weight
    back = Trainer(**trainer_parts(cfg))
    back.share_prompts = False
    assert back.load(two) == 2
    same_step(next_step(back, steps[2], 2), rank0["continued"], atol=1e-5)  # 2 -> 1 = 2 -> 2

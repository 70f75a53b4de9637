"""The coordinator's prompt supply (prompt_supply.py) and the loop's checkpoint (loop_checkpoint.py),
without Ray: replay before sampling, numbered chunks, and a checkpoint's loop state that restores
the same supply."""

from __future__ import annotations

from workbench.engine.run import accounting
from workbench.engine.run.loop_checkpoint import LoopCheckpoint
from workbench.engine.run.prompt_supply import PromptSupply
from workbench.tasks.base import load_task


class FakeWorkers:
    """Stands for Workers.save_trainer: writes a file where the trainer state would go."""

    def save_trainer(self, path) -> None:
        (path / "trainer.txt").write_text("trainer")


def test_the_replay_is_drawn_before_the_sampler_and_chunks_are_numbered(tiny_config):
    cfg = tiny_config(name="supply")
    supply = PromptSupply(cfg, load_task(cfg.task))
    supply.replay = [7, 8, 9]
    assert supply.next_chunk(2) == (0, [7, 8])
    cid, prompts = supply.next_chunk(3)
    assert cid == 1 and prompts[0] == 9 and len(prompts) == 3 and supply.replay == []
    assert supply.next_chunk(1)[0] == 2


def test_a_saved_loop_state_restores_the_same_supply(tiny_config, tmp_path):
    cfg = tiny_config(name="loopckpt")
    task = load_task(cfg.task)
    supply = PromptSupply(cfg, task)
    ckpt = LoopCheckpoint(cfg, tmp_path, supply)
    ckpt.mark_start(0, accounting.Counters())
    supply.next_chunk(4)
    counters = accounting.Counters()
    counters.gen_seconds = 1.5
    ckpt.save(FakeWorkers(), 3, counters, pending=[5, 6])
    state = ckpt.latest()
    assert list(state) == ["step", "chunk_counter", "sampler", "counters", "replay", "config"]  # the checkpoint's layout
    assert ckpt.latest_step() == 3 and (tmp_path / "checkpoints").exists()
    assert (state["step"], state["chunk_counter"], state["replay"]) == (3, 1, [5, 6])
    expected = supply.next_chunk(4)[1]  # what the original draws after the checkpoint, past its replay

    fresh = PromptSupply(cfg, task)
    restored = LoopCheckpoint(cfg, tmp_path, fresh).restore(state)
    assert restored.step == 3 and restored.counters.gen_seconds == 1.5
    assert fresh.next_chunk(2) == (1, [5, 6])  # the pending prompts first, under the next chunk id
    assert fresh.next_chunk(4)[1] == expected
    assert ckpt.start["step"] == 0 and ckpt.start["chunk_counter"] == 0  # the run's start, kept as a copy

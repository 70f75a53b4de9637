"""The shared-run-folder rule (runs/checkpoint.py): the token file, reading it, the refusal; a
prune whose policy snapshot fails warns and still bounds the disk.

The store itself is exercised through the coordinator (tests/engine/run/test_coordinator.py);
the rule across real nodes in tests/engine/train/test_multinode.py.
"""

from __future__ import annotations

import pytest

from workbench.errors import UserError
from workbench.runs.checkpoint import (SHARED_CHECK_PREFIX, TRAINER_DCP, CheckpointStore, reads_token, require_shared,
                                       shared_token)


def test_the_token_is_readable_at_its_path_while_the_check_runs_and_removed_after(tmp_path):
    with shared_token(tmp_path) as (path, token):
        assert path.parent == tmp_path and path.name.startswith(SHARED_CHECK_PREFIX)
        assert reads_token(path, token) and not reads_token(path, token[::-1])
    assert not path.exists() and not reads_token(path, token)  # another node: the file is not there


def test_the_token_is_removed_when_the_check_fails(tmp_path):
    with pytest.raises(UserError):
        with shared_token(tmp_path) as (path, token):
            require_shared(tmp_path, [{"node_ip": "10.0.0.7", "seen": False}])
    assert list(tmp_path.iterdir()) == []


def test_a_worker_that_does_not_read_the_token_is_named_in_one_line(tmp_path):
    require_shared(tmp_path, [{"node_ip": "10.0.0.5", "seen": True}, {"node_ip": "10.0.0.6", "seen": True}])
    with pytest.raises(UserError) as e:
        require_shared(tmp_path, [{"node_ip": "10.0.0.5", "seen": True}, {"node_ip": "10.0.0.6", "seen": False}])
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"out_dir {tmp_path} is not shared with the trainer worker on node 10.0.0.6:")
    assert "NFS" in msg


def test_a_snapshot_that_cannot_be_written_warns_and_the_step_is_still_pruned(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints", keep=1)
    for step in (1, 2):
        (store.begin(step) / TRAINER_DCP).mkdir()  # no DCP metadata in it: nothing to read the policy from
        if step == 2:
            with pytest.warns(UserWarning, match=r"checkpoint step 1: its policy snapshot was not written \(.+\); "
                                                 r"`workbench export --step 1` will not find it"):
                store.commit(step, {"step": step})
        else:
            store.commit(step, {"step": step})
    assert store.steps() == [2] and store.snapshot_steps() == [] and store.exportable_steps() == [2]
    assert not list((tmp_path / "checkpoints").glob("policies/.tmp_*"))  # no half-written snapshot counts

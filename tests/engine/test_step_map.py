"""The step map in engine/train/trainer.py's docstring: every file it names exists, it has at most
12 stops, and one traced step (a generator and a trainer driven in-process, as their Ray actors run
them: sample, score, prepare, train, push the weights) enters no package file the map leaves out."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

from workbench.engine.train import trainer

PACKAGE = Path(trainer.__file__).resolve().parents[2]  # workbench/
NAMED = re.compile(r"(?<![\w/])((?:engine|rl|tasks|runs|tracking)/[\w/]+\.py)\b")
STOP = re.compile(r"^\s*\d+\.\s+(\S+\.py)", re.M)


def step_map() -> tuple[list[str], set[str]]:
    """(the stops in order, every file the map names) from the trainer's module docstring."""
    doc = trainer.__doc__ or ""
    block = doc[doc.index("The step map") :]
    return STOP.findall(block), set(NAMED.findall(block))


def test_the_step_map_names_files_that_exist() -> None:
    stops, named = step_map()
    assert 8 <= len(stops) <= 12, stops
    assert set(stops) <= named
    assert stops[0] == "engine/run/coordinator.py" and stops[-2] == "engine/run/weight_sync.py"
    missing = sorted(f for f in named if not (PACKAGE / f).is_file())
    assert not missing, f"the step map names files that no longer exist: {missing}"


def test_a_traced_step_enters_only_the_files_of_the_map(tiny_config) -> None:
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.run.actors import generator_parts, trainer_parts

    cfg = tiny_config(for_actors=True)
    gen, tr = Generator(**generator_parts(cfg)), trainer.Trainer(**trainer_parts(cfg))
    root = str(PACKAGE) + "/"
    entered: set[str] = set()

    def profile(frame, event, arg):  # functions entered; a module's first import is not the step's path
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(root) and code.co_name != "<module>":
            entered.add(code.co_filename[len(root) :])

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        chunk = gen.generate(0, [0, 1, 2, 3], 4, seed=3)
        result, weights = tr.train_step(chunk.packed, 0)
        gen.set_weights(weights, result.version)
        assert gen._apply_pending() == result.version == 1
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    _, named = step_map()
    assert {"engine/rollout/worker.py", "engine/train/trainer.py", "rl/step.py", "rl/losses.py"} <= entered
    assert not entered - named, f"the step entered files its map does not name: {sorted(entered - named)}"

"""Task mixtures (`task.mix`): several sources in one run, each with its own domain and validation set.

    task:
      mix:
        - {name: addition, difficulty: 2, domain: math, weight: 1}
        - {name: pyfunc, domain: code, weight: 1}

    task = load_task(cfg.task)            # workbench.tasks.base dispatches here when cfg.mix is set
    task.parts["code"].sandboxed          # each domain keeps its own TaskData: checker, flags
    task.weights                          # {"math": 0.5, "code": 0.5} (normalised)
    [ex.domain for ex in task.val]        # every example carries its domain

Each source is an ordinary task config (a synthetic family, a JSONL / Parquet file, a code file,
HumanEval) loaded by `load_task` as if it were alone; its examples are copied with their domain
and a new id, `offset + own id`, where a source's offset is the sum of the id spans
(largest own id + 1) of the sources listed before it. So a mixed example id names its source and
its row there (`workbench check` uses these ids). `val` is the sources' lists one after another,
in config order, `train` the same interleaved evenly; prompts are drawn by weight by `workbench.rl.mixture.MixtureSampler`
(one curriculum per domain), and the evaluator validates each domain on its own split.

A source's problem is reported as one line naming it: `task.mix[1] (domain 'code'): ...`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from workbench.errors import UserError
from workbench.tasks.types import Example, TaskData


def domain_of(src: Any) -> str:
    """A source's domain: its `domain`, else its task name."""
    return src.domain or src.name


def absolute_mix(mix: list) -> list:
    """The sources with their file paths made absolute (Ray workers do not share the driver's cwd)."""
    from workbench.tasks.hf import task_path

    # an hf source's hub dataset id stays an id (tasks/hf.py)
    return [dataclasses.replace(s, path=task_path(s.path) if s.name == "hf" else str(Path(s.path).expanduser().resolve()))
            if s.path else s for s in mix]  # fmt: skip


def _retag(examples: list[Example], domain: str, offset: int) -> list[Example]:
    return [dataclasses.replace(ex, id=ex.id + offset, domain=domain) for ex in examples]


def load_mixed_task(cfg: Any, load_task: Callable[[Any], TaskData]) -> TaskData:
    """The TaskData of `cfg.mix` (a `workbench.config.TaskConfig` whose `mix` is set); each source
    is loaded with `load_task` (workbench.tasks.base.load_task, which dispatches here: passed in,
    so this module does not import its caller)."""
    parts: dict[str, TaskData] = {}
    trains: list[list[Example]] = []
    val: list[Example] = []
    offsets: dict[str, int] = {}
    offset = 0
    for i, src in enumerate(cfg.mix):
        domain = domain_of(src)
        try:
            # the mix's chat template and system prompt reach every source (a source's own system prompt wins)
            part = load_task(dataclasses.replace(src, chat_template=cfg.chat_template or src.chat_template,
                                                 system_prompt=src.system_prompt or cfg.system_prompt))  # fmt: skip
        except UserError as e:
            raise UserError(f"task.mix[{i}] (domain {domain!r}): {e}") from None
        parts[domain] = part
        offsets[domain] = offset
        trains.append(_retag(part.train, domain, offset))
        val += _retag(part.val, domain, offset)
        offset += 1 + max(ex.id for ex in part.train + part.val)
    train = _interleave(trains)
    total = sum(s.weight for s in cfg.mix)
    first = next(iter(parts.values()))
    return TaskData(
        name="mix:" + "+".join(parts),
        train=train,
        val=val,
        checker=first.checker,  # per-example checking goes by domain (base.check_batch)
        stop=_common_stop(parts),
        alphabet="".join(sorted({c for p in parts.values() for c in p.alphabet})),
        checker_name="mix:" + "+".join(f"{d}={p.checker_name}" for d, p in parts.items()),
        seed=first.seed,
        chat_template=any(p.chat_template for p in parts.values()),
        info={"source": "mix", "offsets": offsets, "sources": {d: p.info for d, p in parts.items()}},
        sandboxed=any(p.sandboxed for p in parts.values()),
        parts=parts,
        weights={domain_of(s): s.weight / total for s in cfg.mix},
    )


def _interleave(lists: list[list[Example]]) -> list[Example]:
    """The lists merged evenly (each at its own pace, by position / length), so any prefix of the
    result holds every source in proportion (the builtin warm-up probes the first examples)."""
    keyed = [((j + 0.5) / len(xs), i, ex) for i, xs in enumerate(lists) for j, ex in enumerate(xs)]
    return [ex for _, _, ex in sorted(keyed, key=lambda t: (t[0], t[1]))]


def _common_stop(parts: dict[str, TaskData]):
    """The sources' extra stop strings, merged (None when no source has any)."""
    stops = [s for p in parts.values() for s in (p.stop or [])]
    return sorted(set(stops)) or None


def domains(task: TaskData) -> list[str]:
    """The task's domains in config order ([] for a single task)."""
    return list(task.parts)


def part_for(task: TaskData, ex: Example) -> TaskData:
    """The TaskData that owns `ex`: its source in a mix, else the task itself."""
    return task.parts.get(ex.domain, task) if task.parts else task


def indices_by_domain(examples: list[Example]) -> dict[str, list[int]]:
    """domain -> positions of its examples in `examples` (in order)."""
    out: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        out.setdefault(ex.domain, []).append(i)
    return out

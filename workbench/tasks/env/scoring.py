"""An environment's episodes scored: one Verdict per episode, as `tasks.base.check_batch` gives one per text.

    verdicts = episode_verdicts(task, episodes, examples, trainer_state=state)

- An episode with an environment fault (`Episode.error`) is `env_error`: its group is dropped in
  training and the sample left out of validation (engine/rollout/scoring.py), counted.
- Without `reward.functions`, the environment's reward (get_reward(), or the sum of step's rewards)
  is the sample's reward, and the episode passes when it is above env.pass_threshold; get_reward
  giving None makes it `not_applicable` (reward 0, left out of val/pass_rate, counted).
- With them, they are called as TRL calls them: `prompts` the prompt's messages, `completions` the
  conversation after them (assistant turns with their tool calls, tool and environment messages),
  `completion_ids` the tokens after the prompt, `environments` the episodes' instances, and the
  row's columns. The environment's reward is one more term of weight 1 (TRL adds it so), and the
  pass function decides as for any task; without one (several unmarked functions) the environment's
  pass decides, or, for a tool environment without get_reward, the summed reward above the threshold.
  With `task_verdict` (reward.validate_with: task) the environment's pass decides.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from workbench.tasks.types import Example, TaskData, Verdict


def episode_verdicts(task: TaskData, episodes: Sequence[Any], examples: Sequence[Example], *, threshold: float = 0.0,
                     trainer_state: Any = None, task_verdict: bool = False) -> list[Verdict]:  # fmt: skip
    """One Verdict per episode (prompt-major, as the examples); see the module docstring."""
    if len(episodes) != len(examples):
        raise ValueError(f"{len(episodes)} episodes for {len(examples)} examples")
    env_name = task.env.name if task.env is not None else "env"
    out: list[Optional[Verdict]] = []
    for ep in episodes:
        if ep.error is not None:
            out.append(Verdict("env_error", detail=ep.error))
        elif not task.reward_functions:
            if ep.reward is None:  # get_reward gave None: it does not apply (trained with 0, left out of val/pass_rate)
                out.append(Verdict("not_applicable", reward=0.0, values={env_name: math.nan}))
            else:
                out.append(Verdict("pass" if ep.passed else "fail", reward=ep.reward, values={env_name: float(ep.reward)}))
        else:
            out.append(None)  # the functions score it, below
    good = [i for i, v in enumerate(out) if v is None]
    if good:
        scored = _with_functions(task, [episodes[i] for i in good], [examples[i] for i in good], env_name,
                                 threshold, trainer_state, task_verdict)  # fmt: skip
        for i, v in zip(good, scored):
            out[i] = v
    return out  # type: ignore[return-value]


def _with_functions(task: TaskData, episodes: list, examples: list, env_name: str, threshold: float,
                    trainer_state: Any, task_verdict: bool) -> list[Verdict]:  # fmt: skip
    from workbench.rl.reward_functions import score_batch

    keys = list(dict.fromkeys(k for ex in examples for k in ex.columns))
    columns: dict[str, list] = {k: [ex.columns.get(k) for ex in examples] for k in keys}
    columns.setdefault("answer", [ex.answer for ex in examples])
    columns["environments"] = [ep.instance for ep in episodes]
    columns.setdefault("answer_format", [None] * len(examples))
    columns["task_passed"] = [bool(ep.passed) for ep in episodes]  # the shipped `correct`: the environment's pass
    prompts, completions = zip(*(split_conversation(ep.messages, ep.prompt_messages) for ep in episodes))
    scores = score_batch(task.reward_functions, list(prompts), list(completions), columns, [ex.id for ex in examples],
                         completion_ids=[ep.completion_ids for ep in episodes], trainer_state=trainer_state)  # fmt: skip
    out = []
    for i, ep in enumerate(episodes):
        reward = scores.rewards[i] + (ep.reward if ep.reward is not None else 0.0)
        values = {fn: vs[i] for fn, vs in scores.values.items()}
        if task.env is not None and task.env.has_reward:
            values[env_name] = math.nan if ep.reward is None else float(ep.reward)
        if task_verdict or scores.passed is None:
            if ep.passed is None and task.env is not None and task.env.has_reward:
                name = "not_applicable"  # get_reward gave None and no function decides
            else:
                passed = ep.passed if ep.passed is not None else reward > threshold
                name = "pass" if passed else "fail"
        elif scores.passed[i] is None:
            name = "not_applicable"
        else:
            name = "pass" if scores.passed[i] else "fail"
        out.append(Verdict(name, reward=float(reward) if math.isfinite(reward) else 0.0, values=values))
    return out


def split_conversation(messages: list[dict], prompt_messages: int) -> tuple[list[dict], list[dict]]:
    """(the prompt's messages, the rest): the first `prompt_messages` are the prompt's (Episode.prompt_messages)."""
    return messages[:prompt_messages], messages[prompt_messages:]

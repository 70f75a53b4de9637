"""Environments as tasks (issue 51's foundations): a TRL `environment_factory` class or a turn-based
reset/step class, run as token-exact multi-turn episodes. Pure and engine-independent: the
generators call `EpisodeRunner.run(row, sample)` with their own `sample(token_ids, max_new_tokens)`.

    env = load_env_factory("workbench.envs.calculator:CalculatorEnv")    # factory.py: checked, one line if wrong
    runner = EpisodeRunner(env, tokenizer, EnvSettings(max_turns=4))      # episode.py: the driver
    ep = runner.run(row, sample)                                          # Episode: ids, mask, logprobs, reward, ...

tools.py parses Hermes `<tool_call>` blocks and runs the calls; render.py puts the tools in the
prompt and computes an environment message's token suffix; deadline.py abandons hung calls.
"""

from workbench.tasks.env.deadline import EnvFault, EnvHang, call_with_deadline
from workbench.tasks.env.episode import Episode, EnvSettings, EpisodeRunner, EpisodeTokens
from workbench.tasks.env.factory import EnvFactory, inspect_env, load_env_factory
from workbench.tasks.env.render import EnvTemplateError, TemplateFormat, env_suffix_ids, template_format
from workbench.tasks.env.tools import ParsedReply, ToolCall, ToolResult, parse_reply, run_tool

__all__ = [
    "EnvFactory", "EnvFault", "EnvHang", "EnvSettings", "EnvTemplateError", "Episode", "EpisodeRunner", "EpisodeTokens",
    "ParsedReply", "TemplateFormat", "ToolCall", "ToolResult", "call_with_deadline", "env_suffix_ids", "inspect_env",
    "load_env_factory", "parse_reply", "run_tool", "template_format",
]

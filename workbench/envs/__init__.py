"""Shipped environments, written as a TRL user writes them (standard library only, no workbench import):

    workbench.envs.calculator:CalculatorEnv   tools (add, subtract, multiply, submit) + get_reward; make_rows, write_jsonl
    workbench.envs.guess:GuessNumberEnv       turn-based: reset(**row) -> rules, step(reply) -> (hint, reward, done)

Name one in a run config as `task: {name: env, env: "workbench.envs.calculator:CalculatorEnv", ...}`.
"""

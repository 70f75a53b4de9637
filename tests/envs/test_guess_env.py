"""workbench/envs/guess.py: the turn-based game (reset/step), alone and through the episode driver."""

from __future__ import annotations

from tests.tasks.env.env_helpers import tiny_tokenizer
from workbench.envs.guess import GuessNumberEnv, make_rows
from workbench.tasks.env import EnvSettings, EpisodeRunner, load_env_factory


def test_hints_point_to_the_secret_and_a_right_guess_wins():
    env = GuessNumberEnv(max_guesses=4)
    rules = env.reset(target=13)
    assert "from 1 to 20" in rules and "4 guesses" in rules
    assert env.step("I guess 10.") == ("Higher. 3 guesses left.", 0.0, False)
    assert env.step("15") == ("Lower. 2 guesses left.", 0.0, False)
    assert env.step("13!") == (None, 1.0, True)


def test_running_out_of_guesses_or_not_answering_a_number():
    env = GuessNumberEnv(max_guesses=2)
    env.reset(target=5)
    obs, reward, done = env.step("no idea")
    assert obs.startswith("Reply with one whole number from 1 to 20.") and (reward, done) == (0.0, False)
    assert env.step("6") == (None, 0.0, True)


def test_without_a_target_the_secret_is_drawn_from_the_seed_within_the_range():
    targets = set()
    for seed in range(40):
        env = GuessNumberEnv()
        env.reset(seed=seed, low=3, high=6)
        again = GuessNumberEnv()
        again.reset(seed=seed, low=3, high=6)
        assert env.target == again.target and 3 <= env.target <= 6
        targets.add(env.target)
    assert targets == {3, 4, 5, 6}


def test_rows():
    rows = make_rows(50, seed=2)
    assert rows == make_rows(50, seed=2) and all(1 <= r["target"] <= 20 and r["prompt"] == "" for r in rows)


def test_a_game_through_the_driver_binary_search():
    tok = tiny_tokenizer()
    lo, hi, guesses = 1, 20, []

    def sample(ids, max_new):
        nonlocal lo, hi
        text = tok.decode(ids)
        if guesses and "Higher." in text.rsplit("<|im_start|>user", 1)[-1]:
            lo = guesses[-1] + 1
        elif guesses:
            hi = guesses[-1] - 1
        guesses.append((lo + hi) // 2)
        out = tok.encode(str(guesses[-1]), add_special_tokens=False) + [tok.eos_token_id]
        return out, [0.0] * len(out)

    env = load_env_factory("workbench.envs.guess:GuessNumberEnv")
    ep = EpisodeRunner(env, tok, EnvSettings(max_turns=6)).run({"prompt": "", "target": 17}, sample)
    assert ep.error is None and ep.passed and ep.reward == 1.0 and guesses[-1] == 17 and ep.turns == len(guesses)
    assert ep.messages[0]["content"].startswith("Let's play a game.")  # reset's rules are the user turn
    assert [m["role"] for m in ep.messages[1:]] == ["assistant", "user"] * (ep.turns - 1) + ["assistant"]

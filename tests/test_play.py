"""``rods play``: a human plays an episode in the terminal (stdin is fed by the test)."""

from __future__ import annotations

import io
import json
import re
import shlex

import pytest

from rods_gym import ToolChainEnv
from rods_gym.cli import main
from rods_gym.commands.play import describe_slots, parse_shorthand

REWARD_LINE = re.compile(r"^reward ([+-]\d+\.\d{3}) \| progress (\d\.\d\d) \| error (\w+)$", re.M)


def _oracle_lines(mode: str, difficulty: str, seed: int, split: str | None = None) -> tuple[list[str], object]:
    """The oracle's actions for the episode ``rods play`` will start, as typed lines."""
    env = ToolChainEnv(mode=mode, difficulty=difficulty, task_set=split)
    env.reset(seed=seed)
    lines = []
    for _ in range(100):
        action = env.oracle_action()
        lines.append(action)
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
    return lines, env.task


def _play(monkeypatch, capsys, argv: list[str], lines: list[str]) -> str:
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    assert main(["play", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("mode, difficulty, seed, split", [
    ("chat", "easy", 3, None), ("chat", "hard", 3, None), ("compact", "medium", 3, None), ("chat", "easy", 5, "dev"),
])
def test_play_oracle_lines_solve_the_task(monkeypatch, capsys, mode, difficulty, seed, split) -> None:
    lines, task = _oracle_lines(mode, difficulty, seed, split)
    argv = ["--seed", str(seed), "--mode", mode] + (["--split", split] if split else ["--difficulty", difficulty])
    out = _play(monkeypatch, capsys, argv, lines)
    assert f"task {task.id}" in out
    assert task.turns[0].message in out or mode == "compact"
    for tool in task.tools:
        if not any(tool in t.locked for t in task.turns[:1]):
            assert f"  {tool}(" in out  # tools are listed with their parameters
    rewards = REWARD_LINE.findall(out)
    assert len(rewards) == len(lines)
    assert sum(float(r) for r, _, _ in rewards) == pytest.approx(1.0, abs=2e-3)
    assert rewards[-1][1] == "1.00"
    progress = [float(p) for _, p, _ in rewards]
    assert progress == sorted(progress)  # the oracle never loses progress
    assert all(err == "none" for _, _, err in rewards)
    assert "episode over: return 1.000 | progress 1.00 | success yes" in out


def test_play_shorthand_errors_and_meta_commands(monkeypatch, capsys) -> None:
    # an episode the first call does not finish, so that :quit stops it
    seed = next(s for s in range(3, 40) if len(_oracle_lines("chat", "easy", s)[0]) > 2)
    lines, task = _oracle_lines("chat", "easy", seed)
    first = task.calls[0]
    env = ToolChainEnv(mode="chat", difficulty="easy")
    env.reset(seed=seed)
    other = next(t for t in env.suite.tools if t not in task.tools)
    typed = [
        ":help",
        ":tools",
        ":hint",
        ":oracle",                                     # not a command: refused, not sent as a reply
        "{not json",                                   # malformed tool call
        f"{other} x=1",                                 # a tool not offered in this task
        f"{first.tool} bogus=1",                        # shorthand with a wrong argument
        f"{first.tool} " + " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v!r}"
                                     for k, v in first.args.items()),  # the right first call, shorthand
        ":quit",
    ]
    out = _play(monkeypatch, capsys, ["--seed", str(seed)], typed)
    assert ":tools  show the tools" in out
    assert f"hint    {lines[0]}" in out
    assert "unknown command :oracle;" in out
    rewards = REWARD_LINE.findall(out)
    assert [e for _, _, e in rewards] == ["malformed", "unavailable_tool", "invalid_arguments", "none"]
    assert "is missing required argument(s)" in out
    bound = task.bound(first.id)
    expected = 1 / (len(task.calls) + (task.answer is not None)) if not bound else 0.0
    assert float(rewards[-1][0]) == pytest.approx(expected, abs=1e-3)
    assert "stopped: return" in out and "success no" in out


def test_play_ends_at_eof_and_reports(monkeypatch, capsys) -> None:
    out = _play(monkeypatch, capsys, ["--seed", "1", "--mode", "compact"], ["ask", "bogus words"])
    rewards = REWARD_LINE.findall(out)
    assert [e for _, _, e in rewards] == ["none", "malformed"]
    assert "slots   $0=" in out  # compact mode shows what each value slot holds
    assert "stopped: return 0.000 | progress 0.00" in out


def test_play_stops_cleanly_on_ctrl_c() -> None:
    """Ctrl-C at the prompt ends the episode like end of input: its summary, no traceback."""
    from rods_gym.commands.play import play

    typed, shown = iter(["ask"]), []

    def read(prompt: str) -> str:
        try:
            return next(typed)
        except StopIteration:
            raise KeyboardInterrupt from None

    play(ToolChainEnv(mode="compact", difficulty="easy"), 1, read=read, write=shown.append)
    out = "\n".join(shown)
    assert len(REWARD_LINE.findall(out)) == 1 and "stopped: return 0.000" in out


def test_a_ctrl_c_in_any_command_is_one_line(monkeypatch, capsys) -> None:
    from rods_gym.commands import skills

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(skills, "run", interrupted)
    assert main(["skills"]) == 130
    assert capsys.readouterr().err.strip() == "rods skills: interrupted"


def test_parse_shorthand_types(suite) -> None:
    call = parse_shorthand('transfer_funds from_account_id=ACC-1 to_account_id=ACC-2 amount=12.5', suite, "chat")
    assert call is not None
    body = json.loads(call[len("<tool_call>"):-len("</tool_call>")])
    assert body == {"name": "transfer_funds",
                    "arguments": {"from_account_id": "ACC-1", "to_account_id": "ACC-2", "amount": 12.5}}
    quoted = parse_shorthand("send_email to=a@b.co subject='two words' body=hi", suite, "chat")
    assert quoted is not None and '"subject": "two words"' in quoted
    assert parse_shorthand("get_order order_id=$3", suite, "compact") == "call get_order order_id $3"
    assert parse_shorthand("thanks, that is all", suite, "chat") is None
    assert parse_shorthand("get_order is done", suite, "chat") is None  # not key=value pairs
    assert parse_shorthand("I can't do 'that", suite, "chat") is None  # unbalanced quote: plain text
    # a mistyped tool name with key=value arguments is still a call (the env answers unknown_tool),
    # not a reply that would end the episode
    typo = parse_shorthand("get_ordr order_id=ORD-1", suite, "chat")
    assert typo is not None and json.loads(typo[len("<tool_call>"):-len("</tool_call>")])["name"] == "get_ordr"
    assert parse_shorthand("get_ordr order_id=$1", suite, "compact") == "call get_ordr order_id $1"
    assert parse_shorthand("get_ordr", suite, "chat") is None  # one unknown word: a reply
    assert parse_shorthand("the answer is x=3", suite, "chat") is None  # not name + key=value pairs


def test_play_missing_split_is_reported(monkeypatch, capsys, tmp_path) -> None:
    import rods_gym.envs as envs

    monkeypatch.setattr(envs, "TASKSETS_DIR", tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["play", "--split", "dev"]) == 2
    assert "not found" in capsys.readouterr().err


def test_describe_slots_shows_the_ids_the_view_shows() -> None:
    env = ToolChainEnv(mode="compact", difficulty="easy", slot_ids="shuffled")
    obs, _ = env.reset(seed=2)
    first = next(w for w in obs.split() if w.startswith("$"))
    assert f"  {first}=" in "  " + describe_slots(env)[len("slots   "):]


def test_play_a_given_task_and_refuse_bad_options(monkeypatch, capsys) -> None:
    from rods_gym import load_split

    task = load_split("test")[7]
    env = ToolChainEnv(mode="chat")
    env.reset(options={"task": task.id})
    lines = []
    for _ in range(100):
        lines.append(env.oracle_action())
        if any(env.step(lines[-1])[2:4]):
            break
    for argv in (["--task", task.id], ["--task", task.id, "--split", "test"]):
        out = _play(monkeypatch, capsys, argv, lines)
        assert f"task {task.id}" in out and "success yes" in out
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    for argv, words in ((["--task", task.id, "--split", "dev"], f"no task with id '{task.id}' in split 'dev'"),
                        (["--task", "test-9999"], "no task with id 'test-9999'"),
                        (["--seed", "-1"], "--seed must be >= 0, got -1"),
                        (["--max-steps", "0"], "--max-steps must be >= 1, got 0"),
                        (["--split", "dev", "--difficulty", "hard"], "--difficulty picks sampled tasks")):
        assert main(["play", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("rods play: error: ") and words in err, (argv, err)


@pytest.mark.parametrize("mode", ["chat", "compact"])
def test_help_shows_how_to_type_each_kind_of_action(monkeypatch, capsys, mode) -> None:
    """``:help`` names the three kinds of action with an example of each; the example call is valid syntax in the
    view (the env rejects it, if at all, for its placeholder values, never as malformed)."""
    out = _play(monkeypatch, capsys, ["--seed", "3", "--mode", mode], [":help"])
    lines = out.splitlines()
    assert any("type one action per line" in line for line in lines)
    call = next(line for line in lines if line.strip().startswith("a tool call")).split("a tool call", 1)[1].strip()
    shorthand = next(line for line in lines if "or the shorthand" in line).split("or the shorthand", 1)[1].strip().split("  ")[0]
    question = next(line for line in lines if line.strip().startswith("a question"))
    reply = next(line for line in lines if line.strip().startswith("a reply"))
    assert ":tools  show the tools" in out and ":quit" in out
    env = ToolChainEnv(mode=mode, difficulty="easy")
    env.reset(seed=3)
    assert parse_shorthand(shorthand.strip(), env.suite, mode) is not None
    if mode == "chat":
        body = json.loads(call)
        assert body["name"] in env.episode.available_tools() and set(body["arguments"])
        assert "'?'" in question and "e.g." in question and "e.g." in reply
    else:
        assert call.startswith("call ") and question.split()[2] == "ask" and reply.split()[2] == "reply"
    _, _, _, _, info = env.step(call)
    assert info["error"] != "malformed"


def test_a_call_typed_with_bare_arguments_is_not_sent_and_shows_the_right_form(monkeypatch, capsys) -> None:
    """``search_agent_tickets AGT-3830``: a tool name with arguments that are neither key=value nor JSON. The env
    would take it as the final reply (return 0, episode over); play sends nothing, shows the forms with the typed
    values in place, and the episode goes on: the suggested line then makes the call."""
    seed = next(s for s in range(3, 40) if len(_oracle_lines("chat", "easy", s)[0]) > 2)
    _, task = _oracle_lines("chat", "easy", seed)
    first = task.calls[0]
    assert not task.bound(first.id)  # every argument is typed by the user here
    env = ToolChainEnv(mode="chat", difficulty="easy")
    env.reset(seed=seed)
    params = env.suite.tools[first.tool].params
    ordered = [p.name for p in params if p.required] + [p.name for p in params if not p.required]
    typed = f"{first.tool} " + " ".join(shlex.quote(str(first.args[k])) for k in ordered if k in first.args)
    out = _play(monkeypatch, capsys, ["--seed", str(seed)], [typed])
    assert f"not sent: {typed!r} looks like a call to {first.tool}" in out, out
    assert REWARD_LINE.findall(out) == []  # nothing reached the env
    assert "stopped: return 0.000" in out and "| 0 steps" in out  # the episode was not ended by it
    suggested = out.split("Type it as\n", 1)[1].splitlines()[0].strip()
    json_form = out.split("Type it as\n", 1)[1].splitlines()[2].strip()
    assert json.loads(json_form) == {"name": first.tool, "arguments": json.loads(json.dumps(first.args))}
    again = _play(monkeypatch, capsys, ["--seed", str(seed)], [typed, suggested])
    rewards = REWARD_LINE.findall(again)
    assert len(rewards) == 1 and rewards[0][2] == "none" and float(rewards[0][0]) > 0
    # in a function-call form, and a tool name that is not there: the same refusal, naming what is wrong
    out = _play(monkeypatch, capsys, ["--seed", str(seed)], [f"{first.tool}({', '.join(map(str, first.args.values()))})",
                                                            "search_agnt_tickets AGT-3830", "thanks, that is all"])
    assert out.count("not sent: ") == 2 and "no tool is named search_agnt_tickets" in out
    assert "episode over" in out  # plain text is still the reply that ends the episode (the env's rule)

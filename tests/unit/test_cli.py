"""The command line's conventions, without running a command (click's runner; no JVM)."""

from __future__ import annotations

from click.testing import CliRunner

from ttl.cli import main


def _commands(group=main, path=()):
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_every_command_takes_dash_h_as_help():
    runner = CliRunner()
    for words in [(), *_commands()]:
        result = runner.invoke(main, [*words, "-h"])
        assert result.exit_code == 0 and "Usage: " in result.output, (words, result.output)


def test_the_profile_comes_from_ttl_conf_when_no_conf_is_given(tmp_path, monkeypatch):
    status = main.commands["status"]
    monkeypatch.delenv("TTL_CONF", raising=False)
    assert str(status.make_context("status", []).params["conf_path"]) == "conf/local.toml"
    profile = tmp_path / "mine.toml"
    monkeypatch.setenv("TTL_CONF", str(profile))
    assert status.make_context("status", []).params["conf_path"] == profile
    given = status.make_context("status", ["--conf", "other.toml"]).params["conf_path"]
    assert str(given) == "other.toml"  # the option wins
    assert "TTL_CONF" in CliRunner().invoke(main, ["status", "-h"]).output


def test_dead_letter_replay_takes_its_own_conf():
    replay = main.commands["dead-letters"].commands["replay"]
    ctx = replay.make_context("replay", ["--conf", "x.toml", "--reason", "null_key"])
    assert str(ctx.params["conf_path"]) == "x.toml"

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


def test_produce_sample_takes_the_profiles_brokers_and_says_when_it_cannot():
    result = CliRunner().invoke(main, ["produce-sample", "--conf", "conf/local.toml"])
    assert result.exit_code == 2 and "give --bootstrap HOST:PORT" in result.output
    option = next(p for p in main.commands["produce-sample"].params if p.name == "bootstrap")
    assert not option.required


def test_drill_writes_its_report_with_out_like_report_and_still_takes_report():
    drill = main.commands["drill"]
    assert drill.make_context("drill", ["--out", "d.json"]).params["report"].name == "d.json"
    assert drill.make_context("drill", ["--report", "d.json"]).params["report"].name == "d.json"


def test_submit_prints_the_spark_submit_command_from_the_profile(capsys):
    result = CliRunner().invoke(main, ["submit", "--print", "--conf", "conf/local.toml",
                                       "jobs/stream.py", "--", "--available-now"])
    printed = result.output + capsys.readouterr().out
    assert result.exit_code == 0, printed
    assert "spark-submit --master 'local[*]'" in printed
    assert printed.rstrip().endswith("jobs/stream.py --conf conf/local.toml --available-now")
    # the job's own options after it go to the job, even those submit has (--conf)
    later = CliRunner().invoke(main, ["submit", "--print", "jobs/drill.py", "--conf", "x.toml"])
    assert later.exit_code == 0
    assert (later.output + capsys.readouterr().out).rstrip().endswith(
        "jobs/drill.py --conf conf/local.toml --conf x.toml")


def test_produce_sample_with_bootstrap_is_not_refused_for_an_embedded_profile():
    from ttl import cli

    app = cli._app(cli.Path("conf/local.toml"), "127.0.0.1:1")
    assert app.kafka.bootstrap == "127.0.0.1:1"  # what the command then produces to


_EXITING = """
import atexit, sys, threading, time
from pathlib import Path
from ttl.cli import _exit
out = Path(sys.argv[1])
atexit.register(lambda: out.with_suffix(".atexit").write_text("ran"))
# still working when the exit starts (the thing under test, not a wait): the exit
# must join it
late = lambda: (time.sleep(0.3), out.with_suffix(".thread").write_text("done"))
threading.Thread(target=late).start()
from concurrent.futures import ThreadPoolExecutor
ThreadPoolExecutor(2).submit(print, "from a pool", flush=True).result()  # an idle worker stays
print("printed", flush=False)
_exit(eval(sys.argv[2]))
"""


def test_the_command_lines_exit_does_what_a_normal_exit_does_first(tmp_path):
    """``ttl`` leaves with ``os._exit`` (no interpreter teardown, where Arrow's threads can
    crash a finished command), but first as a normal exit does: it waits for non-daemon
    threads (an idle thread pool's workers are told to stop, not waited for forever), runs
    the exit handlers, flushes output; its code is ``sys.exit``'s."""
    import subprocess
    import sys

    for code, returned, stderr in (("3", 3, ""), ("None", 0, ""), ("'bad setting'", 1,
                                                                     "bad setting")):
        out = tmp_path / code.strip("'")
        proc = subprocess.run([sys.executable, "-c", _EXITING, str(out), code],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == returned, (code, proc.stderr)
        assert proc.stdout == "from a pool\nprinted\n", proc
        assert proc.stderr.strip() == stderr, proc
        assert out.with_suffix(".atexit").read_text() == "ran"
        assert out.with_suffix(".thread").read_text() == "done"

"""The replay against an independent FCFS simulation, its determinism, and its handling of bad input."""

from __future__ import annotations

import heapq
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduling.engine import model as em
from scheduling.engine import parse_policy
from scheduling.replay.run import load_trace
from scheduling.replay.sim import Simulation
from scheduling.replay.spec import ClusterSpec
from scheduling.replay.trace import ReplayError

SAMPLES = Path(__file__).resolve().parents[3] / "scheduling" / "replay" / "samples"
NASA = SAMPLES / "NASA-iPSC-1993-3.1-cln.first3000.swf"
CC = SAMPLES / "computecanada_slurm_2021_gpu_jobs.first3000.csv.gz"
README = SAMPLES.parents[2] / "README.md"


def fcfs_starts(jobs, nodes):
    """A plain list scheduler written for this test: at each instant, ends first, then arrivals,
    then the queue in submission order, starting every job whose node count is free."""
    free, queue, starts, ends, i = nodes, [], {}, [], 0
    while i < len(jobs) or ends or queue:
        t = min(ends[0][0] if ends else float("inf"), jobs[i].submit if i < len(jobs) else float("inf"))
        if t == float("inf"):
            break
        while ends and ends[0][0] <= t:
            free += heapq.heappop(ends)[1]
        while i < len(jobs) and jobs[i].submit <= t:
            queue.append(jobs[i])
            i += 1
        waiting = []
        for j in queue:
            if j.nodes <= free:
                free -= j.nodes
                starts[j.id] = t
                heapq.heappush(ends, (t + j.run, j.nodes))
            else:
                waiting.append(j)
        queue = waiting
    return starts


def test_a_replay_that_measures_nothing_starts_and_ends_every_job_alike():
    """Without ``measure`` (a start estimate reads first starts only) the replay is the same; only
    the use over time is not integrated."""
    spec = ClusterSpec("cc-16x4", [em.Node(f"n{i:02d}", {"gpu": 4.0}) for i in range(16)], default_fair_share="equal")
    jobs, _ = load_trace(str(CC), "slurm-csv", str(SAMPLES / "mapping-cc.json"), spec, limit=300)
    policy = parse_policy(json.loads((SAMPLES / "class_cost.json").read_text()))
    measured = Simulation(jobs, spec, policy).run()
    bare = Simulation(jobs, spec, policy, measure=False).run()
    assert bare.first_start == measured.first_start and bare.finish == measured.finish
    assert bare.decisions == measured.decisions > 0  # it preempted
    assert measured.gpu_area > 0 and measured.gpu_bins
    assert bare.gpu_area == 0 and not bare.gpu_bins and bare.now == measured.now


def test_fcfs_without_preemption_matches_an_independent_simulation():
    spec = ClusterSpec("nasa", [em.Node(f"n{i:03d}", {"gpu": 1.0}) for i in range(32)])
    jobs, stats = load_trace(str(NASA), "swf", None, spec, limit=800)
    assert len(jobs) == 699 and not stats.bad and stats.skipped["larger than any node or the cluster"] > 0
    rec = Simulation(jobs, spec, parse_policy({"kind": "class_cost", "enabled": False})).run()
    expected = fcfs_starts(jobs, 32)
    assert rec.first_start == expected
    assert sum(1 for j in jobs if expected[j.id] > j.submit) > 50  # there was a queue


def _replay_json(*extra):
    out = []

    class Sink:
        def write(self, text):
            out.append(text)

        def flush(self):
            pass

    call_command("replay", str(CC), "--cluster", str(SAMPLES / "cluster-cc.json"), "--policy",
                 str(SAMPLES / "class_cost.json"), "--mapping", str(SAMPLES / "mapping-cc.json"), "--json",
                 *extra, stdout=Sink())
    return "".join(out)


def test_same_trace_twice_gives_identical_reports_and_a_comparison():
    args = ("--jobs", "300", "--compare", str(SAMPLES / "fair_share.json"), "--seed", "7",
            "--checkpoint-jitter", "0.5")
    first, second = _replay_json(*args), _replay_json(*args)
    assert first == second
    doc = json.loads(first)
    assert [p["name"] for p in doc["policies"]] == ["class_cost", "fair_share"]
    assert doc["comparison"][0]["figures"]["preemptions"]["difference"] == (
        doc["policies"][1]["summary"]["preemptions"] - doc["policies"][0]["summary"]["preemptions"])
    assert doc["policies"][0]["summary"]["preemptions"] > 0


def test_report_files_are_written_and_the_html_is_self_contained(tmp_path):
    _replay_json("--jobs", "200", "--out", str(tmp_path))
    html = (tmp_path / "replay.html").read_text()
    assert "<svg" in html and "<script" not in html and "http://www.w3.org/2000/svg" in html
    assert "src=" not in html and "href=" not in html
    assert json.loads((tmp_path / "replay.json").read_text())["schema"] == "lattice.replay/1"


def test_the_readme_example_prints_the_table_the_readme_shows(tmp_path):
    """The README's two-policy comparison on the sample, run as written (its --out aside), prints
    the figures the README shows: a change to the engine that moves them must move them there too."""
    command, table = re.search(r"```sh\nS=scheduling/replay/samples\n(.*?)\n```\n\n```\n(.*?)```",
                               README.read_text(), re.S).groups()
    args = shlex.split(command.replace("\\\n", " ").replace("$S", str(SAMPLES)))
    assert args[:3] == ["python", "manage.py", "replay"] and args[-2] == "--out"
    out = io.StringIO()
    call_command("replay", *args[3:-1], str(tmp_path), stdout=out)
    assert out.getvalue() == table


BROKEN = """; UnixStartTime: 1000
1 0 -1 10 4 -1 -1 -1 20 -1 1 1 1 -1 0 -1 -1 -1
2 5 -1 10 4 -1 -1 -1
3 x -1 10 4 -1 -1 -1 20 -1 1 1 1 -1 0 -1 -1 -1
4 6 -1 -1 4 -1 -1 -1 20 -1 1 1 1 -1 0 -1 -1 -1
5 7 -1 10 2 -1 -1 -1 20 -1 1 2 2 -1 0 -1 -1 -1
"""


def test_broken_lines_are_counted_and_named(tmp_path):
    trace = tmp_path / "broken.swf"
    trace.write_text(BROKEN)
    spec = ClusterSpec("one", [em.Node("n1", {"gpu": 4.0})])
    jobs, stats = load_trace(str(trace), "swf", None, spec)
    assert [j.name for j in jobs] == ["1", "5"]
    assert jobs[0].submit == 1000.0
    assert dict(stats.bad) == {"8 fields, SWF has 18": 1, "not a number in submit": 1, "no run time": 1}
    assert "3 bad lines skipped" in stats.message() and "line 3: 8 fields" in stats.message()
    with pytest.raises(ReplayError, match="line 3: 8 fields, SWF has 18 \\(--strict\\)"):
        load_trace(str(trace), "swf", None, spec, strict=True)


def test_unknown_format_and_unknown_mapping_column_exit_2_naming_them(tmp_path):
    with pytest.raises(CommandError, match="unknown format 'parquet'") as exc:
        call_command("replay", str(NASA), "--format", "parquet", "--cluster", str(SAMPLES / "cluster-small.json"),
                     "--policy", str(SAMPLES / "class_cost.json"))
    assert exc.value.returncode == 2
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps({"tenant": {"from": "acount_id"}}))
    with pytest.raises(CommandError, match="tenant.from names unknown column 'acount_id'") as exc:
        call_command("replay", str(CC), "--cluster", str(SAMPLES / "cluster-cc.json"),
                     "--policy", str(SAMPLES / "class_cost.json"), "--mapping", str(mapping))
    assert exc.value.returncode == 2


def test_the_process_exits_2_with_the_message():
    done = subprocess.run([sys.executable, "manage.py", "replay", str(NASA), "--format", "nope", "--cluster",
                           str(SAMPLES / "cluster-small.json"), "--policy", str(SAMPLES / "class_cost.json")],
                          capture_output=True, text=True, cwd=SAMPLES.parents[2], check=False)
    assert done.returncode == 2
    assert "unknown format 'nope'" in done.stderr

"""A bad trace, spec, mapping or argument ends the replay with exit 2 and one line naming the
problem (never a traceback); a line that cannot be read is counted and named, unless --strict."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduling.engine import model as em
from scheduling.replay.run import load_trace
from scheduling.replay.spec import ClusterSpec
from scheduling.replay.trace import ReplayError

SAMPLES = Path(__file__).resolve().parents[3] / "scheduling" / "replay" / "samples"
CC = SAMPLES / "computecanada_slurm_2021_gpu_jobs.first3000.csv.gz"
SWF_LINE = "1 0 -1 10 4 -1 -1 -1 20 -1 1 1 1 -1 0 -1 -1 -1\n"
SPEC = ClusterSpec("one", [em.Node("n1", {"gpu": 4.0})])


def _replay(trace: Path, *more: str) -> CommandError:
    with pytest.raises(CommandError) as exc:
        call_command("replay", str(trace), "--cluster", str(SAMPLES / "cluster-small.json"),
                     "--policy", str(SAMPLES / "priority.json"), "--json", *more)
    assert exc.value.returncode == 2
    return exc.value


def _slurm_lines(n: int) -> list[str]:
    with gzip.open(CC, "rt", encoding="utf-8") as f:
        return [f.readline() for _ in range(n)]


@pytest.mark.parametrize("content", [
    b"not gzip at all",
    gzip.compress(SWF_LINE.encode() * 50)[:30],  # cut short
    (lambda d: d[:10] + bytes(b ^ 0x55 for b in d[10:40]) + d[40:])(gzip.compress(SWF_LINE.encode() * 50)),
], ids=["not-gzip", "truncated", "corrupt"])
def test_a_broken_gzip_trace_exits_2_naming_the_file(tmp_path, content):
    trace = tmp_path / "t.swf.gz"
    trace.write_bytes(content)
    assert "cannot read" in str(_replay(trace)) and "t.swf.gz" in str(_replay(trace))


def test_an_empty_zip_trace_says_it_is_empty(tmp_path):
    trace = tmp_path / "t.swf.zip"
    zipfile.ZipFile(trace, "w").close()
    assert "holds no file" in str(_replay(trace))


def test_a_zip_of_several_traces_names_them_instead_of_reading_one(tmp_path):
    trace = tmp_path / "t.swf.zip"
    with zipfile.ZipFile(trace, "w") as archive:
        archive.writestr("a.swf", SWF_LINE)
        archive.writestr("b.swf", SWF_LINE)
    assert "holds 2 files ('a.swf', 'b.swf')" in str(_replay(trace))


def test_a_zip_made_on_macos_reads_its_one_trace(tmp_path):
    trace = tmp_path / "t.swf.zip"
    with zipfile.ZipFile(trace, "w") as archive:
        archive.writestr("__MACOSX/._t.swf", b"\x00\x05\x16\x07 resource fork")
        archive.writestr("t.swf", SWF_LINE * 3)
    jobs, stats = load_trace(str(trace), "swf", None, SPEC)
    assert len(jobs) == 3 and not stats.bad


@pytest.mark.parametrize("content", ["", "\n", "\n" + "1,2,3\n"], ids=["empty", "blank", "blank-first"])
def test_a_csv_trace_without_a_header_says_so(tmp_path, content):
    trace = tmp_path / "t.csv"
    trace.write_text(content, encoding="utf-8")
    with pytest.raises(ReplayError, match="the first line must be the header"):
        load_trace(str(trace), "slurm-csv", None, SPEC)
    assert "the first line must be the header" in str(_replay(trace, "--format", "slurm-csv"))


def test_a_csv_field_past_the_csv_limit_is_a_bad_line(tmp_path):
    header, good, other = _slurm_lines(3)
    trace = tmp_path / "t.csv"
    trace.write_text(header + good + '"' + "x" * 200_000 + '"\n' + other, encoding="utf-8")
    jobs, stats = load_trace(str(trace), "slurm-csv", None, SPEC)
    assert len(jobs) == 2 and sum(stats.bad.values()) == 1
    assert "line 3: not CSV" in stats.message()
    with pytest.raises(ReplayError, match="line 3: not CSV.*--strict"):
        load_trace(str(trace), "slurm-csv", None, SPEC, strict=True)


def test_a_csv_header_past_the_csv_limit_exits_2(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text('"' + "x" * 200_000 + '"\n', encoding="utf-8")
    with pytest.raises(ReplayError, match="header is not CSV"):
        load_trace(str(trace), "slurm-csv", None, SPEC)


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-Infinity"])
def test_an_swf_start_time_that_is_not_a_number_exits_2(tmp_path, value):
    trace = tmp_path / "t.swf"
    trace.write_text(f"; UnixStartTime: {value}\n" + SWF_LINE)
    with pytest.raises(ReplayError, match=f"line 1: UnixStartTime {value!r} is not a number"):
        load_trace(str(trace), "swf", None, SPEC)


@pytest.mark.parametrize(("mapping", "message"), [
    ('{"tenant": {"from": "group", "map": [1]}}', "tenant.map must be an object"),
    ('{"gpus_per_processor": Infinity}', "gpus_per_processor must be a non-negative number"),
    ('{"checkpoint_minutes": NaN}', "checkpoint_minutes must be a non-negative number"),
    ('{"min_gpus": NaN}', "min_gpus must be a non-negative number"),
    ('{"class": {"from": "queue", "bands": [[NaN, 1]]}}', "class.bands must be"),
    ('{"tenant": {"from": "group", "prefix": null}}', "tenant.prefix must be a string, not None"),
    ('{"user": {"from": 3}}', "user.from must be a string, not 3"),
    ('{"checkpoint_minutes": 1e308}', "checkpoint_minutes must be at most 52560000, not 1e\\+308"),
    ('{"gpus_per_processor": 1e308}', "gpus_per_processor must be at most 1000000000000000"),
    ('{"min_gpus": 1' + "0" * 400 + '}', "min_gpus must be at most 1000000000000000"),
    ('{"class": {"from": "queue", "bands": [[1' + "0" * 400 + ', 1]]}}', "class.bands must be"),
    ('{"class": {"from": "queue", "bands": "quartiles", "band_values": 5}}', "class.band_values needs two"),
    ('{"class": {"from": "queue", "bands": "quartiles", "band_values": "ab"}}', "class.band_values needs two"),
])
def test_a_bad_mapping_exits_2_naming_the_field(tmp_path, mapping, message):
    trace, path = tmp_path / "t.swf", tmp_path / "m.json"
    trace.write_text(SWF_LINE)
    path.write_text(mapping)
    with pytest.raises(ReplayError, match=message):
        load_trace(str(trace), "swf", str(path), SPEC)


def test_a_class_or_priority_out_of_range_in_the_trace_is_a_bad_line(tmp_path):
    trace, path = tmp_path / "t.swf", tmp_path / "m.json"
    queues = ["3", "1e300", "11", "-3", "10.5", "7"]
    trace.write_text("".join(f"{i} {i} -1 10 4 -1 -1 -1 20 -1 1 1 1 -1 {q} -1 -1 -1\n"
                             for i, q in enumerate(queues, 1)))
    path.write_text('{"class": {"from": "queue"}}')
    jobs, stats = load_trace(str(trace), "swf", str(path), SPEC)
    assert [(j.name, j.preemption_class) for j in jobs] == [("1", 3), ("6", 7)]
    assert dict(stats.bad) == {"class from queue is not a number from 0 to 10": 4}
    assert "line 2: class from queue" in stats.message()
    with pytest.raises(ReplayError, match="line 2: class from queue is not a number from 0 to 10 \\(--strict\\)"):
        load_trace(str(trace), "swf", str(path), SPEC, strict=True)
    path.write_text('{"priority": {"from": "queue"}}')
    jobs, stats = load_trace(str(trace), "swf", str(path), SPEC)
    assert [j.priority for j in jobs] == [3, 11, 10, 7] and sum(stats.bad.values()) == 2


@pytest.mark.parametrize(("spec", "message"), [
    ('{"nodes": 4, "gpus_per_node": 8, "vclusters": 5}', "vclusters: must be a list"),
    ('{"nodes": 4, "gpus_per_node": 8, "vclusters": {"a": 1}}', "vclusters: must be a list"),
    ('{"nodes": 4, "gpus_per_node": 8, "vclusters": ["a"]}', "vclusters\\[0\\]: must be an object"),
    ('{"nodes": 4, "gpus_per_node": 8, "default_fair_share": NaN}', "default_fair_share must be"),
    ('{"nodes": 4, "gpus_per_node": 8, "default_fair_share": Infinity}', "default_fair_share must be"),
    ('{"nodes": 4, "gpus_per_node": 8, "default_fair_share": -1}', "default_fair_share must be"),
    # absurd sizes are refused before a node is made, not allocated (10**12 nodes) or overflowed
    ('{"nodes": 1000000000000, "gpus_per_node": 8}', "nodes must be at most 100000, not 1000000000000"),
    ('{"nodes": 100001, "gpus_per_node": 8}', "nodes must be at most 100000"),
    ('{"nodes": 4, "gpus_per_node": 1' + "0" * 400 + '}', "gpus_per_node must be at most 1000000000000000"),
    ('{"nodes": 4, "gpus_per_node": 8, "cpus_per_node": 1' + "0" * 400 + '}', "cpus_per_node must be at most"),
    ('{"nodes": 4, "gpus_per_node": 8, "vclusters": [{"name": "a", "nodes": 1000000000000}]}',
     "the vclusters' nodes \\(1000000000000\\) are more than nodes \\(4\\)"),
])
def test_a_bad_cluster_spec_exits_2_naming_the_field(tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(spec)
    with pytest.raises(CommandError, match=message) as exc:
        call_command("replay", str(CC), "--cluster", str(path), "--policy", str(SAMPLES / "priority.json"), "--json")
    assert exc.value.returncode == 2


@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
@pytest.mark.parametrize("option", ["--from", "--until"])
def test_a_date_past_what_utc_can_hold_exits_2(node_gpu_a, option, moment):
    with pytest.raises(CommandError, match=re.escape(f"date out of range: '{moment}'")) as exc:
        call_command("replay", "rg-main", "--format", "lattice", "--group", "rg-main", "--json", option, moment)
    assert exc.value.returncode == 2


@pytest.mark.parametrize("jobs", ["-1", "0"])
def test_jobs_must_be_a_positive_count(jobs):
    error = _replay(CC, "--jobs", jobs)
    assert "--jobs must be a positive number of jobs" in str(error)


@pytest.mark.parametrize("run", ["1e9", "1e15"])  # 1e15: the longest run a trace may give
def test_a_job_running_far_past_the_trace_keeps_the_series_small(tmp_path, run):
    trace = tmp_path / "t.swf"
    trace.write_text(SWF_LINE + f"2 5 -1 {run} 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1\n")
    out = io.StringIO()
    call_command("replay", str(trace), "--cluster", str(SAMPLES / "cluster-small.json"),
                 "--policy", str(SAMPLES / "priority.json"), "--json", stdout=out)
    (policy,) = json.loads(out.getvalue())["policies"]
    assert policy["summary"]["finished"] == 2
    assert len(policy["series"]["gpu_utilisation"]) <= 10_001


def _strict_json(text: str) -> dict:
    def refuse(word: str) -> None:
        raise AssertionError(f"{word} in the report: not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("line", "reason"), [
    ("2 5 -1 1e308 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1", "run past 1000000000000000"),
    ("2 1e300 -1 10 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1", "submit past 1000000000000000"),
    ("2 -1e300 -1 10 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1", "submit past 1000000000000000"),
    ("2 5 -1 10 1e308 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1", "procs past 1000000000000000"),
    ("2 5 -1 10 -1 -1 -1 1e308 -1 -1 1 1 1 -1 0 -1 -1 -1", "req_procs past 1000000000000000"),
    ("2 5 -1 10 4 -1 -1 -1 1e308 -1 1 1 1 -1 0 -1 -1 -1", "req_time past 1000000000000000"),
])
def test_an_swf_time_or_size_past_the_engines_numbers_is_a_bad_line(tmp_path, line, reason):
    """A run of 1e308 s made the report's utilisation NaN (not JSON); 1e308 processors at
    gpus_per_processor 1e15 overflowed the job's size (OverflowError)."""
    trace, mapping = tmp_path / "t.swf", tmp_path / "m.json"
    trace.write_text(SWF_LINE + line + "\n")
    mapping.write_text('{"gpus_per_processor": 1e15}')
    out = io.StringIO()
    call_command("replay", str(trace), "--cluster", str(SAMPLES / "cluster-small.json"), "--mapping", str(mapping),
                 "--policy", str(SAMPLES / "priority.json"), "--json", stdout=out)
    report = _strict_json(out.getvalue())
    assert report["trace"]["bad_lines"] == {reason: 1} and report["trace"]["jobs"] == 0
    with pytest.raises(CommandError, match=f"line 2: {reason} \\(--strict\\)"):
        call_command("replay", str(trace), "--cluster", str(SAMPLES / "cluster-small.json"), "--strict",
                     "--mapping", str(mapping), "--policy", str(SAMPLES / "priority.json"), "--json", stdout=out)


def test_an_swf_start_time_past_the_engines_numbers_exits_2(tmp_path):
    """1e308 plus a submit of 1e308 was an infinite submit time, and Infinity in the report."""
    trace = tmp_path / "t.swf"
    trace.write_text("; UnixStartTime: 1e308\n" + SWF_LINE)
    with pytest.raises(ReplayError, match="line 1: UnixStartTime '1e308' is past 1000000000000000"):
        load_trace(str(trace), "swf", None, SPEC)


@pytest.mark.parametrize("column", ["run_time_sec", "time_limit_sec", "req_gpus", "alloc_nodes", "req_cpus"])
def test_a_slurm_time_or_size_past_the_engines_numbers_is_a_bad_line(tmp_path, column):
    trace = tmp_path / "t.csv"
    header = "job_id,submit_time,run_time_sec,time_limit_sec,req_gpus,alloc_nodes,req_cpus\n"
    row = {"job_id": "2", "submit_time": "2021-01-01 00:00:00", "run_time_sec": "10", "time_limit_sec": "20",
           "req_gpus": "4", "alloc_nodes": "1", "req_cpus": "4", column: "1e308"}
    trace.write_text(header + "1,2021-01-01 00:00:00,10,20,4,1,4\n" + ",".join(row.values()) + "\n")
    mapping = tmp_path / "m.json"
    mapping.write_text('{"tenant": {"value": "t"}, "vcluster": null, "class": null, "priority": null}')
    jobs, stats = load_trace(str(trace), "slurm-csv", str(mapping), SPEC)
    assert len(jobs) == 1 and dict(stats.bad) == {f"{column} past 1000000000000000": 1}


@pytest.mark.parametrize("until", ["2021-03-01", "2021-02-01"])
def test_from_not_before_until_exits_2_instead_of_replaying_nothing(until):
    error = _replay(CC, "--from", "2021-03-01", "--until", until)
    assert f"--from 2021-03-01 is not before --until {until}" in str(error)


@pytest.mark.parametrize("option", ["--cluster", "--policy", "--compare", "--mapping"])
def test_a_json_file_nested_past_what_the_decoder_reads_exits_2(tmp_path, option):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    files = {"--cluster": str(SAMPLES / "cluster-small.json"), "--policy": str(SAMPLES / "priority.json")}
    files[option] = str(deep)
    with pytest.raises(CommandError, match=re.escape(f"{deep}: nested too deeply to be read")) as exc:
        call_command("replay", str(CC), "--json", *(a for pair in files.items() for a in pair))
    assert exc.value.returncode == 2


def _replay_out(out: Path) -> None:
    call_command("replay", str(SAMPLES / "NASA-iPSC-1993-3.1-cln.first3000.swf"), "--cluster",
                 str(SAMPLES / "cluster-small.json"), "--policy", str(SAMPLES / "priority.json"), "--jobs", "20",
                 "--json", "--out", str(out), stdout=io.StringIO())


@pytest.mark.parametrize(("where", "message"), [
    ("file", "--out {out}: not a directory"),
    ("file/sub", "--out {out}: {file} is not a directory"),
    ("dir-in-the-way", "--out {out}: replay.html there is a directory"),
])
def test_an_out_that_cannot_hold_the_report_exits_2_before_the_replay(tmp_path, where, message):
    """It was a FileExistsError or NotADirectoryError traceback once the replay had run."""
    (tmp_path / "file").write_text("mine")
    (tmp_path / "dir-in-the-way" / "replay.html").mkdir(parents=True)
    out = tmp_path / where
    with pytest.raises(CommandError, match=re.escape(message.format(out=out, file=tmp_path / "file"))) as exc:
        _replay_out(out)
    assert exc.value.returncode == 2
    assert (tmp_path / "file").read_text() == "mine" and os.listdir(tmp_path / "dir-in-the-way") == ["replay.html"]


def test_a_report_that_cannot_be_written_leaves_the_old_one_whole(tmp_path, monkeypatch):
    """replay.json was written before replay.html was rendered: a failure there left half a report."""
    _replay_out(tmp_path)
    before = {name: (tmp_path / name).read_text() for name in ("replay.json", "replay.html")}
    monkeypatch.setattr("scheduling.management.commands.replay.render", lambda doc: "\ud800")  # utf-8 cannot
    (tmp_path / "replay.json").write_text("old")
    with pytest.raises(CommandError, match=f"--out {re.escape(str(tmp_path))}: 'utf-8' codec") as exc:
        _replay_out(tmp_path)
    assert exc.value.returncode == 2
    assert sorted(os.listdir(tmp_path)) == ["replay.html", "replay.json"]
    assert (tmp_path / "replay.json").read_text() == "old" and (tmp_path / "replay.html").read_text() == before["replay.html"]


@pytest.mark.parametrize(("option", "content"), [
    ("--mapping", '{"tenant": {"value": "t\\ud800"}}'),
    ("--cluster", '{"nodes": 2, "gpus_per_node": 4, "tenants": [{"name": "\\udfff", "fair_share": 0.5}]}'),
])
def test_a_lone_surrogate_in_a_json_file_exits_2_before_the_replay(tmp_path, option, content):
    """JSON's \\ud800 escape reads as a lone surrogate, which replay.html could not be written with:
    a UnicodeEncodeError traceback once the replay had run, with replay.json already written."""
    path = tmp_path / "doc.json"
    path.write_text(content)
    files = {"--cluster": str(SAMPLES / "cluster-small.json"), "--policy": str(SAMPLES / "priority.json")}
    files[option] = str(path)
    with pytest.raises(CommandError, match=re.escape(f"{path}: '\\ud") + ".* is not a character") as exc:
        call_command("replay", str(SAMPLES / "NASA-iPSC-1993-3.1-cln.first3000.swf"), "--jobs", "20", "--json",
                     "--out", str(tmp_path / "out"), *(a for pair in files.items() for a in pair))
    assert exc.value.returncode == 2 and not (tmp_path / "out").exists()


def _zip(compression: int = zipfile.ZIP_DEFLATED, folder: bool = False) -> bytearray:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        if folder:
            archive.writestr("trace/", "")
        archive.writestr("trace/t.swf", SWF_LINE * 100)
    return bytearray(out.getvalue())


def _flag(data: bytearray, local: int, central: int, value: int, *, set_bit: bool = False) -> bytearray:
    """Write ``value`` at an offset of the local file header and of the central directory's entry."""
    for at in (local, data.find(b"PK\x01\x02") + central):
        data[at] = data[at] | value if set_bit else value
    return data


def _garbled(data: bytearray) -> bytearray:
    data[50:70] = bytes(b ^ 0x5A for b in data[50:70])
    return data


@pytest.mark.parametrize(("content", "message"), [
    (_flag(_zip(), 6, 8, 1, set_bit=True), "is encrypted, password required"),
    (_flag(_zip(), 8, 10, 9), "That compression method is not supported"),  # Deflate64, as Windows writes
    (_garbled(_zip(zipfile.ZIP_LZMA)), "Corrupt input data"),
    (_garbled(_zip(zipfile.ZIP_BZIP2)), "Invalid data stream"),
], ids=["encrypted", "deflate64", "corrupt-lzma", "corrupt-bzip2"])
def test_a_zip_trace_that_cannot_be_read_exits_2_naming_the_file(tmp_path, content, message):
    """The first three were tracebacks: RuntimeError, NotImplementedError and LZMAError are no OSError."""
    trace = tmp_path / "t.swf.zip"
    trace.write_bytes(bytes(content))
    error = str(_replay(trace))
    assert f"cannot read {trace}" in error and message in error


def test_a_zip_trace_is_its_first_file_not_its_first_folder(tmp_path):
    """A zip listing its folder first was read as that folder's empty entry: an empty replay."""
    trace = tmp_path / "t.swf.zip"
    trace.write_bytes(bytes(_zip(folder=True)))
    jobs, stats = load_trace(str(trace), "swf", None, SPEC)
    assert len(jobs) == 100 and stats.lines == 100


_SWF_ODD = st.sampled_from(["0", "-1", "1e308", "-1e308", "1e15", "1e16", "0.5", "1e-300", "nan", "inf", "x",
                            "\u0661", "\x00", "\ufeff", ";"])
# a good job's line (no walltime) with some of its fields replaced, or a line of any tokens
_SWF_LINES = st.one_of(
    st.dictionaries(st.integers(0, 17), _SWF_ODD, max_size=4).map(
        lambda odd: " ".join(odd.get(i, f) for i, f in enumerate(SWF_LINE.replace(" 20 ", " -1 ").split()))),
    st.lists(_SWF_ODD | st.just("UnixStartTime:"), max_size=20).map(" ".join))


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(lines=["1 0 -1 1e308 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1"], noise=b"", compress="", cut=0)  # NaN
@example(lines=["; UnixStartTime: 1e308", "1 1e308 -1 10 4 -1 -1 -1 -1 -1 1 1 1 -1 0 -1 -1 -1"], noise=b"",
         compress=".gz", cut=0)  # an infinite submit time
@given(lines=st.lists(_SWF_LINES, max_size=8),
       noise=st.binary(max_size=64), compress=st.sampled_from(["", ".gz", ".zip"]), cut=st.integers(0, 200))
def test_any_swf_file_replays_or_exits_2(tmp_path, lines, noise, compress, cut):
    """Any SWF file, plain or compressed, whole or cut short: a report that is JSON, or exit 2."""
    data = ("\n".join(lines) + "\n").encode() + noise
    if compress == ".gz":
        data = gzip.compress(data, mtime=0)
    elif compress == ".zip":
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("t.swf", data)
        data = out.getvalue()
    trace = tmp_path / f"t.swf{compress}"
    trace.write_bytes(data[:len(data) - cut] if compress and cut else data)
    out_text = io.StringIO()
    try:
        call_command("replay", str(trace), "--cluster", str(SAMPLES / "cluster-small.json"),
                     "--policy", str(SAMPLES / "priority.json"), "--json", stdout=out_text)
    except CommandError as exc:
        assert exc.returncode == 2
        return
    report = _strict_json(out_text.getvalue())
    assert report["trace"]["jobs"] <= len(lines)

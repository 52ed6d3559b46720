"""The tenants' command line: submit, list, read and cancel allocations through the REST API.

    lattice [--url URL] [--token-file PATH] [--json] COMMAND ...     (python -m scheduling.cli from a checkout)

    login [--token-file PATH]            (the token from standard input otherwise)
    submit [--tenant T] [--group G] [--vcluster V] [--session-type S] [--nodes N] [--gpus N]
           [--cpus N] [--memory N] [--class C] [--priority P] [--checkpoint auto|manual|none]
           [--walltime MIN] [--name NAME] [--dependency afterok:ID[:ID][,afterany:ID]]
           [--array 0-99%10] [--hold] [--file JOB.json] [--what-if] [-- COMMAND ...]
    list [--state S[,S]] [--group G] [--array ID]     (an array is one line; --array ID lists its tasks)
    queue [--group G] [--state S[,S]] [--format COL,COL,...]
    show ID | events ID | explain ID | cancel ID | hold ID | release ID | requeue ID
                                         (hold, release, requeue take [--reason TEXT])
    usage [--tenant T] [--since ISO] [--until ISO] [--group-by tenant,user,vcluster,resource_group,day] [--csv]

A client like any other: it sends ``Authorization: Token`` with a token from
``manage.py api_token`` (or POST /api/v1/tokens/). Where it finds the server and the token
(``--url``, ``LATTICE_URL``, ``--token-file``, ``LATTICE_TOKEN``, the config file ``login``
writes) is in cli_config.py. ``--file`` is a job document with the API's own field names;
flags given as well override its fields. ``--group`` may be left out when an operator gave
the tenant a default resource group. ``--what-if`` prints the decision the job would get now
and stores nothing. ``queue`` prints my
tenant's work as squeue does, one line each: pending work with its position in its group's queue,
how many are ahead (other tenants' work counted, never shown) and the code of what it waits on;
an array's pending tasks are one line, ``ARRAY_[0-3,7]``, at the place of its best task.

Exit codes: 0 done; 1 the server refused (its message is printed: field errors,
a quota, a token it does not know), could not be reached or answered other than the API does
(cli_client.py); 2 bad usage or a bad file, with nothing sent; 130 interrupted. Each failure is
one line on standard error. Imports nothing of Django: it runs wherever a tenant works.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.parse
from typing import Any, TextIO

from scheduling import cli_config
from scheduling.cli_client import Client, Refused, loads, one_line
from scheduling.cli_format import (
    QUEUE_COLUMNS,
    collapse_pending_tasks,
    estimate_line,
    list_lines,
    queue_table,
    score_lines,
    usage_output,
)
from scheduling.ids import decimal, row_id
from scheduling.json_keys import unique_keys
from scheduling.queue_terms import term_words
from scheduling.version import version


class Usage(Exception):
    """Bad usage or a bad file: nothing was sent."""


JOB_FILE_LIMIT = 1024 * 1024  # far past what admission takes (a start frame's half of 64 KiB)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def finite(text: str) -> float:
    """A float argument, or a job file's number, that JSON can carry (not nan or inf; 1e400 reads as inf),
    in ASCII (``float()`` also reads "١.٥" as 1.5 and "1_0" as 10)."""
    if not text.isascii() or "_" in text:
        raise ValueError(f"{text} is not a number in ASCII digits")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def job_document(args: argparse.Namespace) -> dict[str, Any]:
    """The submission: ``--file`` if given, then the flags given over it."""
    doc: dict[str, Any] = {}
    if args.file:
        text = cli_config.read_text(args.file, "the job file", JOB_FILE_LIMIT)
        try:
            doc = loads(text, parse_constant=_no_constant, parse_float=finite, object_pairs_hook=unique_keys)
        except ValueError as exc:
            raise Usage(f"{args.file} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise Usage(f"{args.file} must hold a JSON object (the API's job fields)")
        if "per_node" in doc and not isinstance(doc["per_node"], dict):
            raise Usage(f"{args.file}: per_node must be an object of resources, e.g. {{\"gpu\": 1}}")
    flags = {"tenant": args.tenant, "resource_group": args.group, "vcluster": args.vcluster, "session_type": args.session_type,
             "nodes": args.nodes, "preemption_class": args.klass, "priority": args.priority,
             "checkpoint": args.checkpoint, "walltime_minutes": args.walltime, "name": args.name}
    doc.update({k: v for k, v in flags.items() if v is not None})
    per_node = {r: v for r, v in (("gpu", args.gpus), ("cpu", args.cpus), ("memory", args.memory)) if v is not None}
    if per_node:
        doc["per_node"] = {**(doc.get("per_node") or {}), **per_node}
    if args.command:
        doc["command"] = args.command[1:] if args.command[0] == "--" else args.command
    if args.dependency:
        doc["depends_on"] = dependencies(args.dependency)
    if args.array:
        doc["array"] = args.array
    if args.hold:
        doc["held"] = True
    if not doc.get("per_node"):
        raise Usage("a job needs resources per node: --gpus, --cpus or --memory, or per_node in --file")
    return doc


def whole(text: str) -> int:
    """An integer argument: ASCII digits, a sign allowed (the server judges the range), as the
    server reads numbers; ``int()`` also reads "١٢" or "１２" as 12, and "1_2" too."""
    if not decimal(text.removeprefix("-")):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer in ASCII digits")
    return int(text)


def states(text: str) -> str:
    """``--state``: a comma-separated list of states, none of them empty (the server names an
    unknown one)."""
    if not all(part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of states")
    return text


def job_id(text: str) -> int:
    """A job's id: ASCII digits, an id the database can hold (scheduling/ids.py)."""
    value = row_id(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (ASCII digits)")
    return value


DEPENDENCY_TYPES = ("afterok", "afterany", "afternotok")


def dependencies(text: str) -> list[dict[str, Any]]:
    """Slurm's ``--dependency`` syntax: ``afterok:12:13,afterany:14`` (type, then job ids)."""
    out: list[dict[str, Any]] = []
    for part in text.split(","):
        kind, *ids = part.strip().split(":")
        if kind not in DEPENDENCY_TYPES or not ids or not all(decimal(i) for i in ids):
            raise Usage(f"--dependency {part!r}: TYPE:ID[:ID...] with TYPE one of {', '.join(DEPENDENCY_TYPES)}")
        out += [{"type": kind, "job": int(i)} for i in ids]
    return out


def _allocation_line(a: dict[str, Any]) -> str:
    size = f"{a['nodes']} x " + ", ".join(f"{v:g} {k}" for k, v in a["per_node"].items())
    return (f"#{a['id']:<7} {a['state']:<13} class {a['preemption_class']:<2}  {a['resource_group']}"
            f"{'/' + a['vcluster'] if a.get('vcluster') else ''}  {size}  {a['name'] or '-'}")


WHAT_IF_WORDS = {"fits": "it would start now", "preempt": "it would preempt other work to start",
                 "wait": "it would wait"}


def _decision_text(d: dict[str, Any] | None) -> str:
    if not d:
        return "no decision"
    return f"{d['outcome']} ({d['code']}): {d['explanation']}"


QUEUE_FORMAT = "id,name,group,state,class,prio,nodes,gpus,pos,ahead,reason"


def queue_lines(client: Client, args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """My tenant's allocations in ``--state`` (pending and running by default), each pending one
    with its entry of its group's queue; and the lines in ``--format``'s columns."""
    columns = [c.strip() for c in (args.format or QUEUE_FORMAT).split(",") if c.strip()]
    unknown = [c for c in columns if c not in QUEUE_COLUMNS]
    if unknown or not columns:
        raise Usage(f"unknown --format column {', '.join(unknown) or '(none)'}; known: {', '.join(QUEUE_COLUMNS)}")
    query = {"state": args.state or "pending,running", **({"resource_group": args.group} if args.group else {})}
    rows = client.pages("/allocations/", query)
    entries: dict[int, dict[str, Any]] = {}
    for group in sorted({a["resource_group"] for a in rows if a["state"] == "pending"}):
        for q in client.pages(f"/resource-groups/{urllib.parse.quote(group)}/queue/", {}):
            entries[q["id"]] = q
    # Pending first in queue order, then pending work passed over (held, ...), then the rest newest first.
    rows.sort(key=lambda a: (a["id"] not in entries, (entries.get(a["id"]) or {}).get("position") is None,
                             (entries.get(a["id"]) or {}).get("position") or 0))
    found = collapse_pending_tasks([{**a, "queue": entries.get(a["id"])} for a in rows])
    return found, queue_table(columns, found)


def run(args: argparse.Namespace, out: TextIO) -> None:
    try:
        url = cli_config.server_url(args.url)
        if args.cmd == "login":
            return login(args, url, out)
        client = Client(url, _token(args), text=not args.json)
    except cli_config.ConfigError as exc:
        raise Usage(str(exc)) from None

    def show(value: Any, text: str) -> None:
        out.write((json.dumps(value, indent=2) if args.json else text) + "\n")

    if args.cmd == "submit":
        doc = job_document(args)
        if args.what_if:
            d = client.call("POST", "/allocations/what-if/", doc)
            return show(d, f"what-if: {WHAT_IF_WORDS.get(d['outcome'], d['outcome'])} ({d['code']}): "
                           f"{d['explanation']} (nothing stored)")
        a = client.call("POST", "/allocations/", doc)
        if "tasks" in a:
            return show(a, f"submitted array #{a['id']} of {a['size']} tasks: "
                           + " ".join(f"#{t['id']}[{t['index']}]" for t in a["tasks"]))
        return show(a, f"submitted #{a['id']} ({a['state']})")
    if args.cmd == "usage":
        query = {k: v for k, v in (("tenant", args.tenant), ("since", args.since), ("until", args.until),
                                   ("group_by", args.group_by)) if v}
        return usage_output(client.call("GET", "/usage/", query=query), args, out)
    if args.cmd == "list":
        query = {k: v for k, v in (("state", args.state), ("resource_group", args.group),
                                   ("array", args.array)) if v}
        rows = client.pages("/allocations/", query)
        if args.array:
            return show(rows, "\n".join(map(_allocation_line, rows)) or "no allocations")
        lines = list_lines(rows, lambda pk: client.call("GET", f"/arrays/{pk}/"), _allocation_line)
        return show(rows, "\n".join(lines) or "no allocations")
    if args.cmd == "queue":
        found, lines = queue_lines(client, args)
        return show(found, "\n".join(lines))
    path = f"/allocations/{args.id}/"
    if args.cmd == "show":
        a = client.call("GET", path)
        return show(a, _allocation_line(a))
    if args.cmd == "events":
        rows = client.pages(path + "events/", {})
        return show(rows, "\n".join(f"{e['created_at']}  {e['from_state'] or '-':>13} -> {e['to_state']:<13} "
                                    f"{e['reason']}" for e in rows))
    if args.cmd == "explain":
        e = client.call("GET", path + "explain/")
        return show(e, "\n".join(explain_lines(e)))
    if args.cmd == "cancel":
        a = client.call("POST", path + "cancel/", {})
        leaving = ": it ends cancelled once its process is gone" if a["state"] == "terminating" else ""
        return show(a, f"#{a['id']} is {a['state']}{leaving}")
    if args.cmd in ("hold", "release", "requeue"):
        a = client.call("POST", path + f"{args.cmd}/", {"reason": args.reason or ""})
        return show(a, f"#{a['id']} is {a['state']}{' (held)' if a['held'] else ''}")
    raise Usage(f"unknown command {args.cmd}")  # argparse refuses it first


def explain_lines(e: dict[str, Any]) -> list[str]:
    """Why it waits (the binding limit, its place in the queue, the latest decision and its queue
    score) and why it was preempted."""
    lines = [f"#{e['allocation']} is {e['state']}"]
    if e.get("reason"):
        lines.append(f"why it waits ({e['reason']['code']}): {e['reason']['explanation']}")
    q = e.get("queue")
    if q and q["position"] is None:
        lines.append(f"place in the queue: none yet, passed over until the reason above no longer holds "
                     f"({q['queued']} queued)")
    elif q:
        lines.append(f"place in the queue: {q['position']} of {q['queued']}, {q['ahead']} ahead"
                     + (" (" + ", ".join(f"{n} by {term_words(term)}" for term, n in q["ahead_by"].items()) + ")"
                        if q["ahead_by"] else ""))
    if e.get("start_estimate"):
        lines.append(estimate_line(e["start_estimate"]))
    if e.get("waiting"):
        lines.append("latest decision: " + _decision_text(e["waiting"]))
    if e.get("queue_score"):
        lines += score_lines(e["queue_score"])
    return lines + [f"preempted (decision {p['id']}, {p['created_at']}): {p['explanation']}"
                    for p in e["preemptions"]]


def login(args: argparse.Namespace, url: str, out: TextIO) -> None:
    """Check a token against the server, then save the server and the token for later commands."""
    secret = None
    if args.token_file:
        token = cli_config.token(args.token_file)
    else:
        secret = token = cli_config.checked_token(cli_config.stdin_line().strip(), "the token on standard input")
    if not token:
        raise Usage("no token given: --token-file PATH, or the token on standard input")
    Client(url, token).call("GET", "/tokens/")  # a token the server does not know is refused here
    path = cli_config.save_login(url, secret, args.token_file)
    out.write(f"logged in to {url}; saved in {path}\n")


def _token(args: argparse.Namespace) -> str:
    token = cli_config.token(args.token_file)
    if not token:
        raise Usage("no API token: --token-file PATH, LATTICE_TOKEN or `login` "
                    "(issue one with manage.py api_token USER)")
    return token


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lattice", description="Lattice allocations from the shell.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument("--url", help="the Lattice server, its root or its API's root (else LATTICE_URL, else the "
                                 "config file `login` writes, else http://127.0.0.1:8000)")
    p.add_argument("--token-file", help="a file holding an API token (else LATTICE_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of text")
    sub = p.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("login", help="check a token (standard input, or --token-file) and save it with --url")
    lg.add_argument("--token-file", default=argparse.SUPPRESS,  # (SUPPRESS: one given before `login` stays)
                    help="a file holding an API token (else the token is read from standard input)")
    s = sub.add_parser("submit", help="submit a job (or --what-if: what would happen now)")
    s.add_argument("--file", help="a JSON job document with the API's field names")
    s.add_argument("--tenant", help="the job's tenant (a member of several names one)")
    s.add_argument("--group", help="resource group")
    s.add_argument("--vcluster")
    s.add_argument("--session-type")
    s.add_argument("--nodes", type=whole)
    s.add_argument("--gpus", type=whole, help="per node")
    s.add_argument("--cpus", type=whole, help="per node")
    s.add_argument("--memory", type=whole, help="per node")
    s.add_argument("--class", dest="klass", type=whole, help="preemption class 0..10")
    s.add_argument("--priority", type=whole)
    s.add_argument("--checkpoint", choices=["auto", "manual", "none"],
                   help="default: none (the server's default, as on the web form)")
    s.add_argument("--walltime", type=finite, help="minutes")
    s.add_argument("--name")
    s.add_argument("--dependency", help="afterok:ID[:ID],afterany:ID,afternotok:ID (jobs of the same tenant)")
    s.add_argument("--array", help="an array of tasks: 0-99%%10, 1,3,5-7 (%%N: at most N running)")
    s.add_argument("--hold", action="store_true", help="submit it held (release it later)")
    s.add_argument("--what-if", action="store_true", help="print the decision it would get now; store nothing")
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    lst = sub.add_parser("list", help="my tenant's allocations, newest first")
    lst.add_argument("--state", type=states, help="comma-separated states")
    lst.add_argument("--group", help="resource group")
    lst.add_argument("--array", help="the tasks of one array (its id)")
    q = sub.add_parser("queue", help="my tenant's work with its place in the queue (like squeue)")
    q.add_argument("--group", help="resource group")
    q.add_argument("--state", type=states, help="comma-separated states (default: pending,running)")
    q.add_argument("--format", help=f"comma-separated columns (default: {QUEUE_FORMAT}); "
                                    f"known: {', '.join(QUEUE_COLUMNS)}")
    use = sub.add_parser("usage", help="GPU-hours and node-hours (my tenants'; operators: everyone's)")
    use.add_argument("--tenant")
    use.add_argument("--since", help="ISO 8601 (default: 30 days before --until)")
    use.add_argument("--until", help="ISO 8601 (default: now)")
    use.add_argument("--group-by", help="comma-separated: tenant, user, vcluster, resource_group, day "
                                        "(default: tenant,day)")
    use.add_argument("--csv", action="store_true", help="print CSV")
    for name, text in (("show", "one allocation"), ("events", "its history"),
                       ("explain", "why it waits or was preempted"), ("cancel", "cancel it"),
                       ("hold", "hold pending work"), ("release", "release a hold"),
                       ("requeue", "operators: stop running work and queue it again")):
        one = sub.add_parser(name, help=text)
        one.add_argument("id", type=job_id)
        if name in ("hold", "release", "requeue"):
            one.add_argument("--reason", help="kept in the audit log (operators must give one)")
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage
        return 2 if exc.code else 0
    try:
        run(args, out or sys.stdout)
    except (Usage, cli_config.ConfigError) as exc:
        return _fail(2, str(exc))
    except Refused as exc:
        return _fail(1, str(exc))
    except (KeyError, TypeError, AttributeError, IndexError) as exc:  # JSON of another shape than the API's
        where = getattr(args, "url", None) or "the configured URL"
        return _fail(1, f"the server's answer is not what this client reads ({type(exc).__name__}: {exc}); "
                        f"is {where} a Lattice server of version {version()}?")
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
    return 0


def _fail(code: int, message: str) -> int:
    sys.stderr.write(f"lattice: {one_line(message)}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

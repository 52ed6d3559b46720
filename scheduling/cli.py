"""The tenants' command line: submit, list, read and cancel allocations through the REST API.

    python -m scheduling.cli [--url URL] [--token-file PATH] [--json] COMMAND ...

    submit --group G [--vcluster V] [--session-type S] [--nodes N] [--gpus N] [--cpus N]
           [--memory N] [--class C] [--priority P] [--checkpoint auto|manual|none]
           [--walltime MIN] [--name NAME] [--file JOB.json] [--what-if] [-- COMMAND ...]
    list [--state S[,S]] [--group G]
    show ID | events ID | explain ID | cancel ID
    usage [--tenant T] [--since ISO] [--until ISO] [--group-by tenant,user,vcluster,resource_group,day] [--csv]

A client like any other: it sends ``Authorization: Token`` with a token from
``manage.py api_token`` (or POST /api/v1/tokens/), read from ``--token-file`` or
``LATTICE_TOKEN``; the server is ``--url`` or ``LATTICE_URL``. ``--file`` is a job
document with the API's own field names; flags given as well override its fields.
``--what-if`` prints the decision the job would get now and stores nothing.

Exit codes: 0 done; 1 the server refused (its message is printed: field errors,
a quota, a token it does not know) or could not be reached; 2 bad usage or a bad
file, with nothing sent. Imports nothing of Django: it runs wherever a tenant works.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TextIO

DEFAULT_URL = "http://127.0.0.1:8000"


class Refused(Exception):
    """The server answered with an error (or not at all); the message says what."""


class Usage(Exception):
    """Bad usage or a bad file: nothing was sent."""


class Client:
    def __init__(self, url: str, token: str, timeout: float = 30) -> None:
        self.base, self.token, self.timeout = url.rstrip("/") + "/api/v1", token, timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             query: dict[str, str] | None = None) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Token {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            raise Refused(f"{exc.code}: {_error_text(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Refused(f"cannot reach {self.base}: {reason}") from None

    def pages(self, path: str, query: dict[str, str]) -> list[dict[str, Any]]:
        """Every page of a cursor-paginated list, following ``next``."""
        out: list[dict[str, Any]] = []
        body = self.call("GET", path, query=query)
        while True:
            out += body["results"]
            if not body.get("next"):
                return out
            nxt = urllib.parse.urlsplit(body["next"])
            body = self.call("GET", nxt.path.removeprefix("/api/v1"),
                             query=dict(urllib.parse.parse_qsl(nxt.query)))


def _error_text(raw: bytes) -> str:
    """A DRF error body as one readable line: ``detail``, or each field with its messages."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()[:500] or "no message"
    if isinstance(body, dict):
        if ("detail" in body and len(body) == 1) or "error" in body:
            return str(body.get("detail", body.get("error")))
        return "; ".join(f"{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                         for field, msgs in body.items())
    return json.dumps(body)


def job_document(args: argparse.Namespace) -> dict[str, Any]:
    """The submission: ``--file`` if given, then the flags given over it."""
    doc: dict[str, Any] = {}
    if args.file:
        try:
            doc = json.loads(Path(args.file).read_text())
        except OSError as exc:
            raise Usage(f"cannot read {args.file}: {exc.strerror}") from None
        except ValueError as exc:
            raise Usage(f"{args.file} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise Usage(f"{args.file} must hold a JSON object (the API's job fields)")
    flags = {"resource_group": args.group, "vcluster": args.vcluster, "session_type": args.session_type,
             "nodes": args.nodes, "preemption_class": args.klass, "priority": args.priority,
             "checkpoint": args.checkpoint, "walltime_minutes": args.walltime, "name": args.name}
    doc.update({k: v for k, v in flags.items() if v is not None})
    per_node = {r: v for r, v in (("gpu", args.gpus), ("cpu", args.cpus), ("memory", args.memory)) if v is not None}
    if per_node:
        doc["per_node"] = {**(doc.get("per_node") or {}), **per_node}
    if args.command:
        doc["command"] = args.command[1:] if args.command[0] == "--" else args.command
    if "resource_group" not in doc:
        raise Usage("a job needs a resource group: --group, or resource_group in --file")
    if not doc.get("per_node"):
        raise Usage("a job needs resources per node: --gpus, --cpus or --memory, or per_node in --file")
    return doc


def _allocation_line(a: dict[str, Any]) -> str:
    size = f"{a['nodes']} x " + ", ".join(f"{v:g} {k}" for k, v in a["per_node"].items())
    return (f"#{a['id']:<7} {a['state']:<13} class {a['preemption_class']:<2}  {a['resource_group']}"
            f"{'/' + a['vcluster'] if a.get('vcluster') else ''}  {size}  {a['name'] or '-'}")


def _decision_text(d: dict[str, Any] | None) -> str:
    if not d:
        return "no decision"
    return f"{d['outcome']} ({d['code']}): {d['explanation']}"


def run(args: argparse.Namespace, out: TextIO) -> None:
    token = _token(args)
    client = Client(args.url, token)

    def show(value: Any, text: str) -> None:
        out.write((json.dumps(value, indent=2) if args.json else text) + "\n")

    if args.cmd == "submit":
        doc = job_document(args)
        if args.what_if:
            d = client.call("POST", "/allocations/what-if/", doc)
            return show(d, "would " + _decision_text(d) + " (nothing stored)")
        a = client.call("POST", "/allocations/", doc)
        return show(a, f"submitted #{a['id']} ({a['state']})")
    if args.cmd == "usage":
        return _usage(client, args, out)
    if args.cmd == "list":
        query = {k: v for k, v in (("state", args.state), ("resource_group", args.group)) if v}
        rows = client.pages("/allocations/", query)
        return show(rows, "\n".join(map(_allocation_line, rows)) or "no allocations")
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
        lines = [f"#{e['allocation']} is {e['state']}"]
        if e.get("waiting"):
            lines.append("why it waits: " + _decision_text(e["waiting"]))
        lines += [f"preempted (decision {p['id']}, {p['created_at']}): {p['explanation']}" for p in e["preemptions"]]
        return show(e, "\n".join(lines))
    if args.cmd == "cancel":
        a = client.call("POST", path + "cancel/", {})
        return show(a, f"#{a['id']} is {a['state']}")
    raise Usage(f"unknown command {args.cmd}")  # argparse refuses it first


def _usage(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    """GPU-hours and node-hours from the server's accounting: a table, CSV or the API's JSON."""
    query = {k: v for k, v in (("tenant", args.tenant), ("since", args.since), ("until", args.until),
                               ("group_by", args.group_by)) if v}
    body = client.call("GET", "/usage/", query=query)
    if args.json:
        out.write(json.dumps(body, indent=2) + "\n")
        return
    fields = [*body["group_by"], "gpu_seconds", "gpu_hours", "node_hours"]
    if args.csv:
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(body["rows"])
        return
    out.write(f"usage from {body['since']} to {body['until']}\n")
    table = [fields] + [[str(r[f]) for f in fields] for r in body["rows"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(fields))]
    for row in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not body["rows"]:
        out.write("no usage in this window\n")


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise Usage(f"cannot read the token file {args.token_file}: {exc.strerror}") from None
    else:
        token = os.environ.get("LATTICE_TOKEN", "").strip()
    if not token:
        raise Usage("no API token: --token-file PATH or LATTICE_TOKEN (issue one with manage.py api_token USER)")
    return token


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduling.cli", description="Lattice allocations from the shell.")
    p.add_argument("--url", default=os.environ.get("LATTICE_URL", DEFAULT_URL), help="the Lattice server")
    p.add_argument("--token-file", help="a file holding an API token (else LATTICE_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of text")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="submit a job (or --what-if: what would happen now)")
    s.add_argument("--file", help="a JSON job document with the API's field names")
    s.add_argument("--group", help="resource group")
    s.add_argument("--vcluster")
    s.add_argument("--session-type")
    s.add_argument("--nodes", type=int)
    s.add_argument("--gpus", type=int, help="per node")
    s.add_argument("--cpus", type=int, help="per node")
    s.add_argument("--memory", type=int, help="per node")
    s.add_argument("--class", dest="klass", type=int, help="preemption class 0..10")
    s.add_argument("--priority", type=int)
    s.add_argument("--checkpoint", choices=["auto", "manual", "none"],
                   help="default: none (the server's default, as on the web form)")
    s.add_argument("--walltime", type=float, help="minutes")
    s.add_argument("--name")
    s.add_argument("--what-if", action="store_true", help="print the decision it would get now; store nothing")
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    lst = sub.add_parser("list", help="my tenant's allocations, newest first")
    lst.add_argument("--state", help="comma-separated states")
    lst.add_argument("--group", help="resource group")
    use = sub.add_parser("usage", help="GPU-hours and node-hours (my tenants'; operators: everyone's)")
    use.add_argument("--tenant")
    use.add_argument("--since", help="ISO 8601 (default: 30 days before --until)")
    use.add_argument("--until", help="ISO 8601 (default: now)")
    use.add_argument("--group-by", help="comma-separated: tenant, user, vcluster, resource_group, day "
                                        "(default: tenant,day)")
    use.add_argument("--csv", action="store_true", help="print CSV")
    for name, text in (("show", "one allocation"), ("events", "its history"),
                       ("explain", "why it waits or was preempted"), ("cancel", "cancel it")):
        one = sub.add_parser(name, help=text)
        one.add_argument("id", type=int)
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage
        return 2 if exc.code else 0
    try:
        run(args, out or sys.stdout)
    except Usage as exc:
        return _fail(2, str(exc))
    except Refused as exc:
        return _fail(1, str(exc))
    return 0


def _fail(code: int, message: str) -> int:
    sys.stderr.write(f"lattice: {message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

"""Why work ended, in words, from the agent's ``exited`` reason (docs/agent-protocol.md): the
reasons a member must act on (it ran out of memory, its Unix user is missing, it would run as root)
are explained on the job page."""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.models import Allocation

WORDS = {
    "oom": ("The kernel killed it for using more memory than it asked for: {memory} per node, its "
            "limit (memory.max of its cgroup) on the node. Ask for more memory per node, or use less."),
    "user_unknown": ("It did not start: the Unix user or group it was to run as does not exist on the node. "
                     "An operator must create it there, or change the tenant's (or the member's) mapping."),
    "refused": ("It did not start: it would have run as root, or as the node's agent itself, which no operator "
                "allowed (its tenant, or the member, maps to root, to the agent's own user, or to no Unix user). "
                "An operator must map the tenant (or the member) to a Unix user other than root and the agent's; "
                "else allow root for the tenant (where the node's agent runs as root), or start the node's agent "
                "with --unmapped-as-agent (a single-user node, where the agent does not run as root)."),
}


def exit_reason(reasons: Iterable[str]) -> str:
    """The agent's reason in the last ``exited: REASON (CODE)`` of an allocation's history ("" if none)."""
    found = ""
    for text in reasons:
        if text.startswith("exited: "):
            found = text[len("exited: "):].split(" ", 1)[0]
    return found


def exit_explanation(alloc: Allocation, reasons: Iterable[str]) -> str:
    """Words for how the allocation's last run ended, where the member has something to do ("")."""
    template = WORDS.get(exit_reason(reasons), "")
    memory = f"{alloc.per_node_memory:g} GiB" if alloc.per_node_memory else "no memory asked for"
    return template.format(memory=memory)

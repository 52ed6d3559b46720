"""The command line finds its server (``--url``, ``LATTICE_URL``, the config ``login`` writes;
the site's root or the API's), logs in, and speaks the batch verbs: hold, release, requeue,
``--dependency``, ``--array``, and a tenant's default resource group in place of ``--group``."""

from __future__ import annotations

import io
import json
import stat

import pytest

from scheduling import cli_config
from scheduling.actions.tokens import api_token_issue
from scheduling.cli import dependencies, main
from scheduling.models import Allocation, Quota


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    """Each test with a config file of its own and no server or token from the environment."""
    monkeypatch.setenv("LATTICE_CONFIG", str(tmp_path / "cfg" / "config.json"))
    for name in ("LATTICE_URL", "LATTICE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cfg" / "config.json"


@pytest.mark.parametrize("given", ["https://lattice.example", "https://lattice.example/",
                                   "https://lattice.example/api/v1", "https://lattice.example/api/v1/",
                                   "https://lattice.example/api/"])
def test_the_site_root_or_the_api_root_names_the_same_server(given):
    assert cli_config.server_url(given) == "https://lattice.example"


def test_the_flag_wins_over_the_environment_which_wins_over_the_config(own_config, monkeypatch):
    own_config.parent.mkdir(parents=True)
    own_config.write_text(json.dumps({"url": "http://from-config:1/api/v1/"}))
    assert cli_config.server_url(None) == "http://from-config:1"
    monkeypatch.setenv("LATTICE_URL", "http://from-env:2")
    assert cli_config.server_url(None) == "http://from-env:2"
    assert cli_config.server_url("http://from-flag:3/api/") == "http://from-flag:3"


def test_a_bad_url_or_config_is_exit_2(own_config, capsys):
    assert main(["--url", "lattice.example", "list"], out=io.StringIO()) == 2
    assert "not an http:// or https:// URL" in capsys.readouterr().err
    # A user and password were sent to the resolver as part of the host name (exit 1, "cannot
    # reach"), and the message printed the password.
    assert main(["--url", "http://me:s3cret@127.0.0.1:9", "list"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "naming a user or password" in err and "s3cret" not in err
    own_config.parent.mkdir(parents=True)
    own_config.write_text("[1,")
    assert main(["list"], out=io.StringIO()) == 2
    assert "cannot read the config file" in capsys.readouterr().err


def test_dependency_flags_in_slurm_syntax():
    assert dependencies("afterok:12:13,afternotok:14") == [
        {"type": "afterok", "job": 12}, {"type": "afterok", "job": 13}, {"type": "afternotok", "job": 14}]
    for bad in ("after:1", "afterok:²", "afterok:１２"):  # "²" passes str.isdigit and int refuses it
        assert main(["--url", "http://x", "submit", "--gpus", "1", "--dependency", bad, "--", "a"],
                    out=io.StringIO()) == 2


@pytest.mark.django_db(transaction=True)
def test_login_then_every_verb_without_url_or_token_flags(live_server, own_config, monkeypatch, tenant_physics,
                                                          resource_group, vcluster_hpc, node_gpu_a):
    Quota.objects.filter(tenant=tenant_physics).update(default_resource_group=resource_group)
    secret = api_token_issue(user=tenant_physics.memberships.first().user)
    monkeypatch.setattr("sys.stdin", io.StringIO("lpi_wrong\n"))
    assert main(["--url", live_server.url + "/api/v1/", "login"], out=io.StringIO()) == 1  # unknown token
    assert not own_config.exists()
    monkeypatch.setattr("sys.stdin", io.StringIO(secret + "\n"))
    out = io.StringIO()
    assert main(["--url", live_server.url + "/api/v1/", "login"], out=out) == 0, out.getvalue()
    saved = json.loads(own_config.read_text())
    assert saved["url"] == live_server.url
    token_file = own_config.parent / "token"
    assert token_file.read_text().strip() == secret
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    def lattice(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(list(argv), out=out), out.getvalue()

    code, out = lattice("submit", "--vcluster", "hpc", "--gpus", "8", "--hold", "--", "train")  # no --group
    assert code == 0, out
    first = Allocation.objects.get()
    assert (first.resource_group, first.held) == (resource_group, True)
    assert lattice("release", str(first.pk)) == (0, f"#{first.pk} is {Allocation.objects.get().state}\n")
    assert lattice("hold", str(first.pk))[0] in (0, 1)  # pending: held; started meanwhile: refused (409)
    code, out = lattice("submit", "--gpus", "1", "--dependency", f"afterany:{first.pk}", "--array", "0-2%1",
                        "--", "task")
    assert code == 0 and out.startswith("submitted array #"), out
    tasks = Allocation.objects.exclude(pk=first.pk)
    assert sorted(t.array_index for t in tasks) == [0, 1, 2]
    assert all(t.depends_on == [{"type": "afterany", "job": first.pk}] for t in tasks)
    code, out = lattice("--json", "list", "--array", str(tasks[0].array_id))
    assert code == 0 and len(json.loads(out)) == 3
    assert lattice("requeue", str(first.pk), "--reason", "x")[0] == 1  # operators only

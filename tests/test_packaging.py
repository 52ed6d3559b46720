"""Lattice as operators install it: one version, two programs that import nothing of Django, and
a wheel that installs into an empty virtualenv from the lock and works there."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.models import Allocation, Tenant
from scheduling.passes.run import schedule_pass
from tests.conftest import ROOT
from tests.nodes.conftest import AS_ROOT
from tests.nodes.test_end_to_end import UNMAPPED_LEAVE, control_plane, daphne, wait_for  # noqa: F401 (fixtures)

PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_two_programs_import_nothing_of_django():
    code = "import sys, scheduling.cli, nodes.agent; print(sorted({m.split('.')[0] for m in sys.modules}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "'django'" not in done.stdout and "'celery'" not in done.stdout


@pytest.mark.parametrize("module, prog", [("scheduling.cli", "lattice"), ("nodes.agent", "lattice-agent")])
def test_both_programs_say_the_projects_version(module, prog):
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{prog} {PYPROJECT_VERSION}"


def test_the_api_schema_and_the_agents_hello_carry_the_same_version(client, operator, tmp_path):
    from nodes.agent import Agent

    client.force_login(operator)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert schema["info"]["version"] == PYPROJECT_VERSION
    assert Agent("ws://unused/", "t", tmp_path)._hello()["agent_version"] == PYPROJECT_VERSION


# -- installed from a wheel --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """A wheel built from this checkout, installed into an empty virtualenv with the locked
    dependencies (hashes checked): the bin/ folder of that virtualenv. Built once per session."""
    work = tmp_path_factory.mktemp("install")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}

    def run(*cmd: str | Path) -> None:
        done = subprocess.run([str(c) for c in cmd], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", work / "dist", ROOT)
    venv.create(work / "venv", with_pip=True)
    bin_dir = work / "venv" / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--require-hashes", "-r", ROOT / "requirements/lock.txt")
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-deps", *(work / "dist").glob("lattice-*.whl"))
    return bin_dir


def _run_installed(bin_dir: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env.update(extra_env)
    # Away from the checkout, so nothing can be imported from it.
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=bin_dir.parent, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.install
def test_the_installed_programs_answer_help_and_version(installed):
    for prog, words in (("lattice", "submit"), ("lattice-agent", "--token-file")):
        done = _run_installed(installed, prog, "--help")
        assert done.returncode == 0, done.stderr
        assert words in done.stdout
        assert _run_installed(installed, prog, "--version").stdout.strip() == f"{prog} {PYPROJECT_VERSION}"
    code = ("import sys, scheduling.cli, nodes.agent; assert 'django' not in sys.modules, 'django'; "
            "print(scheduling.cli.__file__)")
    done = _run_installed(installed, "python", "-c", code)
    assert done.returncode == 0, done.stderr
    assert str(ROOT) not in done.stdout  # the installed copy, not the checkout's


@pytest.mark.install
def test_the_installed_site_finds_its_templates_static_files_and_migrations(installed, tmp_path):
    code = ("import django; django.setup(); from django.template.loader import get_template; "
            "from django.contrib.staticfiles import finders; from django.db.migrations.loader import MigrationLoader; "
            "print(get_template('ops/console.html').origin.name); print(finders.find('css/lattice.css')); "
            "print(len(MigrationLoader(None).disk_migrations))")
    done = _run_installed(installed, "python", "-c", code, DJANGO_SETTINGS_MODULE="lattice_site.settings.dev",
                          DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", LATTICE_VAR_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    template, css, migrations = done.stdout.strip().splitlines()[-3:]
    assert "site-packages/lattice_site/templates/ops/console.html" in template
    assert "site-packages/lattice_site/static/css/lattice.css" in css
    assert int(migrations) > 5


@pytest.mark.install
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_the_installed_agent_runs_work_for_a_real_control_plane(installed, tmp_path, resource_group, vcluster_hpc,
                                                                node_gpu_a, make_allocation, daphne):  # noqa: F811
    """lattice-agent from the wheel, away from any checkout, against Daphne: hello with the
    project's version, a job started, its exit reported, and nothing of Lattice on its path."""
    token_file = tmp_path / "token"
    token_file.write_text(agent_token_issue(node=node_gpu_a))
    agent = subprocess.Popen([str(installed / "lattice-agent"), "--url", f"ws://127.0.0.1:{daphne}/ws/agent/",
                              "--token-file", str(token_file), "--workdir", str(tmp_path / "agent"),
                              *UNMAPPED_LEAVE],
                             cwd=installed.parent, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    try:
        wait_for(lambda: Node.objects.get(pk=node_gpu_a.pk).agent_version, 30, "the agent's hello")
        assert Node.objects.get(pk=node_gpu_a.pk).agent_version == PYPROJECT_VERSION
        seen = tmp_path / "seen"
        code = f"import os; open({str(seen)!r}, 'w').write(repr(os.environ.get('PYTHONPATH')))"
        # A CPU job: the agent finds no GPU on this machine, and the node then offers none.
        job = make_allocation(state="pending", node_count=1, per_node_gpu=0, per_node_cpu=1, preemption_class=1,
                              checkpoint="none",
                              vcluster=vcluster_hpc, command=[sys.executable, "-c", code])
        # Its tenant maps no Unix user: an agent runs it only with the operator's leave (allow_root
        # where it runs as root, --unmapped-as-agent elsewhere).
        Tenant.objects.filter(pk=job.tenant_id).update(allow_root=AS_ROOT)
        schedule_pass(resource_group.pk)
        wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "completed", 30, "the job to run and end")
        assert seen.read_text() == "None"
    finally:
        agent.terminate()
        agent.wait(timeout=10)

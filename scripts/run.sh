#!/usr/bin/env bash
# Serve Lattice, embedded: one process (SQLite, in-process channel layer, tasks in the web
# process), a simulated agent for every demo node and the demo's tenants. With DATABASE_URL and
# REDIS_URL set, `make run` starts the Procfile's services with honcho instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${LATTICE_HOST:-127.0.0.1}
PORT=${LATTICE_PORT:-8000}

DEMO_TRAFFIC=${LATTICE_DEMO_TRAFFIC:-1}
SIM_SECONDS=${LATTICE_SIM_SECONDS:-120}
mkdir -p var

echo
echo "Lattice on http://$HOST:$PORT/  (operator / lattice-operator, demo only)"
if [[ "$DEMO_TRAFFIC" == "1" ]]; then
  echo "Demo tenants submit work every few seconds (var/demo-traffic.log; LATTICE_DEMO_TRAFFIC=0 to stop them)"
fi
echo

pids=()
cleanup() { trap - INT TERM EXIT; kill "${pids[@]}" 2>/dev/null || true; wait || true; }
trap cleanup INT TERM EXIT
# Embedded: the periodic tasks run in a thread of the web process, next to the sockets.
LATTICE_EMBEDDED_LOOP=1 "$BIN/python" manage.py runserver --noreload "$HOST:$PORT" & pids+=($!)
sleep 2
"$BIN/python" manage.py run_agent --simulate-all --sim-seconds "$SIM_SECONDS" \
  --url "ws://$HOST:$PORT/ws/agent/" & pids+=($!)
# The demo's tenants, as API clients: work arrives, fills the cluster and preempts (see demo_traffic).
if [[ "$DEMO_TRAFFIC" == "1" ]]; then
  "$BIN/python" manage.py demo_traffic --url "http://$HOST:$PORT" >var/demo-traffic.log 2>&1 & pids+=($!)
fi
wait -n

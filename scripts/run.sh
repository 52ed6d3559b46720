#!/usr/bin/env bash
# Serve Lattice. Embedded default: one process (SQLite, in-process channel layer,
# tasks in the web process). With DATABASE_URL and REDIS_URL: Daphne plus a
# Celery worker and beat, all stopped together on Ctrl-C.
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

# The demo's tenants, as API clients: work arrives, fills the cluster and preempts (see demo_traffic).
start_traffic() {
  if [[ "$DEMO_TRAFFIC" == "1" ]]; then
    "$BIN/python" manage.py demo_traffic --url "http://$HOST:$PORT" >var/demo-traffic.log 2>&1 & pids+=($!)
  fi
}

if [[ -n "${DATABASE_URL:-}" && -n "${REDIS_URL:-}" ]]; then
  pids=()
  cleanup() { trap - INT TERM EXIT; kill "${pids[@]}" 2>/dev/null || true; wait || true; }
  trap cleanup INT TERM EXIT
  # Agents stay connected for days, and a reconnect burst may take longer than 5 s to accept.
  "$BIN/daphne" -b "$HOST" -p "$PORT" --websocket_timeout -1 --websocket_connect_timeout 30 \
    lattice_site.asgi:application & pids+=($!)
  # Threads, not forked children: a task starts without a hop through the pool's pipe (about
  # 20 ms off a report-to-placement path). Threads cannot be killed at a time limit, so the
  # worker's database statements are bounded instead.
  DB_STATEMENT_TIMEOUT_MS=60000 "$BIN/celery" -A lattice_site worker --loglevel=INFO --pool=threads \
    --concurrency=4 & pids+=($!)
  "$BIN/celery" -A lattice_site beat --loglevel=INFO --schedule var/celerybeat-schedule & pids+=($!)
  sleep 2
  "$BIN/python" manage.py run_agent --simulate-all --sim-seconds "$SIM_SECONDS" \
    --url "ws://$HOST:$PORT/ws/agent/" & pids+=($!)
  start_traffic
  wait -n
else
  pids=()
  cleanup() { trap - INT TERM EXIT; kill "${pids[@]}" 2>/dev/null || true; wait || true; }
  trap cleanup INT TERM EXIT
  # Embedded: the periodic tasks run in a thread of the web process, next to the sockets.
  LATTICE_EMBEDDED_LOOP=1 "$BIN/python" manage.py runserver --noreload "$HOST:$PORT" & pids+=($!)
  sleep 2
  "$BIN/python" manage.py run_agent --simulate-all --sim-seconds "$SIM_SECONDS" \
    --url "ws://$HOST:$PORT/ws/agent/" & pids+=($!)
  start_traffic
  wait -n
fi

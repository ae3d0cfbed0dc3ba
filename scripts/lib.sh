# Shell helpers shared by the scripts that run a release tallyd against
# tally-loadgen (bench-realtime, bench-ingest, crash-loop, soak), and the
# servers they run it on (FerretDB, PostgreSQL under it). Sourced,
# not run: `source scripts/lib.sh` from the workspace root, under
# `set -euo pipefail`. Each helper says which variables it reads and sets.

# A free TCP port on the loopback interface.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# tallyd_spawn LOG ARGS...: starts $TALLYD with ARGS in the background,
# appending its output to LOG (which may hold earlier incarnations' lines).
# Sets TALLYD_PID, and TALLYD_BEFORE to the "tallyd listening" lines LOG
# held before, for tallyd_listening.
tallyd_spawn() {
  local log=$1
  shift
  touch "$log"
  TALLYD_BEFORE=$(grep -c 'tallyd listening' "$log" || true)
  NO_COLOR=1 "$TALLYD" "$@" >>"$log" 2>&1 &
  TALLYD_PID=$!
}

# tallyd_listening LOG: true once the tallyd of tallyd_spawn has written its
# "tallyd listening" line to LOG; then sets TALLYD_GRPC and TALLYD_HTTP from
# it (text log format).
tallyd_listening() {
  local line
  (($(grep -c 'tallyd listening' "$1" || true) > TALLYD_BEFORE)) || return 1
  line=$(grep 'tallyd listening' "$1" | tail -n 1)
  TALLYD_GRPC=$(sed -nE 's/.*grpc=([0-9.:]+).*/\1/p' <<<"$line")
  TALLYD_HTTP=$(sed -nE 's/.*http=([0-9.:]+).*/\1/p' <<<"$line")
}

# tallyd_start LOG TIMEOUT ARGS...: tallyd_spawn, then waits for
# tallyd_listening at most TIMEOUT seconds. Returns 1, with a message, when
# tallyd exits first or does not listen in time.
tallyd_start() {
  local log=$1 timeout=$2 deadline
  shift 2
  tallyd_spawn "$log" "$@"
  deadline=$((SECONDS + timeout))
  until tallyd_listening "$log"; do
    if ! kill -0 "$TALLYD_PID" 2>/dev/null; then
      wait "$TALLYD_PID" 2>/dev/null || true
      echo "tallyd exited at start; see $log" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      echo "tallyd did not listen within $timeout s; see $log" >&2
      return 1
    fi
    sleep 0.02
  done
}

# tallyd_kill [SIGNAL]: sends SIGNAL (default KILL) to $TALLYD_PID and reaps
# it. Sets TALLYD_STATUS to its exit status.
tallyd_kill() {
  TALLYD_STATUS=0
  [[ -n ${TALLYD_PID:-} ]] || return 0
  kill "-${1:-KILL}" "$TALLYD_PID" 2>/dev/null || true
  wait "$TALLYD_PID" 2>/dev/null || TALLYD_STATUS=$?
}

# flush_count HOST:PORT: tallyd's tally_flushes_total now, "-" when /metrics
# does not answer within a second.
flush_count() {
  { curl -fs --max-time 1 "http://$1/metrics" 2>/dev/null || true; } |
    awk '/^tally_flushes_total/ { s += $2; seen = 1 } END { if (seen) print s + 0; else print "-" }'
}

# watch_flushes HOST:PORT: every second, one line "<unix time> <flushes>"
# (flushes "-" while tallyd does not answer), until killed.
watch_flushes() {
  while true; do
    echo "$(date +%s.%N) $(flush_count "$1")"
    sleep 1
  done
}

# ferretdb_start DIR [PORT]: starts $FERRETDB on 127.0.0.1:PORT (default 0,
# any free port) with its SQLite files under DIR/data, or, when
# FERRET_POSTGRES_URL is set, on that PostgreSQL database; appends its log
# to DIR/ferretdb.log; waits for it to listen. Sets FERRET_PID and
# FERRET_PORT.
ferretdb_start() {
  local dir=$1 want=${2:-0} port="" before backend
  mkdir -p "$dir/data"
  touch "$dir/ferretdb.log"
  before=$(grep -c 'Listening on TCP' "$dir/ferretdb.log" || true)
  if [[ -n ${FERRET_POSTGRES_URL:-} ]]; then
    backend=(--handler=postgresql --postgresql-url="$FERRET_POSTGRES_URL")
  else
    backend=(--handler=sqlite --sqlite-url="file:$dir/data/")
  fi
  "$FERRETDB" "${backend[@]}" --state-dir="$dir" \
    --listen-addr="127.0.0.1:$want" --debug-addr=- --telemetry=disable \
    --log-level=info --log-format=text >>"$dir/ferretdb.log" 2>&1 &
  FERRET_PID=$!
  for _ in $(seq 1 300); do
    if (($(grep -c 'Listening on TCP' "$dir/ferretdb.log" || true) > before)); then
      port=$(grep -o 'Listening on TCP [0-9.]*:[0-9]*' "$dir/ferretdb.log" | tail -n 1 | sed 's/.*://')
      break
    fi
    kill -0 "$FERRET_PID" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $port ]] || { tail -n 20 "$dir/ferretdb.log" >&2; echo "FerretDB did not start" >&2; exit 1; }
  FERRET_PORT=$port
}

# stop_pid PID SIGNAL TENTHS: sends SIGNAL to PID, waits up to TENTHS
# tenths of a second for it to go, then SIGKILLs and reaps it.
stop_pid() {
  local pid=$1 sig=$2 tenths=$3
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 "$tenths"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# ferretdb_stop: stops the FerretDB of FERRET_PID (SIGTERM, SIGKILL after
# 10 s) and clears FERRET_PID.
ferretdb_stop() {
  stop_pid "${FERRET_PID:-}" TERM 100
  FERRET_PID=""
}

# postgres_start DIR: initdb of a fresh PostgreSQL cluster in DIR/data (its
# programs from $PG_BIN), then its server on a free loopback port, TCP only,
# with PostgreSQL's default settings plus $POSTGRES_OPTS (flags such as
# "-c synchronous_commit=off"), logging to DIR/postgres.log; waits until it
# takes connections. The superuser is `tally`, trusted. As root the cluster
# belongs to the user `postgres` and its programs run as that user (the
# server refuses root), so that user must be able to reach DIR; setpriv
# execs the server, so PG_PID is its PID. Sets PG_PID and PG_PORT.
postgres_start() {
  local dir=$1 as=()
  mkdir -p "$dir"
  if [[ $(id -u) == 0 ]]; then
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    chown postgres: "$dir"
  fi
  "${as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U tally --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; echo "initdb failed" >&2; exit 1; }
  PG_PORT=$(free_port)
  # shellcheck disable=SC2086 # POSTGRES_OPTS is a list of flags
  "${as[@]}" "$PG_BIN/postgres" -D "$dir/data" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories= ${POSTGRES_OPTS:-} >"$dir/postgres.log" 2>&1 &
  PG_PID=$!
  for _ in $(seq 1 300); do
    grep -q 'ready to accept connections' "$dir/postgres.log" && return 0
    kill -0 "$PG_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$dir/postgres.log" >&2
  echo "PostgreSQL did not start" >&2
  exit 1
}

# postgres_stop: stops the server of PG_PID (SIGINT, a fast shutdown;
# SIGKILL after 30 s) and clears PG_PID.
postgres_stop() {
  stop_pid "${PG_PID:-}" INT 300
  PG_PID=""
}

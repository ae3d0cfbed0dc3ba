# Shell helpers shared by the scripts that run a release tallyd against
# tally-loadgen (bench-realtime, bench-ingest, crash-loop, soak). Sourced,
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
# any free port) with its SQLite files under DIR/data, appending its log to
# DIR/ferretdb.log; waits for it to listen. Sets FERRET_PID and FERRET_PORT.
ferretdb_start() {
  local dir=$1 want=${2:-0} port="" before
  mkdir -p "$dir/data"
  touch "$dir/ferretdb.log"
  before=$(grep -c 'Listening on TCP' "$dir/ferretdb.log" || true)
  "$FERRETDB" --handler=sqlite --sqlite-url="file:$dir/data/" --state-dir="$dir" \
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

# ferretdb_stop: stops the FerretDB of FERRET_PID (SIGTERM, SIGKILL after
# 10 s) and clears FERRET_PID.
ferretdb_stop() {
  if [[ -n ${FERRET_PID:-} ]] && kill -0 "$FERRET_PID" 2>/dev/null; then
    kill -TERM "$FERRET_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$FERRET_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$FERRET_PID" 2>/dev/null || true
    wait "$FERRET_PID" 2>/dev/null || true
  fi
  FERRET_PID=""
}

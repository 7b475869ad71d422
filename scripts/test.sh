#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing (redis-server, which the
# tests start their own instances of; `openssl` to issue the TLS Redis test's certificates;
# `script` for the CLI's terminal test; Chromium and
# chromedriver for the admin page's browser tests), then runs the whole suite. Extra arguments
# go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs the Debian packages after the first two arguments when `command` is missing.
install_if_missing() {
  local command=$1 why=$2
  shift 2
  command -v "$command" >/dev/null 2>&1 && return
  echo "scripts/test.sh: installing $* ($why)" >&2
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@" >/dev/null
}

if ! command -v cargo >/dev/null 2>&1; then
  echo "scripts/test.sh: cargo is missing: install Rust 1.88 or newer (https://rustup.rs), then run this again" >&2
  exit 1
fi
install_if_missing redis-server "the tests start their own" redis-server
install_if_missing openssl "certificates for the TLS Redis test" openssl
install_if_missing script "\`script\`, for the CLI's terminal test" bsdutils
install_if_missing chromedriver "the admin page's browser tests" chromium chromium-driver

# The suite's output, then — when it failed — each failing test's first panics once more, so the
# last lines of a long log say what broke (a failure's own message can sit above thousands of
# lines of other output and backtraces).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked "$@" 2>&1 | tee "$log" || status=$?
if [[ $status -ne 0 ]]; then
  echo
  echo "scripts/test.sh: the suite failed (exit $status); each failing test's first panics:"
  awk -f scripts/failures.awk "$log"
fi
exit "$status"

#!/usr/bin/env bash
# The test command: installs redis-server when it is missing (the tests start their own
# instances of it), then runs the whole suite. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "scripts/test.sh: installing redis-server (the tests start their own)" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq redis-server >/dev/null
fi

# The CLI's progress-bar test gives it a pseudo-terminal with `script` (util-linux).
if ! command -v script >/dev/null 2>&1; then
  echo "scripts/test.sh: installing bsdutils for \`script\` (the CLI's terminal test)" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq bsdutils >/dev/null
fi

# The admin page's browser tests drive a headless Chromium through chromedriver.
if ! command -v chromedriver >/dev/null 2>&1; then
  echo "scripts/test.sh: installing chromium and chromium-driver (the admin page's browser tests)" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi

exec cargo test --locked "$@"

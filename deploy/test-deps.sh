#!/usr/bin/env bash
# Installs and starts what the test suite needs when it is missing, so
# `make test` passes on a fresh machine: PostgreSQL on 127.0.0.1:5432 (started
# with pg_ctlcluster when it is down, installed with apt-get when its server
# binaries are absent) with enough connections for the end-to-end tests,
# Debian's Chromium for the dashboard's browser test, and promtool for the
# alert rules. Idempotent: where everything is in place it only checks.
set -euo pipefail
cd "$(dirname "$0")/.."



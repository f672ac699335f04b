#!/usr/bin/env bash
# Installs what the test suite needs when it is missing, so `make test`
# passes on a fresh machine: PostgreSQL's server programs (initdb, pg_ctl,
# postgres; the tests run their own private clusters with them, never a
# server already on this machine), PgBouncer, Debian's Chromium for the
# dashboard's browser test, jq for the README's tour, iproute2's ip for the
# network namespaces of one end-to-end test, promtool for the alert rules and
# Node.js 20 or later with npm for the TypeScript client's tests.
# It says what it installs before it does; where everything is in place it
# only checks. It starts, stops and reconfigures no server.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "test-deps: $*"; }

# Where the checks look; overridable so the script's own test runs it
# against stand-ins.
pg_initdb_glob=${TEST_DEPS_PG_GLOB:-/usr/lib/postgresql/*/bin/initdb}
policy_rc_d=${TEST_DEPS_POLICY_RC_D:-/usr/sbin/policy-rc.d}
pgbouncer_bin=${TEST_DEPS_PGBOUNCER:-/usr/sbin/pgbouncer}

export DEBIAN_FRONTEND=noninteractive

# missing collects the packages to install, so that everything missing is
# installed in one apt transaction (one update, one dependency resolution,
# one download), after a line saying why for each.
missing=()
need() {
	log "$1"
	shift
	missing+=("$@")
}

# no_service_start runs a command with Debian's policy-rc.d refusing every
# service start: a package's service (PostgreSQL's cluster at 5432,
# Prometheus at :9090, the dispatcher's default metrics port) is not wanted,
# only its programs.
no_service_start() {
	local policy=""
	if [[ ! -e $policy_rc_d ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy_rc_d"
		chmod +x "$policy_rc_d"
		policy=$policy_rc_d
	fi
	local status=0
	"$@" || status=$?
	[[ -z $policy ]] || rm -f "$policy"
	return "$status"
}

# internal/pgcluster runs initdb and pg_ctl from the newest
# /usr/lib/postgresql/*/bin (or PATH); as root it runs them as the postgres
# user, which the package creates.
if ! compgen -G "$pg_initdb_glob" >/dev/null && ! command -v initdb >/dev/null; then
	need "installing PostgreSQL's server programs (Debian's postgresql package; its own service is not started) for the tests' private clusters" postgresql postgresql-contrib
fi

# The dashboard's browser test (internal/e2e) drives Debian's headless
# Chromium; of its recommended packages it needs only fonts.
if ! command -v chromium >/dev/null; then
	need "installing Chromium for the dashboard's browser test" chromium fonts-liberation
fi

# The README's tour (internal/tour) reads the API's answers with jq.
if ! command -v jq >/dev/null; then
	need "installing jq for the README's tour test" jq
fi

# internal/e2e's test of dispatchers on hosts of their own creates network
# namespaces and veth pairs with iproute2's ip (as root, as CI runs).
if ! command -v ip >/dev/null; then
	need "installing iproute2 for the end-to-end test of dispatchers in network namespaces" iproute2
fi

# cmd/dispatcher/observability_test.go runs promtool on the alert rules
# (and fails without it): Debian's prometheus package ships it.
if ! command -v promtool >/dev/null; then
	need "installing promtool (Debian's prometheus package; its service is not started)" prometheus
fi

# internal/e2e runs a fleet behind PgBouncer in transaction mode, the
# pooler hookd documents (docs/scaling.md): Debian's pgbouncer package,
# whose own service is not started (the test starts a private one).
if ! command -v pgbouncer >/dev/null && [[ ! -x ${pgbouncer_bin} ]]; then
	need "installing PgBouncer (Debian's pgbouncer package; its service is not started) for the test of a fleet behind a pooler" pgbouncer
fi

# sdk/typescript's tests (make sdk-test) run on Node.js 20 or later with
# npm: Debian's nodejs and npm packages when either is missing.
node_major() {
	local v
	v=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)
	[[ $v =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	need "installing Node.js and npm (Debian's nodejs and npm packages) for the TypeScript client's tests" nodejs npm
fi

if ((${#missing[@]})); then
	apt-get update -qq
	no_service_start apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if (($(node_major) < 20)); then
	echo "test-deps: Node.js $(node --version 2>/dev/null || echo none) is too old: sdk/typescript needs 20 or later" >&2
	exit 1
fi

#!/usr/bin/env bash
# Installs and starts what the test suite needs when it is missing, so
# `make test` passes on a fresh machine: PostgreSQL on 127.0.0.1:5432 (started
# with pg_ctlcluster when it is down, installed with apt-get when its server
# binaries are absent) with enough connections for the end-to-end tests,
# Debian's Chromium for the dashboard's browser test, and promtool for the
# alert rules. Idempotent: where everything is in place it only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_HOST=127.0.0.1
PG_PORT=5432
MIN_CONNECTIONS=300

log() { echo "test-deps: $*"; }

pg_ready() {
	command -v pg_isready >/dev/null && pg_isready -q -h "$PG_HOST" -p "$PG_PORT"
}

wait_ready() {
	for _ in $(seq 1 60); do
		pg_ready && return 0
		sleep 1
	done
	echo "test-deps: PostgreSQL on $PG_HOST:$PG_PORT did not become ready in 60s" >&2
	exit 1
}

psql_admin() {
	PGCONNECT_TIMEOUT=5 psql -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -At "$@"
}

cluster_version() {
	ls /etc/postgresql | sort -V | tail -n 1
}

# The server's own directory also holds pg_isready and psql.
add_pg_bin() {
	local dir
	dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [[ -n "$dir" && ":$PATH:" != *":$dir:"* ]]; then PATH="$PATH:$dir"; fi
}

add_pg_bin
if ! pg_ready; then
	if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		log "installing PostgreSQL"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq postgresql >/dev/null
		add_pg_bin
		# Tests connect as postgres over TCP without a password.
		hba="/etc/postgresql/$(cluster_version)/main/pg_hba.conf"
		if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
			sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
		fi
	fi
	log "starting PostgreSQL $(cluster_version)"
	pg_ctlcluster --skip-systemctl-redirect "$(cluster_version)" main start || true
	pg_ctlcluster --skip-systemctl-redirect "$(cluster_version)" main reload || true
	wait_ready
fi

# The dashboard's browser test (internal/e2e) drives Debian's headless Chromium.
if ! command -v chromium >/dev/null; then
	log "installing Chromium for the dashboard's browser test"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq chromium >/dev/null
fi

# cmd/dispatcher/observability_test.go runs promtool on the alert rules (and fails
# without it): Debian's prometheus package ships it. Only the tool is
# wanted, not a Prometheus server on :9090 (the dispatcher's default metrics
# port), so a policy-rc.d keeps the package's service from starting.
if ! command -v promtool >/dev/null; then
	log "installing promtool (Debian's prometheus package)"
	export DEBIAN_FRONTEND=noninteractive
	policy=""
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		policy=/usr/sbin/policy-rc.d
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	[[ -z $policy ]] || rm -f "$policy"
fi

# End-to-end tests run several API and dispatcher processes, each with a pool.
max_conns=$(psql_admin -c 'SHOW max_connections')
if (( max_conns < MIN_CONNECTIONS )); then
	log "raising max_connections from $max_conns to $MIN_CONNECTIONS (restarts PostgreSQL)"
	psql_admin -c "ALTER SYSTEM SET max_connections = $MIN_CONNECTIONS"
	pg_ctlcluster --skip-systemctl-redirect "$(cluster_version)" main restart
	wait_ready
fi


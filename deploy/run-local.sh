#!/usr/bin/env bash
# run-local.sh (behind `make run`) runs hookd on this machine: it builds the
# binaries, finds or starts a PostgreSQL, migrates it, starts the API and the
# dispatcher and prints how to talk to them. Ctrl-C or SIGTERM stops both
# processes, and the private cluster when this script started it.
#
# PostgreSQL, first that answers:
#   1. DATABASE_URL, when set;
#   2. the server at LOCAL_PG_URL (default
#      postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), using the
#      database HOOKD_DB (default hookd) on it, created when absent;
#   3. a private cluster in HOOKD_DATA_DIR (default ./.data) on 127.0.0.1 at
#      port HOOKD_PG_PORT (default 55432), created with initdb when PostgreSQL's
#      server binaries are installed (/usr/lib/postgresql/*/bin/initdb).
#
# Other settings: API_TOKEN (default: generated and printed), LISTEN_ADDR
# (default 127.0.0.1:8080), METRICS_ADDR (the dispatcher's, default
# 127.0.0.1:9090), API_METRICS_ADDR (the api's METRICS_ADDR, default
# 127.0.0.1:9091), RETRY_SCHEDULE (default 0s,5s,10s,30s,1m,5m: short, so a
# retry is seen within seconds; the dispatcher's own default spans hours),
# HOOKD_BIN_DIR (where the binaries and the tour's receiver are built,
# default ./bin), SECRET_KEY (the key sealing endpoint secrets at rest;
# default: generated once into HOOKD_DATA_DIR/secret-key and reused). Every other flag's environment twin (see `bin/api --help`)
# passes through.
#
# It ends by printing an export line (API, TOKEN, SECRET, DATABASE_URL) for a
# second shell: the README's tour starts from it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

say() { printf 'run-local: %s\n' "$*"; }
die() {
	printf 'run-local: %s\n' "$*" >&2
	exit 1
}

bin_dir=${HOOKD_BIN_DIR:-$root/bin}
db_name=${HOOKD_DB:-hookd}
local_pg_url=${LOCAL_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
data_dir=${HOOKD_DATA_DIR:-$root/.data}
pg_port=${HOOKD_PG_PORT:-55432}
listen_addr=${LISTEN_ADDR:-127.0.0.1:8080}
metrics_addr=${METRICS_ADDR:-127.0.0.1:9090}
api_metrics_addr=${API_METRICS_ADDR:-127.0.0.1:9091}
retry_schedule=${RETRY_SCHEDULE:-0s,5s,10s,30s,1m,5m}

[[ $db_name =~ ^[a-z_][a-z0-9_]{0,62}$ ]] || die "HOOKD_DB=$db_name: use lower-case letters, digits and _"
[[ $pg_port =~ ^[0-9]+$ ]] || die "HOOKD_PG_PORT=$pg_port is not a port number"

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
	PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null || die "Go 1.26 is needed and go is not on PATH"

# pg_tool NAME prints the path of a PostgreSQL program: from PATH, else from
# the newest server installation.
pg_tool() {
	if command -v "$1" 2>/dev/null; then return; fi
	ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1
}
psql=$(pg_tool psql || true)

# answers URL: a connection and a query succeed.
answers() {
	[[ -n $psql ]] || return 1
	PGCONNECT_TIMEOUT=3 "$psql" -X -q -At -d "$1" -c 'SELECT 1' >/dev/null 2>&1
}

# with_db URL NAME: URL with its database replaced by NAME.
with_db() {
	local url=$1 query=""
	if [[ $url == *\?* ]]; then
		query="?${url#*\?}"
		url=${url%%\?*}
	fi
	local scheme=${url%%://*} rest=${url#*://}
	printf '%s://%s/%s%s\n' "$scheme" "${rest%%/*}" "$2" "$query"
}

# ensure_db URL NAME: create database NAME on URL's server when absent.
ensure_db() {
	local exists
	exists=$(PGCONNECT_TIMEOUT=3 "$psql" -X -q -At -v ON_ERROR_STOP=1 -d "$1" \
		-c "SELECT 1 FROM pg_database WHERE datname = '$2'")
	if [[ $exists != 1 ]]; then
		say "creating database $2"
		PGCONNECT_TIMEOUT=3 "$psql" -X -q -v ON_ERROR_STOP=1 -d "$1" -c "CREATE DATABASE \"$2\"" >/dev/null
	fi
}

# as_pg runs a command as the postgres user when this script runs as root
# (initdb and postgres refuse root).
as_pg() {
	if [[ $(id -u) == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

api_pid="" disp_pid="" pgdata="" pg_ctl="" started_cluster=""

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	set +e
	if [[ -n $api_pid || -n $disp_pid ]]; then
		say "stopping"
		[[ -n $api_pid ]] && kill -TERM "$api_pid" 2>/dev/null
		[[ -n $disp_pid ]] && kill -TERM "$disp_pid" 2>/dev/null
		[[ -n $api_pid ]] && wait "$api_pid" 2>/dev/null
		[[ -n $disp_pid ]] && wait "$disp_pid" 2>/dev/null
	fi
	if [[ -n $started_cluster ]]; then
		say "stopping the private PostgreSQL cluster"
		as_pg "$pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_private_cluster sets db_admin_url to a private cluster's maintenance
# database, creating and starting the cluster as needed.
start_private_cluster() {
	local initdb
	initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)
	[[ -n $initdb ]] || initdb=$(command -v initdb || true)
	[[ -n $initdb ]] || die "no PostgreSQL found: set DATABASE_URL, start a server on 127.0.0.1:5432 (or set LOCAL_PG_URL), or install PostgreSQL's server binaries (apt-get install postgresql) for a private cluster"
	local pg_bin
	pg_bin=$(dirname "$initdb")
	pg_ctl=$pg_bin/pg_ctl
	[[ -n $psql ]] || psql=$pg_bin/psql
	[[ -x $psql ]] || die "psql not found: install PostgreSQL's client (apt-get install postgresql-client)"

	mkdir -p "$data_dir"
	data_dir=$(cd "$data_dir" && pwd)
	pgdata=$data_dir/pg
	if [[ $(id -u) == 0 ]]; then
		id postgres >/dev/null 2>&1 || die "running as root needs a postgres user to own the private cluster"
		chown postgres: "$data_dir"
		as_pg test -w "$data_dir" -a -x "$data_dir" ||
			die "the postgres user cannot use $data_dir: let it through every parent directory (chmod o+x)"
	fi

	if [[ ! -s $pgdata/PG_VERSION ]]; then
		say "creating a private PostgreSQL cluster in $pgdata"
		if ! as_pg "$initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >"$data_dir/initdb.log" 2>&1; then
			cat "$data_dir/initdb.log" >&2
			die "initdb failed"
		fi
		cat >>"$pgdata/postgresql.conf" <<-'CONF'

			# Added by deploy/run-local.sh: TCP on loopback only, no socket file.
			listen_addresses = '127.0.0.1'
			unix_socket_directories = ''
		CONF
	fi

	if as_pg "$pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
		# Left running by an earlier run: use it where it listens, leave it running.
		pg_port=$(sed -n 4p "$pgdata/postmaster.pid")
		say "using the private PostgreSQL cluster already running in $pgdata on port $pg_port"
	else
		say "starting the private PostgreSQL cluster on 127.0.0.1:$pg_port (log: $data_dir/postgres.log)"
		started_cluster=1
		if ! as_pg "$pg_ctl" -D "$pgdata" -l "$data_dir/postgres.log" -o "-p $pg_port" -w -t 60 start >/dev/null; then
			started_cluster=""
			tail -n 20 "$data_dir/postgres.log" >&2 || true
			die "the private PostgreSQL cluster did not start"
		fi
	fi
	db_admin_url="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
}

say "building $bin_dir/api, $bin_dir/dispatcher, $bin_dir/hookd (the command line) and $bin_dir/receiver (the tour's webhook receiver)"
go build -o "$bin_dir/" ./cmd/api ./cmd/dispatcher ./cmd/hookd ./internal/delivery/deliverytest/cmd/receiver

db_url=""
if [[ -n ${DATABASE_URL:-} ]]; then
	if [[ -z $psql ]] || answers "$DATABASE_URL"; then
		db_url=$DATABASE_URL
		db_source="DATABASE_URL"
	else
		say "DATABASE_URL does not answer; trying LOCAL_PG_URL"
	fi
fi
if [[ -z $db_url ]] && answers "$local_pg_url"; then
	ensure_db "$local_pg_url" "$db_name"
	db_url=$(with_db "$local_pg_url" "$db_name")
	db_source="the server at LOCAL_PG_URL"
fi
if [[ -z $db_url ]]; then
	start_private_cluster
	ensure_db "$db_admin_url" "$db_name"
	db_url=$(with_db "$db_admin_url" "$db_name")
	db_source="the private cluster in $pgdata"
fi

say "migrating"
DATABASE_URL=$db_url "$bin_dir/api" migrate

token_note=""
if [[ -z ${API_TOKEN:-} ]]; then
	if command -v openssl >/dev/null; then
		API_TOKEN=$(openssl rand -hex 24)
	else
		API_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
	fi
	token_note="  (generated; set API_TOKEN to choose one)"
fi

# The key sealing endpoint signing secrets at rest: kept beside the
# private cluster, since the database's secrets open only with it.
if [[ -z ${SECRET_KEY:-} ]]; then
	mkdir -p "$data_dir"
	key_file=$data_dir/secret-key
	if [[ ! -s $key_file ]]; then
		(umask 077 && head -c 32 /dev/urandom | base64 | tr -d '\n' >"$key_file")
		say "generated the secret key in $key_file"
	fi
	SECRET_KEY=$(<"$key_file")
fi
export SECRET_KEY

# A signing secret for the tour's receiver and the endpoint pointed at it:
# whsec_ and 32 random bytes in base64.
secret="whsec_$(head -c 32 /dev/urandom | base64 | tr -d '\n')"

DATABASE_URL=$db_url API_TOKEN=$API_TOKEN LISTEN_ADDR=$listen_addr METRICS_ADDR=$api_metrics_addr \
	NO_MIGRATE=true ALLOW_PRIVATE_TARGETS=true "$bin_dir/api" serve &
api_pid=$!
DATABASE_URL=$db_url METRICS_ADDR=$metrics_addr NO_MIGRATE=true RETRY_SCHEDULE=$retry_schedule \
	ALLOW_PRIVATE_TARGETS=true "$bin_dir/dispatcher" run &
disp_pid=$!

# client_addr ADDR: where a client reaches a listener on ADDR.
client_addr() {
	local host=${1%:*} port=${1##*:}
	case $host in
	"" | 0.0.0.0 | "[::]") host=127.0.0.1 ;;
	esac
	printf '%s:%s\n' "$host" "$port"
}
api_url="http://$(client_addr "$listen_addr")"
metrics_url="http://$(client_addr "$metrics_addr")"
api_metrics_url="http://$(client_addr "$api_metrics_addr")"

# http_ok URL: GET URL answers 200.
http_ok() {
	if command -v curl >/dev/null; then
		curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null
		return
	fi
	local hostport=${1#http://} status
	hostport=${hostport%%/*}
	exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" 2>/dev/null || return 1
	printf 'GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n' "${1#http://*/}" "$hostport" >&3
	read -r _ status _ <&3 || status=""
	exec 3>&-
	[[ $status == 200 ]]
}

deadline=$((SECONDS + 60))
until http_ok "$api_url/readyz" && http_ok "$metrics_url/readyz" && http_ok "$api_metrics_url/metrics"; do
	kill -0 "$api_pid" 2>/dev/null || die "the api exited; its log is above"
	kill -0 "$disp_pid" 2>/dev/null || die "the dispatcher exited; its log is above"
	((SECONDS < deadline)) || die "the api or the dispatcher was not ready within 60s"
	sleep 0.2
done

# The binaries' directory as the second shell names it: relative when it is
# under the repository.
bin_shown=$bin_dir
[[ $bin_dir == "$root"/* ]] && bin_shown=${bin_dir#"$root"/}

cat <<EOF

run-local: hookd is up
  API          $api_url
  dashboard    $api_url/dashboard  (log in with the API token)
  API token    $API_TOKEN$token_note
  metrics      $metrics_url/metrics
  api metrics  $api_metrics_url/metrics
  database     $db_url ($db_source)
  retries      $retry_schedule  (short, for trying hookd; set RETRY_SCHEDULE to change it)
  processes    api pid $api_pid, dispatcher pid $disp_pid
  private/loopback targets allowed for local development (ALLOW_PRIVATE_TARGETS=true)

In a second shell, in $root (the README's tour starts here):

  export API=$api_url TOKEN=$API_TOKEN SECRET=$secret DATABASE_URL='$db_url'

Then start a receiver that checks signatures with \$SECRET, register it and send it a message:

  $bin_shown/receiver --secret "\$SECRET" &
  curl -sS \$API/v1/endpoints -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' \\
    -d '{"tenant_id":"acme","url":"http://127.0.0.1:9000/hooks","secret":"'"\$SECRET"'"}'
  curl -sS \$API/v1/messages -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' \\
    -d '{"tenant_id":"acme","event_type":"invoice.paid","payload":{"amount":42}}'

Ctrl-C stops everything.
EOF

# Run until a signal or until either process exits. A process that exits 0
# was stopped by a signal (Ctrl-C reaches the whole process group).
set +e
wait -n "$api_pid" "$disp_pid"
status=$?
set -e
name=dispatcher
if ! kill -0 "$api_pid" 2>/dev/null; then
	name=api
	api_pid=""
else
	disp_pid=""
fi
if ((status == 0)); then
	say "the $name stopped"
	exit 0
fi
say "the $name exited (status $status)"
exit 1

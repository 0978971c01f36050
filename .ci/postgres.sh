#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests.
#
#   eval "$(.ci/postgres.sh start DIR)"   initdb a cluster in DIR (as the postgres
#                                         user when run as root), start it on a Unix
#                                         socket in DIR and on 127.0.0.1 only, create
#                                         the database lockstep, and print
#                                         export LOCKSTEP_POSTGRES_URL=...
#   .ci/postgres.sh stop DIR               stop the cluster and remove DIR
#   .ci/postgres.sh restart DIR            restart it (fast shutdown), same port
#   .ci/postgres.sh down DIR               stop it (fast shutdown), keeping DIR
#   .ci/postgres.sh up DIR                 start it again after down, same port
#
# PGPORT picks the port (default 55432). Binaries come from PATH or Debian's
# /usr/lib/postgresql/<version>/bin. With PGBOUNCER=1 (and pgbouncer
# installed) start also runs a pgbouncer in transaction mode in front of it
# and prints LOCKSTEP_PGBOUNCER_URL too.
set -euo pipefail
cmd=${1:?usage: postgres.sh start|stop|restart|down|up DIR}
dir=${2:?usage: postgres.sh start|stop|restart|down|up DIR}
port=${PGPORT:-55432}
bouncer_port=$((port + 1))

bindir=""
if ! command -v initdb >/dev/null 2>&1 || ! command -v pg_ctl >/dev/null 2>&1; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do bindir="$d/"; break; done
fi

as_pg() { # run a command as the postgres user when we are root
  if [ "$(id -u)" -eq 0 ]; then
    setpriv --reuid=postgres --regid="$(id -g postgres)" --clear-groups --reset-env -- env PATH="$PATH" "$@"
  else
    "$@"
  fi
}

server_opts() { echo "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c synchronous_commit=on -c max_connections=200"; }

case "$cmd" in
start)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  as_pg "${bindir}initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  echo "$port" >"$dir/port"
  as_pg "${bindir}pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(server_opts)" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  as_pg "${bindir}psql" -h "$dir" -p "$port" -U postgres -q -c "CREATE DATABASE lockstep" postgres >/dev/null
  echo "export LOCKSTEP_POSTGRES_URL='postgres://postgres@127.0.0.1:$port/lockstep?sslmode=disable'"
  echo "export LOCKSTEP_POSTGRES_DIR='$dir'"
  if [ "${PGBOUNCER:-0}" = 1 ] && command -v pgbouncer >/dev/null 2>&1; then
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
lockstep = host=127.0.0.1 port=$port dbname=lockstep user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 400
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    echo '"postgres" ""' >"$dir/userlist.txt"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/pgbouncer.ini" "$dir/userlist.txt"; fi
    as_pg pgbouncer -d "$dir/pgbouncer.ini" >/dev/null
    for _ in $(seq 50); do [ -s "$dir/pgbouncer.pid" ] && break; sleep 0.1; done
    echo "export LOCKSTEP_PGBOUNCER_URL='postgres://postgres@127.0.0.1:$bouncer_port/lockstep?sslmode=disable'"
  fi
  ;;
restart)
  as_pg "${bindir}pg_ctl" -D "$dir/data" -m fast -w -t 60 restart >/dev/null
  ;;
down)
  as_pg "${bindir}pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
  ;;
up)
  port=$(cat "$dir/port")
  as_pg "${bindir}pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(server_opts)" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  ;;
stop)
  if [ -s "$dir/pgbouncer.pid" ]; then kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true; fi
  if [ -d "$dir/data" ]; then as_pg "${bindir}pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true; fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: postgres.sh start|stop|restart|down|up DIR" >&2; exit 2 ;;
esac

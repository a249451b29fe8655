#!/usr/bin/env bash
# A throw-away PostgreSQL server for the tests that need one (tests/test_postgres.py and
# the postgres_url fixture in tests/conftest.py).
#
#   source .ci/postgres.sh            start one in a new temporary folder, export the variables
#                                     below, and stop it (and delete the folder) when this shell
#                                     exits (.ci/run). Sourced again in that shell (or a child of
#                                     it), it reuses that server.
#   eval "$(.ci/postgres.sh start)"   for a developer's shell: start one in the folder
#                                     ${TMPDIR:-/tmp}/autotune-postgres-UID, or reuse the one
#                                     running there, and leave it up
#   .ci/postgres.sh stop              stop that one and delete its folder
# $AUTOTUNE_TEST_POSTGRES_DIR, when set, names the folder in every case.
#
# Without initdb/pg_ctl it installs Debian's postgresql (as root, with apt-get). Started by
# root, the server runs as the postgres user (postgres refuses to run as root). It listens on
# 127.0.0.1 only, on a free port, with a role "autotune" that has a password, may create
# databases and may end other roles' sessions (pg_signal_backend: DROP DATABASE ... WITH (FORCE)),
# and a database "autotune". Exported:
#   AUTOTUNE_TEST_POSTGRES_URL  postgresql://autotune:PASSWORD@127.0.0.1:PORT/autotune
#   AUTOTUNE_TEST_POSTGRES_CTL  this server's pg_ctl command (user switch, -D, -l, -w included):
#                               append "stop -m fast" or "start" to it
#   AUTOTUNE_TEST_POSTGRES_DIR  its folder
# When a step fails, it prints one error line, exports nothing and fails: sourced, it returns 1
# (.ci/run stops there: CI is red); "start" exits 1. The PostgreSQL tests then skip with the reason
# in a developer's shell, and fail with it in CI (CI=true: tests/conftest.py, need).

_atpg_fail() {
    echo "error: no PostgreSQL server for the tests ($1); the PostgreSQL tests skip, and fail in CI" >&2
}

# The folder holding initdb and pg_ctl (PATH first, then Debian's /usr/lib/postgresql/N/bin).
_atpg_bindir() {
    local found
    if found=$(command -v initdb 2>/dev/null) && found=$(dirname "$(readlink -f "$found")") && [ -x "$found/pg_ctl" ]; then
        echo "$found"
        return 0
    fi
    for found in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$found/initdb" ] && [ -x "$found/pg_ctl" ]; then
            echo "$found"
            return 0
        fi
    done
    return 1
}

_atpg_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start (or reuse) the server in folder $1 and export its variables. Returns 0 when it is ready;
# otherwise prints one warning line and returns 1. Sets _atpg_started=1 when this call started it.
_atpg_up() {
    local dir=$1 bindir why="" pw port attempt ctl
    local -a as=()
    _atpg_started=${_atpg_started:-0}  # stays 1 when this shell started the server before

    if [ -f "$dir/env" ] && [ -f "$dir/.autotune-postgres" ]; then
        # shellcheck disable=SC1091
        . "$dir/env"
        if eval "${AUTOTUNE_TEST_POSTGRES_CTL:-false} status" >/dev/null 2>&1; then
            echo "PostgreSQL for the tests: reusing the server in $dir" >&2
            return 0
        fi
        unset AUTOTUNE_TEST_POSTGRES_URL AUTOTUNE_TEST_POSTGRES_CTL AUTOTUNE_TEST_POSTGRES_DIR
    fi
    if [ -e "$dir" ]; then
        if [ ! -f "$dir/.autotune-postgres" ]; then
            _atpg_fail "$dir exists and was not made by .ci/postgres.sh"
            return 1
        fi
        _atpg_down "$dir" || true  # a stopped or half-made one: start afresh
    fi
    mkdir -p "$dir" && touch "$dir/.autotune-postgres" || { _atpg_fail "cannot create $dir"; return 1; }

    if ! bindir=$(_atpg_bindir); then
        if [ "$(id -u)" != 0 ]; then
            _atpg_fail "no initdb/pg_ctl found; install PostgreSQL (Debian: apt-get install postgresql)"
            return 1
        fi
        echo "PostgreSQL for the tests: apt-get install postgresql" >&2
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >"$dir/install.log" 2>&1 \
            || ! bindir=$(_atpg_bindir); then
            _atpg_fail "apt-get install postgresql failed: $(tail -n 1 "$dir/install.log")"
            return 1
        fi
    fi

    if [ "$(id -u)" = 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            _atpg_fail "running as root and there is no postgres user to run the server as"
            return 1
        fi
        as=(runuser -u postgres --)
        chown postgres: "$dir" || { _atpg_fail "cannot give $dir to the postgres user"; return 1; }
    fi
    chmod 700 "$dir"

    # initdb: superuser "postgres" reachable only through the socket in $dir (trust);
    # TCP connections need a password.
    if ! (cd "$dir" && "${as[@]}" "$bindir/initdb" -D "$dir/data" -U postgres -E UTF8 --locale=C \
            --auth-local=trust --auth-host=scram-sha-256 --no-sync) >"$dir/initdb.log" 2>&1; then
        _atpg_fail "initdb failed: $(tail -n 1 "$dir/initdb.log")"
        return 1
    fi
    ctl="$(printf '%q ' "${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60)"
    ctl="${ctl% }"
    for attempt in 1 2 3; do  # a free port can be taken between choosing it and binding it
        port=$(_atpg_free_port) || { _atpg_fail "python3 could not pick a free port"; return 1; }
        # Throw-away data: no fsync, no autovacuum (a worker of its own in a test's database would stop that
        # test's role from dropping it WITH (FORCE)). Later lines of postgresql.conf override earlier ones.
        "${as[@]}" tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
autovacuum = off
EOF
        why=""
        (cd "$dir" && eval "$ctl start") >/dev/null 2>&1 && break
        why="pg_ctl start failed: $(tail -n 1 "$dir/server.log" 2>/dev/null)"
    done
    if [ -n "$why" ]; then
        _atpg_fail "$why"
        return 1
    fi
    _atpg_started=1

    pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    if ! (cd "$dir" && "${as[@]}" "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres \
            -c "CREATE ROLE autotune LOGIN CREATEDB PASSWORD '$pw'" -c "GRANT pg_signal_backend TO autotune" \
            -c "CREATE DATABASE autotune OWNER autotune") \
            >"$dir/setup.log" 2>&1; then
        _atpg_fail "creating the role and database failed: $(tail -n 1 "$dir/setup.log")"
        return 1
    fi
    # The URL the tests get must work as given: over TCP, with the password.
    if ! PGPASSWORD="$pw" PGCONNECT_TIMEOUT=10 "$bindir/psql" -X -q -h 127.0.0.1 -p "$port" -U autotune -d autotune \
            -c "SELECT 1" >>"$dir/setup.log" 2>&1; then
        _atpg_fail "cannot log in as autotune over TCP: $(tail -n 1 "$dir/setup.log")"
        return 1
    fi

    # Created readable by its owner only (umask in a subshell), never world-readable for a moment.
    (
        umask 077
        {
            echo "export AUTOTUNE_TEST_POSTGRES_URL=postgresql://autotune:$pw@127.0.0.1:$port/autotune"
            echo "export AUTOTUNE_TEST_POSTGRES_CTL=$(printf '%q' "$ctl")"
            echo "export AUTOTUNE_TEST_POSTGRES_DIR=$(printf '%q' "$dir")"
        } >"$dir/env"
    ) || { _atpg_fail "cannot write $dir/env"; return 1; }
    # shellcheck disable=SC1091
    . "$dir/env"
    echo "PostgreSQL for the tests: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, in $dir" >&2
    return 0
}

# Stop the server in folder $1, made by this script (if it runs), and delete the folder.
_atpg_down() {
    local dir=$1 ctl=""
    [ -n "$dir" ] && [ "$dir" != / ] && [ -f "$dir/.autotune-postgres" ] || return 0
    if [ -f "$dir/env" ]; then
        ctl=$(. "$dir/env" && echo "$AUTOTUNE_TEST_POSTGRES_CTL")
    fi
    if [ -n "$ctl" ]; then
        (cd "$dir" && eval "$ctl stop -m fast") >/dev/null 2>&1 || true
    elif [ -f "$dir/data/postmaster.pid" ]; then  # failed before env was written: stop it by its pid
        kill -INT "$(head -n 1 "$dir/data/postmaster.pid")" 2>/dev/null || true
        sleep 1
    fi
    rm -rf "$dir"
}

# On exit: stop the server this shell started (a reused one belongs to whoever started it).
_atpg_on_exit() {
    if [ "${_atpg_started:-0}" = 1 ]; then
        _atpg_down "$_atpg_home"
        unset AUTOTUNE_TEST_POSTGRES_URL AUTOTUNE_TEST_POSTGRES_CTL AUTOTUNE_TEST_POSTGRES_DIR
        _atpg_started=0
    fi
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: export the variables into this shell, stop at its exit (replaces any EXIT trap).
    _atpg_home=${AUTOTUNE_TEST_POSTGRES_DIR:-}
    if [ -z "$_atpg_home" ] && _atpg_home=$(mktemp -d "${TMPDIR:-/tmp}/autotune-postgres.XXXXXX"); then
        touch "$_atpg_home/.autotune-postgres"
    fi
    if [ -z "$_atpg_home" ]; then
        _atpg_fail "mktemp -d failed"
        return 1
    elif _atpg_up "$_atpg_home"; then
        trap _atpg_on_exit EXIT
    else
        _atpg_down "$_atpg_home"  # what it started, and its folder
        unset AUTOTUNE_TEST_POSTGRES_URL AUTOTUNE_TEST_POSTGRES_CTL AUTOTUNE_TEST_POSTGRES_DIR
        _atpg_started=0
        return 1
    fi
else
    set -u
    _atpg_home=${AUTOTUNE_TEST_POSTGRES_DIR:-${TMPDIR:-/tmp}/autotune-postgres-$(id -u)}
    case "${1:-start}" in
        start)
            if _atpg_up "$_atpg_home"; then
                printf '. %q\n' "$_atpg_home/env"  # the file (mode 600) holds the password; stdout does not
            else
                _atpg_down "$_atpg_home"
                exit 1
            fi
            ;;
        stop) _atpg_down "$_atpg_home" ;;
        *)
            echo "usage: source .ci/postgres.sh | $0 start | $0 stop" >&2
            exit 2
            ;;
    esac
fi

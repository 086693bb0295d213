# Sourced by .ci/run and test/long.sh: start the servers the tests need on loopback, if they are not
# answering, and export the variables the tests find them through. Nothing is installed by hand: a new
# machine runs this as it is. Sourced under `set -euo pipefail`: no exit, only return.
export STRATA_TEST_POSTGRES_URL="${STRATA_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
export STRATA_TEST_REDIS_URL="${STRATA_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"

services_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

services_wait_for() { # port name
	for _ in $(seq 1 60); do
		services_listening "$1" && return 0
		sleep 0.5
	done
	echo "services: $2 did not start listening on 127.0.0.1:$1" >&2
	return 1
}

if ! services_listening 5432; then
	echo "services: starting PostgreSQL"
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
	services_wait_for 5432 PostgreSQL
fi
if ! services_listening 6379; then
	echo "services: starting Redis"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
	services_wait_for 6379 Redis
fi

# More services, each a script that starts one on loopback (if it is not already listening) and
# exports the variable the tests find it through. They are sourced, so their exports reach the tests.
for service in "$(dirname "${BASH_SOURCE[0]}")"/services.d/*.sh; do
	[ -e "$service" ] || continue
	echo "services: $(basename "$service" .sh)"
	# shellcheck source=/dev/null
	. "$service"
done
unset service

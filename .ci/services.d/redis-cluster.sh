# Sourced by .ci/services.sh (for .ci/run and test/long.sh): a local Redis Cluster of 3 masters and 3
# replicas on loopback ports 127.0.0.1:7000-7005 (STRATA_TEST_REDIS_CLUSTER_PORT moves the first), for
# the redis+cluster:// backend tests, unless the first port already answers; then
# STRATA_TEST_REDIS_CLUSTER_URL pointing at it. Each node is redis-server --cluster-enabled yes, nothing
# persisted, its own directory under /tmp. Tests isolate themselves by key prefix and never FLUSHALL.
# Sourced under `set -euo pipefail`: no exit, only return.
rc_port="${STRATA_TEST_REDIS_CLUSTER_PORT:-7000}"
rc_ports="$rc_port $((rc_port + 1)) $((rc_port + 2)) $((rc_port + 3)) $((rc_port + 4)) $((rc_port + 5))"
export STRATA_TEST_REDIS_CLUSTER_URL="${STRATA_TEST_REDIS_CLUSTER_URL:-redis+cluster://127.0.0.1:${rc_port},127.0.0.1:$((rc_port + 1)),127.0.0.1:$((rc_port + 2))/}"

rc_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

rc_state_ok() { redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

rc_start() {
	local p dir up
	for p in $rc_ports; do
		rc_listening "$p" && continue
		dir="/tmp/strata-redis-cluster/$p"
		rm -rf "$dir"
		mkdir -p "$dir"
		redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --dir "$dir" \
			--cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 5000 \
			--save "" --appendonly no --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
	done
	for p in $rc_ports; do
		up=""
		for _ in $(seq 1 60); do
			if rc_listening "$p"; then
				up=1
				break
			fi
			sleep 0.5
		done
		if [ -z "$up" ]; then
			echo "ci: redis cluster node 127.0.0.1:$p did not start listening" >&2
			cat "/tmp/strata-redis-cluster/$p/redis.log" >&2 || true
			return 1
		fi
	done
	local addrs=""
	for p in $rc_ports; do addrs="$addrs 127.0.0.1:$p"; done
	# shellcheck disable=SC2086
	redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes >/tmp/strata-redis-cluster/create.log 2>&1 || {
		echo "ci: redis-cli --cluster create failed" >&2
		cat /tmp/strata-redis-cluster/create.log >&2
		return 1
	}
}

if ! rc_listening "$rc_port"; then
	echo "ci: starting a Redis Cluster (3 masters, 3 replicas) on 127.0.0.1:${rc_port}-$((rc_port + 5))"
	rc_start || return 1
fi
rc_ok=""
for _ in $(seq 1 120); do
	if rc_state_ok "$rc_port"; then
		rc_ok=1
		break
	fi
	sleep 0.5
done
if [ -z "$rc_ok" ]; then
	echo "ci: the Redis Cluster on 127.0.0.1:${rc_port} never reached cluster_state:ok" >&2
	redis-cli -h 127.0.0.1 -p "$rc_port" cluster info >&2 || true
	return 1
fi
unset rc_port rc_ports rc_ok
unset -f rc_listening rc_state_ok rc_start

# Sourced by .ci/services.sh (for .ci/run and test/long.sh): an S3-protocol server on loopback
# (internal/s3local: gofakes3, in memory) for the blob store tests, unless one already listens, and
# STRATA_TEST_S3_URL pointing at it. Any credentials are accepted; the AWS SDK is given dummy ones and
# told not to ask the EC2 metadata endpoint, since there is no outside network. Sourced under `set -euo
# pipefail`: no exit, only return.
s3_port="${STRATA_TEST_S3_PORT:-9000}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-strata-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-strata-test-secret}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_EC2_METADATA_DISABLED=true
export STRATA_TEST_S3_URL="${STRATA_TEST_S3_URL:-s3://strata-test?endpoint=http://127.0.0.1:${s3_port}&region=us-east-1&use_path_style=true}"
if ! (exec 3<>"/dev/tcp/127.0.0.1/${s3_port}") 2>/dev/null; then
	echo "ci: starting the S3-protocol server (internal/s3local) on 127.0.0.1:${s3_port}"
	s3_bin="$(mktemp -d)/s3local"
	go build -o "$s3_bin" ./internal/s3local/cmd/s3local
	nohup "$s3_bin" -addr "127.0.0.1:${s3_port}" -bucket strata-test >"${s3_bin}.log" 2>&1 &
	s3_up=""
	for _ in $(seq 1 120); do
		if (exec 3<>"/dev/tcp/127.0.0.1/${s3_port}") 2>/dev/null; then
			s3_up=1
			break
		fi
		sleep 0.5
	done
	if [ -z "$s3_up" ]; then
		echo "ci: the S3-protocol server did not start listening on 127.0.0.1:${s3_port}" >&2
		cat "${s3_bin}.log" >&2 || true
		return 1
	fi
	unset s3_bin s3_up
fi
unset s3_port

package testenv

import (
	"net/url"
	"os"
	"testing"
)

// S3Env names the S3-protocol server the S3 tests run against, as a blob store URL:
// s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true. .ci/services.d/s3.sh
// starts one (internal/s3local) and exports it.
const S3Env = "STRATA_TEST_S3_URL"

// S3URL returns STRATA_TEST_S3_URL, skipping the test when it is unset, or failing it when CI=true.
// Its endpoint must be a loopback address that answers. It also gives the AWS SDK the environment a
// local server needs (S3LocalEnv) where the variables are unset.
func S3URL(tb testing.TB) string {
	tb.Helper()
	raw := envURL(tb, S3Env, "set it to run this test against an S3-protocol server (go run ./internal/s3local/cmd/s3local)")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		tb.Fatalf("%s=%q: want s3://bucket?endpoint=http://127.0.0.1:PORT&…", S3Env, raw)
	}
	ep, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || ep.Host == "" {
		tb.Fatalf("%s=%q has no endpoint= of a local server", S3Env, raw)
	}
	// No start command: .ci/services.d/s3.sh builds and starts the server from the repository.
	requireLoopback(tb, S3Env, ep, "80", "")
	S3LocalEnv()
	return raw
}

// S3LocalEnv sets, where unset, the environment the AWS SDK needs to talk to a local S3-protocol
// server with no outside network: dummy credentials (the local server accepts any), a region, and no
// EC2 instance-metadata lookup (which would otherwise be tried, and time out, for credentials).
func S3LocalEnv() {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":         "strata-test",
		"AWS_SECRET_ACCESS_KEY":     "strata-test-secret",
		"AWS_REGION":                "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
}

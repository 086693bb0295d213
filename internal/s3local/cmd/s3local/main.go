// Command s3local serves an in-memory S3-protocol server on loopback until it is stopped, for CI
// (.ci/services.d/s3.sh) and for running the S3 tests by hand:
//
//	go run ./internal/s3local/cmd/s3local -addr 127.0.0.1:9000 -bucket strata-test
//	export STRATA_TEST_S3_URL='s3://strata-test?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true'
//
// Any credentials are accepted; nothing is kept after it exits.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stratalog/strata/internal/s3local"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "loopback `host:port` to listen on")
	buckets := flag.String("bucket", "strata-test", "comma-separated `buckets` to create at start")
	auto := flag.Bool("auto-bucket", true, "create a bucket on its first use")
	flag.Parse()
	var names []string
	for b := range strings.SplitSeq(*buckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			names = append(names, b)
		}
	}
	srv, err := s3local.Start(*addr, *auto, names...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("s3local: serving S3 on %s, buckets %s\n", srv.Endpoint(), strings.Join(names, ", "))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		srv.Close()
	}()
	if err := srv.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

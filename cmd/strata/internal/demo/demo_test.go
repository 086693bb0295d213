//go:build !strata_nos3

package demo_test

import (
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/cmd/strata/internal/demo"
	"github.com/stratalog/strata/internal/s3local"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
)

// TestDemoOnS3 runs the demo with its blobs on the in-process S3-protocol server, then checks through
// the S3 API, with a client of its own, that every invocation's chunks are objects in the bucket and
// decode to its entries.
func TestDemoOnS3(t *testing.T) {
	testenv.S3LocalEnv()
	srv, err := s3local.Start("127.0.0.1:0", false, "demo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() }) // after the objects' cleanup, which runs first
	runDemoOnS3(t, srv.BucketURL("demo", "run"))
}

// TestDemoOnExternalS3 does the same against the server STRATA_TEST_S3_URL names, under a key prefix
// of the test's own.
func TestDemoOnExternalS3(t *testing.T) {
	raw := testenv.S3URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + testenv.UniqueName("strata-test-demo-")
	runDemoOnS3(t, u.String())
}

func runDemoOnS3(t *testing.T, blobURL string) {
	opts := demo.Defaults()
	opts.Dir = t.TempDir()
	opts.BlobURL = blobURL
	opts.Invocations = 40
	opts.LoseRate = 0.5
	opts.Seed = 7
	var out strings.Builder
	opts.Out = &out
	sum, err := demo.Run(t.Context(), opts)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if sum.Mismatches != 0 || sum.Stranded == 0 || sum.Archived == 0 {
		t.Fatalf("summary %+v\n%s", sum, out.String())
	}

	u, err := url.Parse(blobURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	bucket, prefix := u.Host, strings.Trim(u.Path, "/")+"/"
	client := s3.New(s3.Options{
		Region:       q.Get("region"),
		BaseEndpoint: aws.String(q.Get("endpoint")),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("strata-test", "strata-test-secret", ""),
	})
	ctx := t.Context()
	entries := map[string]int{} // agent's stored key → entries its chunks hold
	var keys []string
	for page := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix}); page.HasMorePages(); {
		res, err := page.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListObjectsV2: %v", err)
		}
		for _, obj := range res.Contents {
			keys = append(keys, *obj.Key)
		}
	}
	t.Cleanup(func() { deleteAll(t, client, bucket, keys) })
	for _, key := range keys {
		rel := strings.TrimPrefix(key, prefix)
		if !strings.HasPrefix(rel, string(oplog.Ephemeral)+"/0/segments/") {
			t.Fatalf("object %q is not a blob-level-0 segment", key)
		}
		obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		data, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		listed, err := archive.DecodeSegment(data)
		if err != nil {
			t.Fatalf("object %s is not a segment: %v", key, err)
		}
		for _, c := range listed {
			if _, err := archive.PackedChunkBytes(c, data[c.Offset:c.Offset+c.Length]); err != nil {
				t.Fatalf("segment %s: %v", key, err)
			}
			entries[c.Key] += int(c.Last - c.First + 1)
		}
	}
	if len(entries) != opts.Invocations {
		t.Fatalf("the bucket holds chunks of %d agents, want all %d invocations: %q", len(entries), opts.Invocations, keys)
	}
	if len(keys) >= len(entries) {
		t.Fatalf("%d objects for %d agents: the chunks were not packed", len(keys), len(entries))
	}
	t.Logf("%d segments of %d agents in s3://%s/%s", len(keys), len(entries), bucket, prefix)
}

func deleteAll(t *testing.T, client *s3.Client, bucket string, keys []string) {
	ctx, cancel := testenv.Context()
	defer cancel()
	for _, k := range keys {
		if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(k)}); err != nil {
			t.Errorf("clean up %s: %v", k, err)
		}
	}
}

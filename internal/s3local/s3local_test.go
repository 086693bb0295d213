package s3local_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stratalog/strata/internal/s3local"
)

// Requests racing to a bucket that does not exist yet must all find it made: gofakes3 checks and then
// creates, so without a create in one step the loser of the race got NoSuchBucket (a flake of the
// verify tests in CI, where a batch's first list and first put went out together).
func TestAutoBucket_RacingFirstRequestsAllSucceed(t *testing.T) {
	h, _, err := s3local.Handler(true)
	if err != nil {
		t.Fatal(err)
	}
	const buckets, racers = 2000, 16
	for b := range buckets {
		url := fmt.Sprintf("/race-%d?list-type=2", b)
		var wg sync.WaitGroup
		codes := make([]int, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
				codes[i] = w.Code
			})
		}
		close(start)
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Fatalf("bucket race-%d, request %d of %d racing to it: status %d, want 200", b, i, racers, c)
			}
		}
	}
}

// Without autoBucket a missing bucket stays missing.
func TestAutoBucket_OffLeavesMissingBucketsMissing(t *testing.T) {
	h, _, err := s3local.Handler(false, "present")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for bucket, want := range map[string]int{"present": http.StatusOK, "absent": http.StatusNotFound} {
		resp, err := http.Get(srv.URL + "/" + bucket + "?list-type=2")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("list %s: status %d, want %d", bucket, resp.StatusCode, want)
		}
	}
}

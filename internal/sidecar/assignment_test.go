package sidecar

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/sweeper"
)

func TestAssignmentBody_IsValidatedAsSweeperNewAssignmentValidates(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	count := func(n int) *int { return &n }
	for _, c := range []struct {
		body assignmentBody
		says string
	}{
		// 10^12 s multiplied into a time.Duration wraps: the lease used to end in 2149.
		{assignmentBody{ShardCount: count(4), Shards: []int{0}, LeaseSeconds: 1_000_000_000_000}, "lease_seconds 1000000000000: want 0 (no lease) to 31622400"},
		{assignmentBody{ShardCount: count(4), Shards: []int{0}, LeaseSeconds: -1}, "lease_seconds -1"},
		{assignmentBody{ShardCount: count(sweeper.MaxShardCount + 1)}, "shard count 16385, want 0 to 16384"},
		{assignmentBody{ShardCount: count(-1)}, "shard count -1"},
		{assignmentBody{ShardCount: count(2), Shards: []int{5}}, "shard 5 is outside 0..1"},
		{assignmentBody{ShardCount: count(2), Shards: []int{1, 1}}, "shard 1 is listed twice"},
		{assignmentBody{Shards: []int{1}}, "shard_count is required"},
	} {
		_, err := c.body.assignment(now)
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || !strings.Contains(ae.msg, c.says) {
			t.Errorf("%+v: %v; want a 400 saying %q", c.body, err, c.says)
		}
	}
	a, err := assignmentBody{ShardCount: count(8), Shards: []int{5, 1}, LeaseSeconds: int64(sweeper.MaxLease / time.Second)}.assignment(now)
	if err != nil || a.ShardCount != 8 || !slices.Equal(a.Shards, []int{1, 5}) || !a.LeaseUntil.Equal(now.Add(sweeper.MaxLease)) {
		t.Fatalf("%+v, %v; want shards [1 5] of 8 leased for MaxLease", a, err)
	}
}

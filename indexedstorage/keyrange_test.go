package indexedstorage_test

import (
	"math/rand/v2"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

func TestBucketPrefix_IsFixedWidthAndSortsByBucket(t *testing.T) {
	prev := ""
	for b := range is.Buckets + 1 {
		p := is.BucketPrefix(b)
		if len(p) != is.BucketPrefixLen || p <= prev {
			t.Fatalf("BucketPrefix(%d) = %q after %q", b, p, prev)
		}
		prev = p
		got, ok := is.KeyBucket(p + "c:a")
		if b < is.Buckets && (!ok || got != b) {
			t.Fatalf("KeyBucket(%q) = %d, %v; want %d", p+"c:a", got, ok, b)
		}
		if b == is.Buckets && ok {
			t.Fatalf("KeyBucket(%q) accepted a bucket past the last", p)
		}
	}
	if got := is.BucketPrefix(2651); got != "0a5b/" {
		t.Fatalf("BucketPrefix(2651) = %q, want 0a5b/", got)
	}
	for _, key := range []string{"", "0a5b", "0a5b:c:a", "0A5B/c:a", "0a5g/c:a", " a5b/c:a", "4000/c:a", "ffff/c:a", "c:a"} {
		if b, ok := is.KeyBucket(key); ok {
			t.Fatalf("KeyBucket(%q) = %d, want no bucket", key, b)
		}
	}
}

// RangeBuckets against its definition, bucket by bucket: b is in the result exactly when some key
// with b's prefix lies in the range, i.e. when [prefix, PrefixEnd(prefix)) meets it.
func TestRangeBuckets_AreTheBucketsWhosePrefixRangeMeetsTheRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bound := func() string {
		switch rng.IntN(5) {
		case 0:
			return ""
		case 1:
			return is.BucketPrefix(rng.IntN(is.Buckets + 1))
		case 2:
			return is.BucketPrefix(rng.IntN(is.Buckets))[:1+rng.IntN(4)]
		case 3:
			return is.BucketPrefix(rng.IntN(is.Buckets)) + "c:a"
		}
		return string(rune('0'+rng.IntN(80))) + "x"
	}
	ranges := []is.KeyRange{is.AllKeys, is.BucketsRange(0, is.Buckets), is.BucketsRange(7, 8), is.BucketsRange(9, 9),
		is.PrefixRange("0a5b/"), is.PrefixRange("0a5"), {Start: "0a5b/zz", End: "0a5c/"}, {Start: "z"}, {End: "0"}}
	for range 300 {
		ranges = append(ranges, is.KeyRange{Start: bound(), End: bound()})
	}
	for _, r := range ranges {
		lo, hi := is.RangeBuckets(r)
		for b := range is.Buckets {
			p := is.BucketPrefix(b)
			end, _ := is.PrefixEnd(p)
			meets := !r.Empty() && end > r.Start && (!r.Bounded() || p < r.End)
			if in := lo <= b && b < hi; in != meets {
				t.Fatalf("RangeBuckets(%v) = [%d, %d): bucket %d in it %v, meets the range %v", r, lo, hi, b, in, meets)
			}
		}
	}
}

func TestKeyRange_ContainsAndAfter(t *testing.T) {
	r := is.KeyRange{Start: "b", End: "d"}
	for key, want := range map[string]bool{"a": false, "b": true, "c": true, "czz": true, "d": false, "e": false} {
		if r.Contains(key) != want {
			t.Errorf("%v.Contains(%q) = %v", r, key, !want)
		}
	}
	if lower, excl := r.After("a"); lower != "b" || excl {
		t.Errorf("After a marker before the range: %q %v", lower, excl)
	}
	if lower, excl := r.After("c"); lower != "c" || !excl {
		t.Errorf("After c: %q %v", lower, excl)
	}
	if !(is.KeyRange{Start: "b", End: "b"}).Empty() || !(is.KeyRange{Start: "c", End: "b"}).Empty() || (is.KeyRange{Start: "c"}).Empty() {
		t.Error("Empty")
	}
	if r := is.PrefixRange("\U0010FFFF"); r.Bounded() || !r.Contains("\U0010FFFFx") {
		t.Errorf("PrefixRange of a prefix with no end: %v", r)
	}
}

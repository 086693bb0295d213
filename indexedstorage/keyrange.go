package indexedstorage

import (
	"fmt"
	"sort"
)

// KeyRange is the half-open range of keys [Start, End) that a ScanStable walk visits, compared byte for
// byte. An empty Start is the first key there can be; an empty End means no upper bound. A range whose
// End is not above its Start holds no key. A prefix is the range PrefixRange(prefix).
type KeyRange struct {
	Start, End string
}

// PrefixRange is the range of the keys that start with prefix: [prefix, PrefixEnd(prefix)).
func PrefixRange(prefix string) KeyRange {
	end, _ := PrefixEnd(prefix)
	return KeyRange{Start: prefix, End: end}
}

// AllKeys is the range of every key.
var AllKeys = KeyRange{}

// Bounded reports whether the range has an upper bound.
func (r KeyRange) Bounded() bool { return r.End != "" }

// Empty reports whether no key can lie in the range.
func (r KeyRange) Empty() bool { return r.Bounded() && r.End <= r.Start }

// Contains reports whether key lies in the range.
func (r KeyRange) Contains(key string) bool {
	return key >= r.Start && (!r.Bounded() || key < r.End)
}

// After is what is left of the range strictly after marker, the last key a walk handed back: the lower
// bound and whether it is exclusive. A marker before Start leaves the whole range.
func (r KeyRange) After(marker string) (lower string, exclusive bool) {
	if marker >= r.Start {
		return marker, true
	}
	return r.Start, false
}

func (r KeyRange) String() string {
	if !r.Bounded() {
		return fmt.Sprintf("[%q, ∞)", r.Start)
	}
	return fmt.Sprintf("[%q, %q)", r.Start, r.End)
}

// ValidateRange checks the bounds of a range: each like a prefix (valid UTF-8 without NUL, at most
// MaxKeyLen bytes), so that every engine can bind them as text. An empty range is valid.
func ValidateRange(r KeyRange) error {
	if err := ValidatePrefix(r.Start); err != nil {
		return fmt.Errorf("range start: %w", err)
	}
	if err := ValidatePrefix(r.End); err != nil {
		return fmt.Errorf("range end: %w", err)
	}
	return nil
}

// ValidateScanRange checks the arguments of ScanStable.
func ValidateScanRange(ns string, r KeyRange, count int) error {
	if err := ValidateScan(ns, "", count); err != nil {
		return err
	}
	return ValidateRange(r)
}

// Buckets is how many buckets keys are placed in (DESIGN §11): as many as Redis Cluster has slots.
const Buckets = 16384

// bucketDigits is the width of a bucket prefix's number: four lowercase hex digits hold 0..0x3fff.
const bucketDigits = 4

// BucketPrefixLen is the length of a bucket prefix: the four digits and the '/'.
const BucketPrefixLen = bucketDigits + 1

// BucketPrefix is the prefix of the keys placed in bucket: the bucket as four lowercase hex digits and
// a '/' ("0a5b/" for 2651). Fixed width, so byte order is bucket order. BucketPrefix(Buckets), "4000/",
// is the bound above every bucket.
func BucketPrefix(bucket int) string {
	if bucket < 0 || bucket > Buckets {
		return fmt.Sprintf("%0*x/", bucketDigits, bucket) // not a bucket; whatever it prints
	}
	const hex = "0123456789abcdef"
	return string([]byte{hex[bucket>>12&15], hex[bucket>>8&15], hex[bucket>>4&15], hex[bucket&15], '/'})
}

// BucketsRange is the key range of the buckets [lo, hi): from BucketPrefix(lo) to BucketPrefix(hi).
// It also holds keys that merely sort there without a bucket prefix ("0a5b0…"); a walk meets them and
// KeyBucket tells them apart.
func BucketsRange(lo, hi int) KeyRange {
	return KeyRange{Start: BucketPrefix(lo), End: BucketPrefix(hi)}
}

// KeyBucket returns the bucket a key is placed in when it starts with a bucket prefix (four lowercase
// hex digits below 4000 and '/'), and false for every other key. Backends that spread keys over
// partitions (Redis Cluster slots, multi-file SQLite directories) place a bucketed key by its bucket, so
// that a walk of a bucket range visits those buckets only.
func KeyBucket(key string) (int, bool) {
	if len(key) < BucketPrefixLen || key[bucketDigits] != '/' {
		return 0, false
	}
	b := 0
	for i := range bucketDigits {
		c := key[i]
		switch {
		case '0' <= c && c <= '9':
			b = b<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			b = b<<4 | int(c-'a'+10)
		default:
			return 0, false
		}
	}
	if b >= Buckets {
		return 0, false
	}
	return b, true
}

// RangeBuckets returns the buckets whose keys can lie in r, as the half-open range [lo, hi): the
// buckets b whose prefix range [BucketPrefix(b), PrefixEnd(BucketPrefix(b))) meets r. Keys in r without
// a bucket prefix are not counted; a backend that places such keys apart walks them separately.
func RangeBuckets(r KeyRange) (lo, hi int) {
	if r.Empty() {
		return 0, 0
	}
	lo = sort.Search(Buckets, func(b int) bool {
		end, _ := PrefixEnd(BucketPrefix(b))
		return end > r.Start
	})
	hi = Buckets
	if r.Bounded() {
		hi = sort.Search(Buckets, func(b int) bool { return BucketPrefix(b) >= r.End })
	}
	return lo, max(lo, hi)
}

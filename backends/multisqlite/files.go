package multisqlite

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	is "github.com/stratalog/strata/indexedstorage"
)

// The layout of a namespace directory (see docs/multisqlite.md):
//
//	<ns dir>/<bucket>/<file>   a key that starts with a bucket prefix ("0a5b/…"): <bucket> is its four
//	                           hex digits, and <file> names the rest of the key
//	<ns dir>/other/<file>      every other key, named whole
//
// <file> is "k" and the reversible escaping of the (rest of the) key, then ".db", when that fits in a
// file name; else "h" and the hex SHA-256 of namespace NUL key, then ".db" (the key is then read from
// the file).
const (
	fileExt       = ".db"
	escapedPrefix = "k"
	hashedPrefix  = "h"
	// otherDir holds the keys without a bucket prefix. It sorts after every bucket directory.
	otherDir = "other"
	// maxFileName is the longest file name every file system takes (ext4, XFS, APFS, NTFS: 255 bytes).
	maxFileName = 255
)

// hashedNameLen is the length of a hashed file name.
const hashedNameLen = len(hashedPrefix) + 2*sha256.Size + len(fileExt)

// legacyNameLen is the length of a file name of the layout before buckets: a hex SHA-256 and ".db",
// directly in the namespace directory.
const legacyNameLen = 2*sha256.Size + len(fileExt)

// location is where the file of one index is: its directory under the namespace directory and its name.
type location struct {
	dir  string // otherDir or a bucket's four hex digits
	name string
}

func (l location) rel() string { return l.dir + "/" + l.name }

// locate places the file of (ns, key).
func locate(ns, key string) location {
	dir, rest := otherDir, key
	if b, ok := is.KeyBucket(key); ok {
		dir, rest = bucketDir(b), key[is.BucketPrefixLen:]
	}
	if name := escapedPrefix + escapeKey(rest) + fileExt; len(name) <= maxFileName {
		return location{dir: dir, name: name}
	}
	return location{dir: dir, name: hashedName(ns, key)}
}

// bucketDir is the directory of a bucket: the four hex digits of its key prefix.
func bucketDir(b int) string { return is.BucketPrefix(b)[:is.BucketPrefixLen-1] }

// dirBucket returns the bucket a directory name stands for, or false for any other name.
func dirBucket(name string) (int, bool) {
	if len(name) != is.BucketPrefixLen-1 {
		return 0, false
	}
	return is.KeyBucket(name + "/")
}

// isDirName reports whether name is a directory this backend makes in a namespace directory.
func isDirName(name string) bool {
	_, ok := dirBucket(name)
	return ok || name == otherDir
}

// hashedName names the file of a key too long to escape, by a hash of namespace and key (NUL between
// them; neither may contain one).
func hashedName(ns, key string) string {
	sum := sha256.Sum256([]byte(ns + "\x00" + key))
	return hashedPrefix + hex.EncodeToString(sum[:]) + fileExt
}

func isHashedName(name string) bool {
	return len(name) == hashedNameLen && strings.HasPrefix(name, hashedPrefix) && strings.HasSuffix(name, fileExt) &&
		isLowerHex(name[len(hashedPrefix):len(name)-len(fileExt)])
}

// isLegacyName reports whether name is a file name of the layout before buckets.
func isLegacyName(name string) bool {
	return len(name) == legacyNameLen && strings.HasSuffix(name, fileExt) && isLowerHex(name[:len(name)-len(fileExt)])
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// escapeKey writes a key (or the rest of one after its bucket prefix) in a file name's alphabet,
// reversibly and safely on any file system: a-z, 0-9, '.', '_' and '-' stand for themselves, an
// upper-case letter is '^' and its lower case (so that a case-insensitive file system cannot merge two
// keys), and every other byte is '=' and two lower-case hex digits ('=', unlike '%', means nothing
// in a file: URI, so that a SQLite URI made of the path opens this very file).
func escapeKey(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			b.WriteByte('^')
			b.WriteByte(c - 'A' + 'a')
		default:
			b.WriteByte('=')
			b.WriteByte(hexDigit[c>>4])
			b.WriteByte(hexDigit[c&15])
		}
	}
	return b.String()
}

const hexDigit = "0123456789abcdef"

// standsForItself reports whether escapeKey writes c as it is: a-z, 0-9, '.', '_' and '-'.
func standsForItself(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// unescapeKey reverses escapeKey. It accepts only what escapeKey writes (lower-case hex, no escape of
// a byte that stands for itself), so that one key has one name.
func unescapeKey(s string) (string, bool) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		var c byte
		var ok bool
		switch c = s[i]; c {
		case '^':
			c, ok = unescapeUpper(s[i+1:])
			i++
		case '=':
			c, ok = unescapeHex(s[i+1:])
			i += 2
		default:
			ok = standsForItself(c)
		}
		if !ok {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// unescapeUpper reads the letter after a '^': its upper case. ok is false unless a lower-case letter
// follows.
func unescapeUpper(rest string) (c byte, ok bool) {
	if rest == "" || rest[0] < 'a' || rest[0] > 'z' {
		return 0, false
	}
	return rest[0] - 'a' + 'A', true
}

// unescapeHex reads the two lower-case hex digits after a '=': the byte they write. ok is false
// unless they are there and write a byte escapeKey escapes (neither one that stands for itself nor
// an upper-case letter).
func unescapeHex(rest string) (c byte, ok bool) {
	if len(rest) < 2 {
		return 0, false
	}
	hi, lo := strings.IndexByte(hexDigit, rest[0]), strings.IndexByte(hexDigit, rest[1])
	if hi < 0 || lo < 0 {
		return 0, false
	}
	c = byte(hi<<4 | lo)
	if standsForItself(c) || c >= 'A' && c <= 'Z' {
		return 0, false
	}
	return c, true
}

// nameKey returns the key a file name of directory dir stands for: known from the name alone for an
// escaped name (known true), unknown for a hashed one (known false: the file must be read). ok is
// false for a name this backend would not have given that file: it is not one of its files.
func nameKey(dir, name string) (key string, known, ok bool) {
	if isHashedName(name) {
		return "", false, true
	}
	if !strings.HasPrefix(name, escapedPrefix) || !strings.HasSuffix(name, fileExt) || len(name) > maxFileName {
		return "", false, false
	}
	rest, ok := unescapeKey(name[len(escapedPrefix) : len(name)-len(fileExt)])
	if !ok {
		return "", false, false
	}
	key = rest
	if b, bucketed := dirBucket(dir); bucketed {
		key = is.BucketPrefix(b) + rest
	} else if _, bucketed := is.KeyBucket(key); bucketed || dir != otherDir {
		return "", false, false
	}
	if key == "" || len(key) > is.MaxKeyLen || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return "", false, false
	}
	return key, true, true
}

// isFileName reports whether name is a file name this backend gives an index file in directory dir:
// it keeps SQLite's side files (-wal, -shm) and anything else out of a listing.
func isFileName(dir, name string) bool {
	_, _, ok := nameKey(dir, name)
	return ok
}

// maxDirName keeps an escaped namespace well within every file system's limit on a name (255 bytes).
const maxDirName = 200

// dirName maps a namespace (ValidateNamespace's alphabet, [A-Za-z0-9/._-]) to one directory name,
// injectively and safely on any file system: the "ns-" prefix keeps "." and ".." from meaning
// anything, '/' becomes '~' (neither is in the alphabet) so that namespaces never nest, and an
// upper-case letter becomes '^' and its lower case so that a case-insensitive file system cannot merge
// two namespaces. A name that would be too long is a hash of the namespace instead ("nh-").
func dirName(ns string) string {
	var b strings.Builder
	b.WriteString("ns-")
	for i := 0; i < len(ns); i++ {
		switch c := ns[i]; {
		case c == '/':
			b.WriteByte('~')
		case c >= 'A' && c <= 'Z':
			b.WriteByte('^')
			b.WriteByte(c - 'A' + 'a')
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > maxDirName {
		sum := sha256.Sum256([]byte(ns))
		return "nh-" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// nsListing is what a namespace directory holds: its bucket directories and "other", sorted, and the
// files of the layout before buckets found in it.
type nsListing struct {
	dirs   []string // sorted; never changed once published, so readers keep it without the lock
	legacy []string
}

// listings caches each namespace directory's listing (its directories, not their files), so that a
// walk lists it once rather than once a page. A directory is made or removed by a write or a drop; this
// process drops its listing when it does either, and the TTL is the backstop for directories made by
// another process. A bucket directory's own files are listed afresh each time a walk visits it.
type listings struct {
	ttl    time.Duration // ≤ 0: no expiry
	onList func(ns string)

	mu    sync.Mutex
	byNS  map[string]*listing
	count int64 // directory listings made
}

type listing struct {
	nsListing
	at    time.Time
	valid bool
	gen   uint64 // bumped by every drop, so a listing begun before a drop is not stored after it
}

func newListings(ttl time.Duration, onList func(ns string)) *listings {
	return &listings{ttl: ttl, onList: onList, byNS: make(map[string]*listing)}
}

// get returns the listing of dir, the directory of ns: the cached one if it is still valid, else a new
// one. A missing directory is an empty listing.
func (l *listings) get(ns, dir string) (nsListing, error) {
	l.mu.Lock()
	cur := l.byNS[ns]
	if cur == nil {
		cur = &listing{}
		l.byNS[ns] = cur
	}
	if cur.valid && (l.ttl <= 0 || time.Since(cur.at) < l.ttl) {
		out := cur.nsListing
		l.mu.Unlock()
		return out, nil
	}
	gen := cur.gen
	l.count++
	l.mu.Unlock()

	if l.onList != nil {
		l.onList(ns)
	}
	at := time.Now()
	out, err := readNamespace(dir)
	if err != nil {
		return nsListing{}, err
	}
	l.mu.Lock()
	if cur.gen == gen {
		cur.nsListing, cur.at, cur.valid = out, at, true
	}
	l.mu.Unlock()
	return out, nil
}

// drop forgets the listing of ns; the next get lists the directory again.
func (l *listings) drop(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.byNS[ns]; cur != nil {
		cur.valid = false
		cur.gen++
	}
}

func (l *listings) made() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// readNamespace lists a namespace directory (os.ReadDir sorts by name).
func readNamespace(dir string) (nsListing, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nsListing{}, nil
	}
	if err != nil {
		return nsListing{}, fmt.Errorf("list %s: %w", filepath.Base(dir), err)
	}
	var out nsListing
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir() && isDirName(name):
			out.dirs = append(out.dirs, name)
		case e.Type().IsRegular() && isLegacyName(name):
			out.legacy = append(out.legacy, name)
		}
	}
	return out, nil
}

// readFiles lists the index files of one directory of a namespace, in byte order. A missing directory
// (emptied and removed) has none.
func readFiles(nsDir, dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(nsDir, dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s/%s: %w", filepath.Base(nsDir), dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if name := e.Name(); e.Type().IsRegular() && isFileName(dir, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// dirsInRange returns the directories of a listing a walk of r visits: the buckets r can hold keys of,
// and "other", whose keys are filtered by r one by one.
func dirsInRange(dirs []string, r is.KeyRange) []string {
	if r.Empty() {
		return nil
	}
	lo, hi := is.RangeBuckets(r)
	from := sort.SearchStrings(dirs, bucketDir(lo))
	out := make([]string, 0, len(dirs)-from)
	for _, d := range dirs[from:] {
		if b, ok := dirBucket(d); ok {
			if b >= hi {
				continue
			}
		}
		out = append(out, d)
	}
	return out
}
